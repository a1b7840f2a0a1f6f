"""Query plans as the performance metrics read them: the operators an engine's EXPLAIN names, in SQLite's words,
and the root's estimated cost where the engine gives one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    """What ``explain`` learned: the plan's operators and the optimizer's cost when the engine reports one."""

    operators: list[str]
    cost: float | None


def _plan_operator(name: str, relation: str | None = None) -> str:
    """An engine's operator name in the words of SQLite's plans, which plan_complexity_score weighs.

    >>> _plan_operator("Index Only Scan", "items"), _plan_operator("HASH_GROUP_BY"), _plan_operator("TOP_N")
    ('SEARCH items', 'HASH GROUP BY', 'SORT')
    """
    words = name.upper().replace("_", " ")
    if "INDEX" in words or "BITMAP" in words:
        words = "SEARCH"
    elif words in ("ORDER BY", "TOP N", "SORT", "INCREMENTAL SORT"):
        words = "SORT"
    return f"{words} {relation}" if relation else words


def _postgres_plan(root: dict[str, Any]) -> Plan:
    operators: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        name = "Hash Aggregate" if node.get("Strategy") == "Hashed" else str(node.get("Node Type", ""))
        if node.get("Parent Relationship") == "SubPlan":
            name = f"correlated {name}"
        operators.append(_plan_operator(name, node.get("Relation Name")))
        stack.extend(reversed(node.get("Plans", [])))
    return Plan(operators=operators, cost=float(root["Total Cost"]))


def plan_of(dialect: str, rows: Sequence[Sequence[Any]]) -> Plan | None:
    """The :class:`Plan` in the rows of ``dialect``'s EXPLAIN (see :meth:`ExecutionAdapter.explain`); None when
    they hold none."""
    if dialect == "sqlite":
        return Plan(operators=[str(row[-1]) for row in rows], cost=None)
    try:
        document = rows[0][-1]
        nodes = json.loads(document) if isinstance(document, str) else document
        return _postgres_plan(nodes[0]["Plan"]) if dialect == "postgres" else _duckdb_plan(nodes)
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _duckdb_plan(nodes: list[dict[str, Any]]) -> Plan:
    operators: list[str] = []
    rows = 0.0
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        info = node.get("extra_info") or {}
        table = info.get("Table") if isinstance(info, dict) else None
        operators.append(_plan_operator(str(node.get("name", "")), str(table).split(".")[-1] if table else None))
        estimate = info.get("Estimated Cardinality") if isinstance(info, dict) else None
        rows += float(estimate) if isinstance(estimate, (int, float, str)) and str(estimate).isdigit() else 0.0
        stack.extend(reversed(node.get("children", [])))
    return Plan(operators=operators, cost=rows or None)


