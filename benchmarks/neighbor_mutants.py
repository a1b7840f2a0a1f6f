"""Semantic mutants and equivalence-preserving rewrites of SQL queries, for the neighbor-database figures.

Each mutation kind is one function from a parsed query to a mutated copy (or None when the kind does not apply);
each one changes the query's meaning on some database the schema allows, except where :func:`equivalent`
proves otherwise from the schema (COUNT over a NOT NULL column, DISTINCT over a key). Each rewrite keeps the
meaning on every database: sqlglot's optimizer, ``IN`` to ``EXISTS`` and back, ``BETWEEN`` to two comparisons
and back, the two tables of an inner join commuted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from sqlglot import exp, parse_one
from sqlglot.optimizer import optimize

Mutation = Callable[[exp.Expression, "SchemaInfo"], exp.Expression | None]


class SchemaInfo:
    """Columns, NOT NULL columns, primary-key columns and declared foreign keys of a SQLite database, by
    lower-case table name. A primary-key column counts as NOT NULL, as in standard SQL (SQLite alone lets a
    column of a composite primary key hold NULL, a documented legacy quirk)."""

    def __init__(self, path: Path) -> None:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.columns: dict[str, list[str]] = {}
        self.types: dict[str, dict[str, str]] = {}
        self.not_null: dict[str, set[str]] = {}
        self.keys: dict[str, set[str]] = {}
        self.foreign_keys: dict[str, set[tuple[str, str, str]]] = {}  # (column, parent table, parent column)
        for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                          "AND name NOT LIKE 'sqlite_%'"):
            info = connection.execute(f'PRAGMA table_info("{name}")').fetchall()
            lower = name.lower()
            self.columns[lower] = [row[1] for row in info]
            self.types[lower] = {row[1].lower(): (row[2] or "TEXT").upper() for row in info}
            self.not_null[lower] = {row[1].lower() for row in info if row[3]}
            self.keys[lower] = {row[1].lower() for row in info if row[5]}
            self.not_null[lower] |= self.keys[lower]
            self.foreign_keys[lower] = {(row[3].lower(), row[2].lower(), (row[4] or "").lower())
                                        for row in connection.execute(f'PRAGMA foreign_key_list("{name}")')}
        connection.close()

    def mapping(self) -> dict[str, dict[str, str]]:
        """The schema as sqlglot's optimizer takes it."""
        return {table: {c: self.types[table][c.lower()] for c in columns} for table, columns in self.columns.items()}


def _first(tree: exp.Expression, kind: type[exp.Expression] | tuple[type[exp.Expression], ...],
           where: Callable[[exp.Expression], bool] = lambda _: True) -> exp.Expression | None:
    return next((node for node in tree.find_all(kind) if where(node)), None)


def boundary(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """``>`` to ``>=`` (and ``<`` to ``<=``, and back): a row on the boundary tells them apart."""
    flip = {exp.GT: exp.GTE, exp.GTE: exp.GT, exp.LT: exp.LTE, exp.LTE: exp.LT}
    tree = tree.copy()
    node = _first(tree, tuple(flip))
    if node is None:
        return None
    node.replace(flip[type(node)](this=node.this.copy(), expression=node.expression.copy()))
    return tree


def drop_distinct(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """SELECT DISTINCT to SELECT: duplicates tell them apart."""
    tree = tree.copy()
    select = _first(tree, exp.Select, lambda s: s.args.get("distinct") is not None)
    if select is None:
        return None
    select.set("distinct", None)
    return tree


def count_column(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """COUNT(*) to COUNT(col) for a column of the counted table: a NULL in it tells them apart (unless the
    column is NOT NULL, then they are equivalent)."""
    tree = tree.copy()
    count = _first(tree, exp.Count, lambda c: isinstance(c.this, exp.Star))
    select = count.find_ancestor(exp.Select) if count is not None else None
    table = _first(select, exp.Table) if select is not None else None
    if count is None or table is None or table.name.lower() not in schema.columns:
        return None
    columns = schema.columns[table.name.lower()]
    nullable = [c for c in columns if c.lower() not in schema.not_null[table.name.lower()]
                and c.lower() not in schema.keys[table.name.lower()]]
    column = (nullable or columns)[-1]
    count.set("this", exp.column(column, table=table.alias_or_name))
    return tree


def and_to_or(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """The first AND of a WHERE to OR."""
    tree = tree.copy()
    node = _first(tree, exp.And, lambda n: n.find_ancestor(exp.Where) is not None)
    if node is None:
        return None
    node.replace(exp.Or(this=node.this.copy(), expression=node.expression.copy()))
    return tree


def inner_to_left(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """An inner JOIN to LEFT JOIN: a row without a match tells them apart."""
    tree = tree.copy()
    join = _first(tree, exp.Join, lambda j: not j.side and j.kind in ("", "INNER") and j.args.get("on"))
    if join is None:
        return None
    join.set("side", "LEFT")
    join.set("kind", None)
    return tree


def drop_conjunct(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """``WHERE a AND b`` to ``WHERE a``."""
    tree = tree.copy()
    node = _first(tree, exp.And, lambda n: n.find_ancestor(exp.Where) is not None)
    if node is None:
        return None
    node.replace(node.this.copy())
    return tree


def flip_order(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """ASC to DESC (and back) on the first key of an ORDER BY under LIMIT."""
    tree = tree.copy()
    select = _first(tree, exp.Select, lambda s: s.args.get("limit") is not None and s.args.get("order"))
    if select is None:
        return None
    key = select.args["order"].expressions[0]
    key.set("desc", not key.args.get("desc"))
    return tree


def max_to_min(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """MAX to MIN (and back)."""
    tree = tree.copy()
    node = _first(tree, (exp.Max, exp.Min))
    if node is None:
        return None
    node.replace((exp.Min if isinstance(node, exp.Max) else exp.Max)(this=node.this.copy()))
    return tree


def wrong_join_key(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """One column of the first join condition replaced by another column of the same table."""
    tree = tree.copy()
    join = _first(tree, exp.Join, lambda j: isinstance(j.args.get("on"), exp.EQ))
    if join is None:
        return None
    condition = join.args["on"]
    column = condition.expression if isinstance(condition.expression, exp.Column) else None
    select = join.find_ancestor(exp.Select)
    tables = {t.alias_or_name.lower(): t.name.lower() for t in select.find_all(exp.Table)} if select else {}
    table = tables.get(column.table.lower()) if column is not None and column.table else None
    if column is None or table not in schema.columns:
        return None
    others = [c for c in schema.columns[table] if c.lower() != column.name.lower()]
    if not others:
        return None
    column.set("this", exp.to_identifier(others[0]))
    return tree


def add_distinct_over_key(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """DISTINCT added to a one-table query that projects that table's primary key: provably equivalent."""
    tree = tree.copy()
    if not isinstance(tree, exp.Select) or tree.args.get("distinct") or tree.args.get("joins") \
            or tree.args.get("group") or any(isinstance(p, exp.Star) or p.find(exp.AggFunc) for p in tree.expressions):
        return None
    table = _first(tree, exp.Table)
    if table is None or len(list(tree.find_all(exp.Table))) != 1 or table.name.lower() not in schema.keys:
        return None
    projected = {p.name.lower() for p in tree.expressions if isinstance(p, exp.Column)}
    if not schema.keys[table.name.lower()] or not schema.keys[table.name.lower()] <= projected:
        return None
    tree.set("distinct", exp.Distinct())
    return tree


MUTATIONS: dict[str, Mutation] = {
    "boundary": boundary, "drop_distinct": drop_distinct, "count_column": count_column, "and_to_or": and_to_or,
    "inner_to_left": inner_to_left, "drop_conjunct": drop_conjunct, "flip_order": flip_order,
    "max_to_min": max_to_min, "wrong_join_key": wrong_join_key, "distinct_over_key": add_distinct_over_key,
}


def equivalent(kind: str, mutant: exp.Expression, schema: SchemaInfo, gold: exp.Expression | None = None) \
        -> str | None:
    """Why the mutant is provably equivalent to its gold query under the schema's declared constraints (a rule
    of this list, printed by the benchmark), None when no rule proves it:

    * DISTINCT over a projected primary key;
    * DISTINCT dropped where duplicates cannot show: in an operand of UNION, INTERSECT or EXCEPT (without ALL,
      which remove duplicates themselves) or in the subquery of IN or EXISTS;
    * COUNT over a column that is NOT NULL (or a primary-key column), or that a WHERE conjunct or an inner
      join's ON rejects NULL in;
    * a LEFT JOIN whose right table is then filtered by a null-rejecting predicate (a comparison, or an OR of
      comparisons, in a WHERE conjunct naming a right-table column, unqualified ones resolved through the
      schema; or the ON of a later inner join); whose ON follows a declared foreign key from a NOT NULL column
      to the joined table (every left row has its partner); whose SELECT is one row of aggregates over the
      right table's columns only (SUM, AVG, MIN, MAX, COUNT(col) ignore the NULLs an unmatched row brings, and
      give NULL or 0 on no rows either way); or that is grouped by the left table's primary key under a HAVING
      that rejects a one-row group (``COUNT(*) > k`` with k >= 1, ``>= k`` or ``= k`` with k >= 2): an
      unmatched left row is a group of its own, of one row, which the HAVING drops; or whose SELECT projects
      only right-table columns under INTERSECT (or as EXCEPT's right operand) against an operand without outer
      joins that projects a NOT NULL column: the all-NULL rows it adds meet nothing there;
    * MAX to MIN where every group holds one row (one table whose primary key is covered by the GROUP BY
      columns and the WHERE's equalities with literals) or the aggregated column is a GROUP BY column."""
    if kind == "distinct_over_key":
        return "DISTINCT over a projected primary key"
    if kind == "drop_distinct" and gold is not None:
        return _duplicates_cannot_show(gold)
    if kind == "inner_to_left":
        if _left_join_null_rejected(mutant, schema):
            return "LEFT JOIN whose right table a later predicate filters by a null-rejecting comparison"
        if _left_join_follows_key(mutant, schema):
            return "LEFT JOIN along a declared NOT NULL foreign key: every left row has its partner"
        if _left_join_aggregated_away(mutant):
            return "LEFT JOIN under one row of aggregates over the right table only"
        if _left_join_grouped_away(mutant, schema):
            return "LEFT JOIN grouped by the left primary key under a HAVING that drops one-row groups"
        if _left_join_set_away(mutant, schema):
            return "LEFT JOIN projecting only right-table columns, under INTERSECT or EXCEPT with an operand " \
                   "that never yields an all-NULL row"
    if kind == "count_column":
        count = _first(mutant, exp.Count, lambda c: isinstance(c.this, exp.Column))
        select = count.find_ancestor(exp.Select) if count is not None else None
        table = _first(select, exp.Table) if select is not None else None
        if count is not None and table is not None:
            if count.this.name.lower() in schema.not_null.get(table.name.lower(), set()):
                return "COUNT over a NOT NULL (or primary-key) column"
            if _null_rejected(select, count.this):
                return "COUNT over a column a WHERE conjunct or an inner join rejects NULL in"
    if kind == "max_to_min":
        return _one_row_groups(mutant, schema)
    return None


def _duplicates_cannot_show(gold: exp.Expression) -> str | None:
    select = _first(gold, exp.Select, lambda s: s.args.get("distinct") is not None)
    parent = select.parent if select is not None else None
    while isinstance(parent, exp.Subquery):
        parent = parent.parent
    if isinstance(parent, (exp.Union, exp.Intersect, exp.Except)) and parent.args.get("distinct", True):
        return "DISTINCT dropped in an operand of a set operation that removes duplicates itself"
    if isinstance(parent, (exp.In, exp.Exists)):
        return "DISTINCT dropped in the subquery of IN or EXISTS"
    return None


def _one_row_groups(mutant: exp.Expression, schema: SchemaInfo) -> str | None:
    node = _first(mutant, (exp.Max, exp.Min))
    select = node.find_ancestor(exp.Select) if node is not None else None
    if select is None or select.args.get("joins") or len(list(select.find_all(exp.Table))) != 1:
        return None
    table = _first(select, exp.Table).name.lower()
    group = select.args.get("group")
    grouped = {c.name.lower() for c in group.find_all(exp.Column)} if group is not None else set()
    if isinstance(node.this, exp.Column) and node.this.name.lower() in grouped:
        return "MAX/MIN of a GROUP BY column: one value per group"
    where = select.args.get("where")
    columns = {c.lower() for c in schema.columns.get(table, [])}
    fixed = {c.this.name.lower() for c in (where.this.flatten() if where is not None and isinstance(where.this, exp.And)
                                            else [where.this] if where is not None else [])
             if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and _constant(c.expression, columns)}
    key = schema.keys.get(table, set())
    if key and key <= grouped | fixed:
        return "MAX/MIN over groups of one row: GROUP BY and WHERE equalities cover the primary key"
    return None


def _constant(node: exp.Expression, columns: set[str]) -> bool:
    """A literal, or a double-quoted name that is no column (``"Spanish"``, which SQLite reads as a string)."""
    return isinstance(node, exp.Literal) or isinstance(node, exp.Column) and not node.table \
        and bool(node.this.args.get("quoted")) and node.name.lower() not in columns


def _left_join_set_away(tree: exp.Expression, schema: SchemaInfo) -> bool:
    """A LEFT JOIN whose SELECT projects only columns of its right table is an operand of INTERSECT (either
    side) or the right operand of EXCEPT, and the other operand has no outer join and projects a NOT NULL column
    somewhere: the rows an unmatched left row adds are all NULL, and the set operation compares them with rows
    of the other operand, none of which is all NULL, so they change nothing."""
    join = _first(tree, exp.Join, lambda j: j.side == "LEFT")
    select = join.find_ancestor(exp.Select) if join is not None else None
    operand: exp.Expression | None = select
    while operand is not None and isinstance(operand.parent, exp.Subquery):
        operand = operand.parent
    parent = operand.parent if operand is not None else None
    if select is None or not isinstance(parent, (exp.Intersect, exp.Except)) or \
            (isinstance(parent, exp.Except) and parent.this is operand):
        return False
    right = join.this.alias_or_name.lower()
    if not all(isinstance(p, exp.Column) and p.table.lower() == right for p in select.expressions):
        return False
    other = parent.expression if parent.this is operand else parent.this
    other = other.unnest() if isinstance(other, exp.Subquery) else other
    if not isinstance(other, exp.Select) or any(j.side for j in other.args.get("joins") or []):
        return False
    aliases = {t.alias_or_name.lower(): t.name.lower() for t in other.find_all(exp.Table)}
    only = next(iter(aliases.values())) if len(set(aliases.values())) == 1 else None
    for projection in other.expressions:
        if isinstance(projection, exp.Column):
            table = aliases.get(projection.table.lower()) if projection.table else only
            if table is not None and projection.name.lower() in schema.not_null.get(table, set()):
                return True
    return False


def _left_join_grouped_away(tree: exp.Expression, schema: SchemaInfo) -> bool:
    join = _first(tree, exp.Join, lambda j: j.side == "LEFT")
    select = join.find_ancestor(exp.Select) if join is not None else None
    having, group = (select.args.get("having"), select.args.get("group")) if select is not None else (None, None)
    if having is None or group is None:
        return False
    left = select.args["from_"].this
    if not isinstance(left, exp.Table) or not schema.keys.get(left.name.lower()):
        return False
    grouped = {c.name.lower() for c in group.expressions if isinstance(c, exp.Column)
               and (not c.table or c.table.lower() == left.alias_or_name.lower())}
    if not schema.keys[left.name.lower()] <= grouped:
        return False
    conditions = list(having.this.flatten()) if isinstance(having.this, exp.And) else [having.this]
    least = {exp.GT: 1, exp.GTE: 2, exp.EQ: 2}
    return any(type(c) in least and isinstance(c.this, exp.Count) and isinstance(c.this.this, exp.Star)
               and isinstance(c.expression, exp.Literal) and not c.expression.is_string
               and float(c.expression.this) >= least[type(c)] for c in conditions)


_NULL_REJECTING = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.In, exp.Between)


def _rejects_null(condition: exp.Expression, column: exp.Column, one_table: bool) -> bool:
    """Whether ``condition`` is false or unknown whenever ``column`` is NULL: a comparison naming it (outside
    any IS, COALESCE, IFNULL or CASE; unqualified only where ``one_table`` is read), a conjunction with such a
    part, a disjunction of such parts."""
    if isinstance(condition, exp.Paren):
        return _rejects_null(condition.this, column, one_table)
    if isinstance(condition, exp.And):
        return _rejects_null(condition.this, column, one_table) or \
            _rejects_null(condition.expression, column, one_table)
    if isinstance(condition, exp.Or):
        return _rejects_null(condition.this, column, one_table) and \
            _rejects_null(condition.expression, column, one_table)
    if not isinstance(condition, _NULL_REJECTING) or condition.find(exp.Is, exp.Coalesce, exp.Case, exp.Anonymous):
        return False
    operands = [condition.this] if isinstance(condition, (exp.In, exp.Between)) else \
        [condition.this, condition.expression]
    return any(isinstance(o, exp.Column) and o.name.lower() == column.name.lower()
               and (o.table.lower() == column.table.lower() or one_table and not o.table) for o in operands)


def _null_rejected(select: exp.Select, column: exp.Column) -> bool:
    """Whether ``select``'s WHERE, or the ON of one of its inner joins, rejects rows where ``column`` is NULL
    (no outer join anywhere in it, so no NULL is brought back after the filter)."""
    joins = select.args.get("joins") or []
    if any(j.side for j in joins):
        return False
    where = select.args.get("where")
    conditions = [where.this] if where is not None else []
    conditions += [j.args["on"] for j in joins if j.args.get("on") is not None]
    return any(_rejects_null(c, column, not joins) for c in conditions)


def _left_join_follows_key(tree: exp.Expression, schema: SchemaInfo) -> bool:
    join = _first(tree, exp.Join, lambda j: j.side == "LEFT")
    select = join.find_ancestor(exp.Select) if join is not None else None
    on = join.args.get("on") if join is not None else None
    if select is None or not isinstance(on, exp.EQ) or not isinstance(join.this, exp.Table):
        return False
    joins = select.args.get("joins") or []
    if any(j.side for j in joins[:joins.index(join)]):
        return False
    aliases = {t.alias_or_name.lower(): t.name.lower() for t in select.find_all(exp.Table)}
    right = join.this.alias_or_name.lower()
    sides = [on.this, on.expression]
    if not all(isinstance(c, exp.Column) and c.table for c in sides):
        return False
    inner = [c for c in sides if c.table.lower() == right]
    outer = [c for c in sides if c.table.lower() != right]
    if len(inner) != 1 or len(outer) != 1 or aliases.get(outer[0].table.lower()) is None:
        return False
    child, parent = aliases[outer[0].table.lower()], aliases[right]
    column = outer[0].name.lower()
    return column in schema.not_null.get(child, set()) and \
        (column, parent, inner[0].name.lower()) in schema.foreign_keys.get(child, set())


def _left_join_aggregated_away(tree: exp.Expression) -> bool:
    join = _first(tree, exp.Join, lambda j: j.side == "LEFT")
    select = join.find_ancestor(exp.Select) if join is not None else None
    if select is None or select.args.get("group") or select.args.get("having") or select.args.get("distinct"):
        return False
    right = join.this.alias_or_name.lower()
    aggregates = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count)
    for projection in select.expressions:
        value = projection.this if isinstance(projection, exp.Alias) else projection
        if not isinstance(value, aggregates) or isinstance(value.this, exp.Star) or value.find(exp.Distinct) \
                or not all(c.table.lower() == right for c in value.find_all(exp.Column)):
            return False
    return True


def _left_join_null_rejected(tree: exp.Expression, schema: SchemaInfo) -> bool:
    join = _first(tree, exp.Join, lambda j: j.side == "LEFT")
    select = join.find_ancestor(exp.Select) if join is not None else None
    if join is None or select is None:
        return False
    right = join.this.alias_or_name.lower()
    right_table = join.this.name.lower() if isinstance(join.this, exp.Table) else None
    sources = [select.args["from_"].this, *(j.this for j in select.args.get("joins") or [])]
    others = {t.name.lower() for t in sources if isinstance(t, exp.Table) and t is not join.this}

    def on_right(column: exp.Column) -> bool:
        """A column of the right table: qualified with its alias, or unqualified and of no other table."""
        if column.table:
            return column.table.lower() == right
        name = column.name.lower()
        return right_table is not None and name in {c.lower() for c in schema.columns.get(right_table, [])} \
            and not any(name in {c.lower() for c in schema.columns.get(t, [])} for t in others)

    where = select.args.get("where")
    conjuncts = list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And) else \
        ([where.this] if where is not None else [])
    joins = select.args.get("joins") or []
    later = joins[joins.index(join) + 1:] if join in joins else []
    conjuncts += [j.args["on"] for j in later if not j.side and j.args.get("on") is not None]
    return any(_rejects_right(c, on_right) for c in conjuncts)


def _rejects_right(condition: exp.Expression, on_right: Callable[[exp.Column], bool]) -> bool:
    """Whether ``condition`` is false or unknown on a row whose right-table columns are all NULL: a comparison
    naming one (outside IS, COALESCE, CASE), or an OR whose every part is such a comparison."""
    if isinstance(condition, exp.Paren):
        return _rejects_right(condition.this, on_right)
    if isinstance(condition, exp.Or):
        return _rejects_right(condition.this, on_right) and _rejects_right(condition.expression, on_right)
    return isinstance(condition, _NULL_REJECTING) and condition.find(exp.Is, exp.Coalesce, exp.Case) is None \
        and any(on_right(c) for c in condition.find_all(exp.Column))


def optimized(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """sqlglot's optimizer output for the query (qualified, simplified, subqueries unnested...). A
    double-quoted name that is no column of the database (Spider's ``name = "JetBlue Airways"``) is the string
    SQLite reads it as; sqlglot reads it as a column, which the optimizer cannot resolve, so it is made a string
    literal first (the only change that lets the optimizer take the 213 Spider dev gold queries it refused)."""
    known = {c.lower() for columns in schema.columns.values() for c in columns}
    tree = tree.copy()
    for column in list(tree.find_all(exp.Column)):
        if not column.table and isinstance(column.this, exp.Identifier) and column.this.quoted \
                and column.name.lower() not in known:
            column.replace(exp.Literal.string(column.name))
    try:
        return optimize(tree, schema=schema.mapping(), dialect="sqlite")
    except Exception:  # the optimizer does not handle every query: that query has no such rewrite
        return None


def in_to_exists(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """``x IN (SELECT y FROM t WHERE c)`` in a WHERE, not negated, to ``EXISTS (SELECT 1 FROM t WHERE c AND
    t.y = x)`` (outer column qualified with its table)."""
    tree = tree.copy()
    node = _first(tree, exp.In, lambda n: n.args.get("query") is not None and n.find_ancestor(exp.Not) is None
                  and n.find_ancestor(exp.Where) is not None and isinstance(n.this, exp.Column))
    if node is None:
        return None
    inner = node.args["query"].this if isinstance(node.args["query"], exp.Subquery) else node.args["query"]
    outer = node.find_ancestor(exp.Select)
    if not isinstance(inner, exp.Select) or outer is None or outer.args.get("joins") or inner.args.get("joins") \
            or len(inner.expressions) != 1 or inner.args.get("group") or inner.args.get("limit"):
        return None
    outer_table, inner_table = _first(outer, exp.Table), _first(inner, exp.Table)
    if outer_table is None or inner_table is None or outer_table.name.lower() == inner_table.name.lower():
        return None
    column = node.this.copy()
    if not column.table:
        column.set("table", exp.to_identifier(outer_table.alias_or_name))
    selected = inner.expressions[0]
    selected = selected.this if isinstance(selected, exp.Alias) else selected
    if isinstance(selected, exp.Column) and not selected.table:
        selected = exp.column(selected.name, table=inner_table.alias_or_name)
    exists_query = inner.copy()
    exists_query.set("expressions", [exp.Literal.number(1)])
    exists_query.set("distinct", None)
    exists_query = exists_query.where(exp.EQ(this=selected.copy(), expression=column), copy=False)
    node.replace(exp.Exists(this=exists_query))
    return tree


def between_to_comparisons(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """``x BETWEEN a AND b`` to ``x >= a AND x <= b``."""
    tree = tree.copy()
    node = _first(tree, exp.Between)
    if node is None:
        return None
    node.replace(exp.paren(exp.and_(exp.GTE(this=node.this.copy(), expression=node.args["low"].copy()),
                                    exp.LTE(this=node.this.copy(), expression=node.args["high"].copy()))))
    return tree


def exists_to_in(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """``EXISTS (SELECT ... FROM t WHERE c AND t.y = o.x)`` to ``o.x IN (SELECT t.y FROM t WHERE c)``, the
    inverse of :func:`in_to_exists`: only an EXISTS under AND/OR alone in a WHERE (not negated: there a NULL from
    IN is the false EXISTS gives, which NOT would turn into a difference), over one table without GROUP BY,
    LIMIT or aggregate, correlated by exactly one equality between its own column and an outer one."""
    tree = tree.copy()
    node = _first(tree, exp.Exists, lambda n: _in_where_under_and_or(n))
    inner = node.this if node is not None else None
    if not isinstance(inner, exp.Select) or inner.args.get("joins") or inner.args.get("group") \
            or inner.args.get("limit") or inner.args.get("having") or inner.find(exp.AggFunc) \
            or inner.args.get("where") is None:
        return None
    table = _first(inner, exp.Table)
    own = {table.alias_or_name.lower(), table.name.lower()} if table is not None else set()
    conjuncts = list(inner.args["where"].this.flatten()) if isinstance(inner.args["where"].this, exp.And) \
        else [inner.args["where"].this]
    links = [c for c in conjuncts if isinstance(c, exp.EQ) and all(isinstance(s, exp.Column) and s.table
                                                                    for s in (c.this, c.expression))
             and len({c.this.table.lower() in own, c.expression.table.lower() in own}) == 2]
    if len(links) != 1 or any(c is not links[0] and any(col.table.lower() not in own and col.table
                                                        for col in c.find_all(exp.Column)) for c in conjuncts):
        return None
    link = links[0]
    selected, outer = (link.this, link.expression) if link.this.table.lower() in own else (link.expression, link.this)
    rest = [c.copy() for c in conjuncts if c is not link]
    query = inner.copy()
    query.set("expressions", [selected.copy()])
    query.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
    node.replace(exp.In(this=outer.copy(), query=exp.Subquery(this=query)))
    return tree


def _in_where_under_and_or(node: exp.Expression) -> bool:
    parent = node.parent
    while isinstance(parent, (exp.And, exp.Or, exp.Paren)):
        parent = parent.parent
    return isinstance(parent, exp.Where)


def comparisons_to_between(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """``x >= a AND x <= b`` (in either order, among other conjuncts) to ``x BETWEEN a AND b``, the inverse of
    :func:`between_to_comparisons` (SQLite defines BETWEEN as exactly those two comparisons)."""
    tree = tree.copy()
    for conjunction in tree.find_all(exp.And):
        if isinstance(conjunction.parent, exp.And):
            continue
        conjuncts = list(conjunction.flatten())
        low = next((c for c in conjuncts if isinstance(c, exp.GTE)), None)
        high = next((c for c in conjuncts if isinstance(c, exp.LTE) and low is not None and c.this == low.this), None)
        if low is None or high is None:
            continue
        between = exp.Between(this=low.this.copy(), low=low.expression.copy(), high=high.expression.copy())
        conjunction.replace(exp.and_(*[between if c is low else c.copy() for c in conjuncts if c is not high]))
        return tree
    return None


def commute_join(tree: exp.Expression, schema: SchemaInfo) -> exp.Expression | None:
    """``FROM a JOIN b ON c`` to ``FROM b JOIN a ON c`` (one inner join, an explicit projection)."""
    tree = tree.copy()
    if not isinstance(tree, exp.Select) or len(tree.args.get("joins") or []) != 1 \
            or any(isinstance(p, exp.Star) or p.find(exp.Star) and not p.find(exp.Count) for p in tree.expressions):
        return None
    join = tree.args["joins"][0]
    if join.side or join.kind not in ("", "INNER", None) or not join.args.get("on"):
        return None
    first = tree.args["from_"].this
    second = join.this
    first_copy, second_copy = first.copy(), second.copy()
    first.replace(second_copy)
    second.replace(first_copy)
    return tree


REWRITES: dict[str, Mutation] = {
    "itself": lambda tree, schema: tree.copy(), "optimizer": optimized, "in_to_exists": in_to_exists,
    "between": between_to_comparisons, "commuted_join": commute_join,
    "exists_to_in": exists_to_in, "comparisons_to_between": comparisons_to_between,
}
#: Rewrites whose input the gold never has (no Spider dev gold query uses EXISTS or ``x >= a AND x <= b``):
#: their expected query is the gold rewritten the other way first, so each direction is checked.
EXPECTED_FIRST: dict[str, Mutation] = {"exists_to_in": in_to_exists, "comparisons_to_between": between_to_comparisons}


def gold_queries(spider: Path) -> list[tuple[str, str]]:
    """Spider dev's gold queries as ``(sql, db_id)``, in order."""
    lines = (spider / "dev_gold.sql").read_text(encoding="utf-8").splitlines()
    return [(line.rsplit("\t", 1)[0], line.rsplit("\t", 1)[1]) for line in lines if line.strip()]


def variants(spider: Path, table: dict[str, Mutation]) -> list[tuple[int, str, str, str, str, str | None]]:
    """``(gold index, kind, db_id, gold sql, variant sql, why it is provably equivalent or None)`` for every
    gold query and every kind of ``table`` that applies (a rewrite always is; a mutant when
    :func:`equivalent` proves it)."""
    schemas: dict[str, SchemaInfo] = {}
    out = []
    for index, (sql, db) in enumerate(gold_queries(spider)):
        if db not in schemas:
            schemas[db] = SchemaInfo(spider / "database" / db / f"{db}.sqlite")
        try:
            tree = parse_one(sql, dialect="sqlite")
        except Exception:
            continue
        for kind, change in table.items():
            first = EXPECTED_FIRST.get(kind) if table is REWRITES else None
            expected = first(tree, schemas[db]) if first is not None else tree
            changed = change(expected, schemas[db]) if expected is not None else None
            if changed is not None:
                out.append((index, kind, db, expected.sql(dialect="sqlite") if first is not None else sql,
                            changed.sql(dialect="sqlite"), "an equivalence-preserving rewrite" if table is REWRITES
                            else equivalent(kind, changed, schemas[db], tree)))
    return out
