"""Layer 3: result comparison with polars, vectorized (docs/design.md, "How the engine decides").

The comparison works in three steps, each a frame operation rather than a loop over rows:

1. **Column alignment**: one consistent permutation maps expected columns to actual columns (by position, by
   name, or by the values they hold). Row tuples are never broken up.
2. **Row pairing**: an exact multiset join (each row tagged with its occurrence number among identical rows)
   pairs equal rows; the rest are paired under ``|a-b| <= atol + rtol*|b|`` by numeric (never string) order
   within groups that agree on the non-numeric columns, and a bounded greedy pass for what is still left.
3. **Cell alignment**: unpaired rows that differ in a single column are paired by joining on the others, so the
   per-column mismatch counts say *which* attribute is wrong.

NULL equals NULL and nothing else (``null_equality_mode="strict"``, the default); with ``"sql_semantic"`` a
NULL equals nothing, not even NULL.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, TypeVar

import polars as pl

from sqlcmp_dagster.engine.relation import Relation, tagged_text
from sqlcmp_dagster.engine.models import EvalConfig, ResolvedMode

_ROW = "__row"
_OCC = "__occ"
_GROUP = "__tie"
#: Residual pairs examined by the last, greedy tolerance pass; beyond this the numeric-order pass stands alone.
_GREEDY_PAIR_BUDGET = 1_000_000
#: The column-permutation search when values cannot tell columns apart: candidates tried at most, the cells one
#: candidate may cost, the cells all candidates together may cost, and the steps spent enumerating candidates.
#: Past any of them the search stops with a warning (ten columns of one value have 10! candidates).
_MAX_PERMUTATIONS = 120
_PERMUTATION_CELL_BUDGET = 2_000_000
_PERMUTATION_TOTAL_CELLS = 20_000_000
_PERMUTATION_STEPS = 100_000
#: Below this many rows a frame operation costs its fixed overhead, so fewer operations beat cleverer ones.
_SMALL_FRAME = 10_000
#: From this many rows on each side the exact multiset stage joins on one hash per row (:func:`_hashed_join`).
_HASHED_JOIN_ROWS = _SMALL_FRAME
#: Pairs of that join checked cell by cell per slice (bounds the memory the check holds).
_CHECKED_PAIRS = 1 << 16
#: From this many rows on, a frame's aggregations run on polars' streaming engine (:func:`_aggregate`).
_STREAMED_ROWS = _SMALL_FRAME
#: A row pairing as one path represents it (see :func:`choose_mapping`).
M = TypeVar("M")


@dataclass(frozen=True)
class Tolerance:
    """Numeric tolerance in force: ``|a - b| <= atol + rtol * |b|`` with ``b`` the expected value."""

    atol: float
    rtol: float

    def within(self, expected: pl.Expr, actual: pl.Expr) -> pl.Expr:
        both_nan = expected.is_nan() & actual.is_nan()
        difference = (actual - expected).abs()
        # Only two finite values can be close: an infinite or NaN difference (an infinity or a NaN on one side)
        # is never within a bound, also not an infinite bound; polars would even find NaN <= NaN (it orders NaN
        # above every number). Equal infinities are equal (:func:`_cell_equal`).
        close = difference.is_finite() & (difference <= self.atol + self.rtol * expected.abs())
        return both_nan | close

    def close(self, expected: float, actual: float) -> bool:
        """The same rule on two plain numbers (for comparators outside polars)."""
        if math.isnan(expected) and math.isnan(actual):
            return True
        difference = abs(actual - expected)
        return math.isfinite(difference) and difference <= self.atol + self.rtol * abs(expected)


@dataclass
class ColumnStats:
    """Per expected column: how the paired cells compared (the raw material of per_column_mismatch_map)."""

    name: str
    actual_index: int | None
    actual_name: str | None
    numeric: bool
    compared: int = 0
    mismatched: int = 0
    null_mismatched: int = 0
    within_tolerance: int = 0
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None  # relative to the expected value


@dataclass
class ResultComparison:
    """Every Layer 3 metric of one expected/actual pair, plus what Layer 4 needs to explain a mismatch."""

    comparison_mode: ResolvedMode
    mode_pass: bool
    bag_pass: bool
    ordered_pass: bool | None
    schema_match: dict[str, Any]
    row_overlap: float
    cell_overlap: float
    cardinality_match: dict[str, Any]
    numeric_tolerance_match: dict[str, Any]
    null_handling_match: bool
    columns: list[ColumnStats]
    matched_rows: int  # rows paired under the mode's own pairing (positional/tie-aware when ordered)
    bag_matched_rows: int  # rows paired as a multiset, whatever the mode
    missing_rows: list[list[Any]]
    extra_rows: list[list[Any]]
    extra_columns: list[str]
    vacuous: bool
    ties_checked: bool
    tie_ambiguous: bool = False  # LIMIT cut inside an ORDER BY tie; the actual rows are an equally valid choice
    warnings: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        """``metrics.result.*`` with the report's names."""
        return {
            "result_equality_family": {
                "comparison_mode": self.comparison_mode,
                "mode_pass": self.mode_pass,
                "mode_details": {
                    "order-insensitive": self.bag_pass,
                    "order-sensitive": self.ordered_pass,
                    "vacuous_match": self.vacuous,
                    "ties_checked": self.ties_checked,
                    "tie_ambiguous": self.tie_ambiguous,
                    "matched_rows": self.matched_rows,
                },
            },
            "schema_match": self.schema_match,
            "row_overlap": self.row_overlap,
            "cell_overlap": self.cell_overlap,
            "cardinality_match": self.cardinality_match,
            "numeric_tolerance_match": self.numeric_tolerance_match,
            "null_handling_match": self.null_handling_match,
        }


#: Which implementation compares: ``frames`` (polars, vectorized) or ``rows`` (plain Python, see
#: :mod:`result_rows`). Both give the same :class:`ResultComparison`; the choice is speed only.
ComparisonPath = Literal["frames", "rows"]


@dataclass(frozen=True)
class Rules:
    """The comparison rules one case runs under (from its mode and :class:`EvalConfig`)."""

    tolerance: Tolerance
    nulls_equal: bool  # ``null_equality_mode="strict"``
    positional: bool  # columns are matched by position
    by_name: bool  # columns are matched by name
    max_rows: int  # ``max_rows_for_cell_alignment``

    @classmethod
    def of(cls, mode: ResolvedMode, config: EvalConfig) -> Rules:
        """The rules of a comparison in ``mode`` under ``config``."""
        atol, rtol = config.tolerances(mode)
        return cls(Tolerance(atol, rtol), nulls_equal=config.null_equality_mode == "strict",
                   positional=mode == "exact" or config.require_column_order_match,
                   by_name=mode == "exact" or config.require_column_name_match,
                   max_rows=config.max_rows_for_cell_alignment)

    @property
    def by_value(self) -> bool:
        """Whether columns are paired by the values they hold alone (neither by position nor by name): then no
        order of the result columns can be told from another (what the neighbor search's proof relies on)."""
        return not (self.positional or self.by_name)


@dataclass
class Paired:
    """What a path computes for one comparison; :func:`compare_results` derives every metric from it."""

    mapping: list[int | None]
    cut: str | None  # why the column-permutation search stopped early, or None
    bag_matched: int  # rows paired as a multiset
    matched: int  # rows paired under the mode's own pairing
    ordered_pass: bool  # every row paired in order (ties of the ORDER BY keys permuted when checked)
    ties_checked: bool
    columns: list[ColumnStats]
    null_counts_agree: bool  # each paired column holds as many NULLs on both sides
    missing_rows: list[list[Any]]
    extra_rows: list[list[Any]]


def compare_results(
    expected: Relation,
    actual: Relation,
    *,
    mode: ResolvedMode,
    config: EvalConfig,
    order_keys: list[int] | None = None,
    path: ComparisonPath | None = None,
) -> ResultComparison:
    """Compare two materialized results under ``mode``.

    ``order_keys`` are the expected projection's column indexes that carry the top-level ORDER BY keys; when
    given, order-sensitive mode accepts rows permuted among ties of those keys. Without them ties cannot be
    seen in the result and the order is checked strictly (with a warning).

    ``path`` forces an implementation; by default small results (:func:`result_rows.suits`) are compared in
    plain Python, where polars' fixed cost per frame operation would be most of the time, and the rest with
    polars, as is a small result whose tolerance passes would check more pairs of cells one by one than
    ``result_rows.SMALL_RESULT_PAIRS`` (:class:`result_rows.TooManyPairs`). The two paths answer identically
    (tests/test_properties.py checks it on the same inputs).
    """
    from sqlcmp_dagster.engine import result_rows  # it builds on this module's types; imported once used

    rules = Rules.of(mode, config)
    rows_path = result_rows.suits(expected, actual) if path is None else path == "rows"
    try:
        paired = result_rows.pair(expected, actual, mode, order_keys, rules, bounded=path is None) if rows_path \
            else _pair_frames(expected, actual, mode, order_keys, rules)
    except result_rows.TooManyPairs:  # chosen for its size, the plain path met a large tolerance pass
        paired = _pair_frames(expected, actual, mode, order_keys, rules)
    mapping, stats = paired.mapping, paired.columns
    warnings: list[str] = []
    if paired.cut:
        warnings.append(f"column-permutation search cut at its work budget ({paired.cut}): columns whose values "
                        "cannot tell them apart were aligned greedily, so a permutation that matches may exist "
                        "untried")
    if mode == "order-sensitive" and order_keys and not paired.ties_checked:
        warnings.append("ORDER BY keys are not all in the projection: ties could not be recognized, order "
                        "checked strictly")
    schema = _schema_match(expected, actual, mapping)
    schema_ok = schema["attribute_count_match"] and all(j is not None for j in mapping)
    if rules.by_name:
        schema_ok = schema_ok and schema["names_match"]
    if rules.positional:
        schema_ok = schema_ok and schema["order_match"]
    bag_equal = paired.bag_matched == expected.height == actual.height
    row_equal = bag_equal if mode == "order-insensitive" else paired.ordered_pass
    vacuous = expected.height == 0 and actual.height == 0
    if vacuous:
        warnings.append("both results are empty: the match is vacuous")
    if expected.truncated or actual.truncated:
        warnings.append("a result was truncated at max_result_rows: the comparison covers the kept rows only")

    total_rows = expected.height + actual.height
    row_overlap = 1.0 if total_rows == 0 else 2 * paired.bag_matched / total_rows
    width = max(expected.width, actual.width)
    cells = max(expected.height, actual.height) * width
    equal_cells = sum(s.compared - s.mismatched for s in stats)
    cell_overlap = 1.0 if cells == 0 else equal_cells / cells
    numeric_stats = [s for s in stats if s.numeric]
    outside = sum(s.mismatched for s in numeric_stats)
    diffs = [s.max_abs_diff for s in numeric_stats if s.max_abs_diff is not None]
    null_ok = all(s.null_mismatched == 0 for s in stats) and paired.null_counts_agree

    return ResultComparison(
        comparison_mode=mode,
        mode_pass=bool(schema_ok and row_equal),
        bag_pass=bag_equal and schema_ok,
        ordered_pass=bool(paired.ordered_pass and schema_ok),
        schema_match=schema,
        row_overlap=row_overlap,
        cell_overlap=cell_overlap,
        cardinality_match={
            "expected_rows": expected.height,
            "actual_rows": actual.height,
            "delta": actual.height - expected.height,
            "ratio": None if expected.height == 0 else actual.height / expected.height,
            "match": expected.height == actual.height,
        },
        numeric_tolerance_match={
            "atol": rules.tolerance.atol,
            "rtol": rules.tolerance.rtol,
            "numeric_columns": [s.name for s in numeric_stats],
            "compared_cells": sum(s.compared for s in numeric_stats),
            "within_tolerance_cells": sum(s.within_tolerance for s in numeric_stats),
            "outside_tolerance_cells": outside,
            "max_abs_diff": max(diffs) if diffs else None,
            "match": outside == 0,
        },
        null_handling_match=null_ok,
        columns=stats,
        matched_rows=paired.matched,
        bag_matched_rows=paired.bag_matched,
        missing_rows=paired.missing_rows,
        extra_rows=paired.extra_rows,
        extra_columns=[actual.names[j] for j in range(actual.width) if j not in set(mapping)],
        vacuous=vacuous,
        ties_checked=paired.ties_checked,
        warnings=warnings,
    )


def can_pass(expected: Relation, actual: Relation) -> bool:
    """Whether :func:`compare_results` can find ``actual`` a match for ``expected`` in any mode: only with as many
    rows and as many columns on both sides (``attribute_count_match`` and a row for every row are part of every
    mode's pass). Searches that need only the verdict of many comparisons ask this first.

    >>> from sqlcmp_dagster.engine.execution import relation_from_rows
    >>> can_pass(relation_from_rows(["a"], [(1,), (2,)]), relation_from_rows(["b"], [(2,), (1,)]))
    True
    >>> can_pass(relation_from_rows(["a"], [(1,)]), relation_from_rows(["a", "b"], [(1, 2)]))
    False
    """
    return expected.width == actual.width and expected.height == actual.height


def ties_checkable(mode: ResolvedMode, order_keys: list[int] | None, expected: Relation, actual: Relation,
                   mapping: list[int | None]) -> bool:
    """Whether ties of the ORDER BY keys can be recognized: every key column is in the projection and paired,
    and both sides have as many rows (else no order can match)."""
    return (mode == "order-sensitive" and bool(order_keys) and expected.height == actual.height
            and all(k < expected.width and mapping[k] is not None for k in order_keys or []))


def _pair_frames(expected: Relation, actual: Relation, mode: ResolvedMode, order_keys: list[int] | None,
                 rules: Rules) -> Paired:
    """The frame path: alignment, pairings, cell figures and samples as polars operations."""
    tolerance, nulls_equal = rules.tolerance, rules.nulls_equal
    mapping, matched, cut = align_columns(expected, actual, positional=rules.positional, by_name=rules.by_name,
                                          tolerance=tolerance, nulls_equal=nulls_equal)
    mapped = [(i, j) for i, j in enumerate(mapping) if j is not None]
    keys = [f"k{i}" for i, _ in mapped]
    if matched is not None:  # alignment already paired every row under this mapping: reuse, do not redo
        e_frame, a_frame, numeric, bag = matched
    else:
        e_frame, a_frame, numeric = _comparable_frames(expected, actual, mapped)
        bag = pair_rows(e_frame, a_frame, keys, numeric, tolerance, nulls_equal)
    ties_checked = ties_checkable(mode, order_keys, expected, actual, mapping)
    if expected.height == actual.height and mode == "order-insensitive":
        # Only whether every row pairs in order is reported here (no tie groups: ties are an order-sensitive
        # matter), so the in-order pairs are counted rather than built.
        ordered, ordered_pass = bag, _positional_matches(e_frame, a_frame, keys, tolerance, nulls_equal) == \
            expected.height
    elif expected.height == actual.height:
        groups = _tie_groups(e_frame, [f"k{k}" for k in order_keys or []]) if ties_checked else None
        ordered = pair_rows(_with_groups(e_frame, groups), _with_groups(a_frame, groups),
                            keys + ([_GROUP] if groups is not None else []), numeric, tolerance, nulls_equal,
                            positional=groups is None)
        ordered_pass = ordered.matched == expected.height
    else:
        ordered, ordered_pass = bag, False
    pairing = ordered if mode in ("order-sensitive", "exact") else bag
    stats = _column_stats(expected, actual, mapping, numeric, pairing, e_frame, a_frame, tolerance, nulls_equal,
                          keys, rules.max_rows)
    return Paired(mapping=mapping, cut=cut, bag_matched=bag.matched, matched=pairing.matched,
                  ordered_pass=ordered_pass, ties_checked=ties_checked, columns=stats,
                  null_counts_agree=_null_counts_agree(e_frame, a_frame, keys),
                  missing_rows=_sample(expected, pairing.unpaired_expected),
                  extra_rows=_sample(actual, pairing.unpaired_actual))


def cut_inside_tie(expected: Relation, actual: Relation, uncut: Relation, *, offset: int, order_keys: list[int],
                   config: EvalConfig) -> bool:
    """Whether the expected query's LIMIT cuts inside a tie of its ORDER BY keys and ``actual`` is an equally
    valid answer: the same rows before the tied group, and rows at the cut drawn from that group.

    ``uncut`` is the expected query's result without LIMIT and OFFSET; ``order_keys`` index its projection.
    """
    n = expected.height
    if n == 0 or actual.height != n or uncut.height <= offset + n or not order_keys:
        return False
    keys = uncut.frame.select([pl.col(f"c{k}") for k in order_keys])
    boundary = keys.row(offset + n - 1)
    if keys.row(offset + n) != boundary:
        return False  # the cut falls between two different keys: no tie, nothing ambiguous
    in_group = pl.all_horizontal([pl.col(f"c{k}").eq_missing(v) for k, v in zip(order_keys, boundary)])
    start = int(expected.frame.with_row_index("__i").filter(in_group)["__i"].min())  # type: ignore[arg-type]
    head = compare_results(_rows(expected, 0, start), _rows(actual, 0, start), mode="order-sensitive",
                           config=config, order_keys=order_keys)
    group = Relation(uncut.frame.filter(in_group), uncut.names)
    tail = compare_results(group, _rows(actual, start, n - start), mode="order-insensitive", config=config)
    return head.mode_pass and tail.schema_match["attribute_count_match"] and tail.bag_matched_rows == n - start


def tied_at_cut(uncut: Relation, *, offset: int, kept: int, order_keys: list[int], width: int) -> Relation | None:
    """The rows a LIMIT chooses among at its cut when the cut falls inside a tie of ``order_keys`` (no keys: a
    LIMIT without ORDER BY, where every row ties), projected to the query's first ``width`` columns; None when
    the rows kept are the only valid answer (no cut, no tie at it, or every tied row is the same row).

    ``uncut`` is the query's result without LIMIT and OFFSET, with its ORDER BY keys among its columns; a result
    that matched only because the engine happened to return these tied rows in one order matched by luck.
    """
    end = offset + kept
    if kept == 0 or uncut.height <= end:
        return None
    frame = uncut.frame
    if order_keys:
        keys = frame.select([pl.col(f"c{k}") for k in order_keys])
        boundary = keys.row(end - 1)
        if keys.row(end) != boundary:
            return None
        frame = frame.filter(pl.all_horizontal([pl.col(f"c{k}").eq_missing(v) for k, v in zip(order_keys, boundary)]))
    group = frame.select([pl.col(f"c{i}") for i in range(width)])
    return None if group.n_unique() == 1 else Relation(group, uncut.names[:width])


def _rows(relation: Relation, start: int, length: int) -> Relation:
    return Relation(relation.frame.slice(start, length), relation.names)


def align_columns(
    expected: Relation,
    actual: Relation,
    *,
    positional: bool,
    by_name: bool,
    tolerance: Tolerance,
    nulls_equal: bool,
) -> tuple[list[int | None], _Matched | None, str | None]:
    """One consistent column permutation (see :func:`choose_mapping`), rows paired with polars.

    The second value is the row pairing under the chosen mapping whenever alignment computed it, complete or
    not (a mismatching result is paired once, not once to try the identity and again to compare).
    """
    tried: dict[tuple[int | None, ...], _Matched] = {}

    def rows_match(mapping: list[int | None]) -> _Matched | None:
        tried[tuple(mapping)] = found = _paired_under(expected, actual, mapping, tolerance, nulls_equal)
        return found if found[3].matched == expected.height else None

    def identity_forced() -> bool:
        identity = tried.get(tuple(range(expected.width)))
        return identity is not None and _identity_dominates(expected, actual, identity[3].exact_pairs)

    mapping, matched, cut = choose_mapping(expected, actual, positional=positional, by_name=by_name,
                                           rows_match=rows_match, similarity=lambda: _column_similarity(expected, actual),
                                           identity_forced=identity_forced)
    return mapping, matched if matched is not None else tried.get(tuple(mapping)), cut


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
    ``similarity`` scores every expected column against every actual column (see :func:`_column_similarity`).
    The accepted candidate's pairing is returned too, so it is not computed again. The third value says which
    work budget cut the permutation search short (None when it was not cut).

    ``identity_forced`` is a cheap test, asked after the identity failed to pair every row, that the scores would
    make the identity the only candidate (see :func:`_identity_dominates`); when it answers yes the scores are
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
    if k == j and expected.height == actual.height and expected.height * k <= _PERMUTATION_CELL_BUDGET:
        # Only columns that values cannot tell apart (tied best similarity) are permuted among themselves.
        ties = [[c for c in range(j) if scores[i][c] > 0 and scores[i][c] >= max(scores[i]) - 1e-9]
                for i in range(k)]
        options, cut = _permutations(ties, _MAX_PERMUTATIONS + 1, _PERMUTATION_STEPS)
        if len(options) > _MAX_PERMUTATIONS:
            options, cut = options[:_MAX_PERMUTATIONS], f"more than {_MAX_PERMUTATIONS} candidate mappings"
        candidates += sorted((p for p in options if p != greedy),
                             key=lambda p: sum(abs(i - c) for i, c in enumerate(p)))
    cells = 0
    for candidate in candidates:
        if candidate == identity and k == j:
            continue  # already tried first
        cells += expected.height * k
        if cells > _PERMUTATION_TOTAL_CELLS:
            return greedy, None, f"{_PERMUTATION_TOTAL_CELLS:,} cells compared"
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


@dataclass(frozen=True)
class Pairing:
    """Rows paired between the two sides: how many, and the row numbers left without a partner."""

    matched: int
    pairs: pl.DataFrame  # columns __row (expected), __row_right (actual)
    unpaired_expected: pl.Series
    unpaired_actual: pl.Series
    #: Pairs for cell comparison when the pairing itself fixes them (positional order); None: derive them.
    aligned: pl.DataFrame | None = None
    #: Pairs found by the exact multiset stage, before any tolerance (0 for a positional pairing).
    exact_pairs: int = 0


def pair_rows(
    expected: pl.DataFrame,
    actual: pl.DataFrame,
    keys: list[str],
    numeric: set[str],
    tolerance: Tolerance,
    nulls_equal: bool,
    *,
    positional: bool = False,
) -> Pairing:
    """Pair equal rows of ``expected`` and ``actual`` (frames with ``__row`` and comparable key columns).

    Bag semantics: a row of the expected side pairs with at most one row of the actual side. With
    ``positional`` the n-th row pairs with the n-th row only (plain ordered comparison).
    """
    e = expected.select([_ROW] + keys)
    a = actual.select([_ROW] + keys)
    if positional:
        return _positional_pairing(e, a, keys, numeric, tolerance, nulls_equal)
    exact = _occurrence_join(e, a, keys, nulls_equal)
    pairs = [exact]
    e_left = _without(e, exact[_ROW])
    a_left = _without(a, exact[f"{_ROW}_right"])
    tolerant = _floats(e, keys)
    if tolerant and e_left.height and a_left.height and (tolerance.atol > 0 or tolerance.rtol > 0):
        for matcher in (_ordered_tolerance_pairs, _greedy_tolerance_pairs):
            found = matcher(e_left, a_left, keys, tolerant, tolerance, nulls_equal)
            if found.height:
                pairs.append(found)
                e_left = _without(e_left, found[_ROW])
                a_left = _without(a_left, found[f"{_ROW}_right"])
            if not (e_left.height and a_left.height):
                break
    all_pairs = pl.concat(pairs)
    return Pairing(all_pairs.height, all_pairs, e_left[_ROW], a_left[_ROW], exact_pairs=exact.height)


def _occurrence_join(e: pl.DataFrame, a: pl.DataFrame, keys: list[str], nulls_equal: bool) -> pl.DataFrame:
    """Exact multiset pairing: the n-th copy of a row pairs with the n-th copy of the same row."""
    if not keys:
        count = min(e.height, a.height)
        return pl.DataFrame({_ROW: e[_ROW].head(count), f"{_ROW}_right": a[_ROW].head(count)})
    if not nulls_equal:  # a row holding a NULL equals no row; the occurrence numbers of the others are kept
        has_null = pl.any_horizontal([pl.col(c).is_null() for c in keys])
        e, a = e.filter(~has_null), a.filter(~has_null)
    if min(e.height, a.height) >= _HASHED_JOIN_ROWS and all(_hashable(e.schema[c]) for c in keys):
        hashed = _hashed_join(e, a, keys)
        if hashed is not None:
            return hashed
    joined = _with_occurrence(e, keys).join(_with_occurrence(a, keys), on=keys + [_OCC], how="inner",
                                            nulls_equal=nulls_equal)
    return joined.select(_ROW, f"{_ROW}_right")


def _without(frame: pl.DataFrame, rows: pl.Series) -> pl.DataFrame:
    """The rows of ``frame`` whose ``__row`` is not in ``rows``, in their order (a filter is cheaper than an anti
    join on large frames)."""
    return frame.filter(~pl.col(_ROW).is_in(rows.implode()))


def _hashable(dtype: pl.DataType) -> bool:
    """Types whose polars row hash is equal wherever the join finds values equal (-0.0 and 0.0, every NaN)."""
    return (dtype.is_integer() or dtype in (pl.Float64, pl.Utf8, pl.Boolean, pl.Binary, pl.Date, pl.Time)
            or isinstance(dtype, (pl.Datetime, pl.Duration)))


def _hashed_join(e: pl.DataFrame, a: pl.DataFrame, keys: list[str]) -> pl.DataFrame | None:
    """:func:`_occurrence_join`'s pairs from a join on one 64-bit hash of each row and its occurrence number
    among rows of that hash, instead of on every key: the same pairs whenever no two different rows share a
    hash, and every pair is checked cell by cell (NULL equal to NULL, as the join here; -0.0 equal to 0.0 and NaN
    to NaN, as the join). None when a pair is not equal, or two join keys of one side coincide (hash
    collisions): the caller joins on the keys.

    Equal rows share a hash, so each group of equal rows lies in one hash group and its copies are numbered
    in the same order as by the keys; when every pair is equal, a hash group holding several groups of
    rows still pairs as many rows as the keys would (each pair joins two equal rows, and it pairs all it can).
    """
    left, right = _row_hashes(e, keys), _row_hashes(a, keys)
    if not (_unique(left) and _unique(right)):  # number the copies, on both sides alike
        left, right = _numbered(left), _numbered(right)
        if not (_unique(left) and _unique(right)):
            return None
    # positions only: a smaller join; the streaming engine's join holds about two thirds of the in-memory
    # join's peak memory and takes about half its time at 1M rows (polars 2.1); the pairs' order is the
    # join's own either way, and nothing below depends on it (figures are sums and maxima, sets of rows)
    pairs = left.lazy().join(right.lazy(), on="__hash", how="inner").drop("__hash").collect(engine="streaming")
    del left, right
    # a slice of pairs at a time (bounded memory), every key's two gathers and comparison in one query: polars
    # gathers the columns in parallel, where one eager gather after another ran on one thread (the 1M bag's check
    # alone: 0.58-0.65 s -> 0.28-0.30 s)
    equal = pl.all_horizontal([pl.lit(e[key]).gather(pl.col("__at")).eq_missing(
        pl.lit(a[key]).gather(pl.col("__at_right"))).all() for key in keys])
    for start in range(0, pairs.height, _CHECKED_PAIRS):
        if not pairs.slice(start, _CHECKED_PAIRS).lazy().select(equal).collect().item():
            return None
    return pl.DataFrame([e[_ROW].gather(pairs["__at"]), a[_ROW].gather(pairs["__at_right"]).alias(f"{_ROW}_right")])


def _row_hashes(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Position ``__at`` (32 bits, polars' own row index type: half the memory of 64) and the hash ``__hash`` of
    each row's keys."""
    return pl.DataFrame([pl.int_range(0, frame.height, dtype=pl.get_index_type(), eager=True).alias("__at"),
                         frame.select(keys).hash_rows(0).alias("__hash")])


def _numbered(hashed: pl.DataFrame) -> pl.DataFrame:
    """``__hash`` replaced by the hash of it and the row's occurrence number among rows of that hash (a join
    on one 64-bit column is several times cheaper than on two)."""
    numbered = hashed.select("__hash", pl.int_range(pl.len(), dtype=pl.Int64).over("__hash").alias(_OCC))
    return hashed.with_columns(numbered.hash_rows(0).alias("__hash"))


def _unique(hashed: pl.DataFrame) -> bool:
    return hashed["__hash"].n_unique() == hashed.height


def _with_occurrence(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Number each row among the rows identical to it (0, 1, ...), so that a join pairs copies one to one.

    The window over all keys is the costly part on large frames, so there it runs only on the rows that have a
    duplicate; on small frames one window is cheaper than the extra passes.
    """
    if frame.height < _SMALL_FRAME:
        return frame.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(keys).alias(_OCC))
    duplicated = pl.struct(keys).is_duplicated()
    if not frame.select(duplicated.any()).item():
        return frame.with_columns(pl.lit(0, dtype=pl.Int64).alias(_OCC))
    marked = frame.with_columns(duplicated.alias("__dup"))
    unique = marked.filter(~pl.col("__dup")).with_columns(pl.lit(0, dtype=pl.Int64).alias(_OCC))
    repeated = marked.filter(pl.col("__dup")).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(keys).alias(_OCC))
    return pl.concat([unique, repeated]).drop("__dup")


def _ordered_tolerance_pairs(
    e: pl.DataFrame, a: pl.DataFrame, keys: list[str], tolerant: list[str], tolerance: Tolerance, nulls_equal: bool
) -> pl.DataFrame:
    """Pair residual rows by numeric order within groups that agree exactly on the non-numeric columns."""
    exact = [c for c in keys if c not in tolerant]
    rank = (pl.int_range(pl.len()).over(exact) if exact else pl.int_range(pl.len())).alias(_OCC)
    left = e.sort(exact + tolerant, nulls_last=True).with_columns(rank)
    right = a.sort(exact + tolerant, nulls_last=True).with_columns(rank)
    joined = left.join(right, on=exact + [_OCC], how="inner", nulls_equal=nulls_equal)
    return joined.filter(_all_within(tolerant, tolerance, nulls_equal)).select(_ROW, f"{_ROW}_right")


def _greedy_tolerance_pairs(
    e: pl.DataFrame, a: pl.DataFrame, keys: list[str], tolerant: list[str], tolerance: Tolerance, nulls_equal: bool
) -> pl.DataFrame:
    """Pair what numeric order could not: every candidate pair within tolerance, closest first, each row once.

    Only run when the residual is small (``_GREEDY_PAIR_BUDGET`` candidate pairs); it is the safety net for
    rows whose numeric order differs between the sides because several columns are near-equal at once.
    """
    exact = [c for c in keys if c not in tolerant]
    if e.height * a.height > _GREEDY_PAIR_BUDGET:
        return pl.DataFrame({_ROW: [], f"{_ROW}_right": []}, schema={_ROW: pl.Int64, f"{_ROW}_right": pl.Int64})
    candidates = (e.join(a, on=exact, how="inner", nulls_equal=nulls_equal) if exact else e.join(a, how="cross"))
    distance = pl.sum_horizontal([(pl.col(c) - pl.col(f"{c}_right")).abs().fill_nan(0).fill_null(0)
                                  for c in tolerant])
    candidates = (candidates.filter(_all_within(tolerant, tolerance, nulls_equal))
                  .with_columns(distance.alias("__distance")).sort("__distance"))
    used_left: set[int] = set()
    used_right: set[int] = set()
    chosen: list[tuple[int, int]] = []
    for left, right in candidates.select(_ROW, f"{_ROW}_right").iter_rows():
        if left not in used_left and right not in used_right:
            used_left.add(left)
            used_right.add(right)
            chosen.append((left, right))
    return pl.DataFrame(chosen, schema={_ROW: pl.Int64, f"{_ROW}_right": pl.Int64}, orient="row")


def _positional_pairing(
    e: pl.DataFrame, a: pl.DataFrame, keys: list[str], numeric: set[str], tolerance: Tolerance, nulls_equal: bool
) -> Pairing:
    joined, equal = _in_order(e, a, keys, tolerance, nulls_equal)
    matched = joined.filter(equal).select(_ROW, f"{_ROW}_right")
    unpaired_e = _without(e, matched[_ROW])[_ROW]
    unpaired_a = _without(a, matched[f"{_ROW}_right"])[_ROW]
    return Pairing(matched.height, matched, unpaired_e, unpaired_a, aligned=joined.select(_ROW, f"{_ROW}_right"))


def _positional_matches(e: pl.DataFrame, a: pl.DataFrame, keys: list[str], tolerance: Tolerance,
                        nulls_equal: bool) -> int:
    """How many pairs :func:`_positional_pairing` would find (the n-th row equal to the n-th row)."""
    joined, equal = _in_order(e, a, keys, tolerance, nulls_equal)
    return int(_aggregate(joined, (equal & pl.col(_ROW).is_not_null()).sum()).item())  # a column: no literal broadcast


def _in_order(e: pl.DataFrame, a: pl.DataFrame, keys: list[str], tolerance: Tolerance,
              nulls_equal: bool) -> tuple[pl.DataFrame, pl.Expr]:
    """The n-th row of each side beside each other, and whether the two are equal."""
    count = min(e.height, a.height)
    joined = e.head(count).hstack(a.head(count).rename(lambda c: f"{c}_right"))
    floats = set(_floats(e, keys))
    return joined, pl.all_horizontal([_cell_equal(c, c in floats, tolerance, nulls_equal) for c in keys]
                                     or [pl.lit(True)])


def _floats(frame: pl.DataFrame, keys: list[str]) -> list[str]:
    """The comparable columns the numeric tolerance applies to: floating-point (and decimal) values, which
    :func:`_unify` makes Float64. Integers stay integers and compare exactly, at any size."""
    return [c for c in keys if frame.schema[c] == pl.Float64]


def _cell_equal(column: str, tolerant: bool, tolerance: Tolerance, nulls_equal: bool) -> pl.Expr:
    """Equality of ``column`` and ``column_right`` under the NULL rule and, for floats, the tolerance."""
    left, right = pl.col(column), pl.col(f"{column}_right")
    both_null = left.is_null() & right.is_null() if nulls_equal else pl.lit(False)
    if tolerant:
        same = tolerance.within(left, right) | (left == right)
    else:
        same = left == right
    return both_null | same.fill_null(False)


def _all_within(columns: list[str], tolerance: Tolerance, nulls_equal: bool) -> pl.Expr:
    return pl.all_horizontal([_cell_equal(c, True, tolerance, nulls_equal) for c in columns])


def _comparable_frames(
    expected: Relation, actual: Relation, mapped: list[tuple[int, int]]
) -> tuple[pl.DataFrame, pl.DataFrame, set[str]]:
    """Frames whose paired columns share one dtype, named ``k<i>`` on both sides after expected column ``i``.

    Two integer columns stay integers (compared exactly); a floating-point or decimal column against any number
    becomes Float64 (compared under tolerance); booleans stay booleans and never equal numbers (SQLite has no
    boolean type: its ``a > 1`` is the integer 0 or 1, so on SQLite a comparison and a 0/1 integer compare
    equal); text stays text; columns of different families become tagged text so that they compare unequal
    rather than by accident. Every number column is in the returned set (its cells are reported as numeric).
    """
    e_cols: list[pl.Series] = []
    a_cols: list[pl.Series] = []
    numeric: set[str] = set()
    for i, j in mapped:
        left, right = _unify(expected.frame[:, i], actual.frame[:, j])
        if _type_class(left.dtype) == "numeric":
            numeric.add(f"k{i}")
        e_cols.append(left.alias(f"k{i}"))
        a_cols.append(right.alias(f"k{i}"))
    return _indexed(e_cols, expected.height), _indexed(a_cols, actual.height), numeric


def _indexed(columns: list[pl.Series], height: int) -> pl.DataFrame:
    """A frame of ``columns`` behind a ``__row`` number column (a frame even when no column is paired)."""
    return pl.DataFrame({_ROW: pl.int_range(0, height, eager=True, dtype=pl.Int64)}).with_columns(columns)


def _unify(left: pl.Series, right: pl.Series) -> tuple[pl.Series, pl.Series]:
    lf, rf = _dtype_family(left.dtype), _dtype_family(right.dtype)
    if lf == "null" and rf == "null":
        return left.cast(pl.Utf8), right.cast(pl.Utf8)
    if lf == "null":
        lf, left = rf, left.cast(pl.Float64 if rf == "float" else right.dtype)
    if rf == "null":
        rf, right = lf, right.cast(pl.Float64 if lf == "float" else left.dtype)
    if lf == rf == "integer":
        wide = pl.Int128 if {left.dtype, right.dtype} & {pl.Int128, pl.UInt64} else pl.Int64
        return left.cast(wide), right.cast(wide)
    if {lf, rf} <= {"integer", "float"}:
        return left.cast(pl.Float64), right.cast(pl.Float64)
    if lf == rf and left.dtype == right.dtype:
        return left, right
    return tagged_text(left), tagged_text(right)


def _dtype_family(dtype: pl.DataType) -> str:
    """``null``, ``integer``, ``float`` (floating-point and decimal), ``boolean``, or the dtype's own name."""
    if dtype == pl.Null:
        return "null"
    if dtype == pl.Boolean:
        return "boolean"
    if dtype.is_integer():
        return "integer"
    if dtype.is_numeric():
        return "float"
    return str(dtype)


def _type_class(dtype: pl.DataType) -> str:
    """The family, with integers and floats both ``numeric`` (what ``types_match`` and similarity compare)."""
    family = _dtype_family(dtype)
    return "numeric" if family in ("integer", "float") else family


#: Comparable frames, numeric columns and the full row pairing of an accepted column mapping.
_Matched = tuple[pl.DataFrame, pl.DataFrame, set[str], "Pairing"]


def _paired_under(
    expected: Relation, actual: Relation, mapping: list[int | None], tolerance: Tolerance, nulls_equal: bool
) -> _Matched:
    """Comparable frames and the bag pairing of their rows under ``mapping`` (every column mapped)."""
    mapped = [(i, j) for i, j in enumerate(mapping) if j is not None]
    e, a, numeric = _comparable_frames(expected, actual, mapped)
    return e, a, numeric, pair_rows(e, a, [f"k{i}" for i, _ in mapped], numeric, tolerance, nulls_equal)


def _similarity_values(relation: Relation, index: int) -> pl.Series:
    """What column similarity counts of a column: numbers rounded to 9 decimals (Float64), everything else as
    tagged text (Utf8)."""
    column = relation.frame[:, index]
    family = _type_class(column.dtype)
    if family == "null":
        return column.cast(pl.Utf8).alias("v")
    return (column.cast(pl.Float64).round(9) if family == "numeric" else tagged_text(column)).alias("v")


def _column_similarity(expected: Relation, actual: Relation) -> list[list[float]]:
    """Multiset similarity of every expected column with every actual column (2|A∩B| / (|A|+|B|))."""
    def counts(relation: Relation, index: int) -> pl.DataFrame:
        values = _similarity_values(relation, index).to_frame()
        if values["v"].dtype == pl.Float64:
            # polars' join does not always pair NaN with NaN (one NaN row against one NaN row finds nothing), so
            # NaN joins as a flag beside a NULL value, as the plain path counts it.
            values = values.select(pl.col("v").fill_nan(None), pl.col("v").is_nan().fill_null(False).alias("nan"))
        return values.group_by(values.columns).len()

    e_counts = [counts(expected, i) for i in range(expected.width)]
    a_counts = [counts(actual, j) for j in range(actual.width)]
    total = expected.height + actual.height
    scores: list[list[float]] = []
    for left in e_counts:
        row: list[float] = []
        for right in a_counts:
            if left["v"].dtype != right["v"].dtype:
                row.append(0.0)
                continue
            shared = left.join(right, on=left.columns[:-1], how="inner", nulls_equal=True)
            common = int(shared.select(pl.min_horizontal("len", "len_right").sum()).item() or 0)
            row.append(1.0 if total == 0 else 2 * common / total)
        scores.append(row)
    return scores


def _identity_dominates(expected: Relation, actual: Relation, exact_pairs: int) -> bool:
    """Whether :func:`_column_similarity` would make the identity mapping the only candidate of
    :func:`choose_mapping` (square results), shown from bounds instead of the scores' joins.

    Every diagonal score is at least ``2 * exact_pairs / total``: rows paired by the exact stage under the
    identity hold equal values in every column, and values the exact join finds equal are equal for the
    similarity's group-by and join too (both take -0.0 as 0.0 and NaN as NaN). An off-diagonal common count is
    at most, for the values that are neither NULL nor NaN, how many of each side's values lie within the other
    side's [min, max] (the smaller of the two), plus the smaller NULL count and the smaller NaN count; columns
    whose values have different types score 0. When every off-diagonal bound is below every diagonal's by more
    than the search's tie margin (1e-9), the greedy assignment is the identity and no other column is tied.
    """
    total, width = expected.height + actual.height, expected.width
    if exact_pairs == 0 or width != actual.width:
        return False
    numeric = [_type_class(d) == "numeric" for d in expected.frame.dtypes], \
        [_type_class(d) == "numeric" for d in actual.frame.dtypes]
    pairs = [(i, c) for i in range(width) for c in range(width) if i != c and numeric[0][i] == numeric[1][c]]
    if not pairs:
        return True
    e_range = {i: _range(_similarity_values(expected, i)) for i in sorted({i for i, _ in pairs})}
    a_range = {c: _range(_similarity_values(actual, c)) for c in sorted({c for _, c in pairs})}
    e_inside = _inside(expected, [(i, a_range[c]) for i, c in pairs])
    a_inside = _inside(actual, [(c, e_range[i]) for i, c in pairs])
    diagonal = 2 * exact_pairs / total
    for (i, c), inside_e, inside_a in zip(pairs, e_inside, a_inside):
        bound = min(inside_e, inside_a) + min(e_range[i][2], a_range[c][2]) + min(e_range[i][3], a_range[c][3])
        if not 2 * bound / total < diagonal - 2e-9:
            return False
    return True


#: Of one column's similarity values: the smallest and largest neither NULL nor NaN, the NULL and NaN counts.
_Range = tuple[Any, Any, int, int]


def _range(values: pl.Series) -> _Range:
    """The :data:`_Range` of one column's similarity values (one column at a time: these are copies)."""
    plain = _not_nan(pl.col("v"), values.dtype)
    nan = pl.col("v").is_nan().sum() if values.dtype == pl.Float64 else pl.lit(0)
    lo, hi, nulls, nans = values.to_frame("v").select(plain.min(), plain.max().alias("hi"),
                                                      pl.col("v").null_count().alias("n"), nan.alias("nan")).row(0)
    return lo, hi, int(nulls), int(nans or 0)


def _inside(relation: Relation, ranges: list[tuple[int, _Range]]) -> list[int]:
    """For each (column, range): how many of the column's similarity values, neither NULL nor NaN, lie within
    the range; each column's values are made once, and one column at a time."""
    counts: dict[int, int] = {}
    for i in sorted({i for i, _ in ranges}):
        values = _similarity_values(relation, i).to_frame("v")
        mine = [(n, r) for n, (column, r) in enumerate(ranges) if column == i]
        figures = [(pl.lit(0) if lo is None else _not_nan(pl.col("v"), values.schema["v"])
                    .is_between(pl.lit(lo, values.schema["v"]), pl.lit(hi, values.schema["v"])).sum()).alias(str(n))
                   for n, (lo, hi, _, _) in mine]
        counts.update(zip((n for n, _ in mine), (int(v or 0) for v in values.select(figures).row(0))))
    return [counts[n] for n in range(len(ranges))]


def _not_nan(value: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    return value.fill_nan(None) if dtype == pl.Float64 else value


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


def _tie_groups(frame: pl.DataFrame, key_columns: list[str]) -> pl.Series:
    """Group number of each expected row: consecutive rows with equal ORDER BY keys share a group."""
    changed = pl.any_horizontal([pl.col(c).ne_missing(pl.col(c).shift(1)) for c in key_columns])
    return frame.select(changed.fill_null(True).cum_sum().alias(_GROUP))[_GROUP]


def _with_groups(frame: pl.DataFrame, groups: pl.Series | None) -> pl.DataFrame:
    return frame if groups is None else frame.with_columns(groups.alias(_GROUP))


def _column_stats(
    expected: Relation,
    actual: Relation,
    mapping: list[int | None],
    numeric: set[str],
    pairing: Pairing,
    e_frame: pl.DataFrame,
    a_frame: pl.DataFrame,
    tolerance: Tolerance,
    nulls_equal: bool,
    keys: list[str],
    max_rows: int,
) -> list[ColumnStats]:
    """Compare cells of paired rows, after pairing the unmatched rows that differ in one column only."""
    stats = [ColumnStats(name=expected.names[i], actual_index=j,
                         actual_name=None if j is None else actual.names[j], numeric=f"k{i}" in numeric)
             for i, j in enumerate(mapping)]
    if pairing.aligned is not None:
        pairs, same = pairing.aligned, 0
    else:
        extra = _near_pairs(e_frame, a_frame, pairing, nulls_equal, keys, max_rows)
        pairs = pl.concat([pairing.pairs, extra]) if extra.height else pairing.pairs
        same = pairing.exact_pairs
    floats = set(_floats(e_frame, keys))
    measures: list[pl.Expr] = []  # every column's figures in one frame operation (each costs a fixed overhead)
    counts: list[str] = ["compared"]  # figures that add up over parts of the pairs (the others are maxima)
    for stat, key in zip(stats, [f"k{i}" for i in range(len(mapping))]):
        if stat.actual_index is None:
            continue
        left, right = pl.col(key), pl.col(f"{key}_right")
        measures += [(~_cell_equal(key, key in floats, tolerance, nulls_equal)).alias(f"{key}:mismatched"),
                     (left.is_null() ^ right.is_null()).alias(f"{key}:null_mismatched")]
        counts += [f"{key}:mismatched", f"{key}:null_mismatched"]
        if stat.numeric:
            diff = (left.cast(pl.Float64) - right.cast(pl.Float64)).abs()
            measures += [((left != right) & _cell_equal(key, key in floats, tolerance, nulls_equal))
                         .alias(f"{key}:within"), diff.alias(f"{key}:max_diff"),
                         (diff / left.cast(pl.Float64).abs()).alias(f"{key}:max_rel")]
            counts.append(f"{key}:within")
    # Row ``n`` of either frame has ``__row == n`` (:func:`_indexed`): a gather, not a join, finds it. The first
    # ``same`` pairs are the exact stage's: two values the exact join finds equal (-0.0 and 0.0, two NaNs) give
    # every measure the value of the expected value against itself, so their figures are taken on the expected
    # frame in place (its rows outside them masked), gathering nothing; the two parts' figures then add up, and
    # maxima combine as polars' ``max`` does over the union (NULLs ignored, NaN only when nothing else).
    rest = pairs.slice(same)
    joined = pl.concat([e_frame.drop(_ROW)[rest[_ROW]],
                        a_frame.drop(_ROW)[rest[f"{_ROW}_right"]].rename(lambda c: f"{c}_right")], how="horizontal")
    parts = [_figures(joined, measures, counts, None)]
    if same:
        others = pl.concat([rest[_ROW], pairing.unpaired_expected.cast(pl.Int64)])
        itself = e_frame.with_columns(pl.col(k).alias(f"{k}_right") for k in keys)
        parts.append(_figures(itself, measures, counts, ~pl.col(_ROW).is_in(others.implode())))
    summary = {name: (sum(int(p[name] or 0) for p in parts) if name in counts
                      else pl.Series([p[name] for p in parts], dtype=pl.Float64).max())
               for name in parts[0]}
    for stat, key in zip(stats, [f"k{i}" for i in range(len(mapping))]):
        if stat.actual_index is None:
            continue
        stat.compared = int(summary["compared"])
        stat.mismatched = int(summary[f"{key}:mismatched"])
        stat.null_mismatched = int(summary[f"{key}:null_mismatched"])
        if stat.numeric:
            stat.within_tolerance = int(summary[f"{key}:within"] or 0)
            stat.max_abs_diff = None if summary[f"{key}:max_diff"] is None else float(summary[f"{key}:max_diff"])
            stat.max_rel_diff = None if summary[f"{key}:max_rel"] is None else float(summary[f"{key}:max_rel"])
    return stats


def _figures(frame: pl.DataFrame, measures: list[pl.Expr], counts: list[str], rows: pl.Expr | None) -> dict[str, Any]:
    """``measures`` summed (those named in ``counts``) or maximized over the rows of ``frame`` where ``rows``
    holds (every row when None), and their number as ``compared``."""
    def over(measure: pl.Expr, name: str) -> pl.Expr:
        kept = measure if rows is None else (pl.when(rows).then(measure))
        return (kept.sum() if name in counts else kept.max()).alias(name)

    size = pl.len() if rows is None else rows.sum()
    figures = [over(m, m.meta.output_name()) for m in measures]
    return _aggregate(frame, size.alias("compared"), *figures).row(0, named=True)


def _aggregate(frame: pl.DataFrame, *aggregations: pl.Expr) -> pl.DataFrame:
    """``frame.select(*aggregations)``: from :data:`_STREAMED_ROWS` rows on polars' streaming engine, which works
    through the rows in pieces, so the per-row temporaries of every measure never exist whole at once (1M x 5
    bag: most of the peak memory above the join's); below that its fixed cost (~0.1 ms) outweighs it."""
    if frame.height < _STREAMED_ROWS:
        return frame.select(*aggregations)
    return frame.lazy().select(*aggregations).collect(engine="streaming")


def _near_pairs(
    e_frame: pl.DataFrame, a_frame: pl.DataFrame, pairing: Pairing, nulls_equal: bool, keys: list[str], max_rows: int
) -> pl.DataFrame:
    """Pair unmatched rows that agree on all columns but one; then the rest by sorted position.

    This is what makes the per-column map precise: a wrong value in one column shows as a mismatch of that
    column alone instead of a whole missing row and a whole extra row.
    """
    empty = pl.DataFrame(schema={_ROW: pl.Int64, f"{_ROW}_right": pl.Int64})
    e_left = e_frame.filter(pl.col(_ROW).is_in(pairing.unpaired_expected.implode()))
    a_left = a_frame.filter(pl.col(_ROW).is_in(pairing.unpaired_actual.implode()))
    if not (e_left.height and a_left.height) or e_left.height > max_rows or a_left.height > max_rows:
        return empty
    found: list[pl.DataFrame] = []
    for key in keys if len(keys) > 1 else []:
        others = [c for c in keys if c != key]
        pairs = _occurrence_join(e_left.select([_ROW] + others), a_left.select([_ROW] + others), others, nulls_equal)
        if pairs.height:
            found.append(pairs)
            e_left = _without(e_left, pairs[_ROW])
            a_left = _without(a_left, pairs[f"{_ROW}_right"])
        if not (e_left.height and a_left.height):
            break
    if e_left.height and a_left.height:
        count = min(e_left.height, a_left.height)
        left = e_left.sort(keys, nulls_last=True).head(count)[_ROW]
        right = a_left.sort(keys, nulls_last=True).head(count)[_ROW]
        found.append(pl.DataFrame({_ROW: left, f"{_ROW}_right": right}))
    return pl.concat(found) if found else empty


def _schema_match(expected: Relation, actual: Relation, mapping: list[int | None]) -> dict[str, Any]:
    e_names = [n.lower() for n in expected.names]
    a_names = [n.lower() for n in actual.names]
    mapped = [(i, j) for i, j in enumerate(mapping) if j is not None]
    e_types, a_types = expected.dtypes, actual.dtypes
    types_match = all(
        _type_class(e_types[i]) in (_type_class(a_types[j]), "null") or _type_class(a_types[j]) == "null"
        for i, j in mapped
    )
    used = {j for _, j in mapped}
    return {
        "match": len(e_names) == len(a_names) and len(mapped) == len(e_names) and types_match,
        "attribute_count_match": len(e_names) == len(a_names),
        "expected_attributes": list(expected.names),
        "actual_attributes": list(actual.names),
        "names_match": len(mapped) == len(e_names) == len(a_names)
        and all(e_names[i] == a_names[j] for i, j in mapped),
        "types_match": types_match,
        "order_match": len(e_names) == len(a_names) and all(i == j for i, j in mapped),
        "column_mapping": {expected.names[i]: actual.names[j] for i, j in mapped},
        "missing_attributes": [expected.names[i] for i, j in enumerate(mapping) if j is None],
        "extra_attributes": [actual.names[j] for j in range(len(a_names)) if j not in used],
    }


def _null_counts_agree(e_frame: pl.DataFrame, a_frame: pl.DataFrame, keys: list[str]) -> bool:
    if not keys:
        return True
    e_nulls = e_frame.select([pl.col(k).null_count() for k in keys]).row(0)
    a_nulls = a_frame.select([pl.col(k).null_count() for k in keys]).row(0)
    return e_nulls == a_nulls


def _sample(relation: Relation, rows: pl.Series, limit: int = 5) -> list[list[Any]]:
    """The first ``limit`` of the given rows in value order: a database returns the rows of a query without
    ORDER BY in no fixed order (PostgreSQL's synchronized scans under concurrent cases), so a sample taken by
    position would differ between two runs of the same case."""
    if not relation.width:
        return []
    picked = relation.frame.with_row_index(_ROW).filter(pl.col(_ROW).is_in(rows.cast(pl.UInt32).implode())).drop(_ROW)
    try:
        picked = picked.sort(picked.columns, nulls_last=True, maintain_order=True)
    except pl.exceptions.PolarsError:  # a column polars cannot order (Object): database order, at least stable
        pass
    return [list(r) for r in picked.head(limit).iter_rows()]
