"""Layer 5 asset: the advisory AI judgment of each case, when the judge policy allows one."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import joined, layer_asset, outcome_to_text, report_from_layers, validation_of
from sqlcmp_dagster.engine.judge import JudgeOutcome, judge_reports, prepare
from sqlcmp_dagster.resources import LLMJudgeResource

SCHEMA = {"case_id": pl.Utf8, "status": pl.Utf8, "judgment": pl.Utf8, "fault": pl.Utf8}


@layer_asset("judgments", description="Advisory LLM judgment; never changes the deterministic verdict.")
def judgments(executions: pl.DataFrame, structural_diffs: pl.DataFrame, result_comparisons: pl.DataFrame,
              diagnostics: pl.DataFrame, judge: LLMJudgeResource) -> pl.DataFrame:
    rows = joined(executions, structural_diffs, result_comparisons, diagnostics).to_dicts()
    config = judge.judge_config()
    if config is None:
        return pl.DataFrame([{"case_id": r["case_id"], "status": "disabled", "judgment": None, "fault": r["fault"]}
                             for r in rows], schema=SCHEMA)
    pending, outcomes = [], {}
    for row in rows:
        if row["fault"] is None:
            report = report_from_layers(row)
            validation = validation_of(row)
            request = judge.with_policy(validation.request)
            index = report.evidence.get("matched_expected_index")
            expected = validation.expected[index].relation if isinstance(index, int) else None
            pending.append((row["case_id"], prepare(request, report, expected, validation.actual.relation, config)))
    for (case_id, _), outcome in zip(pending, judge_reports([p for _, p in pending], config)):
        outcomes[case_id] = outcome
    return pl.DataFrame([_row(r, outcomes.get(r["case_id"])) for r in rows], schema=SCHEMA)


def _row(row: dict[str, Any], outcome: JudgeOutcome | None) -> dict[str, Any]:
    if outcome is None:
        return {"case_id": row["case_id"], "status": "skipped", "judgment": None, "fault": row["fault"]}
    status = "skipped" if outcome.skipped else "judged" if outcome.judgment else "failed"
    return {"case_id": row["case_id"], "status": status, "judgment": outcome_to_text(outcome), "fault": row["fault"]}
