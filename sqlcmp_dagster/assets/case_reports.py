"""Final synthesis asset: one report per case under the failure precedence (the output contract)."""

import json
from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import joined, layer_asset, to_json, validation_of
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.pipeline import finish_timings
from sqlcmp_dagster.engine.records import result_from_record, structure_from_record
from sqlcmp_dagster.engine.report import Analysis, blocked_report, build_report, fault_report

SCHEMA = {"case_id": pl.Utf8, "report": pl.Utf8, "deterministic_verdict": pl.Utf8, "severity": pl.Utf8,
          "overall_score": pl.Float64, "blocked_reason": pl.Utf8, "case_valid": pl.Boolean,
          "likely_source_clause": pl.Utf8, "fault": pl.Utf8}


@layer_asset("case_reports", description="The report of each case: verdict, scores, severity, explanations.")
def case_reports(executions: pl.DataFrame, structural_diffs: pl.DataFrame, result_comparisons: pl.DataFrame,
                 diagnostics: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    rows = [_row(_report(row), row["fault"])
            for row in joined(executions, structural_diffs, result_comparisons, diagnostics, judgments)
            .iter_rows(named=True)]
    return pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)


def _report(row: dict[str, Any]) -> Report:
    """The report from the stored layers; a case with a fault upstream gets a fault report (never lost)."""
    if row["fault"] is not None or row["validation"] is None:
        request = CompareRequest(case_id=row["case_id"], expected_sql=["-"], actual_sql="")
        return fault_report(request, row["fault"] or "no stored execution for this case")
    validation = validation_of(row)
    report = blocked_report(validation)
    if report is None:
        index = row["chosen_index"]
        timings = {"comparison_ms": (row["layer_ms__1"] or 0.0) + (row["layer_ms__2"] or 0.0),
                   "diagnostics_ms": row["layer_ms__3"] or 0.0, "probe_execution_ms": row["probe_execution_ms"]}
        analysis = Analysis(
            index=index,
            structure=structure_from_record(json.loads(row["structures"])[str(index)]),
            result=result_from_record(json.loads(row["results"])[str(index)]),
            alternatives=len(validation.expected),
            diagnostics=json.loads(row["diagnostics"]),
            performance=json.loads(row["performance"]) if row["performance"] else None,
            warnings=json.loads(row["performance_warnings"] or "[]"),
            timings=timings,
        )
        report = build_report(validation, analysis)
    timings = report.run_metadata["timings"]
    finish_timings(report, sum(timings.get(k, 0.0) for k in ("parse_ms", "execution_ms", "comparison_ms",
                                                              "diagnostics_ms")))
    return report


def _row(report: Report, fault: str | None) -> dict[str, Any]:
    return {"case_id": report.case_id, "report": to_json(report.model_dump(mode="json")),
            "deterministic_verdict": report.deterministic_verdict, "severity": report.severity,
            "overall_score": report.overall_score, "blocked_reason": report.blocked_reason,
            "case_valid": bool(report.validity.get("case_valid", False)),
            "likely_source_clause": (report.diagnostic_scores or {}).get("likely_source_clause"), "fault": fault}
