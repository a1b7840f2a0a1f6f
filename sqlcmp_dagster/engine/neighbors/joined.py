"""Neighbor rules over the whole database (after every table has its rows): rows that reach the joins, rows
without a partner, an emptied join partner, groups of the sizes a COUNT is compared with, ladders of distinct
group sizes, declared foreign keys repaired to point at a surviving parent.
"""

from __future__ import annotations

import random
from typing import Any

from sqlcmp_dagster.engine.neighbors.cells import carrying_rows, cells_at, copy_row, counted_columns, fresh_value, \
    literal_columns, pairs_in_scope, position_of, with_cells
from sqlcmp_dagster.engine.neighbors.hints import Hints, MAX_GROUP
from sqlcmp_dagster.engine.neighbors.schema import Rows, Schema, Table


def unmatched(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """For each pair of columns the queries join on, in both directions, a row whose join value meets nothing
    on the other side (added after the rows that reach the join, so nothing is made to match it): a copy of a
    row carrying the literals, with fresh keys and a join value no partner holds; NULL where a declared
    foreign key is nullable (the only legal miss), and nothing where it is NOT NULL. A LEFT JOIN that should be
    an inner join keeps that row."""
    for (first, first_column), (second, second_column) in pairs_in_scope(schema, tables, found):
        for (table_name, column), (other, other_column) in (((first, first_column), (second, second_column)),
                                                            ((second, second_column), (first, first_column))):
            table = schema.tables[table_name]
            at, to = position_of(table, column), position_of(schema.tables[other], other_column)
            if not rows.get(table_name) or at is None or to is None:
                continue
            declared = any(at in key.columns for key in table.foreign_keys)
            if declared and (table.columns[at].not_null or table.columns[at].primary_key):
                continue  # a key column is NOT NULL in standard SQL, whatever SQLite's legacy quirk allows
            taken = [row[to] for row in rows.get(other, [])] + [row[at] for row in rows[table_name]]
            value = None if declared else fresh_value(rng.choice(rows[table_name])[at], table.columns[at].numeric,
                                                 [(v,) for v in taken], 0)
            carrying = literal_columns(table, found)
            source = carrying_rows(rows[table_name], carrying) or rows[table_name]
            rows[table_name].append(copy_row(table, rng.choice(source), {at: value}, rows[table_name]))
    return rows


def empty_partner(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """One joined table emptied: the right side of a LEFT JOIN in either query, else the many side of a join
    when there is one (its join column is no key of its own; a nullable foreign key to the emptied table is
    set to NULL): every row of the other side is then without a match, which a LEFT JOIN keeps and a JOIN
    drops, and an aggregate over the emptied side meets no row."""
    pairs = pairs_in_scope(schema, tables, found)
    joined = {t for pair in pairs for t, _ in pair}
    many = sorted({t for pair in pairs for t, c in pair
                   if (position_of(schema.tables[t], c),) not in schema.tables[t].unique_sets})
    candidates = sorted(joined & found.outer_tables) or many or sorted(joined)
    if not candidates:
        return rows
    emptied = rng.choice(candidates)
    rows[emptied] = []
    for name in tables:  # a nullable foreign key to the emptied table: NULL, so the row stays (without a match)
        for key in schema.tables[name].foreign_keys:
            if key.parent == emptied and name != emptied and all(
                    not schema.tables[name].columns[i].not_null and not schema.tables[name].columns[i].primary_key
                    for i in key.columns):
                rows[name] = [with_cells(row, {i: None for i in key.columns}) for row in rows.get(name, [])]
    return rows


def reach_joins(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """Rows that reach the join: for each pair of columns the queries join on (and each declared foreign key
    between the tables), copies of rows of the later table whose join column takes the value of a row of the
    earlier one, rows the rules added first (those carry the literals and their boundaries). Without them a
    literal put into a parent row meets no child row, and the join hides the difference. The copies are made
    of rows of the later table that carry its literals too (else of rows the rules added), so that a WHERE on
    both tables holds on them."""
    order = {name: i for i, name in enumerate(tables)}
    pairs = {(a, b) if order[a[0]] < order[b[0]] else (b, a) for a, b in found.join_pairs
             if a[0] in order and b[0] in order}
    for name in tables:
        for key in schema.tables[name].foreign_keys:
            if key.parent in order and order[key.parent] < order[name] and len(key.columns) == 1:
                parent = schema.tables[key.parent]
                pairs.add(((key.parent, parent.columns[key.parent_columns[0]].name.lower()),
                           (name, schema.tables[name].columns[key.columns[0]].name.lower())))
    for one, other in sorted(pairs):
        for (first, first_column), (second, second_column) in ((one, other), (other, one)):
            source, target = schema.tables[first], schema.tables[second]
            at, to = position_of(source, first_column), position_of(target, second_column)
            if at is None or to is None or not rows.get(first) or not rows.get(second):
                continue
            sampled = schema.sampled(first)
            added = [row for row in rows[first] if row not in sampled]
            out = rows[second]
            literals = literal_columns(target, found)
            sampled_target = schema.sampled(second)
            carrying = carrying_rows(out, literals) or \
                [row for row in out if row not in sampled_target] or list(out)
            for row in (added or rng.sample(rows[first], 1))[:3]:
                if row[at] is not None:  # a NULL reaches nothing (and would land in a key column)
                    out.append(copy_row(target, rng.choice(carrying), {to: row[at]}, out))
    return _bridge(schema, rows, pairs, rng)


def _bridge(schema: Schema, rows: Rows, pairs: set[tuple[tuple[str, str], tuple[str, str]]],
            rng: random.Random) -> Rows:
    """A table joined to two or more others (``has_pet`` between ``student`` and ``pets``) gets rows that reach
    all of them at once: each join column takes the value of a row the rules added to its partner (one that
    carries a literal), so a WHERE on both partners holds through the path."""
    incoming: dict[str, dict[int, tuple[str, int]]] = {}
    for (first, first_column), (second, second_column) in sorted(pairs):
        at, to = position_of(schema.tables[first], first_column), position_of(schema.tables[second], second_column)
        if at is not None and to is not None:
            incoming.setdefault(second, {})[to] = (first, at)
    for name, columns in sorted(incoming.items()):
        if len({partner for partner, _ in columns.values()}) < 2 or not rows.get(name):
            continue
        for _ in range(2):
            changes = {}
            for to, (partner, at) in columns.items():
                sampled = schema.sampled(partner)
                source = [row for row in rows.get(partner, []) if row not in sampled and row[at] is not None] or \
                    [row for row in rows.get(partner, []) if row[at] is not None]
                if source:
                    changes[to] = rng.choice(source)[at]
            rows[name].append(copy_row(schema.tables[name], rng.choice(rows[name]), changes, rows[name]))
    return rows


def repair_keys(schema: Schema, table: Table, rows: list[tuple[Any, ...]], built: Rows, found: Hints,
                rng: random.Random) -> list[tuple[Any, ...]]:
    """Point every declared foreign key without a parent at a random surviving parent row, so that rules that
    copy or change values do not simply lose their rows to the constraint (a row whose key is NULL keeps it).
    A key that holds one of the queries' literals keeps it instead, and its parent gets a row with that key (a
    copy of one of its rows, inserted before the child): the row built to satisfy a WHERE stays in. So does a key
    that is the row's own unique key (``cars_data.Id`` references ``car_names.MakeId``): pointed at an existing
    parent, a copy would repeat the key of the row that parent already has, and be rejected."""
    if not table.foreign_keys:
        return list(rows)
    out = []
    # Each key's parent values (a list, in the parents' order, for the random choice, and a set to look them up),
    # read once instead of once per row; forgotten when a parent row is added. A key of one column (nearly every
    # key) is its cell itself, not a tuple of one: no tuple is made per row and key.
    known: dict[int, tuple[list[Any], set[Any]]] = {}
    keys = [(index, key, cells_at(key.columns), len(key.columns) == 1) for index, key in enumerate(table.foreign_keys)]
    for row in rows:
        for index, key, cells, single in keys:
            value = cells(row)
            if index not in known:
                listed = list(map(cells_at(key.parent_columns), built.get(key.parent, [])))
                known[index] = (listed, set(listed))
            parents, present = known[index]
            if (value is None if single else None in value) or value in present or not parents:
                continue
            literal = single and (key.columns[0] in table.keyed or any(
                value == v for v in found.literals.get(table.columns[key.columns[0]].name.lower(), [])))
            if literal and key.parent in schema.tables:
                parent = schema.tables[key.parent]
                built[key.parent].append(copy_row(parent, rng.choice(built[key.parent]),
                                               {key.parent_columns[0]: value}, built[key.parent]))
                for other, other_key in enumerate(table.foreign_keys):
                    if other_key.parent == key.parent:
                        known.pop(other, None)
                continue
            chosen = rng.choice(parents)
            row = with_cells(row, dict(zip(key.columns, (chosen,) if single else chosen)))
        out.append(row)
    return out


def null_counted(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """NULL in the aggregated columns of the rows the query counts: those the rules added (carrying the
    literals) and those that reach them through the joins, not the sampled ones. ``COUNT(t.col) ... WHERE
    other.name = 'x'`` counts exactly such rows."""
    for name in tables:
        table = schema.tables[name]
        targets = counted_columns(table, found)
        sampled = schema.sampled(name)
        if targets and rows.get(name):
            rows[name] = [row if row in sampled else with_cells(row, {i: None for i in targets}) for row in rows[name]]
    return rows


def group_sizes(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """A group of exactly the size a COUNT is compared with (``HAVING COUNT(*) >= 10``: 10 rows sharing one
    value of a grouping or join column of one table), by copies of one of its rows with fresh keys or by
    dropping the group's extra rows, after the rows reach the joins so that nothing changes its size: a ``>``
    that should be ``>=`` meets its boundary on a group, not a row."""
    # The many side of a join counts the rows of a group of the other side; else a GROUP BY column. A column that
    # is a key by itself has groups of one row.
    many = [(t, c) for pair in pairs_in_scope(schema, tables, found) for t, c in pair
            if (position_of(schema.tables[t], c),) not in schema.tables[t].unique_sets and rows.get(t)]
    candidates = [(t, p) for t, c in many if (p := position_of(schema.tables[t], c)) is not None] or [
        (name, i) for name in tables if rows.get(name) for i, c in enumerate(schema.tables[name].columns)
        if c.name.lower() in found.group_columns and (i,) not in schema.tables[name].unique_sets]
    if not candidates or not found.group_sizes:
        return rows
    (name, position), size = rng.choice(candidates), rng.choice(found.group_sizes)
    table, current = schema.tables[name], rows[name]
    source = rng.choice(current)
    value = source[position]
    members = [row for row in current if row[position] == value][:size]
    out = [row for row in current if row[position] != value or row in members]
    for _ in range(size - len(members)):
        out.append(copy_row(table, source, {position: value}, out))
    rows[name] = out
    return rows


def _ladder_sizes(found: Hints) -> list[int]:
    """Group sizes 1, 2, 3, and each number a COUNT is compared with and one above it (``HAVING COUNT(*) > 3``
    meets groups of 3 and 4), all distinct, so no two groups tie."""
    return sorted({1, 2, 3} | {size + step for size in found.group_sizes for step in (0, 1)
                               if size + step <= MAX_GROUP})


def _null_group(sizes: list[int], found: Hints) -> int:
    """Which group of a ladder gets NULLs in the counted columns: the one of a size a COUNT must equal, else the
    largest (it crosses every threshold, and it is the argmax that ``ORDER BY COUNT(*) DESC`` picks)."""
    equal = [n for n, size in enumerate(sizes) if size in found.equal_sizes]
    return equal[0] if equal else len(sizes) - 1


def _grouped(schema: Schema, tables: list[str], rows: Rows, found: Hints) \
        -> tuple[str, int, str | None, int | None] | None:
    """Where the groups of a ladder are: ``(table, column, parent, parent column)`` for the many side of a join
    the queries make (each parent row is a group: ``JOIN flights ... GROUP BY airports.city``), preferring a
    join whose tables hold a GROUP BY column; else ``(table, GROUP BY column, None, None)`` for a GROUP BY
    column of one table that is no key by itself; None when the queries group nothing."""
    if not found.group_columns:
        return None
    joins = []
    for pair in pairs_in_scope(schema, tables, found):
        for (child, child_column), (parent, parent_column) in (pair, pair[::-1]):
            at, to = position_of(schema.tables[child], child_column), position_of(schema.tables[parent], parent_column)
            if (at,) not in schema.tables[child].unique_sets and rows.get(child) and rows.get(parent) \
                    and at is not None and to is not None:
                grouping = any(c.name.lower() in found.group_columns for t in (child, parent)
                               for c in schema.tables[t].columns)
                joins.append((not grouping, child, at, parent, to))
    if joins:
        _, child, at, parent, to = min(joins)
        return child, at, parent, to
    for name in tables:
        for position, column in enumerate(schema.tables[name].columns):
            if column.name.lower() in found.group_columns and (position,) not in schema.tables[name].unique_sets \
                    and rows.get(name):
                return name, position, None, None
    return None


def ladder(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """Groups of distinct sizes (:func:`_ladder_sizes`) and nothing else in the grouped table: the children of
    as many parent rows of a join (each parent a group, with distinct values in its GROUP BY columns), or
    the values of a GROUP BY column of one table. ``ORDER BY COUNT(*) ASC LIMIT 1`` and ``DESC`` then pick
    different groups with no tie at either end, and a HAVING threshold has a group on each side. Without a
    GROUP BY, the ORDER BY keys of each table take distinct values instead, so its first and last rows are
    unique."""
    where = _grouped(schema, tables, rows, found)
    if where is None:
        return _distinct_keys(schema, tables, rows, found, rng)
    name, position, parent, parent_position = where
    sizes = _ladder_sizes(found)
    table = schema.tables[name]
    values = _group_values(schema, rows, name, position, parent, parent_position, len(sizes), found, rng)
    sampled = schema.sampled(name)
    sources = [row for row in rows[name] if row not in sampled] or rows[name]
    # Every column of the grouped table that the queries join to the same parent column takes the group's value
    # (``ON a.code = f.dest OR a.code = f.source``: a row then meets its parent once, and no other).
    positions = {position} | ({position_of(table, c) for pair in pairs_in_scope(schema, tables, found)
                               for (t, c), other in (pair, pair[::-1]) if t == name and parent is not None
                               and other == (parent, schema.tables[parent].columns[parent_position].name.lower())}
                              if parent is not None and parent_position is not None else set())
    out: list[tuple[Any, ...]] = []
    for value, size in zip(values, sizes):
        source = rng.choice(sources)  # one per group: a WHERE keeps all of a group or none, never a part
        for _ in range(size):
            out.append(copy_row(table, source, {i: value for i in positions if i is not None}, out))
    rows[name] = out
    return _give_parents(schema, rows, name, rng)


def _give_parents(schema: Schema, rows: Rows, name: str, rng: random.Random) -> Rows:
    """A parent row for every row of ``name`` whose declared (one-column) foreign key meets none: a copy of a
    parent row carrying that key. A copy's fresh key column that is also a foreign key (``hiring.employee_id``,
    a primary key that references ``employee``) then has its parent, rather than the copy being rejected."""
    table = schema.tables[name]
    for key in table.foreign_keys:
        if len(key.columns) != 1 or key.parent not in rows or key.parent == name or not rows[key.parent]:
            continue
        at, to = key.columns[0], key.parent_columns[0]
        parents = rows[key.parent]
        present = {row[to] for row in parents}
        for value in dict.fromkeys(row[at] for row in rows[name]):
            if value is not None and value not in present:
                parents.append(copy_row(schema.tables[key.parent], rng.choice(parents), {to: value}, parents))
                present.add(value)
    return rows


def ladder_nulls(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """A :func:`ladder` with NULL in the aggregated columns of one group (:func:`_null_group`), in the grouped
    rows and in their parent row: ``COUNT(col)`` then counts that group short where ``COUNT(*)`` does not, at
    the top of an argmax and across a HAVING threshold."""
    where = _grouped(schema, tables, rows, found)
    rows = ladder(schema, tables, rows, found, rng)
    if where is None:
        return rows
    name, position, parent, parent_position = where
    sizes = _ladder_sizes(found)
    values = sorted({row[position] for row in rows[name]}, key=lambda v: sum(r[position] == v for r in rows[name]))
    if len(values) != len(sizes):
        return rows
    value = values[_null_group(sizes, found)]
    for table_name, column, in ((name, position), (parent, parent_position)):
        if table_name is None or column is None:
            continue
        targets = counted_columns(schema.tables[table_name], found)
        # The other groups count every row: a NULL there (Spider leaves many such columns empty) takes a value.
        filled = {i: next((r[i] for r in [*rows[table_name], *schema.sample.get(table_name, [])]
                           if r[i] is not None), 1 if schema.tables[table_name].columns[i].numeric else "x")
                  for i in targets}
        rows[table_name] = [with_cells(row, {i: None for i in targets}) if row[column] == value else
                            with_cells(row, {i: filled[i] for i in targets if row[i] is None})
                            for row in rows[table_name]]
    return rows


def _group_values(schema: Schema, rows: Rows, name: str, position: int, parent: str | None,
                  parent_position: int | None, count: int, found: Hints, rng: random.Random) -> list[Any]:
    """``count`` values for the groups of a ladder: join values of parent rows (those the rules added first,
    with distinct values in the columns the queries name where there are enough, in their GROUP BY columns at
    least; copies with fresh keys when too few), or distinct values of the grouping column itself (its own,
    then fresh ones)."""
    if parent is None or parent_position is None:
        own = [v for v in dict.fromkeys(row[position] for row in rows[name]) if v is not None]
        rng.shuffle(own)
        while len(own) < count:
            own.append(fresh_value(own[0] if own else None, schema.tables[name].columns[position].numeric,
                              [(v,) for v in own], 0))
        return own[:count]
    table = schema.tables[parent]
    grouping = [i for i, c in enumerate(table.columns)
                if c.name.lower() in found.group_columns and i != parent_position]
    sampled = schema.sampled(parent)
    candidates = sorted(rows[parent], key=lambda row: (row in sampled, rng.random()))
    named = [i for i, c in enumerate(table.columns) if c.name.lower() in found.columns]
    chosen: list[tuple[Any, ...]] = []
    # Parents that differ in every column the queries name (so that the groups show apart), then in their GROUP
    # BY columns at least.
    for distinct in (named, grouping):
        for row in candidates:
            if len(chosen) < count and row[parent_position] is not None and all(
                    row[parent_position] != c[parent_position] and all(row[i] != c[i] for i in distinct)
                    for c in chosen):
                chosen.append(row)
    # Copies differ in their GROUP BY columns and in the other columns the queries name but compare with nothing.
    varied = set(grouping) | {i for i in named if table.columns[i].name.lower() not in found.literals}
    while len(chosen) < count:
        copy = copy_row(table, (chosen or candidates)[0], {}, rows[parent])
        copy = with_cells(copy, {i: fresh_value(copy[i], table.columns[i].numeric, rows[parent], i) for i in varied})
        rows[parent].append(copy)
        chosen.append(copy)
    return [row[parent_position] for row in chosen[:count]]


def _distinct_keys(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """Distinct values in every ORDER BY key column that is no key by itself (``1, 2, ...`` in a random order
    for a number, zero-padded text for text), so that the first and the last row of an ORDER BY are unique."""
    for name in tables:
        table = schema.tables[name]
        for position, column in enumerate(table.columns):
            if column.name.lower() not in found.order_columns or (position,) in table.unique_sets \
                    or not rows.get(name):
                continue
            ranks = list(range(1, len(rows[name]) + 1))
            rng.shuffle(ranks)
            rows[name] = [with_cells(row, {position: rank if column.numeric else f"{rank:06d}"})
                          for row, rank in zip(rows[name], ranks)]
    return rows
