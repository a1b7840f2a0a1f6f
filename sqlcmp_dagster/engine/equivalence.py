"""Equivalence beyond the canonical form: rewrites that keep a query's meaning on its database, applied to both
queries of a pass before their canonical texts are compared again.

The neighbor search (:mod:`~sqlcmp_dagster.engine.neighbors`) asks whether a pass is an accident of the rows. When
no database with the case's schema can tell the two queries apart, the answer is known without building one, and
the search is skipped (``robust_by_structure``). Equal canonical trees prove it; so do trees that become equal
under the rewrites here, each of which turns a query into one that returns the same result on every database
with this schema, in the same order, so that the proof stays sound for every comparison mode:

- :func:`default_ascending`: ``ORDER BY x ASC`` is ``ORDER BY x`` (ascending is the default, with the same NULL
  placement);
- :func:`quoted_strings` (SQLite): a double-quoted name that resolves to no column, alias or row id is the string
  SQLite reads it as (``WHERE name = "Aberdeen"``, the commonest spelling in Spider's gold queries). Both queries
  ran on this schema, and every neighbor has the same schema, so the name resolves the same way on all of them;
- :func:`in_lists` (SQLite): ``x IN (1, 'a')`` is ``x = 1 OR x = 'a'`` for a column ``x`` when every listed
  value is a literal (SQLite's own definition: the listed values carry no affinity, as literals never do);
- :func:`numeric_text` (SQLite): ``year = '2014'`` is ``year = 2014`` for a column with an affinity, of a table
  the column's SELECT can see, in a query that joins without USING or NATURAL (SQLite turns the text into the
  number before it compares with a numeric column, and the number into the text with a text column).

Two more rewrites keep the rows but not their order, and are applied only where the comparison ignores row order
(``order-insensitive``, which a case's ``auto`` mode resolves to when the expected query has no top-level ORDER
BY) and nothing in either query depends on the order rows are read in (:func:`order_free`):

- :func:`inner_joins`: ``FROM a JOIN b ON c WHERE w`` is ``FROM a, b WHERE c AND w``, its tables in one order
  (an inner join's rows are those of the cross product that meet every condition, whichever table comes first),
  and an unqualified column of exactly one of the tables is qualified with it;
- :func:`set_operands`: ``A INTERSECT B`` is ``B INTERSECT A`` (and ``UNION`` alike) where both project the
  same columns, so that either names the result's columns.

Where, besides, the comparison aligns columns by the values they hold (neither by position nor by name), the
result columns of a SQLite SELECT are compared in one order (:func:`permutable_projection`): ``SELECT b, a`` is
``SELECT a, b`` but for the order of its result columns (no plan depends on it: the same rows are read in the same
order; windows and a second MIN or MAX, which do depend on it, are not reordered), so it returns the same rows
with their columns swapped, and the comparison tries every order of up to
:data:`MAX_PERMUTED_COLUMNS` columns that it cannot tell apart by their values (``comparison.budgets.MAX_PERMUTATIONS``
candidates), so it finds the one that pairs every row on any database whose results its cell budget covers (the
neighbors' always are; past that budget it says so in a warning).

The rewrites are applied only to queries that read base tables alone (:func:`reads_base_tables_only`: no
subquery, CTE, VALUES or table-valued function as a source, no view, no table with generated or hidden columns,
no two tables whose names fold to one key here). There the names a query can resolve are the columns of the
database's tables, its own aliases and the row id, all known here, and no name is derived from an expression's
text (SQLite names an unaliased column of a derived table by its text, which a rewrite would change). Queries
that chain comparisons without parentheses (``x = a IN (1)``, ``'p' = NOT b``) are not proven: sqlglot does not
read their precedence as SQLite does, so their canonical text can equal another query's. An IN list is rewritten
only where the IN is a whole condition (under WHERE, HAVING, AND, OR or parentheses, through any NOT). Every
rewrite is bounded (:data:`MAX_COPIED_NODES`) and looks at the deadline; a query beyond either, or one sqlglot
cannot rewrite, is not proven (the search decides). Helper reviews reproduced wrong proofs against earlier
versions of these limits (four so far); tests/test_neighbors.py keeps each reproduction.

Nothing here changes ``normalized_sql`` or the structural scores: the rewrites serve only this proof.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from sqlcmp_dagster.engine.parsing import RewriteCut, scope_columns, scope_sources, scope_tables, tick, \
    clocked_rewrites, plain_text, sort_commutative, sql_text, tokens_of

#: Names SQLite resolves in every table without declaring them.
_ROWID_NAMES = frozenset({"rowid", "oid", "_rowid_"})
#: Nodes :func:`in_lists` may copy for one query (each listed value gets a copy of the IN's left side); past
#: it the query is not proven, so that a hostile list cannot make the rewrite quadratic in time and memory.
MAX_COPIED_NODES = 10_000
#: A tree a rule edits in place and hands back.
_Tree = TypeVar("_Tree", bound=exp.Expr)
#: Comparisons whose precedence among themselves sqlglot does not read as SQLite does (SQLite gives =, IN, IS,
#: LIKE, GLOB and BETWEEN one level, left to right, and NOT a lower one; sqlglot binds = looser than the rest).
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.Like, exp.ILike, exp.Glob, exp.In,
                exp.Between, exp.NullSafeEQ, exp.NullSafeNEQ)
#: Tokens that end an operand: a ``+`` after one of them is binary.
_OPERAND_ENDS = frozenset({TokenType.VAR, TokenType.IDENTIFIER, TokenType.NUMBER, TokenType.STRING,
                           TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.NULL, TokenType.TRUE, TokenType.FALSE})
#: Where an IN (or a NOT IN, through its NOTs) is a whole condition, so that its rewrite as ORs cannot change what
#: binds to what.
_CONDITION_PARENTS = (exp.Where, exp.Having, exp.And, exp.Or, exp.Paren)


class _NotProven(Exception):
    """A rewrite met what it does not handle: the queries are not proven equal."""


def proven_equivalent(actual: exp.Expression, expected: exp.Expression, dialect: str,
                      tables: Mapping[str, frozenset[str]], *, deadline: float, unordered: bool = False,
                      columns_by_value: bool = False, affine: Mapping[str, frozenset[str]] | None = None) -> bool:
    """Whether the canonical trees ``actual`` and ``expected`` (read only; the rewrites work on copies) have
    equal text once rewritten, on a database whose base tables are ``tables`` (lower-case name -> lower-case
    column names, :attr:`~sqlcmp_dagster.engine.neighbors.schema.Schema.plain_tables`). Both queries must read
    only those tables (:func:`reads_base_tables_only`) and chain no comparisons (:func:`chains_comparisons`).
    The rewrites and the re-ordering of operands look at ``deadline`` (a ``time.monotonic()`` instant) as they
    go: past it, the answer is False (the search decides instead). When no rewrite changes either tree the
    answer is False without printing them: equal canonical trees are a proof of their own, the caller's. With
    ``unordered`` (the results are compared as bags), :func:`inner_joins` and :func:`set_operands` are applied
    too where both queries are :func:`order_free`; on SQLite, with ``unordered`` and ``columns_by_value`` (the
    comparison aligns columns by their values), the result columns are compared in one order where both queries'
    projections are :func:`permutable_projection` (DuckDB reads ``ORDER BY ALL`` and ``#1`` by position). With
    ``affine`` (the columns SQLite gives an affinity,
    :attr:`~sqlcmp_dagster.engine.neighbors.schema.Schema.affine_columns`), :func:`numeric_text` is applied too.

    >>> import sqlglot
    >>> from sqlcmp_dagster.engine.parsing import canonical_tree
    >>> def tree(sql): return canonical_tree(sqlglot.parse_one(sql, read="sqlite"), "sqlite")
    >>> t = {"t": frozenset({"a", "b"})}
    >>> proven_equivalent(tree('SELECT a FROM t WHERE "x" = b ORDER BY a ASC'),
    ...                   tree("SELECT a FROM t WHERE b = 'x' ORDER BY a"), "sqlite", t, deadline=9e99)
    True
    >>> proven_equivalent(tree('SELECT a FROM t WHERE "b" = b'), tree("SELECT a FROM t WHERE b = 'b'"), "sqlite",
    ...                   t, deadline=9e99)
    False
    """
    if not all(reads_base_tables_only(tree, tables) and not chains_comparisons(tree) for tree in (actual, expected)):
        return False
    edits: list[str] = []
    try:
        with clocked_rewrites(deadline):
            joins = unordered and all(order_free(tree) for tree in (actual, expected))
            rewritten = [_rewritten(tree.copy(), dialect, tables, edits, joins=joins, affine=affine)
                         for tree in (actual, expected)]
            columns_sorted = dialect == "sqlite" and unordered and columns_by_value \
                and all(map(permutable_projection, rewritten))
            if not edits and not columns_sorted:  # the texts would be the canonical texts: nothing is proven
                return False
            texts = [proof_text(tree, dialect, columns_sorted=columns_sorted) for tree in rewritten]
    except (RewriteCut, _NotProven, SqlglotError, RecursionError):
        return False
    return texts[0] == texts[1]


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


def proof_text(tree: exp.Expression, dialect: str, *, columns_sorted: bool = False) -> str:
    """The text a proof compares: ``tree`` (the proof's own copy) with its commutative operands in order (and,
    with ``columns_sorted``, its result columns in the order of their text), printed as the canonical text is but
    with keywords as sqlglot prints them (upper case on both sides: the texts are compared, never shown, and
    texts equal before lower-casing are equal after it)."""
    tree = sort_commutative(tree)
    if columns_sorted:
        tree.set("expressions", sorted(tree.expressions, key=lambda e: sql_text(e, dialect, lower_functions=True)))
    return sql_text(tree, dialect, lower_functions=True)


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


def _rewritten(tree: exp.Expression, dialect: str, tables: Mapping[str, frozenset[str]], edits: list[str], *,
               joins: bool, affine: Mapping[str, frozenset[str]] | None = None) -> exp.Expression:
    """``tree`` with every rewrite of ``dialect`` applied (:func:`inner_joins` and :func:`set_operands` with
    ``joins``, :func:`numeric_text` with ``affine``), in place; each change is named in ``edits``."""
    tree = default_ascending(tree, edits)
    if dialect == "sqlite":
        tree = in_lists(quoted_strings(tree, frozenset().union(*tables.values()), edits), edits)
        if affine is not None:
            tree = numeric_text(tree, tables, affine, edits)
    return set_operands(inner_joins(tree, tables, edits), edits) if joins else tree


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
    left as it is. Raises :class:`_NotProven` past :data:`MAX_COPIED_NODES` copied nodes. Each IN rewritten is
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
            raise _NotProven()
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
