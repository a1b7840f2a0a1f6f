"""Row and value helpers shared by the neighbor rules: values fitted to a column's type class, copies of rows
with fresh keys, fresh values no row holds, the literal-carrying rows, the join pairs in a search's scope.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import isfinite
from operator import itemgetter
from typing import Any

from sqlcmp_dagster.engine.neighbors.hints import Hints, unique_values
from sqlcmp_dagster.engine.neighbors.schema import Column, Schema, Table


def fitted_values(values: list[Any], column: Column) -> list[Any]:
    """The ``values`` a column of this type class takes: numbers for a numeric column; for a column declared as
    text, strings and numbers as their text (SQLite compares a TEXT column with ``2013`` as with ``'2013'``,
    and Spider stores years and codes as text); both as they are for a column without a type.

    >>> fitted_values([2013, "x"], Column("year", "TEXT", False, False))
    ['2013', 'x']
    >>> fitted_values([2013, "x"], Column("n", "INT", False, False))
    [2013]
    """
    if column.numeric:
        return [v for v in values if isinstance(v, (int, float))]
    if any(fragment in column.declared_type.upper() for fragment in ("CHAR", "CLOB", "TEXT")):
        return unique_values([v if isinstance(v, str) else str(v) for v in values])
    return values


def copy_row(table: Table, row: tuple[Any, ...], changes: dict[int, Any], rows: list[tuple[Any, ...]]) \
        -> tuple[Any, ...]:
    """A copy of ``row`` with ``changes`` and fresh values in its PRIMARY KEY and UNIQUE columns (unless
    changed), so that the copy is a new row the key constraints allow."""
    keys = table.keyed - changes.keys()
    return with_cells(row, {**changes, **{i: fresh_value(row[i], table.columns[i].numeric, rows, i) for i in keys}})


def fresh_value(value: Any, numeric: bool, rows: list[tuple[Any, ...]], position: int) -> Any:
    """A value for column ``position`` that no row holds yet: one above the largest finite number (a DuckDB
    DOUBLE may hold NaN and infinities, which no integer is above), or the text with a ``~`` suffix.

    >>> fresh_value(0, True, [(float("nan"),), (5,), (float("inf"),), (2.5,)], 0)
    6
    >>> fresh_value("a", False, [("a",), ("a~",)], 0)
    'a~~'
    >>> fresh_value(0, True, [(10 ** 400,), (1.5,)], 0) == 10 ** 400 + 1
    True
    """
    if numeric or isinstance(value, (int, float)):
        finite = [v for row in rows if isinstance(v := row[position], int) or isinstance(v, float) and isfinite(v)]
        return int(max(finite, default=0)) + 1
    taken = {row[position] for row in rows}
    candidate = f"{value if value is not None else 'x'}~"
    while candidate in taken:
        candidate += "~"
    return candidate


def with_cells(row: tuple[Any, ...], changes: dict[int, Any]) -> tuple[Any, ...]:
    """``row`` with the values at the positions ``changes`` names replaced (a position outside the row is
    ignored). Called about 100,000 times per Spider dev run: the positions are set on a list rather than every
    cell looked up in ``changes``.

    >>> with_cells((1, 2, 3), {0: None, 2: "x", 7: 0})
    (None, 2, 'x')
    """
    if not changes:
        return row
    cells = list(row)
    width = len(cells)
    for position, value in changes.items():
        if 0 <= position < width:
            cells[position] = value
    return tuple(cells)


def cells_at(positions: Sequence[int]) -> Callable[[tuple[Any, ...]], Any]:
    """The function taking the cells at ``positions`` out of a row: the cell itself for one position, else a
    tuple.

    >>> cells_at([2])(("a", "b", "c")), cells_at([2, 0])(("a", "b", "c")), cells_at([])(("a",))
    ('c', ('c', 'a'), ())
    """
    if len(positions) == 1:
        return itemgetter(positions[0])
    return itemgetter(*positions) if positions else lambda row: ()


def literal_columns(table: Table, found: Hints) -> dict[int, list[Any]]:
    """The literals each column of ``table`` is compared with, fitted to its type (columns without any left out);
    kept in ``found`` (read only)."""
    if table.name not in found.fitted:
        fitted = {i: fitted_values(found.literals.get(c.name.lower(), []), c) for i, c in enumerate(table.columns)}
        found.fitted[table.name] = {i: values for i, values in fitted.items() if values}
    return found.fitted[table.name]


def carrying_rows(rows: list[tuple[Any, ...]], literals: dict[int, list[Any]]) -> list[tuple[Any, ...]]:
    """The rows some column of which holds a literal the queries compare that column with (in their order).
    Asked about 90,000 rows a Spider dev run, most often with one such column (that column is read directly)
    or none.

    >>> carrying_rows([(1, "a"), (2, "b"), (None, "c")], {0: [2, 3]})
    [(2, 'b')]
    >>> carrying_rows([(1, "a"), (2, "b")], {0: [3], 1: ["a"]})
    [(1, 'a')]
    """
    if len(literals) == 1:
        ((position, values),) = literals.items()
        return [row for row in rows if row[position] is not None and row[position] in values]
    if not literals:  # most tables of a search over many: none of their columns is compared with a literal
        return []
    checks = list(literals.items())
    return [row for row in rows if any(row[i] is not None and row[i] in values for i, values in checks)]


def position_of(table: Table, column: str) -> int | None:
    return table.positions.get(column)


def pairs_in_scope(schema: Schema, tables: list[str], found: Hints) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The ``((table, column), (table, column))`` pairs the queries join on (tables in scope), sorted."""
    return sorted((a, b) for a, b in found.join_pairs if a[0] in tables and b[0] in tables
                  and position_of(schema.tables[a[0]], a[1]) is not None
                  and position_of(schema.tables[b[0]], b[1]) is not None)


def counted_columns(table: Table, found: Hints) -> list[int]:
    """Positions of the nullable columns the queries aggregate (COUNT(col) and the like)."""
    return [i for i, c in enumerate(table.columns) if not c.not_null and not c.primary_key
            and c.name.lower() in found.aggregated]
