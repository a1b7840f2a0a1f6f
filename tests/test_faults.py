"""Faults in the middle of a batch: the database disappears or restarts. The affected cases are execution
failures carrying the engine's message; the others complete; the output file is whole or absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.pipeline import Evaluator


def test_sqlite_file_disappearing_mid_batch(tmp_path: Path, sample_db: Path) -> None:
    folder = tmp_path / "dbs"
    folder.mkdir()
    shutil.copy(sample_db, folder / f"{SAMPLE_DB_ID}.sqlite")
    cases = [CompareRequest(case_id=f"c{i}", db=SAMPLE_DB_ID, expected_sql="SELECT count(*) FROM products",
                            actual_sql="SELECT count(*) FROM products") for i in range(6)]
    evaluator = Evaluator(db_dir=folder)

    def remove_after_third(report: Report) -> None:
        if report.case_id == "c2":
            (folder / f"{SAMPLE_DB_ID}.sqlite").unlink()

    reports = evaluator.evaluate_all(cases, progress=remove_after_third)
    assert [r.deterministic_verdict for r in reports] == ["pass"] * 3 + ["fail"] * 3
    for report in reports[3:]:
        assert report.blocked_reason == "execution_failure"
        # Resolution happens per case, so the vanished file is named; an outage is not the model's error.
        assert f"database '{SAMPLE_DB_ID}' not found" in json.dumps(report.evidence)
        assert report.validity["case_valid"] is False


def test_postgres_restart_mid_batch(tmp_path: Path) -> None:
    url, cluster = os.environ.get("SQLCMP_TEST_PG_URL"), os.environ.get("SQLCMP_TEST_PG_CLUSTER")
    if not (url and cluster and shutil.which("pg_ctlcluster")):
        if os.environ.get("SQLCMP_REQUIRE_SERVICES") == "1":
            pytest.fail("SQLCMP_TEST_PG_URL / SQLCMP_TEST_PG_CLUSTER not set: run .ci/services.sh")
        pytest.skip("needs the PostgreSQL cluster of .ci/services.sh")
    version, name = cluster.split()
    cases = [CompareRequest(case_id=f"p{i}", db=url, expected_sql="SELECT 1 AS x", actual_sql="SELECT 1 AS x")
             for i in range(6)]

    def stop_after_second(report: Report) -> None:
        if report.case_id == "p1":
            subprocess.run(["pg_ctlcluster", version, name, "stop", "-m", "fast"], check=True)

    try:
        reports = Evaluator().evaluate_all(cases, progress=stop_after_second)
    finally:
        subprocess.run(["pg_ctlcluster", version, name, "start"], check=False)
        for _ in range(60):
            if subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"]).returncode == 0:
                break
            time.sleep(0.5)
    assert [r.deterministic_verdict for r in reports[:2]] == ["pass", "pass"]
    for report in reports[2:]:
        assert report.blocked_reason == "execution_failure"
        assert "connection" in " ".join(report.explanations).lower() or "server" in " ".join(report.explanations)
    after = Evaluator().evaluate(cases[0])
    assert after.deterministic_verdict == "pass"  # the restarted server serves the next batch


def test_evaluate_output_is_whole_or_absent(tmp_path: Path, sample_dir: Path) -> None:
    """The report file is written under a temporary name and renamed: an old file is replaced whole, and no
    partial file stays behind, even when some cases failed on the way."""
    from sqlcmp_dagster.cli import EXIT_INVALID, main

    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps({"case_id": f"c{i}", "db": "shop" if i % 2 else "gone",
                                         "expected_sql": "SELECT 1", "actual_sql": "SELECT 1"}) + "\n"
                             for i in range(6)), encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    out.write_text("stale\n", encoding="utf-8")
    # the cases on the missing database are invalid (exit 3), the others pass: every report is still written
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out)]) == EXIT_INVALID
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["case_id"] for line in lines] == [f"c{i}" for i in range(6)]
    assert not list(tmp_path.glob("*.partial"))


def test_a_score_that_is_not_a_number_is_an_engine_fault_of_its_case(sample_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A report's scores are finite: JSON has no NaN, and a score written as null would not read back. A score
    an engine fault made NaN is refused where the report is built, which makes the case's report an engine
    fault; the other cases of the batch are reported as usual and every line reads back (a review's finding)."""
    import sqlcmp_dagster.engine.report as report_module

    real = report_module.overall_score
    def overall(result: float, structure: float, passed: bool) -> float:
        return real(result, structure, passed) if passed else float("nan")

    monkeypatch.setattr(report_module, "overall_score", overall)
    cases = [CompareRequest(case_id="fails", db=SAMPLE_DB_ID, expected_sql="SELECT 1", actual_sql="SELECT 2"),
             CompareRequest(case_id="passes", db=SAMPLE_DB_ID, expected_sql="SELECT 1", actual_sql="SELECT 1")]
    reports = Evaluator(db_dir=sample_dir).evaluate_all(cases)
    assert "internal engine error" in reports[0].explanations[0] and "finite number" in reports[0].explanations[0]
    assert reports[1].deterministic_verdict == "pass" and reports[1].overall_score == 1.0
    assert [Report.model_validate_json(r.model_dump_json()) for r in reports] == reports
