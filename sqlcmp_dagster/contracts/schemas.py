"""One pandera DataFrameModel per partitioned asset: the columns the next layer and the UI rely on."""

from __future__ import annotations

import pandera.polars as pa

from sqlcmp_dagster.engine.diagnostics import SCORES
from sqlcmp_dagster.engine.summary import SEVERITIES

_SOURCES = sorted(set(SCORES.values()) | {"ordering"})
_BLOCKED = ["parse_failure", "execution_failure"]


class _CaseRows(pa.DataFrameModel):
    """Every layer stores exactly one row per case. A case the layer could not process keeps its row with
    the reason in ``fault`` and nulls elsewhere, which is why the layer's own columns are nullable."""

    case_id: str = pa.Field(unique=True, str_length={"min_value": 1})
    fault: str = pa.Field(nullable=True)


class ParsedCases(_CaseRows):
    case_hash: str = pa.Field(str_length={"min_value": 16}, nullable=True)
    dialect: str = pa.Field(nullable=True)
    validation: str = pa.Field(nullable=True)
    parse_success_actual: bool = pa.Field(nullable=True)
    parse_success_expected: bool = pa.Field(nullable=True)
    normalized_sql_actual: str = pa.Field(nullable=True)


class Executions(_CaseRows):
    validation: str = pa.Field(nullable=True)
    execution_success_actual: bool = pa.Field(nullable=True)
    execution_success_expected: bool = pa.Field(nullable=True)
    execution_time_actual_ms: float = pa.Field(ge=0, nullable=True)
    error_category_actual: str = pa.Field(nullable=True)
    blocked_reason: str = pa.Field(isin=_BLOCKED, nullable=True)


class StructuralDiffs(_CaseRows):
    structures: str = pa.Field(nullable=True)
    normalized_sql_match: bool = pa.Field(nullable=True)
    clause_weighted_distance: float = pa.Field(ge=0, le=1, nullable=True)


class ResultComparisons(_CaseRows):
    results: str = pa.Field(nullable=True)
    chosen_index: int = pa.Field(ge=0, nullable=True)
    mode_pass: bool = pa.Field(nullable=True)
    row_overlap: float = pa.Field(ge=0, le=1, nullable=True)
    cell_overlap: float = pa.Field(ge=0, le=1, nullable=True)


class Diagnostics(_CaseRows):
    diagnostics: str = pa.Field(nullable=True)
    performance: str = pa.Field(nullable=True)
    likely_source_clause: str = pa.Field(isin=_SOURCES, nullable=True)
    confidence: float = pa.Field(ge=0, le=1, nullable=True)


class Judgments(_CaseRows):
    status: str = pa.Field(isin=["disabled", "skipped", "judged", "failed"], nullable=True)
    judgment: str = pa.Field(nullable=True)


class CaseReports(_CaseRows):
    report: str
    deterministic_verdict: str = pa.Field(isin=["pass", "fail"])
    severity: str = pa.Field(isin=list(SEVERITIES))
    overall_score: float = pa.Field(ge=0, le=1)
    blocked_reason: str = pa.Field(isin=_BLOCKED, nullable=True)
    case_valid: bool


#: Asset name -> its contract.
SCHEMAS: dict[str, type[pa.DataFrameModel]] = {
    "parsed_cases": ParsedCases,
    "executions": Executions,
    "structural_diffs": StructuralDiffs,
    "result_comparisons": ResultComparisons,
    "diagnostics": Diagnostics,
    "judgments": Judgments,
    "case_reports": CaseReports,
}
