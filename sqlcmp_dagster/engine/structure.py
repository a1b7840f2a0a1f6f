"""Layer 2: structural comparison of the two canonical ASTs.

Each clause of a query is reduced to a multiset of canonical fragments, its items (one per projected
expression, WHERE conjunct, join edge, group key, order key, set-operation branch's operator). Two clauses match
when their items are equal; their similarity is the share of matching items (the Dice coefficient of the two
multisets: twice the items paired over the items of both), where an item that is a disjunction and has no equal
counts as the share of its disjuncts it shares with the closest unpaired disjunction of the other side (ORDER BY
also requires the same sequence). ``clause_weighted_distance`` is ``sum(weight * (1 - similarity))`` over the
clauses, with weights summing to 1, so it lies in [0, 1].
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from sqlcmp_dagster.engine.parsing import plain_text

#: Clause weights of clause_weighted_distance. The projection and the predicates decide most of what a query
#: returns, so they weigh most; clauses that rarely change the answer (windows) weigh least.
CLAUSE_WEIGHTS: dict[str, float] = {
    "projection": 0.25,
    "selection_predicate": 0.20,
    "join": 0.15,
    "aggregation_grain": 0.10,
    "post_aggregation_predicate": 0.05,
    "ordering": 0.07,
    "top_k": 0.05,
    "distinct": 0.05,
    "window": 0.03,
    "set_operators": 0.05,
}

#: The SELECT arguments that hold each clause, used to swap one clause between two queries.
CLAUSE_ARGS: dict[str, tuple[str, ...]] = {
    "projection": ("expressions",),
    "selection_predicate": ("where",),
    "join": ("from_", "joins"),
    "aggregation_grain": ("group",),
    "post_aggregation_predicate": ("having",),
    "ordering": ("order",),
    "top_k": ("limit", "offset"),
    "distinct": ("distinct",),
}


@dataclass(frozen=True)
class QueryShape:
    """The clauses of one query as fragment lists, and the facts about it that other layers ask for."""

    clauses: dict[str, list[str]]
    #: The disjuncts of each item that is a disjunction (by its text), for partial credit (:func:`_share`).
    parts: dict[str, tuple[str, ...]]
    aggregates: list[str]
    tables: list[str]
    has_top_level_order: bool
    limit: int | None
    offset: int | None
    order_keys: list[int] | None  # projection index of each ORDER BY key, None when one is not projected


@dataclass(frozen=True)
class StructuralComparison:
    """``normalized_sql_match``, ``clause_match`` and ``clause_weighted_distance`` of one query pair."""

    normalized_sql_match: bool
    clause_match: dict[str, dict[str, Any]]
    clause_weighted_distance: float

    def metrics(self) -> dict[str, Any]:
        return {
            "normalized_sql_match": self.normalized_sql_match,
            "clause_match": self.clause_match,
            "clause_weighted_distance": self.clause_weighted_distance,
        }

    def differing(self) -> list[str]:
        """Clauses that differ, heaviest first."""
        names = [name for name, detail in self.clause_match.items() if not detail["match"]]
        return sorted(names, key=lambda name: -CLAUSE_WEIGHTS[name])


def fragment(node: exp.Expr) -> str:
    """Canonical text of one clause fragment (:func:`~sqlcmp_dagster.engine.parsing.plain_text`: the default
    dialect, the subtree copied first only where printing could change it, which a column never does).

    >>> import sqlglot
    >>> fragment(sqlglot.parse_one("SELECT a FROM t WHERE x = 1").args["where"].this)
    'x = 1'
    """
    return plain_text(node)


def query_shape(tree: exp.Expression) -> QueryShape:
    """Break a canonical AST into clause fragments.

    For a set operation the clauses of every branch are pooled and the operators listed in order; the
    set operation's own ORDER BY and LIMIT are its ordering and top-k.
    """
    branches = _branches(tree)
    clauses: dict[str, list[str]] = {name: [] for name in CLAUSE_WEIGHTS}
    parts: dict[str, tuple[str, ...]] = {}
    for select in branches:
        clauses["projection"] += [fragment(e.unalias()) for e in select.expressions]
        clauses["selection_predicate"] += _conjuncts(select.args.get("where"), parts)
        clauses["post_aggregation_predicate"] += _conjuncts(select.args.get("having"), parts)
        clauses["join"] += _join_edges(select, parts)
        group = select.args.get("group")
        clauses["aggregation_grain"] += [fragment(e) for e in group.expressions] if group else []
        if select.args.get("distinct"):
            clauses["distinct"].append(fragment(select.args["distinct"]) or "DISTINCT")
        clauses["window"] += [fragment(w) for w in select.find_all(exp.Window)]
    top = tree if isinstance(tree, exp.Query) else branches[0]
    order = top.args.get("order")
    clauses["ordering"] = [fragment(o) for o in order.expressions] if order else []
    limit, offset = _int_arg(top, "limit"), _int_arg(top, "offset")
    clauses["top_k"] = [f"limit {_arg_sql(top, 'limit')}"] if top.args.get("limit") else []
    clauses["top_k"] += [f"offset {_arg_sql(top, 'offset')}"] if top.args.get("offset") else []
    clauses["set_operators"] = _set_operators(tree)
    aggregates = sorted(a.key for select in branches for a in select.find_all(exp.AggFunc))
    tables = sorted({t.name for t in tree.find_all(exp.Table)})
    return QueryShape(
        clauses=clauses,
        parts=parts,
        aggregates=aggregates,
        tables=tables,
        has_top_level_order=order is not None,
        limit=limit,
        offset=offset,
        order_keys=_order_keys(branches[0], order) if order else None,
    )


def compare_structure(
    expected_sql: str, actual_sql: str, expected: QueryShape, actual: QueryShape
) -> StructuralComparison:
    """Compare two queries clause by clause.

    >>> import sqlglot
    >>> e = query_shape(sqlglot.parse_one("SELECT a FROM t WHERE x = 1"))
    >>> a = query_shape(sqlglot.parse_one("SELECT a FROM t WHERE x = 2"))
    >>> result = compare_structure("q1", "q2", e, a)
    >>> result.clause_match["selection_predicate"]["match"], result.clause_weighted_distance
    (False, 0.2)
    """
    detail: dict[str, dict[str, Any]] = {}
    distance = 0.0
    for name, weight in CLAUSE_WEIGHTS.items():
        left, right = expected.clauses[name], actual.clauses[name]
        similarity = _share(left, right, {**expected.parts, **actual.parts})
        same = Counter(left) == Counter(right) and (name != "ordering" or left == right)
        if name == "ordering" and not same and similarity == 1.0:
            similarity = 0.5  # the same keys in another order
        # copies: a shape is shared by every case with the same query (``Side.structural``), a report is its own
        detail[name] = {"match": same, "similarity": round(similarity, 6), "expected": list(left),
                        "actual": list(right)}
        distance += weight * (1.0 - similarity)
    return StructuralComparison(
        normalized_sql_match=expected_sql == actual_sql,
        clause_match=detail,
        clause_weighted_distance=round(distance, 6),
    )


def _branches(tree: exp.Expression) -> list[exp.Select]:
    if isinstance(tree, exp.SetOperation):
        return _branches(tree.this) + _branches(tree.expression)
    if isinstance(tree, exp.Subquery):
        return _branches(tree.this)
    if isinstance(tree, exp.Select):
        return [tree]
    return [exp.select(tree)] if not isinstance(tree, exp.Query) else [exp.Select()]


def _set_operators(tree: exp.Expression) -> list[str]:
    if isinstance(tree, exp.SetOperation):
        operator = tree.key + ("" if tree.args.get("distinct") else " all")
        return _set_operators(tree.this) + [operator] + _set_operators(tree.expression)
    if isinstance(tree, exp.Subquery):
        return _set_operators(tree.this)
    return []


def _conjuncts(node: exp.Expression | None, parts: dict[str, tuple[str, ...]]) -> list[str]:
    """The texts of the conjuncts of ``node``'s condition (through parentheses), each disjunction's disjuncts
    kept in ``parts``."""
    if node is None:
        return []
    condition = node.this.unnest()
    items = []
    for conjunct in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        text = fragment(conjunct)
        inner = conjunct.unnest()
        if isinstance(inner, exp.Or):
            parts[text] = tuple(fragment(d) for d in inner.flatten())
        items.append(text)
    return items


def _join_edges(select: exp.Select, parts: dict[str, tuple[str, ...]]) -> list[str]:
    """The join graph: each joined relation with its join type, and each ON condition conjunct."""
    edges: list[str] = []
    source = select.args.get("from_")
    if source is not None:
        edges.append(f"from {fragment(source.this)}")
    for join in select.args.get("joins") or []:
        kind = " ".join(p for p in (join.side, join.kind) if p).lower() or "inner"
        if join.args.get("on") is None and join.args.get("using") is None and kind == "inner":
            kind = "cross"
        edges.append(f"{kind} join {fragment(join.this)}")
        on = join.args.get("on")
        edges += [f"on {c}" for c in (_conjuncts(exp.Where(this=on), parts) if on is not None else [])]
        using = join.args.get("using")
        edges += [f"using {fragment(u)}" for u in using or []]
    return edges


def _order_keys(select: exp.Select, order: exp.Order) -> list[int] | None:
    """Projection index of each ORDER BY key (by position, alias or identical expression), or None."""
    projected = [fragment(e.unalias()) for e in select.expressions]
    aliases = [e.alias for e in select.expressions]
    keys: list[int] = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(projected):
            keys.append(int(key.this) - 1)
        elif isinstance(key, exp.Column) and not key.table and key.name in aliases:
            keys.append(aliases.index(key.name))
        elif fragment(key) in projected:
            keys.append(projected.index(fragment(key)))
        else:
            return None
    return keys


def _int_arg(node: exp.Expression, name: str) -> int | None:
    value = node.args.get(name)
    inner = value.args.get("expression") if value is not None else None
    if isinstance(inner, exp.Literal) and inner.is_int:
        return int(inner.this)
    return None


def _arg_sql(node: exp.Expression, name: str) -> str:
    value = node.args[name]
    inner = value.args.get("expression")
    return fragment(inner) if inner is not None else fragment(value)


def _share(left: list[str], right: list[str], parts: dict[str, tuple[str, ...]]) -> float:
    """The share of matching items of two clauses: equal items pair first; then each unpaired disjunction of
    ``left`` pairs with the unpaired disjunction of ``right`` that shares most of its disjuncts (``parts``),
    counting as that share (the Dice coefficient of their disjuncts).

    >>> _share(["a = 1", "b = 2", "c = 3"], ["a = 1", "b = 2", "c = 4"], {})
    0.6666666666666666
    >>> parts = {"a = 1 OR b = 2 OR c = 3": ("a = 1", "b = 2", "c = 3"),
    ...          "a = 1 OR b = 2 OR c = 4": ("a = 1", "b = 2", "c = 4")}
    >>> _share(["a = 1 OR b = 2 OR c = 3"], ["a = 1 OR b = 2 OR c = 4"], parts)
    0.6666666666666666
    """
    if not left and not right:
        return 1.0
    paired = Counter(left) & Counter(right)
    shared: float = sum(paired.values())
    rest_right = list((Counter(right) - paired).elements())
    for item in (Counter(left) - paired).elements():
        if item not in parts:
            continue
        scores = [(_dice(list(parts[item]), list(parts[other])), index)
                  for index, other in enumerate(rest_right) if other in parts]
        if scores:
            score, index = max(scores)
            shared += score
            del rest_right[index]
    return 2 * shared / (len(left) + len(right))


def _dice(left: list[str], right: list[str]) -> float:
    """Twice the items two multisets share over the items of both."""
    shared = sum((Counter(left) & Counter(right)).values())
    return 2 * shared / (len(left) + len(right))
