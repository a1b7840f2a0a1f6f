"""Final synthesis asset: one report per case under the failure precedence (the output contract)."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import joined, layer_asset, outcome_from_text, report_from_layers, to_json
from sqlcmp_dagster.engine.judge import apply_judgment
from sqlcmp_dagster.engine.models import Report

SCHEMA = {"case_id": pl.Utf8, "report": pl.Utf8, "deterministic_verdict": pl.Utf8, "severity": pl.Utf8,
          "overall_score": pl.Float64, "blocked_reason": pl.Utf8, "case_valid": pl.Boolean,
          "likely_source_clause": pl.Utf8, "fault": pl.Utf8}


@layer_asset("case_reports", description="The report of each case: verdict, scores, severity, explanations.")
def case_reports(executions: pl.DataFrame, structural_diffs: pl.DataFrame, result_comparisons: pl.DataFrame,
                 diagnostics: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    rows = [_row(apply_judgment(report_from_layers(row), outcome_from_text(row["judgment"])), row["fault"])
            for row in joined(executions, structural_diffs, result_comparisons, diagnostics, judgments)
            .iter_rows(named=True)]
    return pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)


def _row(report: Report, fault: str | None) -> dict[str, Any]:
    return {"case_id": report.case_id, "report": to_json(report.model_dump(mode="json")),
            "deterministic_verdict": report.deterministic_verdict, "severity": report.severity,
            "overall_score": report.overall_score, "blocked_reason": report.blocked_reason,
            "case_valid": bool(report.validity.get("case_valid", False)),
            "likely_source_clause": (report.diagnostic_scores or {}).get("likely_source_clause"), "fault": fault}
