"""The plain path: result comparison on small results in plain Python, with row tuples, dicts and Counters
instead of frame operations.

Each polars operation has a fixed cost of a fraction of a millisecond and one comparison takes about forty of
them, so on results of a few rows (most Spider cases, every probe of the neighbor and fix searches) that fixed
cost is the whole cost. :func:`compare.compare_results` takes this path for results of at most
``budgets.SMALL_RESULT_CELLS`` cells. It answers exactly as the frame path (:mod:`frames`) does, metric for
metric (tests/test_properties.py runs its properties on both paths and checks that they agree field for field).
Each step mirrors the frame-path function named in its docstring, where the rule itself is explained.

Value semantics taken over from polars: a NULL compares as the NULL mode says; NaN equals NaN and -0.0 equals
0.0 (polars' equality, joins and group-by); sorting puts NaN after every number and NULL last; similarity
rounds numbers as polars' ``round(9)`` does (``round(x * 1e9) / 1e9``, half to even). Conversions this module
cannot reproduce bit for bit (decimals and 32-bit floats to Float64, the text of dates and times) are left to
polars, one column at a time.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
import math
from typing import Any

import polars as pl

from sqlcmp_dagster.engine.comparison import budgets
from sqlcmp_dagster.engine.comparison.mapping import choose_mapping
from sqlcmp_dagster.engine.comparison.shared import ColumnStats, Paired, Rules, Tolerance, dtype_family, \
    ties_checkable, type_class
from sqlcmp_dagster.engine.models import ResolvedMode
from sqlcmp_dagster.engine.relation import Relation, tagged_text


class TooManyPairs(Exception):
    """The plain path's tolerance passes would check more than :data:`budgets.SMALL_RESULT_PAIRS` pairs of cells."""


class _PairBudget:
    """What is left of :data:`budgets.SMALL_RESULT_PAIRS` for one comparison."""

    def __init__(self) -> None:
        self.left = budgets.SMALL_RESULT_PAIRS

    def spend(self, checks: int) -> None:
        self.left -= checks
        if self.left < 0:
            raise TooManyPairs()

Row = tuple[Any, ...]
Pairs = list[tuple[int, int]]


def suits(expected: Relation, actual: Relation) -> bool:
    """Whether the plain path compares these results: small, and only types whose Python values keep polars'
    equality and order (not nested, categorical or object columns). What its tolerance passes check one pair at
    a time is bounded as each pass begins (:data:`budgets.SMALL_RESULT_PAIRS` for the whole comparison): most results of
    a few hundred rows pair exactly and never reach them."""
    cells = (expected.height + actual.height) * max(expected.width, actual.width, 1)
    return cells <= budgets.SMALL_RESULT_CELLS and all(_plain(t) for t in (*expected.dtypes, *actual.dtypes))


def _plain(dtype: pl.DataType) -> bool:
    return dtype in (pl.Boolean, pl.Null, pl.Utf8, pl.Binary) or dtype.is_numeric() or dtype.is_temporal()


@dataclass
class _Columns:
    """The paired columns of both sides in comparable form (see :func:`frames._comparable_frames`)."""

    expected: list[Row]  # rows of the paired columns, in expected-column order
    actual: list[Row]
    numeric: list[bool]  # per paired column: a number column (reported as numeric)
    tolerant: list[int]  # positions of the floating-point columns, compared under the tolerance


@dataclass
class _Pairing:
    """Rows paired (expected row, actual row) and those left unpaired, ascending (:class:`frames.Pairing`)."""

    pairs: Pairs
    unpaired_expected: list[int]
    unpaired_actual: list[int]
    aligned: Pairs | None = None  # positional comparison: the pairs whose cells are compared


def pair(expected: Relation, actual: Relation, mode: ResolvedMode, order_keys: list[int] | None,
         rules: Rules, *, bounded: bool = False) -> Paired:
    """The plain path of :func:`compare.compare_results` (mirrors :func:`frames.pair`). ``bounded``: raise
    :class:`TooManyPairs` rather than check more than :data:`budgets.SMALL_RESULT_PAIRS` pairs of cells one by one."""
    budget = _PairBudget() if bounded else None
    e_values, a_values = expected.columns()[1], actual.columns()[1]

    def comparable(mapping: list[int | None]) -> _Columns:
        return _comparable(expected, actual, e_values, a_values, mapping)

    def rows_match(mapping: list[int | None]) -> tuple[_Columns, _Pairing] | None:
        columns = comparable(mapping)
        bag = _pair_rows(columns.expected, columns.actual, columns.tolerant, rules, budget)
        return (columns, bag) if not (bag.unpaired_expected or bag.unpaired_actual) else None

    mapping, matched, cut = choose_mapping(
        expected, actual, positional=rules.positional, by_name=rules.by_name, rows_match=rows_match,
        similarity=lambda: _similarity(expected, actual))
    if matched is not None:
        columns, bag = matched
    else:
        columns = comparable(mapping)
        bag = _pair_rows(columns.expected, columns.actual, columns.tolerant, rules, budget)
    ties_checked = ties_checkable(mode, order_keys, expected, actual, mapping)
    if expected.height == actual.height:
        if ties_checked:
            groups = _tie_groups(columns.expected, [_position(mapping, k) for k in order_keys or []])
            ordered = _pair_rows([r + (g,) for r, g in zip(columns.expected, groups)],
                                 [r + (g,) for r, g in zip(columns.actual, groups)], columns.tolerant, rules,
                                 budget)
        else:
            ordered = _positional(columns, rules)
        ordered_pass = len(ordered.pairs) == expected.height
    else:
        ordered, ordered_pass = bag, False
    pairing = ordered if mode in ("order-sensitive", "exact") else bag
    width = len(columns.numeric)
    return Paired(
        mapping=mapping, cut=cut, bag_matched=len(bag.pairs), matched=len(pairing.pairs),
        ordered_pass=ordered_pass, ties_checked=ties_checked,
        columns=_column_stats(expected, actual, mapping, columns, pairing, rules),
        null_counts_agree=all(sum(r[p] is None for r in columns.expected) == sum(r[p] is None for r in columns.actual)
                              for p in range(width)),
        missing_rows=_sample(e_values, pairing.unpaired_expected),
        extra_rows=_sample(a_values, pairing.unpaired_actual))


def _position(mapping: list[int | None], column: int) -> int:
    """Position of expected ``column`` among the paired columns."""
    return sum(1 for j in mapping[:column] if j is not None)


def _comparable(expected: Relation, actual: Relation, e_values: list[list[Any]], a_values: list[list[Any]],
                mapping: list[int | None]) -> _Columns:
    """Rows of the paired columns with one type per column (``frames._comparable_frames``/``_unify``)."""
    e_columns: list[list[Any]] = []
    a_columns: list[list[Any]] = []
    numeric: list[bool] = []
    tolerant: list[int] = []
    for i, j in ((i, j) for i, j in enumerate(mapping) if j is not None):
        left, right = expected.dtypes[i], actual.dtypes[j]
        lf, rf = dtype_family(left), dtype_family(right)
        if lf == "null":
            lf = rf
        if rf == "null":
            rf = lf
        if lf == rf == "null" or (lf == rf and lf not in ("integer", "float")
                                  and (left == right or pl.Null in (left, right))):
            e_col, a_col, number = e_values[i], a_values[j], False  # one type already (or NULLs only)
        elif lf == rf == "integer":
            e_col, a_col, number = e_values[i], a_values[j], True
        elif {lf, rf} <= {"integer", "float"}:
            e_col, a_col, number = _floats(expected, i), _floats(actual, j), True
            tolerant.append(len(numeric))
        else:
            e_col, a_col, number = tagged_column(expected, i), tagged_column(actual, j), False
        e_columns.append(e_col)
        a_columns.append(a_col)
        numeric.append(number)
    return _Columns(_rows(e_columns, expected.height), _rows(a_columns, actual.height), numeric, tolerant)


def _rows(columns: list[list[Any]], height: int) -> list[Row]:
    return list(zip(*columns)) if columns else [()] * height


def _floats(relation: Relation, index: int) -> list[Any]:
    """Column ``index`` of ``relation`` cast to Float64 as polars casts it (Python's ``float`` is exact for
    integers only)."""
    dtype, values = relation.dtypes[index], relation.columns()[1][index]
    if dtype in (pl.Float64, pl.Null):
        return values
    if dtype.is_integer():
        return [None if v is None else float(v) for v in values]
    return relation.frame.to_series(index).cast(pl.Float64).to_list()


class _NaN:
    """The one key all NaNs share (NaN equals NaN in polars' joins and group-by, never in Python)."""

    def __repr__(self) -> str:
        return "NaN"


_NAN = _NaN()


def _key(row: Row) -> Row:
    return tuple(_NAN if v != v else v for v in row)


def _equal(left: Any, right: Any, nulls_equal: bool) -> bool:
    """polars' ``left == right`` under the NULL rule (``frames._cell_equal`` without tolerance)."""
    if left is None or right is None:
        return nulls_equal and left is None and right is None
    return bool(left == right) or (left != left and right != right)


def _close(left: Any, right: Any, tolerance: Tolerance, nulls_equal: bool) -> bool:
    """``frames._cell_equal`` with tolerance: ``left`` is the expected value."""
    if left is None or right is None:
        return nulls_equal and left is None and right is None
    return left == right or tolerance.close(left, right)


def _cell_equal(tolerant: bool, rules: Rules) -> Callable[[Any, Any], bool]:
    if tolerant:
        return lambda left, right: _close(left, right, rules.tolerance, rules.nulls_equal)
    return lambda left, right: _equal(left, right, rules.nulls_equal)


def _sort_key(row: Row, positions: Sequence[int]) -> tuple[Any, ...]:
    """polars' ascending order with ``nulls_last``: numbers, then NaN, then NULL."""
    return tuple((2,) if row[p] is None else (1,) if row[p] != row[p] else (0, row[p]) for p in positions)


def _pair_rows(e_rows: list[Row], a_rows: list[Row], tolerant: list[int], rules: Rules,
               budget: _PairBudget | None = None) -> _Pairing:
    """Bag pairing (``frames.pair_rows``): exact copies one to one, then tolerant pairs of the rest (the pass
    over every pair of rows spends from ``budget``, and :class:`TooManyPairs` stops it)."""
    width = len(e_rows[0]) if e_rows else len(a_rows[0]) if a_rows else 0
    e_left, a_left = list(range(len(e_rows))), list(range(len(a_rows)))
    pairs = _occurrence_pairs(e_rows, a_rows, e_left, a_left, list(range(width)), rules.nulls_equal)
    e_left, a_left = _without(e_left, a_left, pairs)
    tolerance = rules.tolerance
    if tolerant and e_left and a_left and (tolerance.atol > 0 or tolerance.rtol > 0):
        for matcher in (_ordered_tolerance_pairs, _greedy_tolerance_pairs):
            if matcher is _greedy_tolerance_pairs and budget is not None \
                    and len(e_left) * len(a_left) <= budgets.GREEDY_PAIR_BUDGET:
                budget.spend(len(e_left) * len(a_left) * len(tolerant))
            found = matcher(e_rows, a_rows, e_left, a_left, width, tolerant, rules)
            if found:
                pairs += found
                e_left, a_left = _without(e_left, a_left, found)
            if not (e_left and a_left):
                break
    return _Pairing(pairs, e_left, a_left)


def _without(e_left: list[int], a_left: list[int], pairs: Pairs) -> tuple[list[int], list[int]]:
    e_used, a_used = {i for i, _ in pairs}, {j for _, j in pairs}
    return [i for i in e_left if i not in e_used], [j for j in a_left if j not in a_used]


def _occurrence_pairs(e_rows: list[Row], a_rows: list[Row], e_ids: list[int], a_ids: list[int],
                      positions: list[int], nulls_equal: bool) -> Pairs:
    """Exact multiset pairing on ``positions``: the n-th copy pairs with the n-th copy
    (``frames._occurrence_join``)."""
    if not positions:
        return list(zip(e_ids, a_ids))
    waiting: dict[Row, deque[int]] = defaultdict(deque)
    for j in a_ids:
        values = tuple(a_rows[j][p] for p in positions)
        if nulls_equal or None not in values:
            waiting[_key(values)].append(j)
    pairs: Pairs = []
    for i in e_ids:
        values = tuple(e_rows[i][p] for p in positions)
        if (nulls_equal or None not in values) and (queue := waiting.get(_key(values))):
            pairs.append((i, queue.popleft()))
    return pairs


def _ordered_tolerance_pairs(e_rows: list[Row], a_rows: list[Row], e_left: list[int], a_left: list[int],
                             width: int, tolerant: list[int], rules: Rules) -> Pairs:
    """Residual rows paired by numeric order within groups equal on the other columns
    (``frames._ordered_tolerance_pairs``)."""
    exact = [p for p in range(width) if p not in tolerant]

    def ranked(rows: list[Row], ids: list[int]) -> dict[tuple[Row, int], int]:
        seen: Counter[Row] = Counter()
        found: dict[tuple[Row, int], int] = {}
        for i in sorted(ids, key=lambda i: _sort_key(rows[i], exact + tolerant)):
            group = tuple(rows[i][p] for p in exact)
            key = _key(group)
            if rules.nulls_equal or None not in group:
                found[(key, seen[key])] = i
            seen[key] += 1
        return found

    right = ranked(a_rows, a_left)
    pairs: Pairs = []
    for key, i in ranked(e_rows, e_left).items():
        j = right.get(key)
        if j is not None and all(_close(e_rows[i][p], a_rows[j][p], rules.tolerance, rules.nulls_equal)
                                 for p in tolerant):
            pairs.append((i, j))
    return pairs


def _greedy_tolerance_pairs(e_rows: list[Row], a_rows: list[Row], e_left: list[int], a_left: list[int],
                            width: int, tolerant: list[int], rules: Rules) -> Pairs:
    """Every candidate pair within tolerance, closest first, each row once (``frames._greedy_tolerance_pairs``)."""
    if len(e_left) * len(a_left) > budgets.GREEDY_PAIR_BUDGET:
        return []
    exact = [p for p in range(width) if p not in tolerant]
    partners: dict[Row, list[int]] = defaultdict(list)  # the join on the exact columns
    for j in a_left:
        group = tuple(a_rows[j][p] for p in exact)
        if rules.nulls_equal or None not in group:
            partners[_key(group)].append(j)
    candidates: list[tuple[float, int, int]] = []
    for i in e_left:
        left, group = e_rows[i], tuple(e_rows[i][p] for p in exact)
        for j in partners.get(_key(group), []) if rules.nulls_equal or None not in group else []:
            right = a_rows[j]
            if all(_close(left[p], right[p], rules.tolerance, rules.nulls_equal) for p in tolerant):
                candidates.append((sum(_distance(left[p], right[p]) for p in tolerant), i, j))
    candidates.sort(key=lambda c: c[0])
    used_left: set[int] = set()
    used_right: set[int] = set()
    chosen: Pairs = []
    for _, i, j in candidates:
        if i not in used_left and j not in used_right:
            used_left.add(i)
            used_right.add(j)
            chosen.append((i, j))
    return chosen


def _distance(left: float | None, right: float | None) -> float:
    """``|left - right|`` with NULL and NaN counted as 0."""
    if left is None or right is None:
        return 0.0
    diff = abs(left - right)
    return 0.0 if diff != diff else diff


def _positional(columns: _Columns, rules: Rules) -> _Pairing:
    """Row n against row n only (``frames._positional_pairing``)."""
    equal = [_cell_equal(p in columns.tolerant, rules) for p in range(len(columns.numeric))]
    count = min(len(columns.expected), len(columns.actual))
    matched = [i for i in range(count)
               if all(eq(left, right) for eq, left, right in zip(equal, columns.expected[i], columns.actual[i]))]
    done = set(matched)
    return _Pairing([(i, i) for i in matched], [i for i in range(len(columns.expected)) if i not in done],
                    [j for j in range(len(columns.actual)) if j not in done], aligned=[(i, i) for i in range(count)])


def _tie_groups(rows: list[Row], positions: list[int]) -> list[int]:
    """Group number of each expected row: consecutive rows with equal ORDER BY keys share one
    (``frames._tie_groups``)."""
    groups: list[int] = []
    group, previous = 0, None
    for row in rows:
        keys = _key(tuple(row[p] for p in positions))
        if previous is None or keys != previous:
            group += 1
        groups.append(group)
        previous = keys
    return groups


def _column_stats(expected: Relation, actual: Relation, mapping: list[int | None], columns: _Columns,
                  pairing: _Pairing, rules: Rules) -> list[ColumnStats]:
    """Cells of paired rows compared column by column (``frames._column_stats``)."""
    paired = [(i, j) for i, j in enumerate(mapping) if j is not None]
    numeric = {i: columns.numeric[p] for p, (i, _) in enumerate(paired)}
    stats = [ColumnStats(name=expected.names[i], actual_index=j,
                                actual_name=None if j is None else actual.names[j], numeric=numeric.get(i, False))
             for i, j in enumerate(mapping)]
    if pairing.aligned is not None:
        pairs = pairing.aligned
    else:
        pairs = pairing.pairs + _near_pairs(columns, pairing, rules)
    for p, (i, _) in enumerate(paired):
        stat, equal = stats[i], _cell_equal(p in columns.tolerant, rules)
        cells = [(columns.expected[e][p], columns.actual[a][p]) for e, a in pairs]
        stat.compared = len(cells)
        stat.mismatched = sum(not equal(left, right) for left, right in cells)
        stat.null_mismatched = sum((left is None) != (right is None) for left, right in cells)
        if stat.numeric:
            stat.within_tolerance = sum(left is not None and right is not None and not _equal(left, right, True)
                                        and equal(left, right) for left, right in cells)
            diffs = [(abs(float(left) - float(right)), float(left)) for left, right in cells
                     if left is not None and right is not None]
            stat.max_abs_diff = _max([d for d, _ in diffs])
            stat.max_rel_diff = _max([_ratio(d, abs(e)) for d, e in diffs])
    return stats


def _ratio(numerator: float, denominator: float) -> float:
    """IEEE division, as polars divides (0/0 is NaN, x/0 is infinite)."""
    if denominator == 0:
        return math.nan if numerator == 0 or numerator != numerator else math.inf
    return numerator / denominator


def _max(values: list[float]) -> float | None:
    """polars' ``max`` of floats: NaN only when every value is NaN, None when there is none."""
    if not values:
        return None
    numbers = [v for v in values if v == v]
    return max(numbers) if numbers else math.nan


def _near_pairs(columns: _Columns, pairing: _Pairing, rules: Rules) -> Pairs:
    """Unpaired rows that agree on all columns but one, then the rest by sorted position
    (``frames._near_pairs``)."""
    e_left, a_left = pairing.unpaired_expected, pairing.unpaired_actual
    if not (e_left and a_left) or len(e_left) > rules.max_rows or len(a_left) > rules.max_rows:
        return []
    width = len(columns.numeric)
    found: Pairs = []
    for p in range(width) if width > 1 else []:
        others = [q for q in range(width) if q != p]
        pairs = _occurrence_pairs(columns.expected, columns.actual, e_left, a_left, others, rules.nulls_equal)
        if pairs:
            found += pairs
            e_left, a_left = _without(e_left, a_left, pairs)
        if not (e_left and a_left):
            break
    if e_left and a_left:
        count = min(len(e_left), len(a_left))
        everything = list(range(width))
        left = sorted(e_left, key=lambda i: _sort_key(columns.expected[i], everything))[:count]
        right = sorted(a_left, key=lambda j: _sort_key(columns.actual[j], everything))[:count]
        found += list(zip(left, right))
    return found


def _similarity(expected: Relation, actual: Relation) -> list[list[float]]:
    """Multiset similarity of every expected column with every actual column (``similarity.column_similarity``)."""
    left = [_counts(expected, i) for i in range(expected.width)]
    right = [_counts(actual, j) for j in range(actual.width)]
    total = expected.height + actual.height
    scores: list[list[float]] = []
    for kind, counts in left:
        row: list[float] = []
        for other_kind, other in right:
            if kind != other_kind:
                row.append(0.0)
                continue
            common = sum(min(n, other[v]) for v, n in counts.items() if v in other)
            row.append(1.0 if total == 0 else 2 * common / total)
        scores.append(row)
    return scores


def _counts(relation: Relation, index: int) -> tuple[bool, Counter[Any]]:
    """Whether column ``index`` of ``relation`` compares as numbers, and how often each of its values occurs
    (numbers rounded to 9 decimals, everything else as tagged text)."""
    family = type_class(relation.dtypes[index])
    if family == "numeric":
        return True, Counter(None if v is None else _NAN if v != v else _round9(v) for v in _floats(relation, index))
    if family == "null":
        return False, Counter(relation.columns()[1][index])
    return False, Counter(tagged_column(relation, index))


def _round9(value: float) -> float:
    """polars' ``round(9)``: half to even on ``value * 1e9``."""
    scaled = value * 1e9
    if math.isinf(scaled):
        return value
    return round(scaled) / 1e9


def tagged_column(relation: Relation, index: int) -> list[str | None]:
    """:func:`relation.tagged_text` of column ``index`` of ``relation``, written in Python where its text is
    known (booleans, numbers, text, bytes), by polars for the rest (dates and times)."""
    dtype, values = relation.dtypes[index], relation.columns()[1][index]
    if dtype == pl.Boolean:
        return [None if v is None else "l:true" if v else "l:false" for v in values]
    if dtype.is_numeric():
        return [None if v is None else "n:" + _float_text(v) for v in _floats(relation, index)]
    if dtype == pl.Utf8:
        return [None if v is None else "s:" + v for v in values]
    if dtype == pl.Binary:
        return [None if v is None else "b:" + v.hex() for v in values]
    return tagged_text(relation.frame.to_series(index)).to_list()


#: Whether the installed polars writes a positive exponent with its sign (``1e+16``, polars 2) or without it
#: (``1e16``, polars 1, which the ``bench`` extra's datacompy still requires): asked of polars once, since the
#: plain path must write exactly polars' text.
_EXPONENT_PLUS = pl.Series([1e16]).cast(pl.Utf8).item() == "1e+16"


def _float_text(value: float) -> str:
    """A Float64 as polars writes it: Python's shortest digits, but NaN, plain decimals down to 1e-5 and
    exponents without zero padding below that, and a positive exponent's sign as the installed polars writes it."""
    if value != value:
        return "NaN"
    text = repr(value)
    if "e+" in text and not _EXPONENT_PLUS:
        return text.replace("e+", "e")
    if "e-" not in text:
        return text
    mantissa, exponent = text.split("e-")
    if int(exponent) > 5:
        return f"{mantissa}e-{int(exponent)}"
    sign, digits = ("-", mantissa[1:]) if mantissa.startswith("-") else ("", mantissa)
    return f"{sign}0.{'0' * (int(exponent) - 1)}{digits.replace('.', '')}"


def _sample(values: list[list[Any]], rows: list[int], limit: int = 5) -> list[list[Any]]:
    """The first ``limit`` of the given rows in value order (``frames._sample``)."""
    if not values:
        return []
    picked = [tuple(column[i] for column in values) for i in sorted(rows)]
    everything = list(range(len(values)))
    picked.sort(key=lambda row: _sort_key(row, everything))
    return [list(row) for row in picked[:limit]]
