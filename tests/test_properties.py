"""Property-based tests of the result comparator: what must never change a verdict, and what always must.

Every property runs on both implementations of Layer 3 (``path="frames"``, polars; ``path="rows"``, plain
Python for small results), and the last one checks that the two give the same comparison, field for field.
The frame path runs twice: as it runs on small frames, and as it runs on large ones (``frames-hashed``: the exact
stage joins on one hash per row, checked cell by cell, and aggregations run on polars' streaming engine).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, get_args
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polars as pl

from sqlcmp_dagster.engine import comparison
from sqlcmp_dagster.engine.comparison import ComparisonPath, ResultComparison, budgets
from sqlcmp_dagster.engine.relation import Relation, relation_from_rows
from sqlcmp_dagster.engine.models import EvalConfig, ResolvedMode

PATHS = pytest.mark.parametrize("path", [*get_args(ComparisonPath), "frames-hashed"])


@contextmanager
def _hashed_from(rows: int) -> Iterator[None]:
    """The frame path's hashed exact stage and streamed aggregations from ``rows`` rows on (large frames only,
    otherwise)."""
    with mock.patch.object(budgets, "HASHED_JOIN_ROWS", rows), mock.patch.object(budgets, "CHECKED_PAIRS", 3), \
            mock.patch.object(budgets, "STREAMED_ROWS", rows):
        yield


def compare_results(expected: Relation, actual: Relation, *, path: str, **options: Any) -> ResultComparison:
    """:func:`comparison.compare_results` on ``path``; ``frames-hashed`` is the frame path with the hashed stage
    and the streamed aggregations at every size (and the hashed stage's check in slices of three pairs)."""
    if path == "frames-hashed":
        with _hashed_from(1):
            return comparison.compare_results(expected, actual, path="frames", **options)
    return comparison.compare_results(expected, actual, path=path, **options)  # type: ignore[arg-type]

_CELLS = {
    "int": st.one_of(st.none(), st.integers(-3, 3)),
    "float": st.one_of(st.none(), st.integers(-6, 6).map(lambda i: i / 2)),
    "text": st.one_of(st.none(), st.sampled_from(["", "a", "b", "A", "0"])),
}


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[tuple[Any, ...]]]:
    kinds = draw(st.lists(st.sampled_from(sorted(_CELLS)), min_size=1, max_size=4))
    rows = draw(st.lists(st.tuples(*[_CELLS[k] for k in kinds]), max_size=25))
    return [f"c{i}" for i in range(len(kinds))], rows


def _passes(expected: tuple[list[str], list[tuple[Any, ...]]], actual: tuple[list[str], list[tuple[Any, ...]]],
            path: str) -> bool:
    result = compare_results(relation_from_rows(*expected), relation_from_rows(*actual), mode="order-insensitive",
                             config=EvalConfig(), path=path)
    return result.mode_pass


def _changed(value: Any) -> Any:
    """A value that differs from ``value`` beyond any default tolerance and is not NULL-equal to it."""
    if value is None:
        return 7
    if isinstance(value, str):
        return value + "_changed"
    return value + 100


@PATHS
@settings(max_examples=150, deadline=None)
@given(table=tables(), data=st.data())
def test_row_and_column_permutations_never_change_the_verdict(table: tuple[list[str], list[tuple[Any, ...]]],
                                                              data: st.DataObject, path: str) -> None:
    names, rows = table
    variant = list(rows)
    if rows and data.draw(st.booleans(), label="modify"):
        r = data.draw(st.integers(0, len(rows) - 1), label="row")
        c = data.draw(st.integers(0, len(names) - 1), label="column")
        variant[r] = tuple(_changed(v) if i == c else v for i, v in enumerate(variant[r]))
    baseline = _passes(table, (names, variant), path)
    row_order = data.draw(st.permutations(range(len(variant))), label="row order")
    col_order = data.draw(st.permutations(range(len(names))), label="column order")
    permuted = [tuple(row[c] for c in col_order) for row in (variant[i] for i in row_order)]
    assert _passes(table, ([names[c] for c in col_order], permuted), path) == baseline


@PATHS
@settings(max_examples=150, deadline=None)
@given(table=tables(), data=st.data())
def test_identical_tables_pass_and_changing_one_cell_always_fails(table: tuple[list[str], list[tuple[Any, ...]]],
                                                                  data: st.DataObject, path: str) -> None:
    names, rows = table
    assert _passes(table, table, path)
    if not rows:
        return
    r = data.draw(st.integers(0, len(rows) - 1), label="row")
    c = data.draw(st.integers(0, len(names) - 1), label="column")
    changed = list(rows)
    changed[r] = tuple(_changed(v) if i == c else v for i, v in enumerate(changed[r]))
    assert not _passes(table, (names, changed), path)


#: Cells of every kind whose equality or order has a corner: NaN, -0.0, infinities, values a tolerance apart,
#: integers beyond Float64's precision, booleans next to 0/1, bytes, dates, and columns of NULLs only.
_EDGE_CELLS = {
    "int": st.one_of(st.none(), st.integers(-2, 2), st.sampled_from([2**53 + 1, -(2**62)])),
    "float": st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.0, 1.0 + 1e-12, 1.0 + 1e-6, 1.5, -2.25, math.nan,
                                                    math.inf, -math.inf, 1e300])),
    "text": st.one_of(st.none(), st.sampled_from(["", "a", "b", "1", "é", "A"])),
    "bool": st.one_of(st.none(), st.booleans()),
    "bytes": st.one_of(st.none(), st.sampled_from([b"", b"a", b"\xff"])),
    "date": st.one_of(st.none(), st.sampled_from([datetime.date(2020, 1, 1), datetime.date(1999, 12, 31)])),
    "null": st.none(),
    "mixed": st.one_of(st.none(), st.integers(0, 1), st.sampled_from(["0", "1", 1.0])),
}


@st.composite
def _table_pairs(draw: st.DrawFn) -> tuple[tuple[list[str], list[tuple[Any, ...]]],
                                           tuple[list[str], list[tuple[Any, ...]]]]:
    """An expected table and an actual table drawn from it: rows and columns permuted, cells changed or nudged,
    rows dropped or repeated, columns retyped; or an unrelated table."""
    kinds = draw(st.lists(st.sampled_from(sorted(_EDGE_CELLS)), min_size=0, max_size=4))
    rows = draw(st.lists(st.tuples(*[_EDGE_CELLS[k] for k in kinds]), max_size=12))
    names = [f"c{i}" for i in range(len(kinds))]
    if draw(st.booleans()):
        other = draw(st.lists(st.sampled_from(sorted(_EDGE_CELLS)), min_size=0, max_size=4))
        return (names, rows), ([f"c{i}" for i in range(len(other))],
                               draw(st.lists(st.tuples(*[_EDGE_CELLS[k] for k in other]), max_size=12)))
    variant = [list(r) for r in rows]
    for _ in range(draw(st.integers(0, 3))):
        if not variant or not kinds:
            break
        r, c = draw(st.integers(0, len(variant) - 1)), draw(st.integers(0, len(kinds) - 1))
        variant[r][c] = draw(st.one_of(_EDGE_CELLS[kinds[c]], st.sampled_from([None, 0, 1.0, "x"])))
    if variant and draw(st.booleans()):
        variant.append(list(draw(st.sampled_from(variant))))
    if variant and draw(st.booleans()):
        variant.pop(draw(st.integers(0, len(variant) - 1)))
    variant = [variant[i] for i in draw(st.permutations(range(len(variant))))] if draw(st.booleans()) else variant
    order = draw(st.permutations(range(len(kinds)))) if draw(st.booleans()) else list(range(len(kinds)))
    renamed = [names[c] if draw(st.booleans()) else names[c].upper() for c in order]
    return (names, rows), (renamed, [tuple(r[c] for c in order) for r in variant])


def _same(left: Any, right: Any) -> bool:
    """Equality that counts NaN equal to NaN (a metric may be NaN on both paths)."""
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right):
        return True
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right))
    return type(left) is type(right) and left == right


@settings(max_examples=300, deadline=None)
@given(tables=_table_pairs(), mode=st.sampled_from(get_args(ResolvedMode)), data=st.data())
def test_both_paths_give_the_same_comparison(tables: tuple[tuple[list[str], list[tuple[Any, ...]]],
                                                           tuple[list[str], list[tuple[Any, ...]]]],
                                             mode: ResolvedMode, data: st.DataObject) -> None:
    expected, actual = relation_from_rows(*tables[0]), relation_from_rows(*tables[1])
    config = EvalConfig(
        null_equality_mode=data.draw(st.sampled_from(["strict", "sql_semantic"]), label="nulls"),
        require_column_name_match=data.draw(st.booleans(), label="names"),
        require_column_order_match=data.draw(st.booleans(), label="order"),
        numeric_abs_tolerance=data.draw(st.sampled_from([None, 0.0, 1e-3]), label="atol"),
        numeric_rel_tolerance=data.draw(st.sampled_from([None, 0.0, 1e-3]), label="rtol"),
        max_rows_for_cell_alignment=data.draw(st.sampled_from([100_000, 1]), label="max rows"))
    order_keys = data.draw(st.lists(st.integers(0, max(expected.width, 1)), max_size=2), label="order keys")
    frames = compare_results(expected, actual, mode=mode, config=config, order_keys=order_keys, path="frames")
    rows = compare_results(expected, actual, mode=mode, config=config, order_keys=order_keys, path="rows")
    hashed = compare_results(expected, actual, mode=mode, config=config, order_keys=order_keys,
                             path="frames-hashed")
    assert _same(dataclasses.asdict(rows), dataclasses.asdict(frames))
    assert _same(dataclasses.asdict(rows), dataclasses.asdict(hashed))


@settings(max_examples=100, deadline=None)
@given(tables=_table_pairs(), mode=st.sampled_from(get_args(ResolvedMode)))
def test_a_hash_collision_is_caught_by_the_cell_check(tables: tuple[tuple[list[str], list[tuple[Any, ...]]],
                                                                    tuple[list[str], list[tuple[Any, ...]]]],
                                                      mode: ResolvedMode) -> None:
    """A row hash that sees the first column only makes rows that differ elsewhere collide: the cell check
    refuses the pairs and the comparison is the one without hashing."""
    expected, actual = relation_from_rows(*tables[0]), relation_from_rows(*tables[1])
    real = pl.DataFrame.hash_rows
    weak = lambda frame, seed=0: real(frame.select(frame.columns[:1]), seed)  # noqa: E731
    rows = compare_results(expected, actual, mode=mode, config=EvalConfig(), path="rows")
    with _hashed_from(1), mock.patch.object(pl.DataFrame, "hash_rows", weak):
        collided = comparison.compare_results(expected, actual, mode=mode, config=EvalConfig(), path="frames")
    assert _same(dataclasses.asdict(rows), dataclasses.asdict(collided))


@settings(max_examples=300, deadline=None)
@given(tables=_table_pairs(), nulls_equal=st.booleans())
def test_rows_told_the_same_make_equal_frames(tables: tuple[tuple[list[str], list[tuple[Any, ...]]],
                                                             tuple[list[str], list[tuple[Any, ...]]]],
                                              nulls_equal: bool) -> None:
    """``Relation.same_rows``, the neighbor search's way to skip the frames of identical results, says True only
    where the frames the two relations would make are equal, column types included (NaN, -0.0 beside text,
    2**53 + 1, booleans beside 0 and 1, dates); and it does say True for the same rows under other names,
    unless a NULL is in them and NULL is not equal to NULL."""
    (names, rows), (other_names, other_rows) = tables
    left, right = relation_from_rows(names, rows), relation_from_rows(other_names, other_rows)
    if left.same_rows(right, null_equals_null=nulls_equal):
        assert left.frame.dtypes == right.frame.dtypes and left.frame.equals(right.frame)
        assert nulls_equal or not any(cell is None for row in rows for cell in row)
    cells = [cell for row in rows for cell in row]
    plain = all(type(cell) in (int, float, str, bytes, bool, type(None)) for cell in cells) \
        and (nulls_equal or None not in cells)
    renamed = relation_from_rows([name.upper() for name in names], [tuple(row) for row in rows])
    assert relation_from_rows(names, rows).same_rows(renamed, null_equals_null=nulls_equal) == plain


def _same_cells(left: list[Any], right: list[Any]) -> bool:
    """Cell for cell the same value and type, NaN equal to NaN and -0.0 told from 0.0."""
    return len(left) == len(right) and all(
        type(a) is type(b) and (repr(a) == repr(b) if isinstance(a, float) else a == b) for a, b in zip(left, right))


@settings(max_examples=300, deadline=None)
@given(tables=_table_pairs(), extra=st.lists(st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, "\ud800"]),
                                             max_size=2))
def test_columns_told_from_rows_are_the_frames_columns(tables: tuple[tuple[list[str], list[tuple[Any, ...]]],
                                                                     tuple[list[str], list[tuple[Any, ...]]]],
                                                       extra: list[Any]) -> None:
    """``Relation.columns``, what the plain comparison reads, tells each column's type and values from the rows
    where it can (one plain Python type per column); they are what the frame holds, for every kind of cell
    (integers past 64 bits included); where the frame refuses the rows, so do they."""
    for names, rows in tables:
        if extra and names:
            rows = [*rows, *((value,) + tuple(row[1:]) for value, row in zip(extra, rows or [(None,) * len(names)]))]
        try:
            frame = relation_from_rows(names, rows).frame
        except UnicodeEncodeError:  # a lone surrogate: the columns are refused as the frame is
            with pytest.raises(UnicodeEncodeError):
                relation_from_rows(names, rows).columns()
            continue
        told = relation_from_rows(names, rows).columns()
        assert told[0] == list(frame.dtypes)
        assert all(_same_cells(values, column.to_list()) for values, column in zip(told[1], frame.get_columns()))


@settings(max_examples=300, deadline=None)
@given(tables=_table_pairs(), data=st.data())
def test_distinct_rows_told_from_rows_are_the_frames_n_unique(tables: tuple[tuple[list[str], list[tuple[Any, ...]]],
                                                                            tuple[list[str], list[tuple[Any, ...]]]],
                                                              data: st.DataObject) -> None:
    """``Relation.distinct_rows``, Layer 4's count of repeated rows, counts from the rows what the frame's
    ``n_unique`` counts (NaN equal to NaN, -0.0 to 0.0, NULL to NULL; mixed columns as tagged text), with rows
    repeated as they are and as equal copies."""
    for names, rows in tables:
        if rows and names:
            copies = data.draw(st.lists(st.sampled_from(rows)))  # floats as new objects: NaN is not NaN to Python
            rows = [*rows, *(tuple(float(repr(c)) if isinstance(c, float) else c for c in row) for row in copies)]
        try:
            frame = relation_from_rows(names, rows).frame
        except UnicodeEncodeError:
            continue
        assert relation_from_rows(names, rows).distinct_rows() == frame.n_unique()


@pytest.mark.parametrize(("rows", "twin"), [
    ([(1,)], [(1.0,)]),  # equal in Python, an integer column against a float one
    ([(True,)], [(1,)]),  # a boolean is not the number 1
    ([(-0.0,), ("a",)], [(0.0,), ("a",)]),  # beside text, -0.0 is the text n:-0.0
])
def test_rows_equal_in_python_but_not_as_frames_are_not_the_same(rows: list[tuple[Any, ...]],
                                                                 twin: list[tuple[Any, ...]]) -> None:
    left, right = relation_from_rows(["a"], rows), relation_from_rows(["a"], twin)
    assert rows == twin and not left.same_rows(right, null_equals_null=True)
    assert not (left.frame.dtypes == right.frame.dtypes and left.frame.equals(right.frame))


@settings(max_examples=300, deadline=None)
@given(tables=_table_pairs(), mode=st.sampled_from(get_args(ResolvedMode)))
def test_no_mode_passes_what_can_pass_rules_out(tables: tuple[tuple[list[str], list[tuple[Any, ...]]],
                                                              tuple[list[str], list[tuple[Any, ...]]]],
                                                mode: ResolvedMode) -> None:
    """The fix search and the neighbor search skip the comparison of results ``can_pass`` rules out (rows or
    columns in different numbers): no mode, on either path, passes them."""
    expected, actual = relation_from_rows(*tables[0]), relation_from_rows(*tables[1])
    if not comparison.can_pass(expected, actual):
        for path in get_args(ComparisonPath):
            assert not compare_results(expected, actual, mode=mode, config=EvalConfig(), path=path).mode_pass
