"""The equivalence form's rules on conditions: comparisons turned one way round, NOTs pushed inward, AND and
OR chains flattened, equalities gathered into IN lists, BETWEEN and a one-row IN subquery written as
comparisons. Each keeps what a condition lets through under SQL's three-valued logic (a rule that holds only
where the value is read as true or not true, in a WHERE, HAVING or ON, says so)."""

from __future__ import annotations

from sqlglot import exp

from sqlcmp_dagster.engine.parsing import plain_text, tick
from sqlcmp_dagster.engine.rewrites.nodes import rewrite_nodes, stable

#: The comparisons and their converse (``a < b`` is ``b > a``) and negation (``NOT a < b`` is ``a >= b``).
_CONVERSE: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}
_NEGATION: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LTE, exp.LTE: exp.GT, exp.LT: exp.GTE, exp.GTE: exp.LT, exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}
#: Where a condition's value is read only as true / not true.
_CONDITION_HOLDERS = (exp.Where, exp.Having)


def between_bounds(tree: exp.Expr) -> exp.Expr:
    """``x BETWEEN a AND b`` written as ``x >= a AND x <= b`` (the three dialects define it so), where ``x``
    is evaluated alike twice (:func:`~sqlcmp_dagster.engine.rewrites.nodes.stable`); ``NOT BETWEEN`` follows
    by :func:`push_negations`.

    >>> import sqlglot
    >>> between_bounds(sqlglot.parse_one("SELECT a FROM t WHERE a BETWEEN 1 AND 5 AND b = 2")).sql()
    'SELECT a FROM t WHERE (a >= 1 AND a <= 5) AND b = 2'
    """
    def rewrite(node: exp.Expr) -> exp.Expr:
        if node.args.get("symmetric") or not all(stable(node.args.get(k)) for k in ("this", "low", "high")):
            return node
        value = node.this
        return exp.paren(exp.and_(exp.GTE(this=value.copy(), expression=node.args["low"].copy()),
                                  exp.LTE(this=value.copy(), expression=node.args["high"].copy())), copy=False)

    return rewrite_nodes(tree, (exp.Between,), rewrite)


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

    return rewrite_nodes(tree, tuple(_CONVERSE), rewrite)


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
    """In a condition (a WHERE, HAVING or ON condition, through AND, OR and parentheses), ``NOT`` pushed through
    comparisons (``NOT a > b`` is ``a <= b``: both are unknown where either side is NULL), through AND and OR by
    De Morgan's laws (which hold in three-valued logic), and ``NOT NOT p`` as ``p`` (only read as true or not
    true). ``NOT x IN (...)``, ``NOT LIKE``, ``IS NOT NULL`` and ``NOT EXISTS`` stay as they are.

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

    tree = rewrite_nodes(tree, (exp.Paren,), rewrite)
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

    return rewrite_nodes(tree, (exp.In,), rewrite)
