"""Neighbor rules aimed at the classes of data that natural query errors meet, and how a counterexample names its
class.

A model's accidental pass is rarely a mutant's: it reads a lookup table where the gold query reads the table that
references it, groups by a name where the gold query groups by a key, takes ``MAX`` where the gold query takes
``ORDER BY ... LIMIT 1``. Each class below is one kind of data that tells such queries apart, built by one rule
over the whole database (a :data:`~.generation.JoinedRule`, applied after the rows reach the joins) and aimed
first at the columns on which the two queries differ (:attr:`~.hints.Hints.differing_columns`):

* ``empty``: empty input (a table, or the rows a WHERE keeps). An empty table is an admissible database: every
  declared constraint holds on it, and real tables are empty on the day a product launches.
* ``null``: NULL in a nullable column (``NOT IN`` over a subquery, ``COUNT(col)`` against ``COUNT(*)``).
* ``boundary``: rows on each literal of either query and the next value on each side (the literal rules of
  :mod:`.rules`: :func:`~.rules.literal_values`, and :func:`~.joined.group_sizes` for COUNT thresholds).
* ``partner``: rows without a partner (a parent no child references, a child whose key meets no parent).
* ``duplicate``: repeated values in non-unique columns (two rows sharing a name, a child repeated).

Every rule keeps the declared constraints: NULL only in a column that is neither NOT NULL nor part of the
primary key (whatever SQLite's legacy quirk allows there) and that no foreign key references; keys stay unique
(a copy gets fresh keys); a foreign key points at a parent or is NULL where nullable. What a rule still gets
wrong (a CHECK, a composite UNIQUE) the engine rejects when the neighbor is built.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from sqlcmp_dagster.engine.neighbors.cells import carrying_rows, copy_row, fitted_values, fresh_value, \
    literal_columns, pairs_in_scope, position_of, with_cells
from sqlcmp_dagster.engine.neighbors.hints import Hints
from sqlcmp_dagster.engine.neighbors.schema import Rows, Schema, Table

#: The classes, in the order a counterexample found by a profile of several looks for its fact.
CLASSES = ("empty", "null", "partner", "duplicate", "boundary")
#: The order a counterexample whose rows hold no fact of its profile's classes looks for one of another: rows
#: sharing a value the queries name first (the fact most often behind such a difference: ``EXCEPT`` or
#: ``GROUP BY`` over a name where the other query keeps rows apart by key), a partner missing, a boundary last
#: (a value next to a literal is in most rows a literal profile makes).
FALLBACK_ORDER = ("duplicate", "empty", "null", "partner", "boundary")


def nullable(table: Table, position: int) -> bool:
    """Whether a column may hold NULL: neither NOT NULL nor part of the primary key (standard SQL's reading of a
    key, which SQLite's legacy quirk relaxes)."""
    column = table.columns[position]
    return not column.not_null and not column.primary_key


def _referenced(schema: Schema, tables: list[str]) -> set[tuple[str, int]]:
    """``(table, position)`` of every column a declared foreign key of ``tables`` references (a parent key)."""
    return {(key.parent, position) for name in tables for key in schema.tables[name].foreign_keys
            for position in key.parent_columns}


def _links(schema: Schema, tables: list[str], found: Hints) -> list[tuple[str, int, str, int, bool]]:
    """``(child, column, parent, column, declared)`` for each declared one-column foreign key between ``tables``
    and each pair of columns the queries join on that no key declares (each direction of such a pair)."""
    links = [(name, key.columns[0], key.parent, key.parent_columns[0], True) for name in tables
             for key in schema.tables[name].foreign_keys if key.parent in tables and len(key.columns) == 1]
    declared = {(child, at, parent, to) for child, at, parent, to, _ in links}
    for pair in pairs_in_scope(schema, tables, found):
        for (child, child_column), (parent, parent_column) in (pair, pair[::-1]):
            at, to = position_of(schema.tables[child], child_column), position_of(schema.tables[parent], parent_column)
            if at is not None and to is not None and (child, at, parent, to) not in declared \
                    and (parent, to, child, at) not in declared:
                links.append((child, at, parent, to, False))
    return links


def emptied(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """Empty input: one table the queries read (one they aggregate or order first, else one they filter with a
    literal) without rows, or, half the time, without the rows that carry the queries' literals (the rows a WHERE
    keeps): ``MAX`` then returns one NULL row where ``ORDER BY ... LIMIT 1`` returns none. A child row whose
    declared key pointed into the removed rows takes NULL where the key is nullable, else goes with them."""
    read = [name for name in tables if schema.tables[name].name.lower() in found.tables and rows.get(name)]
    named = found.aggregated | found.order_columns

    def holds(name: str, columns: set[str]) -> bool:
        return any(column.name.lower() in columns for column in schema.tables[name].columns)

    candidates = [n for n in read if holds(n, named)] or [n for n in read if literal_columns(schema.tables[n], found)] \
        or read
    if not candidates:
        return rows
    name = rng.choice(candidates)
    carrying = set(carrying_rows(rows[name], literal_columns(schema.tables[name], found)))
    rows[name] = [row for row in rows[name] if row not in carrying] if carrying and rng.random() < 0.5 else []
    return _orphaned(schema, tables, rows, name)


def _orphaned(schema: Schema, tables: list[str], rows: Rows, parent: str) -> Rows:
    """The children of ``parent`` whose declared key meets none of its rows left: NULL in the key where it is
    nullable, else the row removed."""
    for name in tables:
        table = schema.tables[name]
        for key in table.foreign_keys:
            if key.parent != parent or name == parent:
                continue
            present = {tuple(row[i] for i in key.parent_columns) for row in rows.get(parent, [])}
            kept = []
            for row in rows.get(name, []):
                value = tuple(row[i] for i in key.columns)
                if None in value or value in present:
                    kept.append(row)
                elif all(nullable(table, i) for i in key.columns):
                    kept.append(with_cells(row, {i: None for i in key.columns}))
            rows[name] = kept
    return rows


def nulled(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """NULL in the nullable columns the queries name (those on which the two queries differ when there are any:
    the column ``COUNT(col)`` counts, the one a ``NOT IN`` subquery returns), each in about half the rows of its
    table, chosen apart for each column (a NULL join key beside the NULL would drop the row from the subquery),
    and always in one row the rules added (one that carries the literals or reaches a join: the row a WHERE or a
    subquery keeps). A column a foreign key references keeps its values (its children would lose their
    parent)."""
    referenced = _referenced(schema, tables)
    for name in tables:
        table, current = schema.tables[name], rows.get(name)
        if not current:
            continue
        named = [i for i, c in enumerate(table.columns) if c.name.lower() in found.columns and nullable(table, i)
                 and (name, i) not in referenced]
        aimed = [i for i in named if table.columns[i].name.lower() in found.differing_columns] or named
        sampled = schema.sampled(name)
        added = [n for n, row in enumerate(current) if row not in sampled] or list(range(len(current)))
        for position in aimed:
            chosen = {n for n in range(len(current)) if rng.random() < 0.5} | {rng.choice(added)}
            current = [with_cells(row, {position: None}) if n in chosen else row for n, row in enumerate(current)]
        rows[name] = current
    return rows


def partnerless(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """Rows without a partner across the links between the tables (declared foreign keys and pairs of columns the
    queries join on) whose columns the two queries differ on, else one link: for each, a parent row that no child
    references (a copy with fresh keys and a fresh join value: codes read from a lookup table list it, codes read
    from the table that references it do not), and about half the children without a parent: NULL where a
    declared key is nullable (the only legal miss: a NOT NULL key has none), a fresh value where no key is
    declared. ``IN (subquery)`` against a join, a join path through another table, LEFT against inner join
    then disagree."""
    links = [link for link in _links(schema, tables, found) if link[0] != link[2]]
    if not links:
        return rows

    def aimed(link: tuple[str, int, str, int, bool]) -> bool:
        child, at, parent, to, _ = link
        return bool({schema.tables[child].columns[at].name.lower(), schema.tables[parent].columns[to].name.lower()}
                    & found.differing_columns)

    for child, at, parent, to, declared in [link for link in links if aimed(link)] or [rng.choice(links)]:
        parents, children = rows.get(parent), rows.get(child)
        if parents:
            table = schema.tables[parent]
            copy = copy_row(table, rng.choice(parents), {}, parents)
            if to not in table.keyed:
                copy = with_cells(copy, {to: fresh_value(copy[to], table.columns[to].numeric, parents, to)})
            parents.append(copy)
        table = schema.tables[child]
        if not children or (declared and not nullable(table, at)):
            continue
        chosen = {n for n in range(len(children)) if rng.random() < 0.5} or {rng.randrange(len(children))}
        taken = [(row[to],) for row in rows.get(parent, [])] + [(row[at],) for row in children]
        rows[child] = [with_cells(row, {at: None if declared else fresh_value(row[at], table.columns[at].numeric,
                                                                               taken, 0)})
                       if n in chosen else row for n, row in enumerate(children)]
    return rows


def shared_values(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """Duplicates in non-unique columns: the columns of one move take one value each in many rows of their table.
    Where the queries group by different columns, a move is the GROUP BY columns of one query that the other
    lacks (``GROUP BY name`` against ``GROUP BY id``: the names, so that rows of distinct ids share one); else
    the columns on which the two queries differ, those of one table that join nothing together, or one join
    column of the many side (a child repeated under one parent); else those compared with a literal or a
    subquery. A column that is unique by itself is never part of a move. The value is the literal the column is
    compared with (a name a subquery looks up: two rows called so), else one row's; a join column takes an
    existing row's value, so its rows keep their parent. Every row takes it but the spared ones: the largest
    group of the other query's GROUP BY columns in this table, else the row with the most partners where the
    table is joined (so that merged groups outgrow the largest single one, and rows sharing a name each keep
    their own children), else a random one; half the time only a random half of the other rows takes it."""
    moves = _moves(schema, tables, rows, found)
    if not moves:
        return rows
    name, positions, other = rng.choice(moves)
    table, current = schema.tables[name], rows[name]
    keep = [i for i in range(len(table.columns)) if table.columns[i].name.lower() in other and i not in positions]
    largest, size = Counter(tuple(row[i] for i in keep) for row in current).most_common(1)[0] if keep else ((), 0)
    if size > 1:  # the other query's groups in this table: its largest stays apart
        spared = {n for n, row in enumerate(current) if tuple(row[i] for i in keep) == largest}
    else:
        partners = _partners(schema, tables, rows, found, name)
        spared = {max(range(len(current)), key=lambda n: (partners[n], -n)) if any(partners) else
                  rng.randrange(len(current))}
    half = rng.random() < 0.5
    chosen = [n for n in range(len(current)) if n not in spared and (not half or rng.random() < 0.5)]
    changes: dict[int, Any] = {}
    for position in positions:
        column = table.columns[position]
        literals = fitted_values(found.literals.get(column.name.lower(), []), column)
        # A value no spared row holds: the spared rows must stay apart from the rows that share it.
        kept = {current[n][position] for n in spared}
        donors = [current[n][position] for n in chosen if current[n][position] is not None
                  and current[n][position] not in kept]
        if literals and column.name.lower() not in found.join_columns:
            changes[position] = literals[0]
        elif donors:
            changes[position] = rng.choice(donors)
    rows[name] = [with_cells(row, changes) if n in set(chosen) else row for n, row in enumerate(current)]
    return rows


def _moves(schema: Schema, tables: list[str], rows: Rows, found: Hints) -> list[tuple[str, list[int], set[str]]]:
    """The moves of :func:`shared_values`: ``(table, positions, the other query's GROUP BY columns)``."""
    unique = {(name, key[0]) for name in tables for key in schema.tables[name].unique_sets if len(key) == 1}

    def columns(name: str, wanted: set[str]) -> list[int]:
        return [i for i, c in enumerate(schema.tables[name].columns)
                if c.name.lower() in wanted and (name, i) not in unique and not c.primary_key]

    present = [name for name in tables if len(rows.get(name, [])) >= 2 and schema.tables[name].name.lower() in found.tables]
    sets = found.group_sets
    if len(sets) == 2 and sets[0] != sets[1]:
        # A grouped join key is left out where anything else is grouped: sharing it merges groups in both queries.
        grouped = [(name, [i for i in positions if schema.tables[name].columns[i].name.lower()
                           not in found.join_columns] or positions, other)
                   for own, other in (sets, sets[::-1]) for name in present
                   for positions in [columns(name, own - other)]]
        if any(positions for _, positions, _ in grouped):
            return [move for move in grouped if move[1]]
    moves: list[tuple[str, list[int], set[str]]] = []
    for name in present:
        differing = columns(name, found.differing_columns)
        plain = [i for i in differing if schema.tables[name].columns[i].name.lower() not in found.join_columns]
        moves += [(name, plain, set())] if plain else []
        moves += [(name, [i], set()) for i in differing if i not in plain]
    if moves:
        return moves
    compared = set(found.literals) | found.subquery_compared
    return [(name, positions, set()) for name in present if (positions := columns(name, compared))]


def _partners(schema: Schema, tables: list[str], rows: Rows, found: Hints, name: str) -> list[int]:
    """Per row of ``name``, how many rows of other tables reference it (a declared key or a join the queries
    make, with ``name`` on the parent side)."""
    counts = [0] * len(rows.get(name, []))
    for child, at, parent, to, _ in _links(schema, tables, found):
        if parent != name or child == name:
            continue
        # Keys compared as text: a TEXT key column holds '3' where an INT parent holds 3, and the join meets them.
        values = Counter(str(row[at]) for row in rows.get(child, []) if row[at] is not None)
        for n, row in enumerate(rows[name]):
            counts[n] += values.get(str(row[to]), 0)
    return counts


def can_change(rule: object, schema: Schema, tables: list[str], found: Hints) -> bool:
    """Whether a rule of this module can change anything for these queries on this schema: a move of
    :func:`shared_values` over the sample, a link for :func:`partnerless`, a nullable named column for
    :func:`nulled`. A neighbor whose rule cannot is not built (it would be another profile's, and cost a
    neighbor's time)."""
    if rule is shared_values:  # a table whose sample is empty gets synthesized rows (:func:`~.rules.synthesized`)
        return bool(_moves(schema, tables, {name: schema.sample.get(name) or [(), ()] for name in tables}, found))
    if rule is partnerless:
        return any(link[0] != link[2] for link in _links(schema, tables, found))
    if rule is nulled:
        referenced = _referenced(schema, tables)
        return any(column.name.lower() in found.columns and nullable(schema.tables[name], i)
                   and (name, i) not in referenced
                   for name in tables for i, column in enumerate(schema.tables[name].columns))
    return True


def fact(kind: str, schema: Schema, tables: list[str], rows: Rows, found: Hints) -> str | None:
    """What of class ``kind`` a counterexample's ``rows`` hold, as a clause of its sentence (``Dogs is empty``,
    ``two stadium rows share Name``), or None when they hold nothing of it (shrinking may drop it)."""
    table_of = {name: schema.tables[name] for name in tables}
    named = [(name, i) for name in tables for i, c in enumerate(table_of[name].columns)
             if c.name.lower() in found.columns]
    named.sort(key=lambda item: table_of[item[0]].columns[item[1]].name.lower() not in found.differing_columns)

    def cell(name: str, i: int) -> str:
        return f"{table_of[name].name}.{table_of[name].columns[i].name}"

    if kind == "empty":
        empty = [table_of[n].name for n in tables if table_of[n].name.lower() in found.tables and not rows.get(n)]
        if not empty:
            return None
        return f"{empty[0]} is empty" if len(empty) == 1 else f"{', '.join(empty[:-1])} and {empty[-1]} are empty"
    if kind == "null":
        return next((f"{cell(n, i)} is NULL" for n, i in named if any(row[i] is None for row in rows.get(n, []))),
                    None)
    if kind == "duplicate":
        return next((f"two {table_of[n].name} rows share {table_of[n].columns[i].name}" for n, i in named
                     if any(count > 1 for value, count in Counter(row[i] for row in rows.get(n, [])).items()
                            if value is not None)), None)
    if kind == "partner":
        for child, at, parent, to, _ in _links(schema, tables, found):
            present = {row[to] for row in rows.get(parent, [])}
            referenced = {row[at] for row in rows.get(child, [])}
            if any(row[at] is None or row[at] not in present for row in rows.get(child, [])):
                return f"a {table_of[child].name} row meets no {table_of[parent].name} row"
            if any(row[to] not in referenced for row in rows.get(parent, [])):
                return f"a {table_of[parent].name} row has no {table_of[child].name} row"
        return None
    for name, i in named:  # boundary: a value on a literal of the queries, or next to it
        column = table_of[name].columns[i]
        literals = fitted_values(found.literals.get(column.name.lower(), []), column)
        value = next((row[i] for row in rows.get(name, []) if row[i] is not None and row[i] in literals), None)
        if value is not None:
            return f"{cell(name, i)} is {value!r} (on or next to a literal of the queries)"
    return None


def named_class(kinds: frozenset[str], schema: Schema, tables: list[str], rows: Rows, found: Hints) \
        -> tuple[str | None, str | None]:
    """The class a counterexample names and the clause saying what of it its ``rows`` hold: the first of the
    ``kinds`` its profile builds (in :data:`CLASSES` order) whose :func:`fact` they hold, else the first other
    class (in :data:`FALLBACK_ORDER`) whose fact they hold: shrinking keeps what tells the queries apart, which
    need not be what the profile aimed at (two countries sharing a name in the sample a literal profile
    started from: 18 of Spider dev's 86 counterexamples named no fact before); else the profile's first kind
    with no clause (None for a profile of no class)."""
    ordered = [kind for kind in CLASSES if kind in kinds]
    for kind in (*ordered, *(kind for kind in FALLBACK_ORDER if kind not in kinds)):
        clause = fact(kind, schema, tables, rows, found)
        if clause is not None:
            return kind, clause
    return (ordered[0] if ordered else None), None
