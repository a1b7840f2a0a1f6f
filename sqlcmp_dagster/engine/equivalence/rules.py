"""The second stage of a proof: the rewrites, each of which turns a query into one that returns the same
result on every database of its schema (the package's docstring lists them and says where each applies). Each
edits a tree in place, hands it back, and names what it changed in ``edits``, so that a proof whose rewrites
changed nothing is known without printing the trees."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from sqlglot import exp

from sqlcmp_dagster.engine.parsing import plain_text, scope_tables, tick

#: Names SQLite resolves in every table without declaring them.
_ROWID_NAMES = frozenset({"rowid", "oid", "_rowid_"})
#: Nodes :func:`in_lists` may copy for one query (each listed value gets a copy of the IN's left side); past
#: it the query is not proven, so that a hostile list cannot make the rewrite quadratic in time and memory.
MAX_COPIED_NODES = 10_000
#: A tree a rule edits in place and hands back.
_Tree = TypeVar("_Tree", bound=exp.Expr)
#: Where an IN (or a NOT IN, through its NOTs) is a whole condition, so that its rewrite as ORs cannot change what
#: binds to what.
_CONDITION_PARENTS = (exp.Where, exp.Having, exp.And, exp.Or, exp.Paren)


class NotProven(Exception):
    """A rewrite met what it does not handle (:func:`in_lists` past :data:`MAX_COPIED_NODES`): the queries are
    not proven equal."""


def inner_joins(tree: exp.Expression, tables: Mapping[str, frozenset[str]],
                edits: list[str] | None = None) -> exp.Expression:
    """``tree`` with the inner joins of each SELECT written as one list of its tables, in the order of their
    text, their ON conditions and its WHERE as one AND of their conjuncts, and each unqualified column that is a
    column of exactly one of its tables (``tables``: lower-case name -> lower-case column names) and no alias of
    the query qualified with that table, in place. A SELECT with any other join (LEFT, NATURAL, USING, ...), or
    with a table twice, is left as it is. The rows are the same bag; their order may not be (see
    :func:`order_free`). Each SELECT rewritten is named in ``edits``.

    >>> import sqlglot
    >>> inner_joins(sqlglot.parse_one("SELECT x FROM b JOIN a ON a.id = b.id WHERE (y = 1 AND a.z = 2)"),
    ...             {"a": frozenset({"id", "z"}), "b": frozenset({"id", "x", "y"})}).sql()
    'SELECT b.x FROM a CROSS JOIN b WHERE a.id = b.id AND b.y = 1 AND a.z = 2'
    """
    introduced = _aliases(tree)
    for select in list(tree.find_all(exp.Select)):
        joins = select.args.get("joins") or []
        source = select.args.get("from_")
        if not joins or source is None or not all(_inner(join) for join in joins) \
                or not isinstance(source.this, exp.Table):
            continue
        sources = sorted([source.this, *(join.this for join in joins)], key=plain_text)
        names = [table.name.lower() for table in sources]
        if len(set(names)) < len(names) or not all(name in tables for name in names):
            continue
        tick()
        conditions = [join.args["on"] for join in joins if join.args.get("on") is not None]
        where = select.args.get("where")
        if where is not None:
            conditions.append(where.this)
        select.set("from_", exp.From(this=sources[0]))
        select.set("joins", [exp.Join(this=table, kind="CROSS") for table in sources[1:]])
        conjuncts = [part for condition in conditions for part in _conjuncts(condition)]
        if conjuncts:
            select.set("where", exp.Where(this=exp.and_(*conjuncts, copy=False)))
        for column in select.find_all(exp.Column):
            name = column.name.lower()
            owners = [table for table in sources if name in tables[table.name.lower()]]
            if not column.table and isinstance(column.this, exp.Identifier) and len(owners) == 1 \
                    and name not in introduced:
                owner = owners[0]
                column.set("table", (owner.args.get("alias") or owner).this.copy())
        if edits is not None:
            edits.append("JOIN")
    return tree


def _aliases(tree: exp.Expression) -> set[str]:
    """The names (lower case) ``tree`` gives its expressions with AS: a name SQLite may resolve to one of them."""
    return {node.alias.lower() for node in tree.find_all(exp.Alias) if node.alias}


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    """The operands of ``condition``'s AND chain, through parentheses (``(a AND b) AND c``: a, b, c)."""
    inner = condition.unnest()
    if isinstance(inner, exp.And):
        return [part for operand in (inner.this, inner.expression) for part in _conjuncts(operand)]
    return [condition]


def set_operands(tree: exp.Expression, edits: list[str] | None = None) -> exp.Expression:
    """``tree`` with the two SELECTs of each UNION, UNION ALL or INTERSECT in the order of their text, in place,
    where both project the same expressions (the left one names the result's columns). EXCEPT is left as it
    is. The rows are the same bag; their order may not be. Each operation reordered is named in ``edits``.

    >>> import sqlglot
    >>> set_operands(sqlglot.parse_one("SELECT a FROM t WHERE b = 2 INTERSECT SELECT a FROM t WHERE b = 1")).sql()
    'SELECT a FROM t WHERE b = 1 INTERSECT SELECT a FROM t WHERE b = 2'
    """
    for operation in list(tree.find_all(exp.Union, exp.Intersect)):
        left, right = operation.this, operation.expression
        if not isinstance(left, exp.Select) or not isinstance(right, exp.Select) \
                or any(operation.args.get(key) for key in ("by_name", "side", "kind", "on")) \
                or [plain_text(e) for e in left.expressions] != [plain_text(e) for e in right.expressions]:
            continue
        if plain_text(right) < plain_text(left):
            operation.set("this", right)
            operation.set("expression", left)
            if edits is not None:
                edits.append("INTERSECT" if isinstance(operation, exp.Intersect) else "UNION")
    return tree


def _inner(join: exp.Join) -> bool:
    """Whether ``join`` is an inner join of a table, with at most an ON condition (no side, USING or NATURAL)."""
    return isinstance(join.this, exp.Table) and join.args.get("kind") in (None, "", "INNER", "CROSS") \
        and all(key in ("this", "kind", "on") for key, value in join.args.items() if value)


def default_ascending(tree: _Tree, edits: list[str] | None = None) -> _Tree:
    """``tree`` with every explicit ``ASC`` dropped, in place (sqlglot keeps ``desc=False`` for it and prints it);
    each one dropped is named in ``edits``.

    >>> import sqlglot
    >>> default_ascending(sqlglot.parse_one("SELECT a FROM t ORDER BY a ASC, b DESC")).sql()
    'SELECT a FROM t ORDER BY a, b DESC'
    """
    for ordered in tree.find_all(exp.Ordered):
        if ordered.args.get("desc") is False:
            ordered.set("desc", None)
            if edits is not None:
                edits.append("ASC")
    return tree


def quoted_strings(tree: exp.Expression, columns: frozenset[str], edits: list[str] | None = None) -> exp.Expression:
    """``tree`` with each unqualified double-quoted name that is no column of the database (``columns``, lower
    case), no alias or column name the query itself introduces and no row id replaced by the string literal
    SQLite reads it as, in place. A name a query introduces is kept whoever introduces it: the rule is
    conservative, never the other way round. Each name replaced is named in ``edits``.

    >>> import sqlglot
    >>> quoted_strings(sqlglot.parse_one('SELECT "n" AS x FROM t WHERE "Aberdeen" = city AND "x" = 1'),
    ...                frozenset({"city", "n"})).sql()
    'SELECT "n" AS x FROM t WHERE \\'Aberdeen\\' = city AND "x" = 1'
    """
    introduced = _aliases(tree)
    for alias in tree.find_all(exp.TableAlias):
        introduced |= {identifier.name.lower() for identifier in (alias.this, *alias.columns) if identifier}
    known = columns | introduced | _ROWID_NAMES
    for column in list(tree.find_all(exp.Column)):
        name = column.this
        tick()
        if not column.table and isinstance(name, exp.Identifier) and name.args.get("quoted") \
                and name.name.lower() not in known:
            replacement = exp.Literal.string(name.name)
            if edits is not None:
                edits.append(f'"{name.name}"')
            if column is tree:
                return replacement
            column.replace(replacement)
    return tree


#: A text SQLite's numeric affinity turns into the integer it spells, and its text affinity spells that integer
#: as: digits without a sign or a leading zero, well inside a 64-bit integer.
_WHOLE_NUMBER = re.compile(r"0|[1-9][0-9]{0,14}")
#: The comparisons before which SQLite applies an operand's affinity to the other operand.
_AFFINITY_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def numeric_text(tree: exp.Expression, tables: Mapping[str, frozenset[str]], affine: Mapping[str, frozenset[str]],
                 edits: list[str] | None = None) -> exp.Expression:
    """``tree`` with each string literal that spells a whole number (:data:`_WHOLE_NUMBER`) and is compared
    (=, <>, <, <=, >, >=) with a column written as that number, in place, where the column's name is no alias of
    the query and every table it may name (:func:`_visible_tables`; ``tables``) that has a column of that name
    gives it an affinity (``affine``). SQLite applies the column's affinity to a literal before comparing (a
    literal has none): a numeric affinity turns ``'2014'`` into 2014, and a text affinity turns 2014 into
    ``'2014'``, so both spellings compare the same values on every row. A column without affinity (BLOB or no
    declared type) compares the text as text, and so does a name no visible table has (a double-quoted one is a
    string to SQLite then): they are left as they are, and so is every column of a query that joins with USING
    or NATURAL (a FULL join's shared column is a ``coalesce()``, which has no affinity). Each literal rewritten
    is named in ``edits``.

    >>> import sqlglot
    >>> t, typed = {"t": frozenset({"y", "b"})}, {"t": frozenset({"y"})}
    >>> numeric_text(sqlglot.parse_one("SELECT 1 FROM t WHERE y = '2014' AND b = '7' AND y > '03'"), t, typed).sql()
    "SELECT 1 FROM t WHERE y = 2014 AND b = '7' AND y > '03'"
    """
    if any(join.args.get("using") or join.args.get("method") for join in tree.find_all(exp.Join)):
        return tree
    introduced = _aliases(tree)
    for node in list(tree.find_all(*_AFFINITY_COMPARISONS)):
        tick()
        for column, literal in ((node.this, node.expression), (node.expression, node.this)):
            if not (isinstance(column, exp.Column) and isinstance(column.this, exp.Identifier)
                    and isinstance(literal, exp.Literal) and literal.is_string
                    and _WHOLE_NUMBER.fullmatch(literal.this)):
                continue
            name = column.name.lower()
            owners = [table for table in _visible_tables(column) if name in tables.get(table, ())]
            if owners and name not in introduced and all(name in affine.get(table, ()) for table in owners):
                literal.replace(exp.Literal.number(literal.this))
                if edits is not None:
                    edits.append(f"'{literal.this}'")
    return tree


def _visible_tables(column: exp.Column) -> set[str]:
    """The tables (lower-case names) whose columns ``column`` may name: those its own SELECT and the SELECTs
    around it read, never those of a sibling (another operand of a UNION, a subquery beside it)."""
    visible: set[str] = set()
    select = column.find_ancestor(exp.Select)
    while select is not None:
        visible |= {table.name.lower() for table in scope_tables(select)}
        select = select.find_ancestor(exp.Select)
    return visible


def in_lists(tree: exp.Expression, edits: list[str] | None = None) -> exp.Expression:
    """``tree`` with each ``x IN (v1, v2, ...)`` of a column ``x`` (evaluated once either way) whose values are
    all literals, and which is a whole condition (under WHERE, HAVING, AND, OR or parentheses, through any NOT),
    written as ``x = v1 OR x = v2 ...``, in place (parenthesized unless it is a whole WHERE or HAVING
    condition). SQLite defines the list form as that disjunction, with values that carry no affinity; literals
    carry none either. Elsewhere (``x = a IN (1)``) sqlglot's precedence for IN is not SQLite's, and the IN is
    left as it is. Raises :class:`NotProven` past :data:`MAX_COPIED_NODES` copied nodes. Each IN rewritten is
    named in ``edits``.

    >>> import sqlglot
    >>> in_lists(sqlglot.parse_one("SELECT 1 FROM t WHERE a IN (1, 'x') AND b IN (SELECT c FROM u)")).sql()
    "SELECT 1 FROM t WHERE (a = 1 OR a = 'x') AND b IN (SELECT c FROM u)"
    >>> in_lists(sqlglot.parse_one("SELECT 1 FROM t WHERE x = a IN (1)")).sql()
    'SELECT 1 FROM t WHERE x = a IN (1)'
    """
    copied = 0
    for node in list(tree.find_all(exp.In)):
        values = node.expressions
        condition = node.parent
        while isinstance(condition, exp.Not):
            condition = condition.parent
        if not values or node.args.get("query") is not None or node.args.get("unnest") is not None \
                or node.args.get("field") is not None or not all(isinstance(v, exp.Literal) for v in values) \
                or not isinstance(node.this, exp.Column) or not isinstance(condition, _CONDITION_PARENTS):
            continue
        copied += len(values) * sum(1 for _ in node.this.walk())
        if copied > MAX_COPIED_NODES:
            raise NotProven()
        disjunction: exp.Expression = exp.EQ(this=node.this.copy(), expression=values[0].copy())
        for value in values[1:]:
            tick()
            disjunction = exp.Or(this=disjunction, expression=exp.EQ(this=node.this.copy(), expression=value.copy()))
        if len(values) > 1 and not isinstance(node.parent, (exp.Where, exp.Having)):
            disjunction = exp.Paren(this=disjunction)
        node.replace(disjunction)
        if edits is not None:
            edits.append("IN")
    return tree
