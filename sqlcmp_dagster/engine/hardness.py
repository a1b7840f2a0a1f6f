"""Spider's hardness of a query (easy, medium, hard, extra), computed from its syntax tree.

Spider reports accuracy per hardness level, and people compare models by it; so a breakdown by the same levels
must give the same levels. The rules are those of the official evaluator (taoyds/test-suite-sql-eval,
``evaluation.py``: ``count_component1``, ``count_component2``, ``count_others``, ``eval_hardness``),
re-implemented here over a sqlglot tree instead of Spider's own parse. They look at the outermost query only
(for a set operation, its leftmost SELECT), and keep two quirks of the original that decide levels:

* in WHERE, a condition counts as an aggregate when it is negated (``NOT IN``, ``NOT LIKE``, ...), because the
  original tests the condition's negation flag where it meant its aggregate;
* in HAVING, every AND/OR between conditions counts as an aggregate, and so does a negated condition, while
  the aggregate in ``HAVING count(*) > 1`` itself does not.

Over Spider's dev gold queries this gives 248 easy, 446 medium, 174 hard and 166 extra, the official counts
(``tests/test_hardness.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

Hardness = Literal["easy", "medium", "hard", "extra"]
HARDNESS_LEVELS: tuple[Hardness, ...] = ("easy", "medium", "hard", "extra")


@dataclass(frozen=True)
class _Conditions:
    """A WHERE, HAVING or ON condition as Spider's flat list sees it: its leaves and its connectors."""

    leaves: list[exp.Expr]
    ors: int
    connectors: int

    @classmethod
    def of(cls, condition: exp.Expr | None) -> _Conditions:
        leaves: list[exp.Expr] = []
        counts = [0, 0]

        def walk(node: exp.Expr) -> None:
            node = node.unnest() if isinstance(node, exp.Paren) else node
            if isinstance(node, exp.Connector):
                counts[0] += isinstance(node, exp.Or)
                counts[1] += 1
                walk(node.left)
                walk(node.right)
            else:
                leaves.append(node)

        if condition is not None:
            walk(condition)
        return cls(leaves, counts[0], counts[1])

    def __add__(self, other: _Conditions) -> _Conditions:
        return _Conditions(self.leaves + other.leaves, self.ors + other.ors, self.connectors + other.connectors)

    def likes(self) -> int:
        return sum(isinstance(_positive(leaf), exp.Like) for leaf in self.leaves)

    def negated(self) -> int:
        """Leaves whose NOT comes before the operator (``x NOT IN``, ``NOT LIKE``, ``NOT BETWEEN``)."""
        return sum(isinstance(leaf, exp.Not) and isinstance(leaf.this, (exp.In, exp.Like, exp.Between))
                   for leaf in self.leaves)

    def nested(self) -> int:
        """Subqueries used as a condition's value (``x IN (SELECT ...)``, ``x > (SELECT ...)``)."""
        return sum(len(_outermost_selects(leaf)) for leaf in self.leaves)


def spider_hardness(tree: exp.Expr) -> Hardness:
    """The hardness level of ``tree`` by the rules of Spider's official evaluator.

    >>> import sqlglot
    >>> spider_hardness(sqlglot.parse_one("SELECT count(*) FROM singer"))
    'easy'
    >>> spider_hardness(sqlglot.parse_one("SELECT name, age FROM singer WHERE country = 'France' ORDER BY age"))
    'medium'
    >>> spider_hardness(sqlglot.parse_one("SELECT name FROM a WHERE x > (SELECT avg(x) FROM a)"))
    'hard'
    >>> spider_hardness(sqlglot.parse_one("SELECT a FROM t WHERE b = 1 AND c = 2 UNION SELECT a FROM u"))
    'extra'
    """
    component1, component2, others = _counts(tree)
    if component1 <= 1 and others == 0 and component2 == 0:
        return "easy"
    if (others <= 2 and component1 <= 1 and component2 == 0) or \
            (component1 <= 2 and others < 2 and component2 == 0):
        return "medium"
    if (others > 2 and component1 <= 2 and component2 == 0) or \
            (2 < component1 <= 3 and others <= 2 and component2 == 0) or \
            (component1 <= 1 and others == 0 and component2 <= 1):
        return "hard"
    return "extra"


def _counts(tree: exp.Expr) -> tuple[int, int, int]:
    """Spider's three counts for the outermost query: clause components, nested queries, other complexity."""
    tree = tree.unnest() if isinstance(tree, exp.Paren) else tree
    set_operation = isinstance(tree, exp.SetOperation)
    while isinstance(tree, (exp.SetOperation, exp.Subquery)):
        tree = tree.left if isinstance(tree, exp.SetOperation) else tree.this
    if not isinstance(tree, exp.Select):
        return 0, int(set_operation), 0
    where = _Conditions.of(tree.args["where"].this if tree.args.get("where") else None)
    having = _Conditions.of(tree.args["having"].this if tree.args.get("having") else None)
    joins = tree.args.get("joins") or []
    on = _Conditions(leaves=[], ors=0, connectors=0)
    for join in joins:
        on = on + _Conditions.of(join.args.get("on"))
    group = tree.args["group"].expressions if tree.args.get("group") else []
    order = tree.args["order"].expressions if tree.args.get("order") else []
    tables = (1 if tree.args.get("from_") else 0) + len(joins)

    component1 = (bool(where.leaves) + bool(group) + bool(order) + bool(tree.args.get("limit"))
                  + max(tables - 1, 0))
    conditions = on + where + having
    component1 += conditions.ors + conditions.likes()
    component2 = conditions.nested() + int(set_operation)

    aggregates = (sum(_select_aggregate(e) for e in tree.expressions) + where.negated()
                  + sum(isinstance(e, exp.AggFunc) for e in group)
                  + sum(_operand_aggregates(o.this) for o in order)
                  + having.connectors + having.negated())
    others = (aggregates > 1) + (len(tree.expressions) > 1) + (len(where.leaves) > 1) + (len(group) > 1)
    return component1, component2, others


def _select_aggregate(item: exp.Expr) -> bool:
    """Whether a SELECT item starts with an aggregate (Spider records one aggregate per item, its first)."""
    item = item.this if isinstance(item, exp.Alias) else item
    while isinstance(item, exp.Binary) and not isinstance(item, exp.Connector):
        item = item.left
    return isinstance(item, exp.AggFunc)


def _operand_aggregates(value: exp.Expr) -> int:
    """Aggregates among the (at most two) operands of an ORDER BY key, as Spider's value unit holds them."""
    value = value.unnest() if isinstance(value, exp.Paren) else value
    if isinstance(value, exp.Binary) and not isinstance(value, exp.Connector):
        return isinstance(value.left, exp.AggFunc) + isinstance(value.right, exp.AggFunc)
    return int(isinstance(value, exp.AggFunc))


def _positive(leaf: exp.Expr) -> exp.Expr:
    return leaf.this if isinstance(leaf, exp.Not) else leaf


def _outermost_selects(node: exp.Expr) -> list[exp.Expr]:
    """The queries inside ``node`` that are not themselves inside another query within ``node``."""
    found: list[exp.Expr] = []

    def walk(current: exp.Expr) -> None:
        for child in current.iter_expressions():
            if isinstance(child, (exp.Select, exp.SetOperation)):
                found.append(child)
            else:
                walk(child)

    walk(node)
    return found
