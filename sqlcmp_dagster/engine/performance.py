"""Optional performance metrics: execution_time_ratio, resource_cost_score, plan_complexity_score.

Collected only when ``enable_performance_metrics`` is set, and only when both queries executed (performance
precedence). The figures come from one run of each query, so every report that carries them also carries a
warning that they are indicative: a single timing is exposed to cache state and machine load.
"""

from __future__ import annotations

from typing import Any

from sqlcmp_dagster.engine.plans import Plan

#: Plan operators that cost the most, with their weight in plan_complexity_score (SQLite EXPLAIN QUERY PLAN
#: wording; ``ExecutionAdapter.explain`` puts PostgreSQL's and DuckDB's operators in the same words).
OPERATOR_WEIGHTS: dict[str, float] = {
    "SCAN": 3.0,  # full table scan
    "TEMP B-TREE": 2.0,  # sort or DISTINCT materialized in a temporary index
    "HASH": 2.0,  # hash join or hash aggregate
    "NESTED LOOP": 2.0,
    "CORRELATED": 2.0,  # correlated subquery, re-run per outer row
    "SEARCH": 1.0,  # index lookup
    "SORT": 2.0,  # an explicit sort operator (PostgreSQL, DuckDB; SQLite says TEMP B-TREE)
}


def plan_complexity(plan: Plan) -> float:
    """Weighted count of expensive operators in ``plan``.

    >>> plan_complexity(Plan(operators=["SCAN singer", "USE TEMP B-TREE FOR ORDER BY"], cost=None))
    5.0
    """
    total = 0.0
    for operator in plan.operators:
        text = operator.upper()
        total += sum(weight for word, weight in OPERATOR_WEIGHTS.items() if word in text)
    return total


def performance_metrics(
    actual_ms: float, expected_ms: float, actual_plan: Plan | None, expected_plan: Plan | None
) -> tuple[dict[str, Any], list[str]]:
    """``metrics.performance`` and the warnings that qualify it. Costs are the optimizer's estimates (no query
    is run for its plan); the timing ratio comes from the one run each query had."""
    warnings = ["performance figures come from a single run of each query and are indicative only: timings vary "
                "with cache state and machine load, and costs are the optimizer's estimates"]
    ratio = actual_ms / expected_ms if expected_ms > 0 else None
    cost: float | None = None
    if actual_plan is not None and expected_plan is not None and actual_plan.cost and expected_plan.cost:
        cost = actual_plan.cost / expected_plan.cost
    else:
        warnings.append("no optimizer cost estimate available: resource_cost_score is null")
    complexity = plan_complexity(actual_plan) if actual_plan is not None else None
    if actual_plan is None:
        warnings.append("no query plan available: plan_complexity_score is null")
    return {
        "execution_time_ratio": None if ratio is None else round(ratio, 4),
        "resource_cost_score": cost,
        "plan_complexity_score": complexity,
        "plan_complexity_expected": plan_complexity(expected_plan) if expected_plan is not None else None,
    }, warnings
