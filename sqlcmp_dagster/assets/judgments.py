"""Layer 5 asset: the advisory AI judgment of each case, when the judge policy allows one."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import joined, layer_asset, report_from_layers, to_json, validation_of
from sqlcmp_dagster.engine.judge import JudgeOutcome, judge_reports, prepare
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.records import report_row
from sqlcmp_dagster.resources import LLMJudgeResource

#: ``judge_metadata`` is JSON text (model, prompt version, token usage, cost: keys vary by provider).
#: ``deterministic_report`` holds the report a judged case's prompt was built from, so that ``case_reports``
#: does not build it a second time; null for cases the judge never saw.
SCHEMA = {"case_id": pl.Utf8, **frame_schema("judgments"), "fault": pl.Utf8}


@layer_asset("judgments", description="Advisory LLM judgment; never changes the deterministic verdict.")
def judgments(executions: pl.DataFrame, structural_diffs: pl.DataFrame, result_comparisons: pl.DataFrame,
              diagnostics: pl.DataFrame, judge: LLMJudgeResource) -> pl.DataFrame:
    rows = joined(executions, structural_diffs, result_comparisons, diagnostics).to_dicts()
    config = judge.judge_config()
    if config is None:
        return pl.DataFrame([{"case_id": r["case_id"], "status": "disabled", "fault": r["fault"]} for r in rows],
                            schema=SCHEMA)
    pending, reports = [], {}
    for row in rows:
        if row["fault"] is None:
            report = reports[row["case_id"]] = report_from_layers(row)
            validation = validation_of(row)
            request = judge.with_policy(validation.request)
            index = report.evidence.get("matched_expected_index")
            expected = validation.expected[index].relation if isinstance(index, int) else None
            pending.append(prepare(request, report, expected, validation.actual.relation, config))
    outcomes = dict(zip(reports, judge_reports(pending, config)))
    return pl.DataFrame([_row(r, outcomes.get(r["case_id"]), reports.get(r["case_id"])) for r in rows],
                        schema=SCHEMA)


def _row(row: dict[str, Any], outcome: JudgeOutcome | None, report: Report | None) -> dict[str, Any]:
    if outcome is None:
        return {"case_id": row["case_id"], "status": "skipped", "fault": row["fault"]}
    status = "skipped" if outcome.skipped else "judged" if outcome.judgment else "failed"
    return {"case_id": row["case_id"], "status": status,
            "judgment": outcome.judgment.model_dump() if outcome.judgment else None,
            "judge_metadata": to_json(outcome.metadata), "judge_warnings": outcome.warnings,
            "skipped": outcome.skipped, "deterministic_report": report_row(report) if report else None,
            "fault": row["fault"]}
