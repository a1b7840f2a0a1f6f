"""Neighbor generation: row sets of the same schema that a fragile pass is likely to disagree on.

Each rule is one function over one table's rows (the sqlglot style: small, named, documented), applied with a
seeded :class:`random.Random`, so neighbor ``i`` of seed ``s`` is the same database on every run. The hints
come from both queries: the literals each column is compared with (and their boundaries), the ORDER BY keys,
the columns that join tables. Values keep their column's type class; rows that break a declared constraint
are not filtered here but rejected by the engine when the neighbor is built (``neighbor_scratch.scratch``).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from math import isfinite
from operator import itemgetter
from typing import Any, TypeVar, overload

from sqlglot import exp

from sqlcmp_dagster.engine.neighbor_scratch import Column, Rows, Schema, Table
from sqlcmp_dagster.engine.parsing import sql_text

#: Largest group :func:`group_sizes` and :func:`ladder` build (a HAVING COUNT(*) >= 50 needs a group of 50,
#: one of ``COUNT(col) < 200`` a group of 200 whose NULLs bring it under).
_MAX_GROUP = 200
#: Rows :func:`synthesized` makes for a table whose sample is empty.
_SYNTHESIZED_ROWS = 4
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between,
                exp.Glob)
_CONDITIONS = (exp.And, exp.Or, exp.Not)
#: The kinds of node :func:`hints` and :func:`features` read (:class:`_Nodes`), and every class among them.
_KINDS = (exp.Column, exp.Join, exp.Table, exp.Ordered, exp.AggFunc, exp.Group, _COMPARISONS, exp.Count, exp.Distinct,
          _CONDITIONS)
_ANY_KIND = tuple(k for kind in _KINDS for k in (kind if isinstance(kind, tuple) else (kind,)))
_Node = TypeVar("_Node")


@dataclass
class Hints:
    """What the two queries look at: literal candidates per column name (lower case), every literal,
    ORDER BY key columns, columns compared with other columns (join keys) and the pairs of ``(table, column)``
    they join, and columns inside an aggregate (``COUNT(col)``, ``MAX(col)``...)."""

    literals: dict[str, list[Any]] = field(default_factory=dict)
    pool: list[Any] = field(default_factory=list)
    order_columns: set[str] = field(default_factory=set)
    join_columns: set[str] = field(default_factory=set)
    join_pairs: set[tuple[tuple[str, str], tuple[str, str]]] = field(default_factory=set)
    aggregated: set[str] = field(default_factory=set)
    columns: set[str] = field(default_factory=set)
    tables: set[str] = field(default_factory=set)
    group_columns: set[str] = field(default_factory=set)
    group_sizes: list[int] = field(default_factory=list)  # the numbers COUNT(...) is compared with
    equal_sizes: list[int] = field(default_factory=list)  # those it must equal (``HAVING COUNT(*) = 2``)
    subquery_compared: set[str] = field(default_factory=set)  # columns compared with a subquery's value
    differences: set[str] = field(default_factory=set)  # the :func:`features` on which the queries differ
    outer_tables: set[str] = field(default_factory=set)  # tables on the NULL-filled side of an outer join
    # :func:`_literal_columns` per table name, computed once per search (the literals do not change after
    # :func:`hints`): every neighbor asked for them again, several times per table.
    fitted: dict[str, dict[int, list[Any]]] = field(default_factory=dict, compare=False, repr=False)


def hints(trees: Iterable[exp.Expression], schema: Schema | None = None) -> Hints:
    """Collect :class:`Hints` from the queries' ASTs. With the ``schema``, a double-quoted name that is no
    column of it is the string SQLite reads it as (``WHERE city = "Aberdeen"``), and join keys are resolved
    to their tables."""
    found = Hints()
    seen: list[dict[str, list[str]]] = []
    known = {c.name.lower(): name for name, t in schema.tables.items() for c in t.columns} if schema else None
    def string(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and not node.table and bool(node.this.args.get("quoted")) \
            and known is not None and node.name.lower() not in known

    for tree in trees:
        nodes = _Nodes(tree)
        if known is not None and any(string(node) for node in nodes[exp.Column]):  # else no copy
            tree = tree.transform(lambda node: exp.Literal.string(node.name) if string(node) else node)
            nodes = _Nodes(tree)
        seen.append(features(tree, nodes))
        found.outer_tables |= {j.this.name.lower() for j in nodes[exp.Join]
                               if j.side in ("LEFT", "FULL") and isinstance(j.this, exp.Table)}
        found.tables |= {t.name.lower() for t in nodes[exp.Table] if t.name}
        found.columns |= {c.name.lower() for c in nodes[exp.Column]}
        for order in nodes[exp.Ordered]:
            found.order_columns |= {c.name.lower() for c in order.find_all(exp.Column)}
        for aggregate in nodes[exp.AggFunc]:
            found.aggregated |= {c.name.lower() for c in aggregate.find_all(exp.Column)}
        for group in nodes[exp.Group]:
            found.group_columns |= {c.name.lower() for c in group.find_all(exp.Column)}
        for node in nodes[_COMPARISONS]:
            operands = list(node.iter_expressions())
            # A column under an aggregate (AVG(x) >= 72) takes the literal too: on a one-row group they are equal.
            columns = [c for o in operands for c in ([o] if isinstance(o, exp.Column) else
                                                     o.find_all(exp.Column) if isinstance(o, exp.AggFunc) else [])]
            if any(isinstance(o, (exp.Subquery, exp.Select)) for o in operands):
                found.subquery_compared |= {c.name.lower() for c in columns}
            literals = [lit for lit in node.find_all(exp.Literal)
                        if not any(isinstance(a, exp.Select) for a in _between(lit, node))]
            direct = [o for o in operands if isinstance(o, exp.Column)]
            if isinstance(node, exp.EQ) and len(direct) == 2:
                found.join_columns |= {c.name.lower() for c in direct}
                pair = [_table_of(c, schema) for c in direct]
                if pair[0] is not None and pair[1] is not None and pair[0] != pair[1]:
                    found.join_pairs.add((pair[0], pair[1]))
            values = [v for lit in literals for v in boundaries(lit, like=isinstance(node, (exp.Like, exp.ILike)))]
            if any(isinstance(o, exp.Count) for o in operands):
                sizes = [int(lit.this) for lit in literals if not lit.is_string and lit.this.isdigit()
                         and 0 < int(lit.this) <= _MAX_GROUP]
                found.group_sizes.extend(sizes)
                if isinstance(node, exp.EQ):
                    found.equal_sizes.extend(sizes)
            for column in columns:
                found.literals.setdefault(column.name.lower(), []).extend(values)
            found.pool.extend(values)
    for name, values in found.literals.items():
        found.literals[name] = _unique(values)
    found.pool = _unique(found.pool)
    found.group_sizes = sorted(set(found.group_sizes))
    found.differences = {name for name in seen[0] if any(f[name] != seen[0][name] for f in seen[1:])} \
        if seen else set()
    return found


def features(tree: exp.Expression, nodes: _Nodes | None = None) -> dict[str, list[str]]:
    """What the profiles aim at, per feature of a query (lower-case SQL, sorted): its COUNTs and other
    aggregates, its joins' sides, the column pairs it equates (join keys), its comparisons with anything else
    (literals, subqueries, aggregates), its ORDER BY keys with their direction, its DISTINCTs, the shape of its
    conditions (AND, OR, NOT); columns without their table qualifier, which is only an author's alias. Where
    two queries differ is where a neighbor must tell them apart (:func:`neighbor_numbers` builds the profiles
    aimed there first). ``nodes`` is ``tree``'s :class:`_Nodes` when the caller has it.

    >>> import sqlglot
    >>> features(sqlglot.parse_one("SELECT count(T1.a) FROM t AS T1 WHERE T1.b > 2 ORDER BY 1 DESC"))["comparison"]
    ['b > 2']
    """
    nodes = nodes if nodes is not None else _Nodes(tree)

    def text(node: exp.Expression) -> str:  # without table qualifiers: aliases differ between any two authors
        # transform() made the copy printed here: the generator need not copy it again
        return sql_text(node.transform(lambda n: exp.column(n.name) if isinstance(n, exp.Column) else n),
                        "sqlite").lower()

    def key_pair(node: exp.Expression) -> bool:
        return isinstance(node, exp.EQ) and all(isinstance(o, exp.Column) for o in node.iter_expressions())

    comparisons = nodes[_COMPARISONS]
    return {
        "count": sorted(text(node) for node in nodes[exp.Count]),
        "aggregate": sorted(type(node).__name__ for node in nodes[exp.AggFunc]),
        "join": sorted(f"{j.side} {j.kind}".lower() for j in nodes[exp.Join]),
        "join_key": sorted(text(node) for node in comparisons if key_pair(node)),
        "comparison": sorted(text(node) for node in comparisons if not key_pair(node)),
        "order": sorted(f"{text(node.this)} {'desc' if node.args.get('desc') else 'asc'}"
                       for node in nodes[exp.Ordered]),
        "distinct": sorted(text(node.parent) for node in nodes[exp.Distinct] if node.parent is not None),
        "condition": sorted(type(node).__name__ for node in nodes[_CONDITIONS]),
    }


class _Nodes(dict[Any, list[exp.Expression]]):
    """The nodes of a tree of each of :data:`_KINDS` (a class, or a tuple of classes, as
    :meth:`~sqlglot.exp.Expression.find_all` takes them), each list in ``find_all``'s order (breadth first),
    from one walk of the tree: :func:`hints` and :func:`features` read ten kinds, and walked the tree once per
    kind (fifteen walks of each query of a searched pass).

    >>> import sqlglot
    >>> nodes = _Nodes(sqlglot.parse_one("SELECT a FROM t WHERE a = 1 AND b > 2"))
    >>> [n.sql() for n in nodes[_COMPARISONS]], [n.sql() for n in nodes[exp.Column]]
    (['a = 1', 'b > 2'], ['a', 'a', 'b'])
    """

    def __init__(self, tree: exp.Expression) -> None:
        super().__init__((kind, []) for kind in _KINDS)
        buckets = list(self.items())
        for node in tree.walk():
            if isinstance(node, _ANY_KIND):
                for kind, bucket in buckets:
                    if isinstance(node, kind):
                        bucket.append(node)

    @overload
    def __getitem__(self, kind: type[_Node]) -> list[_Node]: ...

    @overload
    def __getitem__(self, kind: tuple[type[exp.Expression], ...]) -> list[exp.Expression]: ...

    def __getitem__(self, kind: Any) -> list[Any]:
        return super().__getitem__(kind)


def _table_of(column: exp.Column, schema: Schema | None) -> tuple[str, str] | None:
    """``(table, column)`` (lower case) of a column reference: its qualifier resolved through the aliases of
    its SELECT, or the one table of that SELECT that has such a column."""
    select = column.find_ancestor(exp.Select)
    if schema is None or select is None:
        return None
    aliases = {t.alias_or_name.lower(): t.name.lower() for t in select.find_all(exp.Table)}
    name = column.name.lower()
    if column.table:
        table = aliases.get(column.table.lower())
        candidates = [table] if table is not None else []
    else:
        candidates = sorted(set(aliases.values()))
    owners = [t for t in candidates if t in schema.tables and any(c.name.lower() == name
                                                                  for c in schema.tables[t].columns)]
    return (owners[0], name) if len(owners) == 1 else None


def _between(node: exp.Expression, top: exp.Expression) -> list[exp.Expression]:
    """The ancestors of ``node`` strictly below ``top`` (a literal inside a subquery is not this comparison's)."""
    chain, parent = [], node.parent
    while parent is not None and parent is not top:
        chain.append(parent)
        parent = parent.parent
    return chain


def boundaries(literal: exp.Literal, *, like: bool = False) -> list[Any]:
    """The literal's value and its neighbours: ``v-1, v, v+1`` (and ``±0.5`` for a fraction) for a number;
    for a string the value and its case variants, and for a LIKE pattern its fixed text alone and with a
    character before and after it (a match of ``%x%`` that ``x%`` misses, and the reverse).

    >>> boundaries(exp.Literal.number(5))
    [5, 4, 6]
    >>> boundaries(exp.Literal.string("Ab%"), like=True)
    ['Ab', 'Abz', 'zAb', 'zAbz', 'ab', 'AB']
    """
    text = literal.this
    if not literal.is_string:
        try:
            number = float(text)
        except ValueError:
            return []
        if number.is_integer():
            value = int(number)
            return [value, value - 1, value + 1]
        return [number, number - 0.5, number + 0.5]
    if like:
        core = text.replace("%", "").replace("_", "")
        values: list[Any] = [core, core + "z", "z" + core, "z" + core + "z"]
    else:
        values = [text]
    values += [text.lower(), text.upper()] if not like else [core.lower(), core.upper()]
    return _unique(values)


def neighbor_rows(schema: Schema, tables: list[str], found: Hints, index: int, rng: random.Random) -> Rows:
    """Neighbor ``index``: the sample of each table (parents first), cut to a random subset and perturbed by
    the rules of profile ``index % len(PROFILES)`` with random strength; declared foreign keys are repaired to
    point at a surviving parent row (a NULL key is left NULL: the row then fails the join legally)."""
    profile = PROFILES[index % len(PROFILES)]
    rows: Rows = {}
    keep = rng.choice((0.15, 0.3, 0.5, 0.8))
    for name in tables:
        table = schema.tables[name]
        current = subset(schema.sample.get(name, []), rng, keep) or synthesized(table, found)
        if profile.may_empty and rng.random() < 0.3 and len(tables) > 1:
            rows[name] = []  # emptied table
            continue
        for rule in profile.rules:
            current = rule(table, current, found, rng)
        rows[name] = repair_keys(schema, table, current, rows, found, rng)
    rows = reach_joins(schema, tables, rows, found, rng)
    for joined in profile.joined:
        rows = joined(schema, tables, rows, found, rng)
    return rows


def neighbor_numbers(count: int, tables: list[str], found: Hints) -> list[int]:
    """The numbers of the ``count`` neighbors to build: first the profiles aimed at a feature on which the two
    queries differ (``found.differences``: a COUNT's argument, a join's side, a comparison...), then the others,
    each group in the order of :data:`PRIORITY` (the usual accidents first), those that cannot apply skipped,
    round after round (number ``p + r * len(PROFILES)`` for profile ``p`` in round ``r``, so neighbor ``n`` is
    the same database whatever the count)."""
    aimed = [p for p in PRIORITY if PROFILES[p].targets & found.differences]
    order = aimed + [p for p in PRIORITY if p not in aimed]
    numbers: list[int] = []
    for round_ in range(count):
        if len(numbers) >= count:
            break
        for profile in order:
            number = profile + round_ * len(PROFILES)
            if len(numbers) < count and applies(number, tables, found):
                numbers.append(number)
    return numbers


def applies(index: int, tables: list[str], found: Hints) -> bool:
    """Whether neighbor ``index``'s profile can change anything for these queries: a profile of joins needs a
    join, one of group sizes a COUNT compared with a number, one of NULLs in counted rows an aggregate. A
    profile that cannot is not built (time)."""
    profile = PROFILES[index % len(PROFILES)]
    if profile.needs_join and (len(tables) == 1 or not found.join_columns):
        return False
    if group_sizes in profile.joined and not found.group_sizes:
        return False
    if ladder in profile.joined and not (found.group_columns or found.order_columns):
        return False
    if ladder_nulls in profile.joined and not (found.group_columns and found.aggregated):
        return False
    return found.aggregated or not (null_counted in profile.joined or null_all_but_one in profile.rules)


def _join_pairs(schema: Schema, tables: list[str], found: Hints) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The ``((table, column), (table, column))`` pairs the queries join on (tables in scope), sorted."""
    return sorted((a, b) for a, b in found.join_pairs if a[0] in tables and b[0] in tables
                  and _position(schema.tables[a[0]], a[1]) is not None
                  and _position(schema.tables[b[0]], b[1]) is not None)


def unmatched(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """For each pair of columns the queries join on, in both directions, a row whose join value meets nothing
    on the other side (added after the rows that reach the join, so nothing is made to match it): a copy of a
    row carrying the literals, with fresh keys and a join value no partner holds; NULL where a declared
    foreign key is nullable (the only legal miss), and nothing where it is NOT NULL. A LEFT JOIN that should be
    an inner join keeps that row."""
    for (first, first_column), (second, second_column) in _join_pairs(schema, tables, found):
        for (table_name, column), (other, other_column) in (((first, first_column), (second, second_column)),
                                                            ((second, second_column), (first, first_column))):
            table = schema.tables[table_name]
            at, to = _position(table, column), _position(schema.tables[other], other_column)
            if not rows.get(table_name) or at is None or to is None:
                continue
            declared = any(at in key.columns for key in table.foreign_keys)
            if declared and (table.columns[at].not_null or table.columns[at].primary_key):
                continue  # a key column is NOT NULL in standard SQL, whatever SQLite's legacy quirk allows
            taken = [row[to] for row in rows.get(other, [])] + [row[at] for row in rows[table_name]]
            value = None if declared else _fresh(rng.choice(rows[table_name])[at], table.columns[at].numeric,
                                                 [(v,) for v in taken], 0)
            carrying = _literal_columns(table, found)
            source = _carrying(rows[table_name], carrying) or rows[table_name]
            rows[table_name].append(_copy(table, rng.choice(source), {at: value}, rows[table_name]))
    return rows


def empty_partner(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """One joined table emptied: the right side of a LEFT JOIN in either query, else the many side of a join
    when there is one (its join column is no key of its own; a nullable foreign key to the emptied table is
    set to NULL): every row of the other side is then without a match, which a LEFT JOIN keeps and a JOIN
    drops, and an aggregate over the emptied side meets no row."""
    pairs = _join_pairs(schema, tables, found)
    joined = {t for pair in pairs for t, _ in pair}
    many = sorted({t for pair in pairs for t, c in pair
                   if (_position(schema.tables[t], c),) not in schema.tables[t].unique_sets})
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
                rows[name] = [_with(row, {i: None for i in key.columns}) for row in rows.get(name, [])]
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
            at, to = _position(source, first_column), _position(target, second_column)
            if at is None or to is None or not rows.get(first) or not rows.get(second):
                continue
            sampled = schema.sampled(first)
            added = [row for row in rows[first] if row not in sampled]
            out = rows[second]
            literals = _literal_columns(target, found)
            sampled_target = schema.sampled(second)
            carrying = _carrying(out, literals) or \
                [row for row in out if row not in sampled_target] or list(out)
            for row in (added or rng.sample(rows[first], 1))[:3]:
                out.append(_copy(target, rng.choice(carrying), {to: row[at]}, out))
    return _bridge(schema, rows, pairs, rng)


def _bridge(schema: Schema, rows: Rows, pairs: set[tuple[tuple[str, str], tuple[str, str]]],
            rng: random.Random) -> Rows:
    """A table joined to two or more others (``has_pet`` between ``student`` and ``pets``) gets rows that reach
    all of them at once: each join column takes the value of a row the rules added to its partner (one that
    carries a literal), so a WHERE on both partners holds through the path."""
    incoming: dict[str, dict[int, tuple[str, int]]] = {}
    for (first, first_column), (second, second_column) in sorted(pairs):
        at, to = _position(schema.tables[first], first_column), _position(schema.tables[second], second_column)
        if at is not None and to is not None:
            incoming.setdefault(second, {})[to] = (first, at)
    for name, columns in sorted(incoming.items()):
        if len({partner for partner, _ in columns.values()}) < 2 or not rows.get(name):
            continue
        for _ in range(2):
            changes = {}
            for to, (partner, at) in columns.items():
                sampled = schema.sampled(partner)
                source = [row for row in rows.get(partner, []) if row not in sampled] or rows.get(partner, [])
                if source:
                    changes[to] = rng.choice(source)[at]
            rows[name].append(_copy(schema.tables[name], rng.choice(rows[name]), changes, rows[name]))
    return rows


def _position(table: Table, column: str) -> int | None:
    return table.positions.get(column)


def subset(rows: list[tuple[Any, ...]], rng: random.Random, keep: float) -> list[tuple[Any, ...]]:
    """Rows kept with probability ``keep`` (at least one row when there are any)."""
    kept = [row for row in rows if rng.random() < keep]
    return kept or rows[:1]


def synthesized(table: Table, found: Hints) -> list[tuple[Any, ...]]:
    """Rows for a table whose sample is empty (Spider's ``wta_1.rankings``), so that a join through it can
    meet anything: in each column the first literal the queries compare it with, else a distinct value of its
    type class (``1, 2, ...`` or ``'<column> 1', ...``); a declared foreign key is then pointed at a parent by
    :func:`repair_keys`, and a row that breaks a CHECK is rejected when the neighbor is built."""
    literals = _literal_columns(table, found)
    return [tuple(literals[i][0] if i in literals and not column.primary_key else
                  n + 1 if column.numeric else f"{column.name} {n + 1}" for i, column in enumerate(table.columns))
            for n in range(_SYNTHESIZED_ROWS)]


def literal_rows(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """Copies of rows with every column the queries compare with a literal set at once (the literals
    themselves in the first copy, then random boundaries): a conjunction of predicates then holds on one row,
    and a ``>`` that should be ``>=`` meets its boundary there."""
    paired = _literal_columns(table, found)
    if not rows or not paired:
        return rows
    out = list(rows)
    for copy in range(rng.randint(1, 3)):
        changes = {i: values[0] if copy == 0 else rng.choice(values) for i, values in paired.items()}
        out.append(_copy(table, rng.choice(rows), changes, out))
    return out


def literal_values(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """Put the queries' literals and their boundaries into the columns they are compared with (and now and
    then into any column of the same type class), in copies of existing rows: a ``>`` that should be ``>=``
    disagrees on a row that sits on the boundary."""
    if not rows:
        return rows
    out = list(rows)
    for position, column in enumerate(table.columns):
        candidates = _fitted(found.literals.get(column.name.lower(), []), column)
        if not candidates and rng.random() < 0.3:
            candidates = _fitted(found.pool, column)
        for value in candidates:
            if rng.random() < 0.4:
                index = rng.randrange(len(out))
                out[index] = _with(out[index], {position: value})
            elif rng.random() < 0.5:
                out.append(_copy(table, rng.choice(rows), {position: value}, out))
    return out


def duplicates(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """Copies of some rows with fresh values only in their PRIMARY KEY and UNIQUE columns, so that every other
    column repeats: a missing DISTINCT, or a COUNT of rows where distinct values were asked, shows."""
    if not rows:
        return rows
    out = list(rows)
    for row in rng.sample(rows, max(1, len(rows) // 4)):
        out.append(_copy(table, row, {}, out))
    return out


def nulls(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) -> list[tuple[Any, ...]]:
    """NULL in some nullable columns (those neither NOT NULL nor part of the primary key), mostly in the
    columns the queries name: COUNT(col) against COUNT(*), ``NOT IN`` with a NULL, an aggregate over NULLs."""
    nullable = [i for i, c in enumerate(table.columns) if not c.not_null and not c.primary_key]
    named = {i for i in nullable if table.columns[i].name.lower() in found.columns}
    share = {i: rng.choice((0.2, 0.4)) if i in named else 0.05 for i in nullable}
    return [_with(row, {i: None for i in nullable if rng.random() < share[i]}) for row in rows]


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
    carrying = _literal_columns(table, found)
    counted = _carrying(rows, carrying)
    mode = rng.random()
    if mode < 0.25 and counted:  # exactly the rows the query counts: those the rules built to satisfy its WHERE
        return [_with(row, {i: None for i in chosen}) if row in counted else row for row in rows]
    if mode < 0.45 and len(rows) > 1:  # all but one row: the NULL group is the largest, one group is not NULL
        spared = rng.randrange(len(rows))
        return [row if n == spared else _with(row, {i: None for i in chosen}) for n, row in enumerate(rows)]
    if mode < 0.75 and len(table.columns) > 1:
        group = rng.choice([i for i in range(len(table.columns)) if i not in chosen] or [0])
        value = rng.choice(counted or rows)[group]
        return [_with(row, {i: None for i in chosen}) if row[group] == value else row for row in rows]
    return [_with(row, {i: None for i in chosen}) for row in rows]


def _counted(table: Table, found: Hints) -> list[int]:
    """Positions of the nullable columns the queries aggregate (COUNT(col) and the like)."""
    return [i for i, c in enumerate(table.columns) if not c.not_null and not c.primary_key
            and c.name.lower() in found.aggregated]


def null_all_but_one(table: Table, rows: list[tuple[Any, ...]], found: Hints, rng: random.Random) \
        -> list[tuple[Any, ...]]:
    """NULL in the aggregated columns of every row but one, that one in the smallest group of a GROUP BY column,
    and one more row in the largest group, so it is the strict largest: an argmax by COUNT(*) then picks the
    largest group and one by COUNT(col) the group of the one row left (``GROUP BY x ORDER BY COUNT(x) DESC
    LIMIT 1`` meets its NULL group)."""
    targets = _counted(table, found)
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
        out.append(_copy(table, next(r for r in out if r[position] == largest), {position: largest}, out))
        others = [n for n, row in enumerate(out) if row[position] != largest]
        if others:
            spared = min(others, key=lambda n: (sizes.get(out[n][position], 0), n))
    return [row if n == spared else _with(row, {i: None for i in targets}) for n, row in enumerate(out)]


def null_counted(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """NULL in the aggregated columns of the rows the query counts: those the rules added (carrying the
    literals) and those that reach them through the joins, not the sampled ones. ``COUNT(t.col) ... WHERE
    other.name = 'x'`` counts exactly such rows."""
    for name in tables:
        table = schema.tables[name]
        targets = _counted(table, found)
        sampled = schema.sampled(name)
        if targets and rows.get(name):
            rows[name] = [row if row in sampled else _with(row, {i: None for i in targets}) for row in rows[name]]
    return rows


def _literal_columns(table: Table, found: Hints) -> dict[int, list[Any]]:
    """The literals each column of ``table`` is compared with, fitted to its type (columns without any left out);
    kept in ``found`` (read only)."""
    if table.name not in found.fitted:
        fitted = {i: _fitted(found.literals.get(c.name.lower(), []), c) for i, c in enumerate(table.columns)}
        found.fitted[table.name] = {i: values for i, values in fitted.items() if values}
    return found.fitted[table.name]


def _carrying(rows: list[tuple[Any, ...]], literals: dict[int, list[Any]]) -> list[tuple[Any, ...]]:
    """The rows some column of which holds a literal the queries compare that column with (in their order).
    Asked about 90,000 rows a Spider dev run, most often with one such column (that column is read directly)
    or none.

    >>> _carrying([(1, "a"), (2, "b"), (None, "c")], {0: [2, 3]}), _carrying([(1, "a"), (2, "b")], {0: [3], 1: ["a"]})
    ([(2, 'b')], [(1, 'a')])
    """
    if len(literals) == 1:
        ((position, values),) = literals.items()
        return [row for row in rows if row[position] is not None and row[position] in values]
    if not literals:  # most tables of a search over many: none of their columns is compared with a literal
        return []
    checks = list(literals.items())
    return [row for row in rows if any(row[i] is not None and row[i] in values for i, values in checks)]


def group_sizes(schema: Schema, tables: list[str], rows: Rows, found: Hints, rng: random.Random) -> Rows:
    """A group of exactly the size a COUNT is compared with (``HAVING COUNT(*) >= 10``: 10 rows sharing one
    value of a grouping or join column of one table), by copies of one of its rows with fresh keys or by
    dropping the group's extra rows, after the rows reach the joins so that nothing changes its size: a ``>``
    that should be ``>=`` meets its boundary on a group, not a row."""
    # The many side of a join counts the rows of a group of the other side; else a GROUP BY column. A column that
    # is a key by itself has groups of one row.
    many = [(t, c) for pair in _join_pairs(schema, tables, found) for t, c in pair
            if (_position(schema.tables[t], c),) not in schema.tables[t].unique_sets and rows.get(t)]
    candidates = [(t, _position(schema.tables[t], c)) for t, c in many] or [
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
        out.append(_copy(table, source, {position: value}, out))
    rows[name] = out
    return rows


def _ladder_sizes(found: Hints) -> list[int]:
    """Group sizes 1, 2, 3, and each number a COUNT is compared with and one above it (``HAVING COUNT(*) > 3``
    meets groups of 3 and 4), all distinct, so no two groups tie."""
    return sorted({1, 2, 3} | {size + step for size in found.group_sizes for step in (0, 1)
                               if size + step <= _MAX_GROUP})


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
    for pair in _join_pairs(schema, tables, found):
        for (child, child_column), (parent, parent_column) in (pair, pair[::-1]):
            at, to = _position(schema.tables[child], child_column), _position(schema.tables[parent], parent_column)
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
    positions = {position} | ({_position(table, c) for pair in _join_pairs(schema, tables, found)
                               for (t, c), other in (pair, pair[::-1]) if t == name and parent is not None
                               and other == (parent, schema.tables[parent].columns[parent_position].name.lower())}
                              if parent is not None and parent_position is not None else set())
    out: list[tuple[Any, ...]] = []
    for value, size in zip(values, sizes):
        source = rng.choice(sources)  # one per group: a WHERE keeps all of a group or none, never a part
        for _ in range(size):
            out.append(_copy(table, source, {i: value for i in positions if i is not None}, out))
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
                parents.append(_copy(schema.tables[key.parent], rng.choice(parents), {to: value}, parents))
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
        targets = _counted(schema.tables[table_name], found)
        # The other groups count every row: a NULL there (Spider leaves many such columns empty) takes a value.
        filled = {i: next((r[i] for r in [*rows[table_name], *schema.sample.get(table_name, [])]
                           if r[i] is not None), 1 if schema.tables[table_name].columns[i].numeric else "x")
                  for i in targets}
        rows[table_name] = [_with(row, {i: None for i in targets}) if row[column] == value else
                            _with(row, {i: filled[i] for i in targets if row[i] is None})
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
            own.append(_fresh(own[0] if own else None, schema.tables[name].columns[position].numeric,
                              [(v,) for v in own], 0))
        return own[:count]
    table = schema.tables[parent]
    grouping = [i for i, c in enumerate(table.columns) if c.name.lower() in found.group_columns and i != parent_position]
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
        copy = _copy(table, (chosen or candidates)[0], {}, rows[parent])
        copy = _with(copy, {i: _fresh(copy[i], table.columns[i].numeric, rows[parent], i) for i in varied})
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
            rows[name] = [_with(row, {position: rank if column.numeric else f"{rank:06d}"})
                          for row, rank in zip(rows[name], ranks)]
    return rows


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
                out[index] = _with(out[index], {position: source})
            if keyed:  # and one more row, other values, on the same key
                out.append(_copy(table, rng.choice(rows), {position: source}, out))
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
                out.append(_copy(table, row, {position: None}, out))
        else:
            out.append(_copy(table, row, {position: _fresh(row[position], column.numeric, out, position)}, out))
    return out


def repair_keys(schema: Schema, table: Table, rows: list[tuple[Any, ...]], built: Rows, found: Hints,
                rng: random.Random) -> list[tuple[Any, ...]]:
    """Point every declared foreign key without a parent at a random surviving parent row, so that rules that
    copy or change values do not simply lose their rows to the constraint (a row whose key is NULL keeps it).
    A key that holds one of the queries' literals keeps it instead, and its parent gets a row with that key (a
    copy of one of its rows, inserted before the child): the row built to satisfy a WHERE stays in."""
    if not table.foreign_keys:
        return list(rows)
    out = []
    # Each key's parent values (a list, in the parents' order, for the random choice, and a set to look them up),
    # read once instead of once per row; forgotten when a parent row is added. A key of one column (nearly every
    # key) is its cell itself, not a tuple of one: no tuple is made per row and key.
    known: dict[int, tuple[list[Any], set[Any]]] = {}
    keys = [(index, key, _cells(key.columns), len(key.columns) == 1) for index, key in enumerate(table.foreign_keys)]
    for row in rows:
        for index, key, cells, single in keys:
            value = cells(row)
            if index not in known:
                listed = list(map(_cells(key.parent_columns), built.get(key.parent, [])))
                known[index] = (listed, set(listed))
            parents, present = known[index]
            if (value is None if single else None in value) or value in present or not parents:
                continue
            literal = single and any(
                value == v for v in found.literals.get(table.columns[key.columns[0]].name.lower(), []))
            if literal and key.parent in schema.tables:
                parent = schema.tables[key.parent]
                built[key.parent].append(_copy(parent, rng.choice(built[key.parent]),
                                               {key.parent_columns[0]: value}, built[key.parent]))
                for other, other_key in enumerate(table.foreign_keys):
                    if other_key.parent == key.parent:
                        known.pop(other, None)
                continue
            chosen = rng.choice(parents)
            row = _with(row, dict(zip(key.columns, (chosen,) if single else chosen)))
        out.append(row)
    return out


def _cells(positions: Sequence[int]) -> Callable[[tuple[Any, ...]], Any]:
    """The function taking the cells at ``positions`` out of a row: the cell itself for one position, else a
    tuple.

    >>> _cells([2])(("a", "b", "c")), _cells([2, 0])(("a", "b", "c")), _cells([])(("a",))
    ('c', ('c', 'a'), ())
    """
    if len(positions) == 1:
        return itemgetter(positions[0])
    return itemgetter(*positions) if positions else lambda row: ()


Rule = Callable[[Table, list[tuple[Any, ...]], Hints, random.Random], list[tuple[Any, ...]]]
JoinedRule = Callable[[Schema, list[str], Rows, Hints, random.Random], Rows]


@dataclass(frozen=True)
class Profile:
    """The rules one neighbor applies to each table, in turn; whether it may empty a table; the rules over
    the whole database applied after the rows reach the joins; whether it needs a join to change anything;
    the :func:`features` it aims at (built first where the two queries differ on one of them)."""

    rules: tuple[Rule, ...]
    may_empty: bool = False
    joined: tuple[JoinedRule, ...] = ()
    needs_join: bool = False
    targets: frozenset[str] = frozenset()


#: Neighbor ``i`` uses profile ``i % len(PROFILES)``: one rule alone first, so that a difference one rule
#: exposes is not hidden by another (NULLs that tie at a LIMIT, say), then combinations, then the targeted
#: ones (rows without a match, an emptied join partner, groups of the compared size).
PROFILES: list[Profile] = [
    Profile((literal_rows, literal_values), targets=frozenset({"comparison", "condition", "aggregate"})),
    Profile((null_columns,), targets=frozenset({"count"})),
    Profile((duplicates,), targets=frozenset({"distinct", "count"})),
    Profile((literal_rows, ties), targets=frozenset({"order", "aggregate", "comparison"})),
    Profile((failed_joins,), may_empty=True, needs_join=True, targets=frozenset({"join"})),
    Profile((literal_rows, literal_values, nulls)),
    Profile((literal_rows, duplicates, ties), targets=frozenset({"distinct"})),
    Profile((literal_rows, literal_values, duplicates, nulls, ties, failed_joins), may_empty=True),
    Profile((literal_rows, null_columns), targets=frozenset({"count"})),
    Profile((nulls,)),
    Profile((literal_rows,), joined=(unmatched,), needs_join=True, targets=frozenset({"join"})),
    Profile((literal_rows, literal_values), joined=(empty_partner,), needs_join=True, targets=frozenset({"join"})),
    Profile((literal_rows,), joined=(group_sizes,), targets=frozenset({"comparison"})),
    Profile((literal_rows,), joined=(null_counted,), targets=frozenset({"count"})),
    Profile((null_all_but_one,), targets=frozenset({"count"})),
    Profile((literal_rows,), joined=(ladder,), targets=frozenset({"order", "count", "join"})),
    Profile((literal_rows,), joined=(ladder_nulls,), targets=frozenset({"count"})),
]
#: The order profiles are tried in: literals and boundaries, NULLs where counted, rows without a match,
#: duplicates and ties, group sizes, then the rest.
PRIORITY = (0, 8, 10, 13, 16, 6, 15, 12, 14, 11, 1, 3, 2, 5, 7, 4, 9)


def seed_of(seed: int, index: int) -> int:
    """The seed of neighbor ``index`` under the configured ``seed`` (stable across runs and platforms)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "big")


def _fitted(values: list[Any], column: Column) -> list[Any]:
    """The ``values`` a column of this type class takes: numbers for a numeric column; for a column declared as
    text, strings and numbers as their text (SQLite compares a TEXT column with ``2013`` as with ``'2013'``,
    and Spider stores years and codes as text); both as they are for a column without a type.

    >>> _fitted([2013, "x"], Column("year", "TEXT", False, False)), _fitted([2013, "x"], Column("n", "INT", False, False))
    (['2013', 'x'], [2013])
    """
    if column.numeric:
        return [v for v in values if isinstance(v, (int, float))]
    if any(fragment in column.declared_type.upper() for fragment in ("CHAR", "CLOB", "TEXT")):
        return _unique([v if isinstance(v, str) else str(v) for v in values])
    return values


def _copy(table: Table, row: tuple[Any, ...], changes: dict[int, Any], rows: list[tuple[Any, ...]]) \
        -> tuple[Any, ...]:
    """A copy of ``row`` with ``changes`` and fresh values in its PRIMARY KEY and UNIQUE columns (unless
    changed), so that the copy is a new row the key constraints allow."""
    keys = table.keyed - changes.keys()
    return _with(row, {**changes, **{i: _fresh(row[i], table.columns[i].numeric, rows, i) for i in keys}})


def _fresh(value: Any, numeric: bool, rows: list[tuple[Any, ...]], position: int) -> Any:
    """A value for column ``position`` that no row holds yet: one above the largest finite number (a DuckDB
    DOUBLE may hold NaN and infinities, which no integer is above), or the text with a ``~`` suffix.

    >>> _fresh(0, True, [(float("nan"),), (5,), (float("inf"),), (2.5,)], 0), _fresh("a", False, [("a",), ("a~",)], 0)
    (6, 'a~~')
    >>> _fresh(0, True, [(10 ** 400,), (1.5,)], 0) == 10 ** 400 + 1
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


def _with(row: tuple[Any, ...], changes: dict[int, Any]) -> tuple[Any, ...]:
    """``row`` with the values at the positions ``changes`` names replaced (a position outside the row is
    ignored). Called about 100,000 times per Spider dev run: the positions are set on a list rather than every
    cell looked up in ``changes``.

    >>> _with((1, 2, 3), {0: None, 2: "x", 7: 0})
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


def _unique(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if not any(value == s and type(value) is type(s) for s in seen):
            seen.append(value)
    return seen
