"""Layer 5 asset: the advisory AI judgment of each case, when the judge policy allows one."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import layer_asset, per_case
from sqlcmp_dagster.resources import LLMJudgeResource

SCHEMA = {"status": pl.Utf8, "judgment": pl.Utf8, "reason": pl.Utf8}


@layer_asset("judgments", description="Advisory LLM judgment; never changes the deterministic verdict.")
def judgments(diagnostics: pl.DataFrame, judge: LLMJudgeResource) -> pl.DataFrame:
    def judge_case(row: dict[str, Any]) -> dict[str, Any]:
        if not judge.enabled:
            return {"status": "disabled", "reason": "enable_ai_judge is off for this deployment"}
        return {"status": "skipped", "reason": "no judge client is configured in this version"}

    return per_case(diagnostics, judge_case, SCHEMA)
