"""What the Dagster UI shows: each case's verdict on its own partition, numeric summary metadata for the Plots
tab, and a summary that follows the case reports without a hidden switch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.local import materialize_summary, sensor_tick


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance


def test_partitions_carry_their_own_verdicts_and_the_summary_numbers(tmp_path: Path, sample_dir: Path,
                                                                      instance: dg.DagsterInstance) -> None:
    defs = build_definitions(cases_dir=str(sample_suite_path().parent), db_dir=str(sample_dir),
                             storage_dir=str(tmp_path / "store"))
    before = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert before.get_num_requested(dg.AssetKey("evaluation_summary")) == 0  # no case report yet
    tick = sensor_tick(defs, instance, None)
    assert len(tick.runs) == 1 and tick.runs[0].success  # 34 partitions in one run
    records = instance.fetch_materializations(dg.AssetKey("case_reports"), limit=1000).records
    metadata = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
    assert len(metadata) == 34
    assert metadata["fail_filter"]["outcome"].value == "fail"
    assert metadata["fail_filter"]["likely_source_clause"].value == "selection_predicate"
    assert metadata["fail_filter"]["severity"].value == "moderate issue"
    assert isinstance(metadata["fail_filter"]["overall_score"], dg.FloatMetadataValue)
    assert metadata["pass_identical"]["outcome"].value == "pass"
    outcomes = {key: m["outcome"].value for key, m in metadata.items()}
    assert sorted(set(outcomes.values())) == ["fail", "invalid", "pass"]  # not one value for every partition

    # the summary follows without a switch: its automation sensor runs by default and requests it now
    sensor = next(s for s in defs.sensors if s.name == "evaluation_summary_follows_cases")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=before.cursor)
    assert after.get_num_requested(dg.AssetKey("evaluation_summary")) == 1

    summary_run = materialize_summary(defs, instance)
    assert summary_run.success
    event = instance.fetch_materializations(dg.AssetKey("evaluation_summary"), limit=1).records[0]
    numbers = event.asset_materialization.metadata
    assert isinstance(numbers["pass_rate"], dg.FloatMetadataValue)
    assert numbers["pass_rate"].value == pytest.approx(11 / 33, abs=1e-6)
    assert isinstance(numbers["pass_rate_easy"], dg.FloatMetadataValue) and numbers["passed"].value == 11


def test_benchmark_difficulty_reaches_the_summary_metadata(tmp_path: Path, sample_dir: Path,
                                                           instance: dg.DagsterInstance) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "bird.jsonl").write_text(
        '{"case_id": "s", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop", '
        '"context": {"difficulty": "simple"}}\n'
        '{"case_id": "c", "expected_sql": "SELECT 1", "actual_sql": "SELECT 2", "db": "shop", '
        '"context": {"difficulty": "challenging"}}\n', encoding="utf-8")
    defs = build_definitions(cases_dir=str(cases), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    assert all(run.success for run in sensor_tick(defs, instance, None).runs)
    assert materialize_summary(defs, instance).success
    numbers = instance.fetch_materializations(dg.AssetKey("evaluation_summary"), limit=1).records[0] \
        .asset_materialization.metadata
    assert (numbers["pass_rate_simple"].value, numbers["pass_rate_challenging"].value) == (1.0, 0.0)
    assert "| challenging | 1 | 0 |" in numbers["per_difficulty"].value
