"""The frame path: result comparison as polars operations, vectorized, for results too large for plain rows.

It works in three steps, each a frame operation rather than a loop over rows:

1. **Column alignment**: one consistent permutation maps expected columns to actual columns (by position, by
   name, or by the values they hold; :func:`mapping.choose_mapping`). Row tuples are never broken up.
2. **Row pairing**: an exact multiset join (each row tagged with its occurrence number among identical rows)
   pairs equal rows; the rest are paired under ``|a-b| <= atol + rtol*|b|`` by numeric (never string) order
   within groups that agree on the non-numeric columns, and a bounded greedy pass for what is still left.
3. **Cell alignment**: unpaired rows that differ in a single column are paired by joining on the others, so the
   per-column mismatch counts say *which* attribute is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from sqlcmp_dagster.engine.comparison import budgets
from sqlcmp_dagster.engine.comparison.mapping import choose_mapping
from sqlcmp_dagster.engine.comparison.shared import ColumnStats, Paired, Rules, Tolerance, dtype_family, \
    ties_checkable, type_class
from sqlcmp_dagster.engine.comparison.similarity import column_similarity, identity_dominates
from sqlcmp_dagster.engine.models import ResolvedMode
from sqlcmp_dagster.engine.relation import Relation, tagged_text

_ROW = "__row"
_OCC = "__occ"
_GROUP = "__tie"


def pair(expected: Relation, actual: Relation, mode: ResolvedMode, order_keys: list[int] | None,
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
        return identity is not None and identity_dominates(expected, actual, identity[3].exact_pairs)

    mapping, matched, cut = choose_mapping(expected, actual, positional=positional, by_name=by_name,
                                           rows_match=rows_match,
                                           similarity=lambda: column_similarity(expected, actual),
                                           identity_forced=identity_forced)
    return mapping, matched if matched is not None else tried.get(tuple(mapping)), cut


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
    if min(e.height, a.height) >= budgets.HASHED_JOIN_ROWS and all(_hashable(e.schema[c]) for c in keys):
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
    for start in range(0, pairs.height, budgets.CHECKED_PAIRS):
        if not pairs.slice(start, budgets.CHECKED_PAIRS).lazy().select(equal).collect().item():
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
    if frame.height < budgets.SMALL_FRAME:
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

    Only run when the residual is small (``budgets.GREEDY_PAIR_BUDGET`` candidate pairs); it is the safety net for
    rows whose numeric order differs between the sides because several columns are near-equal at once.
    """
    exact = [c for c in keys if c not in tolerant]
    if e.height * a.height > budgets.GREEDY_PAIR_BUDGET:
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
        if type_class(left.dtype) == "numeric":
            numeric.add(f"k{i}")
        e_cols.append(left.alias(f"k{i}"))
        a_cols.append(right.alias(f"k{i}"))
    return _indexed(e_cols, expected.height), _indexed(a_cols, actual.height), numeric


def _indexed(columns: list[pl.Series], height: int) -> pl.DataFrame:
    """A frame of ``columns`` behind a ``__row`` number column (a frame even when no column is paired)."""
    return pl.DataFrame({_ROW: pl.int_range(0, height, eager=True, dtype=pl.Int64)}).with_columns(columns)


def _unify(left: pl.Series, right: pl.Series) -> tuple[pl.Series, pl.Series]:
    lf, rf = dtype_family(left.dtype), dtype_family(right.dtype)
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


#: Comparable frames, numeric columns and the full row pairing of an accepted column mapping.
_Matched = tuple[pl.DataFrame, pl.DataFrame, set[str], "Pairing"]


def _paired_under(
    expected: Relation, actual: Relation, mapping: list[int | None], tolerance: Tolerance, nulls_equal: bool
) -> _Matched:
    """Comparable frames and the bag pairing of their rows under ``mapping`` (every column mapped)."""
    mapped = [(i, j) for i, j in enumerate(mapping) if j is not None]
    e, a, numeric = _comparable_frames(expected, actual, mapped)
    return e, a, numeric, pair_rows(e, a, [f"k{i}" for i, _ in mapped], numeric, tolerance, nulls_equal)


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
    summary: dict[str, Any] = {name: (sum(int(p[name] or 0) for p in parts) if name in counts
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
    """``frame.select(*aggregations)``: from :data:`budgets.STREAMED_ROWS` rows on polars' streaming engine, which works
    through the rows in pieces, so the per-row temporaries of every measure never exist whole at once (1M x 5
    bag: most of the peak memory above the join's); below that its fixed cost (~0.1 ms) outweighs it."""
    if frame.height < budgets.STREAMED_ROWS:
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
