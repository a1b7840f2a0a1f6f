"""How alike two columns' values are, on the frame path: the scores the column-permutation search
(:func:`mapping.choose_mapping`) pairs columns by when neither position nor name decides, and the bound that
spares computing them when they could only confirm the identity mapping."""

from __future__ import annotations

from typing import Any, NamedTuple

import polars as pl

from sqlcmp_dagster.engine.comparison.shared import type_class
from sqlcmp_dagster.engine.relation import Relation, tagged_text


def _similarity_values(relation: Relation, index: int) -> pl.Series:
    """What column similarity counts of a column: numbers rounded to 9 decimals (Float64), everything else as
    tagged text (Utf8)."""
    column = relation.frame[:, index]
    family = type_class(column.dtype)
    if family == "null":
        return column.cast(pl.Utf8).alias("v")
    return (column.cast(pl.Float64).round(9) if family == "numeric" else tagged_text(column)).alias("v")


def column_similarity(expected: Relation, actual: Relation) -> list[list[float]]:
    """Multiset similarity of every expected column with every actual column (2|A∩B| / (|A|+|B|)).

    The columns' value counts are joined once per value type (Float64 numbers, Utf8 text), each value tagged with
    its column, not once per pair of columns: a pair's join cost about 0.3 ms whatever its size, so a model's
    2,000-column answer against a 19-column expected result took 38,000 joins and 12 s (a review's finding);
    one join's output holds a row for each value two columns share, at most what the pairs' joins held together.
    Columns whose values have different types score 0, and so do columns that share no value.
    """
    total = expected.height + actual.height
    left, right = _tagged_counts(expected), _tagged_counts(actual)
    if total == 0:  # no values: columns of one type are alike
        return [[1.0 if left_type == right_type else 0.0 for right_type in right.types] for left_type in left.types]
    scores = [[0.0] * actual.width for _ in range(expected.width)]
    for dtype, counts in left.counts.items():
        if (other := right.counts.get(dtype)) is None:
            continue
        values = [name for name in counts.columns if name not in ("col", "len")]
        shared = (counts.join(other, on=values, how="inner", nulls_equal=True)
                  .group_by("col", "col_right").agg(pl.min_horizontal("len", "len_right").sum().alias("common")))
        for i, c, common in shared.iter_rows():
            scores[i][c] = 2 * common / total
    return scores


class _TaggedCounts(NamedTuple):
    """Of each column of a relation, the type of its similarity values; and by type, how often each value occurs in
    each column of that type (columns ``col``, ``v``, ``nan`` for numbers, ``len``)."""

    types: list[pl.DataType]
    counts: dict[pl.DataType, pl.DataFrame]


def _tagged_counts(relation: Relation) -> _TaggedCounts:
    """:class:`_TaggedCounts` of ``relation``'s columns."""
    types: list[pl.DataType] = []
    frames: dict[pl.DataType, list[pl.DataFrame]] = {}
    for index in range(relation.width):
        values = _similarity_values(relation, index).to_frame()
        if values["v"].dtype == pl.Float64:
            # polars' join does not always pair NaN with NaN (one NaN row against one NaN row finds nothing), so
            # NaN joins as a flag beside a NULL value, as the plain path counts it.
            values = values.select(pl.col("v").fill_nan(None), pl.col("v").is_nan().fill_null(False).alias("nan"))
        types.append(values["v"].dtype)
        frames.setdefault(values["v"].dtype, []).append(values.with_columns(pl.lit(index, pl.Int64).alias("col")))
    counts = {dtype: pl.concat(parts).group_by(pl.all()).len() for dtype, parts in frames.items()}
    return _TaggedCounts(types, counts)


def identity_dominates(expected: Relation, actual: Relation, exact_pairs: int) -> bool:
    """Whether :func:`column_similarity` would make the identity mapping the only candidate of
    :func:`mapping.choose_mapping` (square results), shown from bounds instead of the scores' joins.

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
    numeric = [type_class(d) == "numeric" for d in expected.frame.dtypes], \
        [type_class(d) == "numeric" for d in actual.frame.dtypes]
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
