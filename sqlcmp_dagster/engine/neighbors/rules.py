"""Neighbor rules over one table's rows (the sqlglot style: small, named, documented), each applied with a seeded
:class:`random.Random`. Values keep their column's type class; rows that break a declared constraint are not
filtered here but rejected by the engine when the neighbor is built (:func:`~.scratch.scratch`).
"""

from __future__ import annotations

import random
from typing import Any

from sqlcmp_dagster.engine.neighbors.cells import carrying_rows, copy_row, counted_columns, fitted_values, \
    fresh_value, literal_columns, with_cells
from sqlcmp_dagster.engine.neighbors.hints import Hints
from sqlcmp_dagster.engine.neighbors.schema import Table


#: Rows :func:`synthesized` makes for a table whose sample is empty.
_SYNTHESIZED_ROWS = 4
#: Most copies :func:`literal_rows` makes of a table's rows.
_LITERAL_COPIES = 4


def subset(rows: list[tuple[Any, ...]], rng: random.Random, keep: float) -> list[tuple[Any, ...]]:
    """Rows kept with probability ``keep`` (at least one row when there are any)."""
    kept = [row for row in rows if rng.random() < keep]
    return kept or rows[:1]


def synthesized(table: Table, found: Hints) -> list[tuple[Any, ...]]:
    """Rows for a table whose sample is empty (Spider's ``wta_1.rankings``), so that a join through it can
    meet anything: in each column the first literal the queries compare it with, else a distinct value of its
    type class (``1, 2, ...`` or ``'<column> 1', ...``); a declared foreign key is then pointed at a parent by
    :func:`repair_keys`, and a row that breaks a CHECK is rejected when the neighbor is built."""
    literals = literal_columns(table, found)
    return [tuple(literals[i][0] if i in literals and not column.primary_key else
                  n + 1 if column.numeric else f"{column.name} {n + 1}" for i, column in enumerate(table.columns))
            for n in range(_SYNTHESIZED_ROWS)]


def literal_rows(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """Copies of rows with every column the queries compare with a literal set at once, one copy per candidate
    of the column with the most (the literals themselves first, then their boundaries: ``v``, ``v-1``, ``v+1``
    for a number; at most :data:`_LITERAL_COPIES`): a conjunction of predicates then holds on one row, a ``>``
    that should be ``>=`` meets its boundary on another, and a ``> 20`` holds on the copy with 21 whatever else
    the neighbor does."""
    paired = literal_columns(table, found)
    if not rows or not paired:
        return rows
    out = list(rows)
    for copy in range(min(_LITERAL_COPIES, max(len(values) for values in paired.values()))):
        changes = {i: values[copy % len(values)] for i, values in paired.items()}
        out.append(copy_row(table, rng.choice(rows), changes, out))
    return out


#: The most literal values :func:`literal_values` puts into one column of a neighbor (a query's literals and their
#: boundaries: three values a literal).
MAX_LITERALS_PER_COLUMN = 96


def literal_values(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """Put the queries' literals and their boundaries into the columns they are compared with (and now and
    then into any column of the same type class), in copies of existing rows: a ``>`` that should be ``>=``
    disagrees on a row that sits on the boundary. At most :data:`MAX_LITERALS_PER_COLUMN` values a column: the
    first ones, then (last, so that no later value is written over them) those of the literals not in every query
    (a ``NOT IN`` list one literal shorter than the other's, a review's finding); each copy's fresh keys read every
    row before it, so a ``NOT IN`` of 3,000 numbers made millions of reads and 12 s of one passing case's search."""
    if not rows:
        return rows
    out = list(rows)
    for position, column in enumerate(table.columns):
        candidates = fitted_values(found.literals.get(column.name.lower(), []), column)
        if not candidates and rng.random() < 0.3:
            candidates = fitted_values(found.pool, column)
        if len(candidates) > MAX_LITERALS_PER_COLUMN:  # the first values, then those of literals not in every query
            telling = fitted_values(found.telling_literals.get(column.name.lower(), []), column)
            telling = telling[:MAX_LITERALS_PER_COLUMN]
            kept = {(type(v), v) for v in telling}
            room = MAX_LITERALS_PER_COLUMN - len(telling)
            candidates = [v for v in candidates if (type(v), v) not in kept][:room] + telling  # last: not written over
        for value in candidates:
            if rng.random() < 0.4:
                index = rng.randrange(len(out))
                out[index] = with_cells(out[index], {position: value})
            elif rng.random() < 0.5:
                out.append(copy_row(table, rng.choice(rows), {position: value}, out))
    return out


def duplicates(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """Copies of some rows with fresh values only in their PRIMARY KEY and UNIQUE columns, so that every other
    column repeats: a missing DISTINCT, or a COUNT of rows where distinct values were asked, shows."""
    if not rows:
        return rows
    out = list(rows)
    for row in rng.sample(rows, max(1, len(rows) // 4)):
        out.append(copy_row(table, row, {}, out))
    return out


def nulls(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) -> list[tuple[Any, ...]]:
    """NULL in some nullable columns (those neither NOT NULL nor part of the primary key), mostly in the
    columns the queries name: COUNT(col) against COUNT(*), ``NOT IN`` with a NULL, an aggregate over NULLs."""
    nullable = [i for i, c in enumerate(table.columns) if not c.not_null and not c.primary_key]
    named = {i for i in nullable if table.columns[i].name.lower() in found.columns}
    share = {i: rng.choice((0.2, 0.4)) if i in named else 0.05 for i in nullable}
    return [with_cells(row, {i: None for i in nullable if rng.random() < share[i]}) for row in rows]


def null_columns(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """NULL in every row of a nullable column the queries aggregate or join on (COUNT(col) against COUNT(*),
    MAX over NULLs, a NULL foreign key that LEFT JOIN keeps and JOIN drops), or, half the time, only in the
    rows that share one value of another column: the NULLs then fall into one group, where a HAVING threshold
    or an argmax by COUNT notices them."""
    targets = [i for i, c in enumerate(table.columns) if not c.not_null and not c.primary_key
               and c.name.lower() in found.aggregated | found.join_columns]
    if not rows or not targets:
        return rows
    chosen = {i for i in targets if rng.random() < 0.7} or {rng.choice(targets)}
    carrying = literal_columns(table, found)
    counted = carrying_rows(rows, carrying)
    mode = rng.random()
    if mode < 0.25 and counted:  # exactly the rows the query counts: those the rules built to satisfy its WHERE
        return [with_cells(row, {i: None for i in chosen}) if row in counted else row for row in rows]
    if mode < 0.45 and len(rows) > 1:  # all but one row: the NULL group is the largest, one group is not NULL
        spared = rng.randrange(len(rows))
        return [row if n == spared else with_cells(row, {i: None for i in chosen}) for n, row in enumerate(rows)]
    if mode < 0.75 and len(table.columns) > 1:
        group = rng.choice([i for i in range(len(table.columns)) if i not in chosen] or [0])
        value = rng.choice(counted or rows)[group]
        return [with_cells(row, {i: None for i in chosen}) if row[group] == value else row for row in rows]
    return [with_cells(row, {i: None for i in chosen}) for row in rows]


def null_all_but_one(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """NULL in the aggregated columns of every row but one, that one in the smallest group of a GROUP BY column,
    and one more row in the largest group, so it is the strict largest: an argmax by COUNT(*) then picks the
    largest group and one by COUNT(col) the group of the one row left (``GROUP BY x ORDER BY COUNT(x) DESC
    LIMIT 1`` meets its NULL group)."""
    targets = counted_columns(table, found)
    if len(rows) < 2 or not targets:
        return rows
    groups = [i for i, c in enumerate(table.columns) if c.name.lower() in found.group_columns]
    out = list(rows)
    spared = rng.randrange(len(out))
    if groups:
        position = groups[0]
        sizes: dict[Any, int] = {}
        for row in out:
            sizes[row[position]] = sizes.get(row[position], 0) + 1
        largest = max(sizes, key=lambda v: (sizes[v], str(v)))
        out.append(copy_row(table, next(r for r in out if r[position] == largest), {position: largest}, out))
        others = [n for n, row in enumerate(out) if row[position] != largest]
        if others:
            spared = min(others, key=lambda n: (sizes.get(out[n][position], 0), n))
    return [row if n == spared else with_cells(row, {i: None for i in targets}) for n, row in enumerate(out)]


def ties(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) -> list[tuple[Any, ...]]:
    """Equal values in ORDER BY key columns (and sometimes in others), often the column's largest or smallest
    value: an argmax by ``LIMIT 1`` against one by ``= (SELECT MAX ...)`` disagrees when two rows tie for the
    top."""
    if not rows:
        return rows
    out = list(rows)
    for position, column in enumerate(table.columns):
        keyed = column.name.lower() in found.order_columns | found.subquery_compared
        if keyed or rng.random() < 0.15:
            values = [row[position] for row in out if row[position] is not None]
            source = rng.choice(out)[position]
            if values and rng.random() < 0.6:
                try:
                    source = rng.choice((max(values), min(values)))
                except TypeError:  # a column that mixes numbers and text has no order in Python
                    pass
            # A third of the rows, or every row where the column is compared with a subquery's value (then on
            # its boundary whether that is the AVG, MAX or MIN of the column).
            share = len(out) if column.name.lower() in found.subquery_compared else max(1, len(out) // 3)
            for index in rng.sample(range(len(out)), share):
                out[index] = with_cells(out[index], {position: source})
            if keyed:  # and one more row, other values, on the same key
                out.append(copy_row(table, rng.choice(rows), {position: source}, out))
    return out


def failed_joins(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """Rows whose join columns match nothing: a fresh value where no foreign key is declared, NULL where a
    declared key is nullable (the only legal way to miss the parent), so LEFT and INNER JOIN disagree."""
    if not rows:
        return rows
    declared = {i for key in table.foreign_keys for i in key.columns}
    out = list(rows)
    for position, column in enumerate(table.columns):
        if column.name.lower() not in found.join_columns or column.primary_key:
            continue
        row = rng.choice(rows)
        if position in declared:
            if not column.not_null:
                out.append(copy_row(table, row, {position: None}, out))
        else:
            out.append(copy_row(table, row, {position: fresh_value(row[position], column.numeric, out, position)}, out))
    return out
