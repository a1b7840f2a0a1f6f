"""Layer 2's equivalence form: the canonical tree of a query rewritten, knowing its database's schema, so that
queries that mean the same thing on every database of that schema print alike.

The canonical form (:func:`~sqlcmp_dagster.engine.parsing.canonical_tree`) only undoes formatting. The rules
here undo spellings a model writes every day: each is one small function, in the manner of sqlglot's optimizer
rules, with an example, and each turns a query into one whose permitted results are the same on the case's
dialect (the same bag of rows; with an ORDER BY, the same rows in an order the original also permits), under
SQL's three-valued logic. What is not provably so stays apart (LEFT vs INNER joins, UNION vs UNION ALL, ``>=``
vs ``>``, LIKE vs ``=``, EXCEPT vs NOT IN, ...). tests/test_rewrites.py runs every rule's original and rewritten
query on random databases of one schema (SQLite, DuckDB and PostgreSQL) and requires the same bag.

The schema is a :data:`Catalog` (lower-case table name -> lower-case column names), read from the case's
database by the executions' schema reader; without one (a PostgreSQL case, a result given instead of a database)
the rules that need names resolved (:func:`qualify_columns`, :func:`double_quoted_strings`) are skipped, and a
quoted name on SQLite stays a name.

The tree is never executed by the pipeline (the fix search transplants canonical trees, not these), but every
rule keeps it executable, which is what lets the property test run it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import cast

from sqlglot import exp
from sqlglot.tokens import TokenType

from sqlcmp_dagster.engine.equivalence import default_ascending
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.neighbors.schema import read_schema
from sqlcmp_dagster.engine.parsing import (
    dialect_of,
    plain_text,
    scope_columns,
    scope_sources,
    sort_commutative,
    tick,
    tokens_of,
)

#: Lower-case table name -> lower-case column names of the case's database (its tables of declared columns).
Catalog = Mapping[str, Collection[str]]

#: Names SQLite resolves in every table without declaring them.
_ROWID_NAMES = frozenset({"rowid", "oid", "_rowid_"})
#: The comparisons and their converse (``a < b`` is ``b > a``) and negation (``NOT a < b`` is ``a >= b``).
_CONVERSE: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}
_NEGATION: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LTE, exp.LTE: exp.GT, exp.LT: exp.GTE, exp.GTE: exp.LT, exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}
#: Where a condition's value is read only as true / not true.
_CONDITION_HOLDERS = (exp.Where, exp.Having)
#: What may be evaluated twice or moved without changing its value: no function sqlglot does not know (it may
#: be volatile), no random number, no subquery.
_UNSTABLE = (exp.Anonymous, exp.Rand, exp.Subquery, exp.Select)


def read_catalog(database: ExecutionAdapter, sample_rows: int, timeout_ms: int) -> dict[str, list[str]] | None:
    """The :data:`Catalog` of ``database``, from the schema the neighbor search reads (one read per database
    content, cached with it: ``sample_rows`` is the search's, so that both share one entry): its tables whose
    columns are all declared (a virtual table's hidden columns are not), so that a name no table of the catalog
    has is known to name no column. None on an engine whose schema is not read (PostgreSQL), where it cannot be
    read, or where two tables' names fold to one."""
    if database.dialect not in ("sqlite", "duckdb"):
        return None
    schema = read_schema(database, sample_rows, timeout_ms)
    tables = None if isinstance(schema, str) else schema.plain_tables
    return None if tables is None else {name: sorted(columns) for name, columns in tables.items()}


def equivalence_form(tree: exp.Expr, dialect: str, catalog: Catalog | None = None) -> exp.Expression:
    """A copy of the canonical ``tree`` with every rule applied, in an order where each rule sees the shapes the
    rules before it leave (NOTs pushed before ORs of equalities are gathered, parentheses dropped before chains
    are sorted).

    >>> import sqlglot
    >>> from sqlcmp_dagster.engine.parsing import canonical_tree
    >>> def form(sql): return equivalence_form(canonical_tree(sqlglot.parse_one(sql, read="sqlite"), "sqlite"),
    ...                                        "sqlite", {"t": ["a", "b"]}).sql("sqlite")
    >>> form('SELECT a FROM t WHERE NOT (b <= 3 OR "x" <> a) ORDER BY a ASC LIMIT 2 OFFSET 0')
    "SELECT a FROM t WHERE a = 'x' AND b > 3 ORDER BY a LIMIT 2"
    >>> form("SELECT a FROM t WHERE 3 < b AND a = 'x' ORDER BY 1")
    "SELECT a FROM t WHERE a = 'x' AND b > 3 ORDER BY a"
    """
    tree = tree.copy()
    if catalog is not None:
        tree = qualify_columns(tree, catalog)
        if dialect == "sqlite":
            tree = double_quoted_strings(tree, catalog)
    orient = functools.partial(orient_comparisons, columns_collate=dialect == "sqlite")
    for rule in (inline_single_ctes, zero_offset, order_by_outputs, default_ascending, between_bounds,
                 scalar_subquery_in, orient, push_negations, flatten_connectives, gather_in_lists, orient,
                 distinct_for_group, inner_join_order, flatten_connectives):
        tick(force=True)
        tree = rule(tree)
    tree = identifier_case(tree, dialect)
    # each rule replaces a node by one of sqlglot's concrete nodes (Expr is their abstract base): an Expression
    return sort_commutative(cast(exp.Expression, tree))


def _rewrite_nodes(tree: exp.Expr, types: tuple[type[exp.Expr], ...],
                   rewrite: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """``tree`` with each node of ``types`` replaced by ``rewrite(node)``, bottom-up (children first)."""
    for node in reversed(list(tree.find_all(*types, bfs=False))):
        tick()
        replacement = rewrite(node)
        if replacement is node:
            continue
        if node is tree:
            tree = replacement
        else:
            node.replace(replacement)
    return tree


def _stable(node: exp.Expr | None) -> bool:
    """Whether ``node`` (present) gives the same value each time it is evaluated on one row (:data:`_UNSTABLE`)."""
    return isinstance(node, exp.Expression) and node.find(*_UNSTABLE) is None


def zero_offset(tree: exp.Expr) -> exp.Expr:
    """``OFFSET 0`` dropped: it skips no row.

    >>> import sqlglot
    >>> zero_offset(sqlglot.parse_one("SELECT a FROM t LIMIT 3 OFFSET 0")).sql()
    'SELECT a FROM t LIMIT 3'
    """
    for query in tree.find_all(exp.Select, exp.SetOperation):
        offset = query.args.get("offset")
        value = offset.args.get("expression") if offset is not None else None
        if isinstance(value, exp.Literal) and not value.is_string and value.this.strip() in ("0", "0.0"):
            query.set("offset", None)
    return tree


def order_by_outputs(tree: exp.Expr) -> exp.Expr:
    """``ORDER BY 2`` and ``ORDER BY name_alias`` of a SELECT written as the projected expression they name
    (SQLite, DuckDB and PostgreSQL all read a bare integer as a result column's position and a bare name as a
    result column's alias before a table's column). A projected literal or window is left named by position.

    >>> import sqlglot
    >>> order_by_outputs(sqlglot.parse_one("SELECT a, count(*) AS n FROM t GROUP BY a ORDER BY n DESC, 1")).sql()
    'SELECT a, COUNT(*) AS n FROM t GROUP BY a ORDER BY COUNT(*) DESC, a'
    """
    for select in tree.find_all(exp.Select):
        order = select.args.get("order")
        if order is None:
            continue
        projected = select.expressions
        aliases: dict[str, exp.Expr] = {}
        for e in projected:  # a name given twice reads the first
            if isinstance(e, exp.Alias) and e.alias:
                aliases.setdefault(e.alias.lower(), e.this)
        for ordered in order.expressions:
            key = ordered.this
            target: exp.Expr | None = None
            if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(projected):
                target = projected[int(key.this) - 1].unalias()
            elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
                target = aliases[key.name.lower()]
            if target is not None and not isinstance(target, exp.Literal) and not target.is_star \
                    and target.find(exp.Window) is None and _stable(target):
                ordered.set("this", target.copy())
    return tree


def between_bounds(tree: exp.Expr) -> exp.Expr:
    """``x BETWEEN a AND b`` written as ``x >= a AND x <= b`` (the three dialects define it so), where ``x``
    is evaluated alike twice (:func:`_stable`); ``NOT BETWEEN`` follows by :func:`push_negations`.

    >>> import sqlglot
    >>> between_bounds(sqlglot.parse_one("SELECT a FROM t WHERE a BETWEEN 1 AND 5 AND b = 2")).sql()
    'SELECT a FROM t WHERE (a >= 1 AND a <= 5) AND b = 2'
    """
    def rewrite(node: exp.Expr) -> exp.Expr:
        if node.args.get("symmetric") or not all(_stable(node.args.get(k)) for k in ("this", "low", "high")):
            return node
        value = node.this
        return exp.paren(exp.and_(exp.GTE(this=value.copy(), expression=node.args["low"].copy()),
                                  exp.LTE(this=value.copy(), expression=node.args["high"].copy())), copy=False)

    return _rewrite_nodes(tree, (exp.Between,), rewrite)


def orient_comparisons(tree: exp.Expr, *, columns_collate: bool = False) -> exp.Expr:
    """A comparison with a literal on its left written with the literal on its right (``30 < age`` is
    ``age > 30``), and one of two non-literals with the operand of smaller text first (its converse otherwise),
    unless ``columns_collate`` and both operands may carry a collation (:func:`_collates`): SQLite compares two
    such operands by the left one's (``=`` is ordered by the canonical form already).

    >>> import sqlglot
    >>> orient_comparisons(sqlglot.parse_one("SELECT a FROM t WHERE 30 < age AND b >= a")).sql()
    'SELECT a FROM t WHERE age > 30 AND a <= b'
    """
    def rewrite(node: exp.Expr) -> exp.Expr:
        left, right = node.this, node.expression
        if (not columns_collate or not (_collates(left) and _collates(right))) \
                and _operand_key(right) < _operand_key(left):
            return _CONVERSE[type(node)](this=right, expression=left)
        return node

    return _rewrite_nodes(tree, tuple(_CONVERSE), rewrite)


def _collates(operand: exp.Expr) -> bool:
    """Whether a SQLite operand may carry a collation: a column or a COLLATE (through parentheses and CASTs), or
    a scalar subquery whose value does. A literal, a function's or an operator's value is compared as BINARY.

    >>> import sqlglot
    >>> [_collates(sqlglot.parse_one(sql, read="sqlite")) for sql in ("CAST(a AS TEXT)", "(SELECT max(a) FROM t)",
    ...                                                               "(SELECT a FROM t LIMIT 1)", "a + 1")]
    [True, False, True, False]
    """
    while isinstance(operand, (exp.Paren, exp.Cast)):
        operand = operand.this
    if isinstance(operand, exp.Subquery):
        inner = operand.this
        return not isinstance(inner, exp.Select) or len(inner.expressions) != 1 \
            or _collates(inner.expressions[0].unalias())
    return isinstance(operand, (exp.Column, exp.Collate))


def _operand_key(operand: exp.Expr) -> tuple[bool, str]:
    """Literals after everything else, then the text."""
    return isinstance(operand, exp.Literal), plain_text(operand)


def push_negations(tree: exp.Expr) -> exp.Expr:
    """In a condition (a WHERE, HAVING or ON condition, through AND, OR and parentheses), ``NOT`` pushed through comparisons (``NOT a > b`` is
    ``a <= b``: both are unknown where either side is NULL), through AND and OR by De Morgan's laws (which hold
    in three-valued logic), and ``NOT NOT p`` as ``p`` (only read as true or not true). ``NOT x IN (...)``,
    ``NOT LIKE``, ``IS NOT NULL`` and ``NOT EXISTS`` stay as they are.

    >>> import sqlglot
    >>> push_negations(sqlglot.parse_one("SELECT a FROM t WHERE NOT (a > 1 OR NOT b = 2)")).sql()
    'SELECT a FROM t WHERE (a <= 1 AND b = 2)'
    """
    def negated(node: exp.Expr) -> exp.Expr | None:
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if type(inner) in _NEGATION:
            return _NEGATION[type(inner)](this=inner.this, expression=inner.expression)
        if isinstance(inner, exp.Not):
            operand: exp.Expr = inner.this
            return operand
        if isinstance(inner, exp.Connector):
            dual = exp.Or if isinstance(inner, exp.And) else exp.And
            return exp.paren(dual(this=exp.not_(inner.this, copy=False), expression=exp.not_(inner.expression,
                                                                                              copy=False)), copy=False)
        return None

    def pushed(condition: exp.Expr) -> exp.Expr:
        """``condition`` (read as true or not true) with its NOTs pushed, outermost first."""
        while isinstance(condition, exp.Not):
            tick()
            replacement = negated(condition)
            if replacement is None:
                return condition
            condition = replacement
        if isinstance(condition, (exp.Connector, exp.Paren)):
            for key in ("this", "expression"):
                operand = condition.args.get(key)
                if operand is not None:
                    condition.set(key, pushed(operand))
        return condition

    for holder in list(tree.find_all(exp.Where, exp.Having, exp.Join)):
        key = "on" if isinstance(holder, exp.Join) else "this"
        condition = holder.args.get(key)
        if condition is not None:
            holder.set(key, pushed(condition))
    return tree


def flatten_connectives(tree: exp.Expr) -> exp.Expr:
    """Parentheses dropped where they group nothing: around an AND inside an AND chain (and an OR inside an OR
    chain), around a comparison (or IN, LIKE, IS, ...) that is an operand of AND or OR, around a whole WHERE,
    HAVING or ON condition, and around a column or literal. AND and OR are
    associative in three-valued logic; :func:`~sqlcmp_dagster.engine.parsing.sort_commutative` then orders the
    flat chain.

    >>> import sqlglot
    >>> flatten_connectives(sqlglot.parse_one("SELECT a FROM t WHERE ((a = 1 AND (b = 2)) AND (c = 3 OR d = 4))")).sql()
    'SELECT a FROM t WHERE a = 1 AND b = 2 AND (c = 3 OR d = 4)'
    """
    def rewrite(node: exp.Expr) -> exp.Expr:
        inner: exp.Expr = node.this
        parent = node.parent
        if isinstance(inner, (exp.Column, exp.Literal, exp.Paren)) \
                or isinstance(parent, _CONDITION_HOLDERS) \
                or (isinstance(inner, exp.Predicate) and isinstance(parent, exp.Connector)) \
                or (isinstance(parent, exp.Join) and node.arg_key == "on") \
                or (isinstance(inner, exp.Connector) and type(parent) is type(inner)):
            return inner
        return node

    tree = _rewrite_nodes(tree, (exp.Paren,), rewrite)
    # a chain rebuilt from its flattened operands, so that it nests one way (left-deep) whatever it was
    for chain in list(tree.find_all(exp.Connector)):
        if type(chain.parent) is not type(chain) and chain.parent is not None:
            chain.replace(_chain(type(chain), list(chain.flatten(unnest=False))))
    return tree


def _chain(kind: type[exp.Expr], operands: list[exp.Expr]) -> exp.Expr:
    """``operands`` joined by ``kind`` (AND or OR), left-deep."""
    combined = operands[0]
    for operand in operands[1:]:
        combined = kind(this=combined, expression=operand)
    return combined


def gather_in_lists(tree: exp.Expr) -> exp.Expr:
    """In an OR chain, the equalities and IN lists of literals on one column gathered into one ``IN`` list of
    its distinct values in the order of their text (``x = 1 OR x IN (3, 2)`` is ``x IN (1, 2, 3)``: SQL defines
    the list as that disjunction); in an AND chain, the dual: ``x <> 1 AND x NOT IN (2)`` is
    ``x NOT IN (1, 2)``. Every list of literals is so ordered, and a list of one value is an equality
    (``x IN ('a')`` is ``x = 'a'``).

    >>> import sqlglot
    >>> gather_in_lists(sqlglot.parse_one("SELECT a FROM t WHERE b = 2 OR a = 'y' OR b = 1 OR a IN ('x')")).sql()
    "SELECT a FROM t WHERE b IN (1, 2) OR a IN ('x', 'y')"
    >>> gather_in_lists(sqlglot.parse_one("SELECT a FROM t WHERE b <> 2 AND NOT b IN (1) AND c IN (5)")).sql()
    'SELECT a FROM t WHERE NOT b IN (1, 2) AND c = 5'
    """
    def listed(operand: exp.Expr, negated: bool) -> tuple[exp.Expr, list[exp.Literal]] | None:
        """The column and literals ``operand`` compares, when it is one of the forms gathered."""
        if negated:
            if isinstance(operand, exp.NEQ):
                operand = exp.EQ(this=operand.this, expression=operand.expression)
            elif isinstance(operand, exp.Not):
                operand = operand.this
            else:
                return None
        if isinstance(operand, exp.EQ) and isinstance(operand.expression, exp.Literal) \
                and isinstance(operand.this, exp.Column):
            return operand.this, [operand.expression]
        if isinstance(operand, exp.In) and isinstance(operand.this, exp.Column) and operand.expressions \
                and not any(operand.args.get(k) for k in ("query", "unnest", "field")) \
                and all(isinstance(v, exp.Literal) for v in operand.expressions):
            return operand.this, list(operand.expressions)
        return None

    def gathered(column: exp.Expr, values: list[exp.Literal], negated: bool) -> exp.Expr:
        unique = {_operand_key(v)[1] + ("'" if v.is_string else ""): v for v in values}
        ordered = [unique[k] for k in sorted(unique, key=lambda k: (unique[k].is_string, plain_text(unique[k])))]
        if len(ordered) == 1:
            kind = exp.NEQ if negated else exp.EQ
            return kind(this=column.copy(), expression=ordered[0].copy())
        listing = exp.In(this=column.copy(), expressions=[v.copy() for v in ordered])
        return exp.not_(listing, copy=False) if negated else listing

    for chain in list(tree.find_all(exp.Connector, exp.In)):
        tick()
        if isinstance(chain, exp.In):  # a list outside a chain (a NOT around it included)
            found = listed(chain, False)
            outer = chain.parent
            # an OR chain gathers its lists, an AND chain its negated ones
            if found is None or outer is None or isinstance(outer, exp.Or) \
                    or isinstance(outer, exp.Not) and isinstance(outer.parent, exp.And):
                continue
            if isinstance(outer, exp.Not):
                outer.replace(gathered(*found, negated=True))
            else:
                chain.replace(gathered(*found, negated=False))
            continue
        if chain.parent is None and chain is not tree or type(chain.parent) is type(chain):
            continue
        negated = isinstance(chain, exp.And)
        operands = list(chain.flatten(unnest=False))
        groups: dict[str, list[int]] = {}
        for position, operand in enumerate(operands):
            found = listed(operand, negated)
            if found is not None:
                groups.setdefault(plain_text(found[0]), []).append(position)
        replaced: dict[int, exp.Expr | None] = {}
        for positions in groups.values():
            pieces = [listed(operands[p], negated) for p in positions]
            values = [v for piece in pieces if piece is not None for v in piece[1]]
            column = pieces[0][0]  # type: ignore[index]
            replaced[positions[0]] = gathered(column, values, negated)
            replaced.update({p: None for p in positions[1:]})
        if replaced:
            kept = [replaced.get(p, operand) if p in replaced else operand for p, operand in enumerate(operands)]
            rebuilt = _chain(type(chain), [operand for operand in kept if operand is not None])
            if chain is tree:
                return rebuilt
            chain.replace(rebuilt)
    return tree


def scalar_subquery_in(tree: exp.Expr) -> exp.Expr:
    """``x IN (SELECT max(y) FROM ...)`` written as ``x = (SELECT max(y) FROM ...)``: a SELECT of one aggregate
    without GROUP BY, HAVING, LIMIT or OFFSET returns exactly one row, against which IN and ``=`` agree (NULL
    included); ``NOT IN`` becomes ``<>`` by :func:`push_negations`, which runs after.

    >>> import sqlglot
    >>> scalar_subquery_in(sqlglot.parse_one("SELECT a FROM t WHERE b IN (SELECT max(b) FROM t)")).sql()
    'SELECT a FROM t WHERE b = (SELECT MAX(b) FROM t)'
    """
    def rewrite(node: exp.Expr) -> exp.Expr:
        query = node.args.get("query")
        inner = query.this if isinstance(query, exp.Subquery) else None
        if not isinstance(inner, exp.Select) or node.expressions or len(inner.expressions) != 1 \
                or any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "distinct", "with_")) \
                or not isinstance(inner.expressions[0].unalias(), exp.AggFunc) or inner.find(exp.Window) is not None:
            return node
        return exp.EQ(this=node.this, expression=query)

    return _rewrite_nodes(tree, (exp.In,), rewrite)


def distinct_for_group(tree: exp.Expr) -> exp.Expr:
    """``SELECT a, b ... GROUP BY a, b`` without an aggregate, HAVING or window written as ``SELECT DISTINCT
    a, b ...``: one row per distinct pair either way (NULLs in one group as DISTINCT takes them as one), where
    the keys are exactly the projected expressions and every ORDER BY key is one of them.

    >>> import sqlglot
    >>> distinct_for_group(sqlglot.parse_one("SELECT b, a FROM t WHERE c = 1 GROUP BY a, b")).sql()
    'SELECT DISTINCT b, a FROM t WHERE c = 1'
    """
    for select in list(tree.find_all(exp.Select)):
        group = select.args.get("group")
        if group is None or select.args.get("having") or select.args.get("distinct") \
                or any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "totals", "all")) \
                or select.find(exp.AggFunc, exp.Window, exp.Star) is not None:
            continue
        projected = {plain_text(e.unalias()) for e in select.expressions}
        keys = {plain_text(k) for k in group.expressions}
        order = select.args.get("order")
        ordered = {plain_text(o.this) for o in order.expressions} if order is not None else set()
        if projected != keys or not ordered <= projected or not all(_stable(e) for e in select.expressions):
            continue
        select.set("group", None)
        select.set("distinct", exp.Distinct())
    return tree


def inline_single_ctes(tree: exp.Expr) -> exp.Expr:
    """A non-recursive CTE that the query reads once, and whose name nothing else in the query takes, written
    as a derived table of that name where it is read: the rows are the same (each engine may inline it so). One
    with a column list (SQLite has no column list for a derived table) or a MATERIALIZED hint is kept.

    >>> import sqlglot
    >>> inline_single_ctes(sqlglot.parse_one("WITH c AS (SELECT a FROM t) SELECT a FROM c WHERE a > 1")).sql()
    'SELECT a FROM (SELECT a FROM t) AS c WHERE a > 1'
    """
    for with_ in list(tree.find_all(exp.With)):
        query = with_.parent
        if with_.args.get("recursive") or query is None:
            continue
        for cte in list(with_.expressions):
            name = cte.alias_or_name.lower()
            readers = [t for t in query.find_all(exp.Table)
                       if t.name.lower() == name and not t.args.get("db") and not t.args.get("catalog")]
            named = [c for c in tree.find_all(exp.CTE) if c.alias_or_name.lower() == name]
            later = with_.expressions[with_.expressions.index(cte) + 1:]
            if len(readers) != 1 or len(named) != 1 or any(t.name.lower() == name for c in later
                                                            for t in c.find_all(exp.Table)) \
                    or readers[0].find_ancestor(exp.CTE) is not None or not isinstance(cte.this, exp.Query) \
                    or cte.args["alias"].columns or cte.args.get("materialized") is not None:
                continue
            reader = readers[0]
            alias = cte.args["alias"].copy()
            if reader.alias:
                alias.set("this", exp.to_identifier(reader.alias))
            reader.replace(exp.Subquery(this=cte.this.copy(), alias=alias))
            cte.pop()
        if not with_.expressions:
            with_.pop()
    return tree


def inner_join_order(tree: exp.Expr) -> exp.Expr:
    """A SELECT whose joins are all inner (``JOIN ... ON``, comma and CROSS joins) written with its sources in
    the order of their text, each joined ``ON`` the conditions (its own ONs' and its WHERE's conjuncts) that
    qualify columns of it and of sources before it, all of two sources at least; the other conjuncts stay in
    WHERE. An inner join's rows are those of the sources' product meeting every condition, whichever comes first
    and wherever each condition is written. A SELECT that projects ``*`` (its columns' order is the sources'),
    that names a source twice, or that has another join (LEFT, NATURAL, USING, ...) is left as it is.

    >>> import sqlglot
    >>> inner_join_order(sqlglot.parse_one("SELECT s.n FROM t, s WHERE t.id = s.tid AND s.x = 1")).sql()
    'SELECT s.n FROM s JOIN t ON t.id = s.tid WHERE s.x = 1'
    """
    for select in list(tree.find_all(exp.Select)):
        joins = select.args.get("joins") or []
        source = select.args.get("from_")
        if not joins or source is None or not all(_inner(join) for join in joins) \
                or any(e.find(exp.Star) is not None and e.find(exp.Count) is None for e in select.expressions):
            continue
        sources = sorted([source.this, *(join.this for join in joins)], key=plain_text)
        names = [s.alias_or_name.lower() for s in sources]
        if len(set(names)) < len(names) or not all(isinstance(s, (exp.Table, exp.Subquery)) and s.alias_or_name
                                                   for s in sources):
            continue
        tick()
        conditions = [join.args["on"] for join in joins if join.args.get("on") is not None]
        where = select.args.get("where")
        conjuncts = [part for condition in [*conditions, *([where.this] if where is not None else [])]
                     for part in _conjuncts(condition)]
        ons: list[list[exp.Expr]] = [[] for _ in sources]
        rest: list[exp.Expr] = []
        for conjunct in conjuncts:
            qualifiers = {c.table.lower() for c in conjunct.find_all(exp.Column)}
            if conjunct.find(*_UNSTABLE) is None and len(qualifiers) >= 2 and qualifiers <= set(names) \
                    and all(c.table for c in conjunct.find_all(exp.Column)):
                ons[max(names.index(q) for q in qualifiers)].append(conjunct)
            else:
                rest.append(conjunct)
        select.set("from_", exp.From(this=sources[0]))
        select.set("joins", [exp.Join(this=s, on=exp.and_(*on, copy=False)) if on else exp.Join(this=s, kind="CROSS")
                             for s, on in zip(sources[1:], ons[1:], strict=True)])
        select.set("where", exp.Where(this=exp.and_(*rest, copy=False)) if rest else None)
    return tree


def _inner(join: exp.Join) -> bool:
    """Whether ``join`` is an inner join with at most an ON condition (no side, USING or NATURAL)."""
    return join.args.get("kind") in (None, "", "INNER", "CROSS") \
        and all(key in ("this", "kind", "on") for key, value in join.args.items() if value)


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The operands of ``condition``'s AND chain, through parentheses."""
    inner = condition.unnest()
    if isinstance(inner, exp.And):
        return [part for operand in (inner.this, inner.expression) for part in _conjuncts(operand)]
    return [inner]


def qualify_columns(tree: exp.Expr, catalog: Catalog) -> exp.Expr:
    """In a SELECT of two sources or more, all base tables of ``catalog``, each unqualified column that exactly
    one of them has, and that no alias of the query names, qualified with that source's name (``name`` is
    ``singer.name`` in ``FROM singer JOIN concert``); the canonical form already drops the qualifier of a SELECT
    of one table.

    >>> import sqlglot
    >>> qualify_columns(sqlglot.parse_one("SELECT name, cid FROM singer JOIN concert ON id = sid"),
    ...                 {"singer": ["id", "name"], "concert": ["cid", "sid", "name"]}).sql()
    'SELECT name, concert.cid FROM singer JOIN concert ON singer.id = concert.sid'
    """
    aliases = {node.alias.lower() for node in tree.find_all(exp.Alias) if node.alias}
    for select in list(tree.find_all(exp.Select)):
        sources = scope_sources(select)
        if len(sources) < 2 or not all(isinstance(s, exp.Table) and s.name.lower() in catalog
                                       and not s.args.get("db") for s in sources):
            continue
        for column in scope_columns(select):
            name = column.name.lower()
            if column.table or not isinstance(column.this, exp.Identifier) or name in aliases:
                continue
            owners = [s for s in sources if name in catalog[s.name.lower()]]
            if len(owners) == 1:
                column.set("table", exp.to_identifier(owners[0].alias_or_name))
    return tree


def double_quoted_strings(tree: exp.Expr, catalog: Catalog) -> exp.Expr:
    """SQLite: an unqualified double-quoted name that no column in its scope has (the tables its SELECT and
    the SELECTs around it read), that no alias of the query takes and that is no row id, written as the string
    literal SQLite reads it as; one that names a column stays a column, in lower case (SQLite matches names
    without regard to case). Where a SELECT in scope reads anything but a table of ``catalog`` (a subquery, a
    CTE, a view), the name is kept as it is: what it names is not known here.

    >>> import sqlglot
    >>> double_quoted_strings(sqlglot.parse_one('SELECT "Name" FROM pets WHERE "dog" = pettype AND x = "kind"'),
    ...                       {"pets": ["name", "pettype"], "kinds": ["kind"]}).sql()
    "SELECT name FROM pets WHERE 'dog' = pettype AND x = 'kind'"
    """
    introduced = {node.alias.lower() for node in tree.find_all(exp.Alias) if node.alias}
    for alias in tree.find_all(exp.TableAlias):
        introduced |= {i.name.lower() for i in (alias.this, *alias.columns) if isinstance(i, exp.Identifier)}
    for column in list(tree.find_all(exp.Column)):
        identifier = column.this
        if column.table or not isinstance(identifier, exp.Identifier) or not identifier.args.get("quoted"):
            continue
        name = identifier.name.lower()
        names = _scope_names(column, catalog)
        if name in introduced or name in _ROWID_NAMES or names is None:
            continue
        if name in names:
            _write_folded(identifier, name, "sqlite")
            continue
        replacement = exp.Literal.string(identifier.name)
        if column is tree:
            return replacement
        column.replace(replacement)
    return tree


def _scope_names(column: exp.Column, catalog: Catalog) -> set[str] | None:
    """The column names ``column`` may resolve to: those of the tables its SELECT and the SELECTs around it
    read; None where one of them reads anything but a table of ``catalog``."""
    names: set[str] = set()
    for select in _enclosing_selects(column):
        for source in scope_sources(select):
            if not isinstance(source, exp.Table) or source.args.get("db") or source.name.lower() not in catalog:
                return None
            names.update(catalog[source.name.lower()])
    return names


def _enclosing_selects(node: exp.Expr) -> Iterator[exp.Select]:
    select = node.find_ancestor(exp.Select)
    while select is not None:
        yield select
        select = select.find_ancestor(exp.Select)


def identifier_case(tree: exp.Expr, dialect: str) -> exp.Expr:
    """Quoted identifiers written as the dialect matches them: SQLite and DuckDB match names without regard to
    (ASCII) case, quoted or not, so a quoted name is lower-cased; PostgreSQL folds unquoted names to lower case
    and keeps quoted ones, so a quoted name already in lower case is the unquoted one. A name is unquoted where
    it reads as a plain name (no keyword, no space). On SQLite an unqualified quoted column name is left to
    :func:`double_quoted_strings`: it may be a string.

    >>> import sqlglot
    >>> identifier_case(sqlglot.parse_one('SELECT "Name", t."order" FROM "Pets" AS t'), "sqlite").sql()
    'SELECT "Name", t."order" FROM pets AS t'
    >>> identifier_case(sqlglot.parse_one('SELECT "Name", "age" FROM t', read="postgres"), "postgres").sql("postgres")
    'SELECT "Name", age FROM t'
    """
    for identifier in list(tree.find_all(exp.Identifier)):
        if not identifier.args.get("quoted") or not identifier.name.isascii():
            continue
        parent = identifier.parent
        if dialect == "sqlite" and isinstance(parent, exp.Column) and identifier.arg_key == "this" \
                and not parent.table:
            continue
        if dialect in ("sqlite", "duckdb"):
            _write_folded(identifier, identifier.name.lower(), dialect)
        elif identifier.name == identifier.name.lower():
            _write_folded(identifier, identifier.name, dialect)
    return tree


def _write_folded(identifier: exp.Identifier, name: str, dialect: str) -> None:
    """``identifier`` set to ``name``, quoted only where it does not read as a plain name (:func:`_plain_name`)."""
    identifier.set("this", name)
    identifier.set("quoted", not _plain_name(name, dialect))


def _plain_name(name: str, dialect: str) -> bool:
    """Whether ``name`` reads, unquoted, as one plain name in ``dialect`` (not a keyword, nothing to quote)."""
    tokens = tokens_of(name, dialect)
    return len(tokens) == 1 and tokens[0].token_type == TokenType.VAR and tokens[0].text == name \
        and name.upper() not in _keywords(dialect)


@functools.cache
def _keywords(dialect: str) -> frozenset[str]:
    """Every word that starts one of ``dialect``'s keywords (``ORDER`` of ``ORDER BY`` included)."""
    return frozenset(key.split()[0] for key in dialect_of(dialect).tokenizer_class.KEYWORDS)
