"""The output contract as blocking pandera checks: the typed columns of every report field, allowed values and
ranges, and the failure precedence as dataframe-level rules that name the rule and the case they catch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.contracts import contract_check
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.judge import Judgment, JudgeOutcome, apply_judgment
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.records import report_row, reports_from_frame

from conftest import JUDGE_PASS


@pytest.fixture(scope="module")
def reports(sample_dir: Path) -> list[Report]:
    """The bundled suite's reports; the first carries an advisory verdict."""
    evaluator = Evaluator(db_dir=sample_dir)
    reports = [evaluator.evaluate(case) for case in load_suite(sample_suite_path()).cases]
    reports[0] = apply_judgment(reports[0], JudgeOutcome(Judgment.model_validate(JUDGE_PASS), {"model": "m"}))
    return reports


@pytest.fixture(scope="module")
def reports_frame(reports: list[Report]) -> pl.DataFrame:
    """The reports as the case_reports asset stores them."""
    rows = [{**report_row(r), "fault": None} for r in reports]
    return pl.DataFrame(rows, schema={"case_id": pl.Utf8, **frame_schema("case_reports"), "fault": pl.Utf8})


def test_reports_round_trip_through_the_typed_columns(reports: list[Report], reports_frame: pl.DataFrame,
                                                      tmp_path: Path) -> None:
    reports_frame.write_parquet(tmp_path / "reports.parquet")
    assert reports_from_frame(pl.read_parquet(tmp_path / "reports.parquet")) == reports


def test_the_sample_reports_satisfy_the_contract(reports_frame: pl.DataFrame) -> None:
    result = contract_check("case_reports", reports_frame)
    assert result.passed, result.description


def _first(frame: pl.DataFrame, condition: pl.Expr) -> str:
    return str(frame.filter(condition)["case_id"][0])


def _field(column: str, name: str) -> pl.Expr:
    return pl.col(column).struct.field(name)


def _corrupt(frame: pl.DataFrame, case_id: str, **values: Any) -> pl.DataFrame:
    """``frame`` with the given columns of one case replaced (the same types, so only a rule can object)."""
    hit = pl.col("case_id") == case_id
    return frame.with_columns(**{name: pl.when(hit).then(pl.lit(value, dtype=frame.schema[name]))
                                 .otherwise(pl.col(name)) for name, value in values.items()})


#: One corruption per precedence rule: which case to pick, and what to change in it.
RULES: dict[str, tuple[pl.Expr, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "parse_failure_precedence": (pl.col("blocked_reason") == "parse_failure", lambda row: {"overall_score": 0.4}),
    "execution_failure_precedence": (pl.col("blocked_reason") == "execution_failure",
                                     lambda row: {"severity": "major issue"}),
    "result_gate": (pl.col("metrics").str.contains('"mode_pass": false'), lambda row: {"overall_score": 0.75}),
    "performance_null_on_execution_failure": (
        pl.col("blocked_reason") == "execution_failure",
        lambda row: {"performance_scores": {"execution_time_ratio": 1.0, "resource_cost_score": None,
                                            "plan_complexity_score": None, "plan_complexity_expected": None}}),
    "verdict_consistency": (pl.col("ai_advisory_verdict").is_not_null(),
                            lambda row: {"verdict_consistency_flag": not row["verdict_consistency_flag"]}),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_each_precedence_rule_names_itself_and_the_case(reports_frame: pl.DataFrame, rule: str) -> None:
    where, change = RULES[rule]
    case_id = _first(reports_frame, where)
    row = reports_frame.filter(pl.col("case_id") == case_id).row(0, named=True)
    result = contract_check("case_reports", _corrupt(reports_frame, case_id, **change(row)))
    assert not result.passed
    assert f"case {case_id!r}, rule {rule}" in (result.description or ""), result.description


def test_field_values_and_ranges_name_case_and_column(reports_frame: pl.DataFrame) -> None:
    case_id = _first(reports_frame, pl.col("blocked_reason").is_null())
    broken = _corrupt(reports_frame, case_id, deterministic_verdict="maybe", structure_score=1.7,
                      error_types=["not_a_category"])
    description = contract_check("case_reports", broken).description or ""
    for column in ("deterministic_verdict", "structure_score", "error_types"):
        assert f"case {case_id!r}, column {column!r}" in description, description
    missing = contract_check("case_reports", reports_frame.drop("severity")).description or ""
    assert "severity" in missing
