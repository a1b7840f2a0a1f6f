"""The column-permutation search both paths share: which actual column each expected column is compared with.

The search decides from the columns' names, positions or values; the rows under a candidate mapping are paired
by the path that asks (:func:`choose_mapping`'s ``rows_match``), so the same search serves polars frames and
plain rows.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from sqlcmp_dagster.engine.comparison import budgets
from sqlcmp_dagster.engine.relation import Relation

#: A row pairing as one path represents it (see :func:`choose_mapping`).
M = TypeVar("M")


def choose_mapping(
    expected: Relation,
    actual: Relation,
    *,
    positional: bool,
    by_name: bool,
    rows_match: Callable[[list[int | None]], M | None],
    similarity: Callable[[], list[list[float]]],
    identity_forced: Callable[[], bool] = lambda: False,
) -> tuple[list[int | None], M | None, str | None]:
    """One consistent column permutation: for each expected column, the index of its actual column or None.

    Positional when column order is required; by (case-insensitive) name when names are required; otherwise by
    the values the columns hold. Columns whose values cannot tell them apart (two columns of equal multisets)
    are resolved by trying their permutations against whole rows, preferring the identity. ``rows_match``
    pairs the rows under a candidate mapping and returns the pairing when every row paired (else None);
    ``similarity`` scores every expected column against every actual column (see :func:`similarity.column_similarity`).
    The accepted candidate's pairing is returned too, so it is not computed again. The third value says which
    work budget cut the permutation search short (None when it was not cut).

    ``identity_forced`` is a cheap test, asked after the identity failed to pair every row, that the scores would
    make the identity the only candidate (see :func:`similarity.identity_dominates`); when it answers yes the scores are
    not computed, with the outcome they would give.
    """
    k, j = expected.width, actual.width
    if positional:
        return [i if i < j else None for i in range(k)], None, None
    if by_name:
        free = list(range(j))
        mapping: list[int | None] = []
        for name in expected.names:
            hit = next((c for c in free if actual.names[c].lower() == name.lower()), None)
            if hit is not None:
                free.remove(hit)
            mapping.append(hit)
        return mapping, None, None
    identity: list[int | None] = [i if i < j else None for i in range(k)]
    if k == j and (matched := _complete(expected, actual, identity, rows_match)) is not None:
        return identity, matched, None
    if k == j and identity_forced():
        return identity, None, None
    scores = similarity()
    greedy = _assign(scores, k, j)
    candidates = [greedy]
    cut: str | None = None
    # Only a mapping under which every row pairs is accepted, so with unequal heights no candidate can be.
    if k == j and expected.height == actual.height and expected.height * k <= budgets.PERMUTATION_CELL_BUDGET:
        # Only columns that values cannot tell apart (tied best similarity) are permuted among themselves.
        ties = [[c for c in range(j) if scores[i][c] > 0 and scores[i][c] >= max(scores[i]) - 1e-9]
                for i in range(k)]
        options, cut = _permutations(ties, budgets.MAX_PERMUTATIONS + 1, budgets.PERMUTATION_STEPS)
        if len(options) > budgets.MAX_PERMUTATIONS:
            options = options[:budgets.MAX_PERMUTATIONS]
            cut = f"more than {budgets.MAX_PERMUTATIONS} candidate mappings"
        candidates += sorted((p for p in options if p != greedy),
                             key=lambda p: sum(abs(i - c) for i, c in enumerate(p) if c is not None))
    cells = 0
    for candidate in candidates:
        if candidate == identity and k == j:
            continue  # already tried first
        cells += expected.height * k
        if cells > budgets.PERMUTATION_TOTAL_CELLS:
            return greedy, None, f"{budgets.PERMUTATION_TOTAL_CELLS:,} cells compared"
        if (matched := _complete(expected, actual, candidate, rows_match)) is not None:
            return candidate, matched, None
    return greedy, None, cut


def _complete(expected: Relation, actual: Relation, mapping: list[int | None],
              rows_match: Callable[[list[int | None]], M | None]) -> M | None:
    """``rows_match`` under ``mapping`` when it could pair every row (equal heights, every column mapped)."""
    if expected.height != actual.height or any(j is None for j in mapping):
        return None
    return rows_match(mapping)


def _permutations(ties: list[list[int]], limit: int, steps: int) -> tuple[list[list[int | None]], str | None]:
    """Up to ``limit`` one-to-one mappings that send each position ``i`` to one of ``ties[i]``, in the order of
    ``itertools.product(*ties)``, enumerated depth-first within ``steps`` steps; and why enumeration stopped
    early (None when every mapping was found or ``limit`` reached).

    >>> _permutations([[0, 1], [0, 1]], 10, 100)
    ([[0, 1], [1, 0]], None)
    >>> _permutations([list(range(10))] * 10, 10, 50)[1]
    '50 enumeration steps'
    """
    found: list[list[int | None]] = []
    chosen: list[int | None] = []
    used: set[int] = set()
    spent = 0

    def extend(i: int) -> bool:
        nonlocal spent
        if i == len(ties):
            found.append(list(chosen))
            return len(found) < limit
        for c in ties[i]:
            spent += 1
            if spent > steps:
                return False
            if c in used:
                continue
            chosen.append(c)
            used.add(c)
            going = extend(i + 1)
            chosen.pop()
            used.discard(c)
            if not going:
                return False
        return True

    extend(0)
    return found, (f"{steps} enumeration steps" if spent > steps else None)


def _assign(scores: list[list[float]], k: int, j: int) -> list[int | None]:
    """Greedy assignment by descending similarity, ties broken towards the same position."""
    ranked = sorted(((scores[i][c], -abs(i - c), i, c) for i in range(k) for c in range(j)), reverse=True)
    mapping: list[int | None] = [None] * k
    used: set[int] = set()
    for score, _, i, c in ranked:
        if score <= 0 or mapping[i] is not None or c in used:
            continue
        mapping[i] = c
        used.add(c)
    # Columns with no shared value still pair by position when that position is free: a wrong value is then a
    # cell mismatch of that column, not a missing column.
    for i in range(k):
        if mapping[i] is None and i < j and i not in used:
            mapping[i] = i
            used.add(i)
    return mapping
