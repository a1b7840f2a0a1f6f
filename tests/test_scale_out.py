"""Scale-out settings: runs of at most N cases (``SQLCMP_CASES_PER_RUN``, the layer assets'
``BackfillPolicy.multi_run(N)``), which the case sensor follows when it splits a first load."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from sqlcmp_dagster.cases.sample import sample_suite_path


def test_sensor_splits_a_first_load_into_runs_of_the_backfill_policy_size(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlcmp_dagster.assets import sensors
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

    monkeypatch.setattr(sensors, "LAYER_BACKFILL_POLICY", dg.BackfillPolicy.multi_run(3))
    cases = tmp_path / "cases"
    cases.mkdir()
    lines = sample_suite_path().read_text(encoding="utf-8").splitlines()[:7]
    (cases / "suite.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    keys = [json.loads(line)["case_id"] for line in lines]
    result = sensors.changed_case_runs(CaseSuiteResource(folder=str(cases)), DatabaseResource(db_dir=str(sample_dir)),
                                       [], None)
    spans = [(r.tags.get(sensors.RANGE_START), r.tags.get(sensors.RANGE_END), r.partition_key)
             for r in result.run_requests or []]
    assert spans == [(keys[0], keys[2], None), (keys[3], keys[5], None), (None, None, keys[6])]


@pytest.mark.parametrize("value", ["0", "many", "-2"])
def test_cases_per_run_must_be_a_positive_whole_number(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlcmp_dagster.assets.common import layer_backfill_policy

    monkeypatch.setenv("SQLCMP_CASES_PER_RUN", value)
    with pytest.raises(ValueError, match=f"SQLCMP_CASES_PER_RUN must be a whole number of cases >= 1, not '{value}'"):
        layer_backfill_policy()
    monkeypatch.setenv("SQLCMP_CASES_PER_RUN", "40")
    assert layer_backfill_policy() == dg.BackfillPolicy.multi_run(40)
