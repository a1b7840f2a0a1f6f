"""Property-based tests of the result comparator: what must never change a verdict, and what always must."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sqlcmp_dagster.engine.execution import relation_from_rows
from sqlcmp_dagster.engine.models import EvalConfig
from sqlcmp_dagster.engine.results import compare_results

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


def _passes(expected: tuple[list[str], list[tuple[Any, ...]]], actual: tuple[list[str], list[tuple[Any, ...]]]) -> bool:
    result = compare_results(relation_from_rows(*expected), relation_from_rows(*actual), mode="order-insensitive",
                             config=EvalConfig())
    return result.mode_pass


def _changed(value: Any) -> Any:
    """A value that differs from ``value`` beyond any default tolerance and is not NULL-equal to it."""
    if value is None:
        return 7
    if isinstance(value, str):
        return value + "_changed"
    return value + 100


@settings(max_examples=150, deadline=None)
@given(table=tables(), data=st.data())
def test_row_and_column_permutations_never_change_the_verdict(table: tuple[list[str], list[tuple[Any, ...]]],
                                                              data: st.DataObject) -> None:
    names, rows = table
    variant = list(rows)
    if rows and data.draw(st.booleans(), label="modify"):
        r = data.draw(st.integers(0, len(rows) - 1), label="row")
        c = data.draw(st.integers(0, len(names) - 1), label="column")
        variant[r] = tuple(_changed(v) if i == c else v for i, v in enumerate(variant[r]))
    baseline = _passes(table, (names, variant))
    row_order = data.draw(st.permutations(range(len(variant))), label="row order")
    col_order = data.draw(st.permutations(range(len(names))), label="column order")
    permuted = [tuple(row[c] for c in col_order) for row in (variant[i] for i in row_order)]
    assert _passes(table, ([names[c] for c in col_order], permuted)) == baseline


@settings(max_examples=150, deadline=None)
@given(table=tables(), data=st.data())
def test_identical_tables_pass_and_changing_one_cell_always_fails(table: tuple[list[str], list[tuple[Any, ...]]],
                                                                  data: st.DataObject) -> None:
    names, rows = table
    assert _passes(table, table)
    if not rows:
        return
    r = data.draw(st.integers(0, len(rows) - 1), label="row")
    c = data.draw(st.integers(0, len(names) - 1), label="column")
    changed = list(rows)
    changed[r] = tuple(_changed(v) if i == c else v for i, v in enumerate(changed[r]))
    assert not _passes(table, (names, changed))
