"""Scoring and severity, and the precedence of failures (docs/design.md, "Scoring").

The weights are explicit module constants so that a report can be recomputed by hand:

* ``structure_score = 0.2 * normalized_sql_match + 0.3 * share of matching clauses
  + 0.5 * (1 - clause_weighted_distance)``
* ``result_score = 0.2 * schema_match + 0.3 * row_overlap + 0.2 * cell_overlap + 0.1 * cardinality closeness
  + 0.1 * numeric_tolerance_match + 0.1 * null_handling_match`` (``mode_pass`` is the gate, not an input)
* ``overall_score = 0.7 * result_score + 0.3 * structure_score`` on a pass; a failed result gate halves it, so a
  fail never scores above 0.5; a parse or execution failure scores 0.0 before any weighting.
"""

from __future__ import annotations

from sqlcmp_dagster.engine.models import Severity
from sqlcmp_dagster.engine.comparison import ResultComparison
from sqlcmp_dagster.engine.structure import StructuralComparison

STRUCTURE_WEIGHTS = {"normalized_sql_match": 0.2, "clause_match": 0.3, "clause_similarity": 0.5}
RESULT_WEIGHTS = {"schema_match": 0.2, "row_overlap": 0.3, "cell_overlap": 0.2, "cardinality_match": 0.1,
                  "numeric_tolerance_match": 0.1, "null_handling_match": 0.1}
OVERALL_WEIGHTS = {"result": 0.7, "structure": 0.3}
FAIL_FACTOR = 0.5
#: A numeric miss within this relative difference (with everything else equal) is a rounding issue.
ROUNDING_RTOL = 1e-3


def structure_score(structure: StructuralComparison) -> float:
    clauses = structure.clause_match.values()
    share = sum(c["match"] for c in clauses) / len(clauses)
    w = STRUCTURE_WEIGHTS
    return float(round(w["normalized_sql_match"] * structure.normalized_sql_match + w["clause_match"] * share
                       + w["clause_similarity"] * (1 - structure.clause_weighted_distance), 6))


def result_score(result: ResultComparison) -> float:
    card = result.cardinality_match
    rows = max(card["expected_rows"], card["actual_rows"], 1)
    closeness = 1 - min(1.0, abs(card["delta"]) / rows)
    w = RESULT_WEIGHTS
    return float(round(w["schema_match"] * result.schema_match["match"] + w["row_overlap"] * result.row_overlap
                       + w["cell_overlap"] * result.cell_overlap + w["cardinality_match"] * closeness
                       + w["numeric_tolerance_match"] * result.numeric_tolerance_match["match"]
                       + w["null_handling_match"] * result.null_handling_match, 6))


def overall_score(result: float, structure: float, passed: bool) -> float:
    blend = OVERALL_WEIGHTS["result"] * result + OVERALL_WEIGHTS["structure"] * structure
    return round(blend if passed else FAIL_FACTOR * blend, 6)


def severity(result: ResultComparison, ordering_error: bool) -> Severity:
    """Severity of a case that parsed and executed (blocked cases are ``critical failure`` by precedence).

    * pass: the result gate passed.
    * minor issue: only the row order differs, only column names/order differ while values match, or every
      mismatching cell is a number within ``ROUNDING_RTOL`` of the expected value.
    * moderate issue: most of the answer is right (row overlap or cell overlap of at least 0.75).
    * major issue: anything else, including an empty result where rows were expected.
    """
    if result.mode_pass:
        return "pass"
    if ordering_error or _rounding_only(result) or (result.bag_pass or _values_equal(result)):
        return "minor issue"
    if result.cardinality_match["actual_rows"] == 0 and result.cardinality_match["expected_rows"] > 0:
        return "major issue"
    if result.row_overlap >= 0.75 or result.cell_overlap >= 0.75:
        return "moderate issue"
    return "major issue"


def _values_equal(result: ResultComparison) -> bool:
    """All rows pair up on all columns, so what failed is column naming or order."""
    card = result.cardinality_match
    return (card["match"] and result.matched_rows == card["expected_rows"] and not result.extra_columns
            and all(c.actual_index is not None for c in result.columns))


def _rounding_only(result: ResultComparison) -> bool:
    card = result.cardinality_match
    if not card["match"] or result.extra_columns or any(c.actual_index is None for c in result.columns):
        return False
    wrong = [c for c in result.columns if c.mismatched]
    return bool(wrong) and all(
        c.numeric and c.null_mismatched == 0 and c.max_rel_diff is not None and c.max_rel_diff <= ROUNDING_RTOL
        for c in wrong
    )
