"""The first stage of a proof: whether two queries' trees may be compared at all. A proof rests on sqlglot's
tree holding all that SQLite reads in the text (:func:`provable`), on queries that read base tables alone
(:func:`reads_base_tables_only`) and, for the rewrites that change row order or column order, on queries whose
results do not depend on them (:func:`order_free`, :func:`permutable_projection`). Each check answers for one
query: the neighbor search asks :func:`provable` of each before it takes even equal canonical trees as a proof,
and :mod:`.proof` asks the others of both queries."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from sqlcmp_dagster.engine.parsing import (
    plain_text,
    scope_columns,
    scope_sources,
    tokens_of,
)

#: Comparisons whose precedence among themselves sqlglot does not read as SQLite does (SQLite gives =, IN, IS,
#: LIKE, GLOB and BETWEEN one level, left to right, and NOT a lower one; sqlglot binds = looser than the rest).
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.Like, exp.ILike, exp.Glob, exp.In,
                exp.Between, exp.NullSafeEQ, exp.NullSafeNEQ)
#: Tokens that end an operand: a ``+`` after one of them is binary.
_OPERAND_ENDS = frozenset({TokenType.VAR, TokenType.IDENTIFIER, TokenType.NUMBER, TokenType.STRING,
                           TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.NULL, TokenType.TRUE, TokenType.FALSE})


def reads_base_tables_only(tree: exp.Expression, tables: Mapping[str, frozenset[str]]) -> bool:
    """Whether every source ``tree`` reads is one of ``tables`` named plainly (no schema qualifier): no subquery,
    CTE, VALUES, table-valued function or other relation as a source, anywhere in the query.

    >>> import sqlglot
    >>> t = {"t": frozenset({"a"})}
    >>> [reads_base_tables_only(sqlglot.parse_one(sql, read="sqlite"), t) for sql in (
    ...     "SELECT a FROM t WHERE a IN (SELECT a FROM t)", "SELECT x FROM (SELECT a AS x FROM t)",
    ...     "WITH w AS (SELECT a FROM t) SELECT a FROM w", "SELECT a FROM v", "SELECT value FROM t, json_each(t.a)")]
    [True, False, False, False, False]
    """
    if any(True for _ in tree.find_all(exp.CTE, exp.Values, exp.Lateral, exp.Unnest)):
        return False
    for node in tree.find_all(exp.From, exp.Join):
        if not isinstance(node.this, exp.Table):
            return False
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier) or table.args.get("db") or table.args.get("catalog") \
                or table.name.lower() not in tables:
            return False
    return True


def provable(sql: str, ast: exp.Expression, tree: exp.Expression, dialect: str) -> bool:
    """Whether a proof may rest on ``tree``, the canonical tree of ``sql`` (parsed as ``ast``), at all (equal
    canonical trees included): sqlglot's tree must hold all that SQLite reads in the text. It does not when
    comparisons chain without parentheses (:func:`chains_comparisons`), when a COLLATE takes part (SQLite gives
    the left operand's collation precedence, and the canonical form orders ``=`` operands by their text), when
    the text has a unary plus, a CAST or LIKE written as a function (:func:`misread_text`), when a quoted name
    may read a derived column (:func:`derived_name`), or when a nested SELECT refers to an outer one by a
    qualifier (:func:`correlated`).

    >>> import sqlglot
    >>> [provable(sql, sqlglot.parse_one(sql, read="sqlite"), sqlglot.parse_one(sql, read="sqlite"), "sqlite")
    ...  for sql in ("SELECT a FROM t WHERE a = 1", "SELECT a FROM t WHERE +a = '1'",
    ...              "SELECT a FROM t WHERE a = b COLLATE nocase")]
    [True, False, False]
    """
    return not chains_comparisons(tree) and tree.find(exp.Collate) is None and not misread_text(sql, dialect) \
        and not derived_name(tree) and not correlated(ast)


def derived_name(tree: exp.Expression) -> bool:
    """Whether a quoted name may read a column of a derived table: a subquery, CTE or VALUES as a source of the
    SELECT the name is in, or of one around it (a correlated name reads the outer sources; a SELECT that is itself
    a source does not see the sources beside it). SQLite names such a
    column, when it has no alias, by its expression's text as written (``"a+b"``), which the canonical form does
    not keep: ``(SELECT a+b ...)`` and ``(SELECT a + b ...)`` print alike.

    >>> import sqlglot
    >>> [derived_name(sqlglot.parse_one(sql, read="sqlite")) for sql in (
    ...     'SELECT count(*) FROM (SELECT a+b FROM t) WHERE "a+b" > 5', 'SELECT "a" FROM t',
    ...     "SELECT x FROM (SELECT a AS x FROM t)", 'SELECT count(*) FROM (SELECT a FROM t WHERE b = "x")')]
    [True, False, False, False]
    """
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}

    def reads_derived(select: exp.Select) -> bool:
        return any(not isinstance(s, exp.Table) or s.name.lower() in ctes for s in scope_sources(select))

    for column in tree.find_all(exp.Column):
        if not (isinstance(column.this, exp.Identifier) and column.this.args.get("quoted")):
            continue
        scope = column.find_ancestor(exp.Select)
        sees_sources = True
        while scope is not None:
            if sees_sources and reads_derived(scope):
                return True
            outer = scope.find_ancestor(exp.Select)
            step: exp.Expression = scope
            while outer is not None and step.parent is not outer:
                step = step.parent  # type: ignore[assignment]
            sees_sources = outer is None or step.arg_key not in ("from_", "joins")
            scope = outer
    return False


def misread_text(sql: str, dialect: str) -> bool:
    """Whether ``sql``'s text has what sqlglot's tree does not keep as SQLite reads it:

    - a unary ``+`` (``+a = '1'``): sqlglot drops it, but in SQLite it strips the operand's affinity, which
      decides how ``=`` compares a number with text (a ``+`` is unary unless the token before it ends an
      operand);
    - a CAST (``CAST(x AS t)``, ``x::t``): sqlglot prints some type names as others of another affinity in
      SQLite (NUMERIC and DECIMAL as REAL, STRING as TEXT, VARBINARY as BLOB, DATE as ``date()``), and
      ``CAST(s AS NUMERIC) * 100 / n`` divides integers where ``CAST(s AS REAL) * 100 / n`` does not;
    - LIKE or GLOB written as a function (``like('a%', b) || 'x'``), which sqlglot prints as the operator
      without the parentheses SQLite's precedence then needs (a LIKE after a token that ends no operand).

    Text that cannot be tokenized counts as having one; text without ``+``, ``::``, ``cast``, ``like`` or ``glob``
    is not tokenized.

    >>> [misread_text(sql, "sqlite") for sql in ("SELECT a + 1, -b FROM t WHERE x = +1", "SELECT a + 1 FROM t",
    ...     "SELECT CAST(a AS NUMERIC) FROM t", "SELECT like('a%', b) FROM t", "SELECT b LIKE ('a%') FROM t",
    ...     "SELECT b FROM t WHERE b NOT LIKE 'a%'", "SELECT a::REAL FROM t")]
    [True, False, True, True, False, False, True]
    """
    folded = sql.casefold()
    if not any(part in folded for part in ("+", "::", "cast", "like", "glob")):
        return False
    try:
        tokens = tokens_of(sql, dialect)
    except (SqlglotError, RecursionError, ValueError, TypeError):  # what the parse catches of sqlglot's limits
        return True
    kinds = [token.token_type for token in tokens]
    for index, token in enumerate(tokens):
        kind = token.token_type
        before = kinds[index - 1] if index else None
        if kind in (TokenType.LIKE, TokenType.GLOB) and before == TokenType.NOT:  # NOT LIKE: look before the NOT
            before = kinds[index - 2] if index > 1 else None
        cast = kind == TokenType.DCOLON or (kind == TokenType.VAR and token.text.upper() == "CAST"
                                            and index + 1 < len(kinds) and kinds[index + 1] == TokenType.L_PAREN)
        if cast or (kind in (TokenType.PLUS, TokenType.LIKE, TokenType.GLOB) and before not in _OPERAND_ENDS):
            return True
    return False


def correlated(ast: exp.Expression) -> bool:
    """Whether a nested SELECT of ``ast`` (as parsed, before the canonical rewrites) qualifies a column with a
    name its own FROM does not give (``singer.country`` inside ``FROM singer AS T2``): a reference to an outer
    query. The canonical form's unaliasing renames ``T2`` to ``singer`` and then reads that reference as the
    inner table's, so such trees prove nothing.

    >>> import sqlglot
    >>> [correlated(sqlglot.parse_one(sql, read="sqlite")) for sql in (
    ...     "SELECT a FROM s WHERE a > (SELECT avg(T2.a) FROM s AS T2 WHERE T2.c = s.c)",
    ...     "SELECT a FROM s WHERE a > (SELECT avg(s.a) FROM s WHERE s.c = 'x')")]
    [True, False]
    """
    for select in ast.find_all(exp.Select):
        if select.find_ancestor(exp.Select) is None:
            continue
        visible = {source.alias_or_name.lower() for source in scope_sources(select)}
        if any(column.table and column.table.lower() not in visible for column in scope_columns(select)):
            return True
    return False


def chains_comparisons(tree: exp.Expression) -> bool:
    """Whether a comparison has a comparison or a NOT as a direct operand (``x = a IN (1)``, ``'p' = NOT b``,
    ``a LIKE b = 'p'`` written without parentheses), or a NOT is the operand of a unary ``-`` or ``~``
    (``'abc' = -NOT 'a'``). sqlglot's tree of such text is not SQLite's reading of it, and
    its canonical text can equal that of a different query: such queries are not proven here, and the neighbor
    search does not take even equal canonical trees of them as a proof.

    >>> import sqlglot
    >>> [chains_comparisons(sqlglot.parse_one(f"SELECT 1 FROM t WHERE {c}", read="sqlite"))
    ...  for c in ("x = a IN (1)", "'p' = NOT b", "(a IN (1)) = x", "NOT a = 1 AND b LIKE 'x'", "x = -NOT a")]
    [True, True, False, False, True]
    """
    return any(isinstance(operand, (*_COMPARISONS, exp.Not))
               for node in tree.find_all(*_COMPARISONS) for operand in node.iter_expressions()) \
        or any(isinstance(node.this, exp.Not) for node in tree.find_all(exp.Neg, exp.BitwiseNot))


#: The most result columns :func:`permutable_projection` admits: the comparison tries every order of this many
#: columns (5! = 120 = ``comparison.budgets.MAX_PERMUTATIONS`` candidates); of six it would try only some.
MAX_PERMUTED_COLUMNS = 5


def permutable_projection(tree: exp.Expression) -> bool:
    """Whether the result columns of ``tree`` can be put in another order without changing what any of them
    holds, in SQLite: a SELECT (not a set operation, whose operands pair their columns by position) of at most
    :data:`MAX_PERMUTED_COLUMNS` expressions, none of them a ``*`` (its width is the tables'), no two with one
    alias (a name then resolves to the first of them), no ORDER BY or GROUP BY term that is a literal, through
    parentheses, a sign or a COLLATE (SQLite reads an integer there as a result column's position), no window
    (SQLite computes each window in the order of the projection, sorting the rows again for each), and at most
    one MIN or MAX (a bare column takes its value from the row the last of them picked).

    >>> import sqlglot
    >>> [permutable_projection(sqlglot.parse_one(sql, read="sqlite")) for sql in (
    ...     "SELECT count(*), a AS n FROM t GROUP BY a", "SELECT a, b FROM t ORDER BY 1",
    ...     "SELECT a AS n, b AS n FROM t ORDER BY n", "SELECT *, a FROM t", "SELECT a FROM t UNION SELECT b FROM u",
    ...     "SELECT a, b, c, d, e, f FROM t", "SELECT a, b FROM t ORDER BY (1) COLLATE nocase",
    ...     "SELECT row_number() OVER (), a FROM t", "SELECT min(a), max(b), c FROM t")]
    [True, False, False, False, False, False, False, False, False]
    """
    if not isinstance(tree, exp.Select) or len(tree.expressions) > MAX_PERMUTED_COLUMNS:
        return False
    aliases = [e.alias.lower() for e in tree.expressions if e.alias]
    if len(set(aliases)) < len(aliases) or any(e.is_star for e in tree.expressions) \
            or tree.find(exp.Window) is not None or sum(1 for _ in tree.find_all(exp.Min, exp.Max)) > 1:
        return False
    terms = [*(tree.args["order"].expressions if tree.args.get("order") else []),
             *(tree.args["group"].expressions if tree.args.get("group") else [])]
    for term in terms:
        inner = term.this if isinstance(term, exp.Ordered) else term
        while isinstance(inner, (exp.Paren, exp.Collate, exp.Neg)):
            inner = inner.this
        if isinstance(inner, exp.Literal):
            return False
    return True


#: The aggregates whose value does not depend on the order of their rows (a sum of floats does, in its last
#: digits; GROUP_CONCAT in its text).
_ORDERLESS_AGGREGATES = (exp.Count, exp.Min, exp.Max)
#: What makes a result depend on the order rows are read in, or hides a function that may.
_ORDERED = (exp.Order, exp.Limit, exp.Offset, exp.Fetch, exp.Window, exp.Anonymous)


def order_free(tree: exp.Expression) -> bool:
    """Whether the bag of rows ``tree`` returns does not depend on the order its tables' rows are read in, so
    that reading them in another order (another join order) returns the same bag: no ORDER BY, LIMIT, OFFSET or
    window, no function sqlglot does not know (it may be an aggregate such as ``json_group_array``), no
    aggregate but COUNT, MIN and MAX, no ``*`` but ``COUNT(*)``, no subquery (only SELECTs joined by UNION,
    INTERSECT or EXCEPT); and in a SELECT that aggregates, a GROUP BY expression's column or a MIN or MAX only as
    a whole column of the result, nothing else outside a COUNT (:func:`_picked_whole`).

    >>> import sqlglot
    >>> [order_free(sqlglot.parse_one(sql, read="sqlite")) for sql in (
    ...     "SELECT a.x, count(*), max(a.y) FROM a JOIN b ON a.id = b.id GROUP BY a.x",
    ...     "SELECT a.y, count(*) FROM a JOIN b ON a.id = b.id GROUP BY a.x",
    ...     "SELECT max(a.y) / 2 FROM a JOIN b ON a.id = b.id",
    ...     "SELECT a.x FROM a JOIN b ON a.id = b.id LIMIT 1", "SELECT sum(a.x) FROM a JOIN b ON a.id = b.id")]
    [True, False, False, False, False]
    """
    if tree.find(*_ORDERED) is not None:
        return False
    if any(not isinstance(node, _ORDERLESS_AGGREGATES) for node in tree.find_all(exp.AggFunc)):
        return False
    if any(not isinstance(star.parent, exp.Count) for star in tree.find_all(exp.Star)):
        return False
    for select in tree.find_all(exp.Select):
        outer = select.parent
        while isinstance(outer, (exp.SetOperation, exp.Subquery)):
            outer = outer.parent
        if outer is not None:
            return False
        group = select.args.get("group")
        if (group is not None or select.find(exp.AggFunc) is not None) and not _picked_whole(select):
            return False
    return True


def _picked_whole(select: exp.Select) -> bool:
    """Whether the values an aggregating ``select`` picks from one of several rows are only shown, never computed
    with: a GROUP BY column or a MIN or MAX only as a whole column of the result (aliased or not), every other
    column, in the result or in HAVING, under a COUNT. SQLite's 1 and 1.0 are equal, so MIN, MAX and a group's
    key keep whichever of them they read first; shown, they compare equal (the comparison takes 1 for 1.0), but
    ``max(x) / 2`` is 0 against 0.5, and a HAVING on it keeps a group or not."""
    group = select.args.get("group")
    keys = {plain_text(key) for key in group.expressions} if group is not None else set()
    having = select.args.get("having")
    parts = [(part, True) for part in select.expressions] + ([(having.this, False)] if having is not None else [])
    for part, shown in parts:
        value = part.this if shown and isinstance(part, exp.Alias) else part
        if shown and isinstance(value, (exp.Min, exp.Max)) and value.this.find(exp.AggFunc) is None:
            continue
        if shown and isinstance(value, exp.Column) and plain_text(value) in keys:
            continue
        if value.find(exp.Min, exp.Max) is not None or any(
                column.find_ancestor(exp.Count) is None for column in value.find_all(exp.Column)):
            return False
    return True
