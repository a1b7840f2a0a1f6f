"""The equivalence form's rules on a query's clauses: a zero OFFSET dropped, ORDER BY keys written as the
outputs they name, a GROUP BY without aggregates as DISTINCT, a CTE read once inlined, inner joins in one order.
Each keeps the bag of rows (and, with an ORDER BY, an order the original permits)."""

from __future__ import annotations

from sqlglot import exp

from sqlcmp_dagster.engine.parsing import plain_text, tick
from sqlcmp_dagster.engine.rewrites.nodes import UNSTABLE, stable


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
                    and target.find(exp.Window) is None and stable(target):
                ordered.set("this", target.copy())
    return tree


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
        if projected != keys or not ordered <= projected or not all(stable(e) for e in select.expressions):
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
            if conjunct.find(*UNSTABLE) is None and len(qualifiers) >= 2 and qualifiers <= set(names) \
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
