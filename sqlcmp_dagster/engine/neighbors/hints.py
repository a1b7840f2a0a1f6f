"""What the two queries look at, read from their trees for the neighbor generation (:class:`Hints`): the literals
each column is compared with (and their boundaries), the ORDER BY keys, the columns that join tables, the
aggregated and grouped columns, and the features on which the two queries differ (:func:`features`), which the
profiles aimed there are built for first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from sqlglot import exp

from sqlcmp_dagster.engine.neighbors.schema import Schema
from sqlcmp_dagster.engine.parsing import sql_text

#: Largest group :func:`~.joined.group_sizes` and :func:`~.joined.ladder` build (a HAVING COUNT(*) >= 50 needs a
#: group of 50, one of ``COUNT(col) < 200`` a group of 200 whose NULLs bring it under).
MAX_GROUP = 200
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between,
                exp.Glob)
_CONDITIONS = (exp.And, exp.Or, exp.Not)
#: The kinds of node :func:`hints` and :func:`features` read (:class:`_Nodes`), and every class among them.
_KINDS = (exp.Column, exp.Join, exp.Table, exp.Ordered, exp.AggFunc, exp.Group, _COMPARISONS, exp.Count, exp.Distinct,
          _CONDITIONS, exp.Select)
_ANY_KIND = tuple(k for kind in _KINDS for k in (kind if isinstance(kind, tuple) else (kind,)))
_Node = TypeVar("_Node")
#: A name in a feature item's SQL text (:attr:`Hints.differing_columns` keeps those that are columns).
_WORD = re.compile(r"[a-z_][a-z0-9_]*")


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
    group_sets: list[set[str]] = field(default_factory=list)  # each query's GROUP BY columns (empty: none)
    group_sizes: list[int] = field(default_factory=list)  # the numbers COUNT(...) is compared with
    equal_sizes: list[int] = field(default_factory=list)  # those it must equal (``HAVING COUNT(*) = 2``)
    subquery_compared: set[str] = field(default_factory=set)  # columns compared with a subquery's value
    differences: set[str] = field(default_factory=set)  # the :func:`features` on which the queries differ
    # The columns named in a feature item one query has and the other lacks (``count(*)`` against
    # ``count(distinct language)``: ``language``; ``GROUP BY name`` against ``GROUP BY id``: both): where the class
    # generators aim first (:mod:`.classes`).
    differing_columns: set[str] = field(default_factory=set)
    outer_tables: set[str] = field(default_factory=set)  # tables on the NULL-filled side of an outer join
    # Per column, the values (with their boundaries) of the literals compared with it in some of the queries and
    # not all: where a long IN list of one query lacks a literal of the other's, the neighbor must hold that one
    # (``rules.literal_values``, which takes only the first values of a long list, puts these after them).
    telling_literals: dict[str, list[Any]] = field(default_factory=dict)
    # :func:`literal_columns` per table name, computed once per search (the literals do not change after
    # :func:`hints`): every neighbor asked for them again, several times per table.
    fitted: dict[str, dict[int, list[Any]]] = field(default_factory=dict, compare=False, repr=False)


def hints(trees: Iterable[exp.Expression], schema: Schema | None = None) -> Hints:
    """Collect :class:`Hints` from the queries' ASTs. With the ``schema``, a double-quoted name that is no
    column of it is the string SQLite reads it as (``WHERE city = "Aberdeen"``), and join keys are resolved
    to their tables."""
    found = Hints()
    seen: list[dict[str, list[str]]] = []
    told: list[dict[str, dict[tuple[Any, ...], list[Any]]]] = []  # per query, column: literal -> its values
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
        told.append({})
        found.outer_tables |= {j.this.name.lower() for j in nodes[exp.Join]
                               if j.side in ("LEFT", "FULL") and isinstance(j.this, exp.Table)}
        found.tables |= {t.name.lower() for t in nodes[exp.Table] if t.name}
        found.columns |= {c.name.lower() for c in nodes[exp.Column]}
        for order in nodes[exp.Ordered]:
            found.order_columns |= {c.name.lower() for c in order.find_all(exp.Column)}
        for aggregate in nodes[exp.AggFunc]:
            found.aggregated |= {c.name.lower() for c in aggregate.find_all(exp.Column)}
        grouped = {c.name.lower() for group in nodes[exp.Group] for c in group.find_all(exp.Column)}
        found.group_columns |= grouped
        found.group_sets.append(grouped)
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
            like = isinstance(node, (exp.Like, exp.ILike))
            groups = [((lit.is_string, lit.this, like), boundaries(lit, like=like)) for lit in literals]
            values = [v for _, group in groups for v in group]
            if any(isinstance(o, exp.Count) for o in operands):
                sizes = [int(lit.this) for lit in literals if not lit.is_string and lit.this.isdigit()
                         and 0 < int(lit.this) <= MAX_GROUP]
                found.group_sizes.extend(sizes)
                if isinstance(node, exp.EQ):
                    found.equal_sizes.extend(sizes)
            for column in columns:
                found.literals.setdefault(column.name.lower(), []).extend(values)
                told[-1].setdefault(column.name.lower(), {}).update(groups)
            found.pool.extend(values)
    for name, values in found.literals.items():
        found.literals[name] = unique_values(values)
    found.pool = unique_values(found.pool)
    for name in found.literals:
        found.telling_literals[name] = unique_values([
            v for own in told for key, group in own.get(name, {}).items()
            if any(key not in other.get(name, {}) for other in told) for v in group])
    found.group_sizes = sorted(set(found.group_sizes))
    found.differences = {name for name in seen[0] if any(f[name] != seen[0][name] for f in seen[1:])} \
        if seen else set()
    found.differing_columns = {word for name in found.differences for f in seen for item in f[name]
                               if any(item not in other[name] for other in seen if other is not f)
                               for word in _WORD.findall(item)} & found.columns
    return found


def features(tree: exp.Expression, nodes: _Nodes | None = None) -> dict[str, list[str]]:
    """What the profiles aim at, per feature of a query (lower-case SQL, sorted): its COUNTs and other
    aggregates, its joins' sides, the column pairs it equates (join keys), its comparisons with anything else
    (literals, subqueries, aggregates), its ORDER BY keys with their direction, its DISTINCTs, the shape of its
    conditions (AND, OR, NOT), its GROUP BY columns and the columns its projections read; columns without their
    table qualifier, which is only an author's alias. Where
    two queries differ is where a neighbor must tell them apart (:func:`neighbor_numbers` builds the profiles
    aimed there first). ``nodes`` is ``tree``'s :class:`_Nodes` when the caller has it.

    >>> import sqlglot
    >>> features(sqlglot.parse_one("SELECT count(T1.a) FROM t AS T1 WHERE T1.b > 2 ORDER BY 1 DESC"))["comparison"]
    ['b > 2']
    """
    nodes = nodes if nodes is not None else _Nodes(tree)

    def text(node: exp.Expr) -> str:  # without table qualifiers: aliases differ between any two authors
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
        "group": sorted(text(column) for group in nodes[exp.Group] for column in group.find_all(exp.Column)),
        "projection": sorted(text(column) for select in nodes[exp.Select] for projection in select.expressions
                             for column in projection.find_all(exp.Column)),
    }


class _Nodes(dict[Any, list[exp.Expression]]):
    """The nodes of a tree of each of :data:`_KINDS` (a class, or a tuple of classes, as
    :meth:`~sqlglot.exp.Expression.find_all` takes them), each list in ``find_all``'s order (breadth first),
    from one walk of the tree: :func:`hints` and :func:`features` read eleven kinds, and walked the tree once per
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


def _between(node: exp.Expr, top: exp.Expr) -> list[exp.Expr]:
    """The ancestors of ``node`` strictly below ``top`` (a literal inside a subquery is not this comparison's)."""
    chain: list[exp.Expr] = []
    parent = node.parent
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
    return unique_values(values)


def unique_values(values: list[Any]) -> list[Any]:
    """``values`` without repeats, in their first order: a value repeats an earlier one that equals it and is of
    its type (``1``, ``1.0`` and ``True`` are three values, a column may hold each). Looked up by ``(type,
    value)`` in a set, where each value was compared with every earlier one: 45 million comparisons for a
    ``NOT IN`` of 3,000 numbers, and :func:`hints` and every text column's :func:`~.cells.fitted_values` did
    it again (a review's finding). A value that is not equal to itself (NaN) equals no earlier one, and one
    that cannot be hashed is compared with every earlier one, as before.

    >>> unique_values([1, 1.0, True, 1, "a", "a", float("nan"), float("nan")])
    [1, 1.0, True, 'a', nan, nan]
    """
    kept: list[Any] = []
    keys: set[tuple[type, Any]] = set()
    for value in values:
        if value != value:  # NaN: a set would find the same object by identity, which == does not
            kept.append(value)
            continue
        try:
            key = (type(value), value)
            if key in keys:
                continue
            keys.add(key)
        except TypeError:  # unhashable: compared with every earlier value
            if any(value == s and type(value) is type(s) for s in kept):
                continue
        kept.append(value)
    return kept
