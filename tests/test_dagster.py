"""The Dagster pipeline: partitions follow the suite folder, only changed cases re-run, contracts block."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import weakref
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
import polars as pl
import pytest

from conftest import JUDGE_PASS
from sqlcmp_dagster.assets import LAYERS, evaluation_summary
from sqlcmp_dagster.assets.case_reports import CASE_VERDICT
from sqlcmp_dagster.assets.common import LAYER_ASSETS, RANGE_END, RANGE_START, case_reports_key, cases_partitions
from sqlcmp_dagster.assets.evaluation_summary import ROBUST_FIGURES
from sqlcmp_dagster.assets.sensors import LAUNCH_GRACE_SECONDS, MAX_ATTEMPTS, REQUEST_TAG, CursorState, \
    changed_case_runs
from sqlcmp_dagster.cases.sample import sample_db_dir, sample_suite_path
from sqlcmp_dagster.cases.suite import load_suites
from sqlcmp_dagster.contracts import CONTRACT_CHECK, contract_check
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.records import reports_from_frame, typed_frame
from sqlcmp_dagster.resources import DatabaseResource
from sqlcmp_dagster.resources.storage import read_asset
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.summary import robust_line, summarize
from sqlcmp_dagster.reporting.cases import outcome
from sqlcmp_dagster.event_log import local_instance
from sqlcmp_dagster.local import materialize_summary, sensor_tick


@pytest.fixture
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dg.DagsterInstance]:
    """A local instance as ``sqlcmp demo`` configures it (the batched SQLite event log)."""
    home = tmp_path_factory.mktemp("dagster_home")
    with dg.instance_for_test(temp_dir=str(home), overrides=local_instance(str(home / "history" / "runs"))) \
            as test_instance:
        yield test_instance


def _materialized_partitions(instance: dg.DagsterInstance, asset: str) -> Counter[str]:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=10_000).records
    return Counter(r.asset_materialization.partition for r in records if r.asset_materialization)


def _reports(storage: Path) -> dict[str, Report]:
    frames = [pl.read_parquet(p) for p in (storage / "case_reports").glob("*.parquet")]
    return {r.case_id: r for f in frames for r in reports_from_frame(f)}


def _write_cases(folder: Path, count: int) -> list[dict[str, object]]:
    """``count`` cases cycling over the bundled suite's, each with an id of its own."""
    source = [json.loads(line) for line in sample_suite_path().read_text().splitlines()]
    cases = [{**source[i % len(source)], "case_id": f"c{i:02d}"} for i in range(count)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return cases


def test_sample_through_dagster_matches_the_library(tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    defs = build_definitions(cases_dir=str(sample_suite_path().parent), db_dir=str(sample_dir),
                             storage_dir=str(tmp_path / "store"))
    reads, decodes = _count_store_reads_and_decodes(monkeypatch)
    tick = sensor_tick(defs, instance, None)
    assert len(tick.added) == 34 and len(tick.runs) == 1 and tick.runs[0].success
    # within the run, each layer gets the frames its upstream layers stored in memory, and the validations the
    # Layer 1 records (parsed, executed) were written from: no record is decoded in the process that wrote it
    assert reads == []
    assert decodes == []
    reports = _reports(tmp_path / "store")
    library = Evaluator(db_dir=sample_dir)
    for case in load_suites(sample_suite_path().parent).cases:
        expected = library.evaluate(case)
        got = reports[case.case_id]
        assert (got.deterministic_verdict, got.severity, got.overall_score, got.blocked_reason, got.error_types) == (
            expected.deterministic_verdict, expected.severity, expected.overall_score, expected.blocked_reason,
            expected.error_types), case.case_id
        assert got.diagnostic_scores == expected.diagnostic_scores, case.case_id
        assert got.metrics["result"] == expected.metrics["result"], case.case_id
    _query_the_store_as_the_readme_does(tmp_path / "store", [library.evaluate(c) for c in
                                                           load_suites(sample_suite_path().parent).cases])
    _failing_cases_are_found_per_partition(instance, reports)
    _layer_frames_convert_as_polars_does(tmp_path / "store")
    schema = defs.resolve_asset_graph().get(dg.AssetKey("diagnostics")).metadata["dagster/column_schema"]
    assert {c.name: c.type for c in schema.columns}["likely_source_clause"] == "String"
    summary = materialize_summary(defs, instance)
    assert summary.success
    value = summary.output_for_node("evaluation_summary")
    assert (value["cases"], value["passed"], value["invalid_cases"]) == (34, 11, 1)
    # added up in the cases' ids' order, as with chunks of cases (ties and lists in that order)
    assert json.dumps(value) == json.dumps(summarize(sorted(reports.values(), key=lambda r: r.case_id)))
    metadata = summary.get_asset_materialization_events()[0].materialization.metadata
    assert "█" in metadata["severity"].value and metadata["pass_rate_%"].value == round(100 * 11 / 33, 2)
    for name in ROBUST_FIGURES:  # numbers beside pass_rate, so the Plots tab draws their trend
        key = f"{name}_%" if name.endswith("_rate") else name
        assert isinstance(metadata[key], (dg.IntMetadataValue, dg.FloatMetadataValue)), name
    assert (metadata["robust_passes"].value, metadata["passes_with_counterexample"].value) == (
        value["robust_passes"], value["passes_with_counterexample"])
    assert metadata["robust_pass_rate_%"].value == pytest.approx(100 * value["robust_pass_rate"], abs=0.005)
    assert metadata["passes_not_searched"].value == value["passes_not_searched"]
    assert metadata["robustness"].value == robust_line(value)  # the rate in words, with the passes not searched


def test_a_suite_url_s_password_is_not_stored_and_a_later_step_opens_the_suite_s_database(
        tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance, pg_service: tuple[str, str]) -> None:
    """A case whose ``db`` is a URL with a password: the layers' records kept it whole in the store (a local
    folder or a bucket, beside no suite: a review's finding). A record now keeps it as ***, and a step that decodes
    a record (another process: here the records this process kept are dropped between the steps) opens the
    database the suite names, so the case's fix is verified on it as in one process."""
    import sqlalchemy as sa

    from sqlcmp_dagster.assets import common, executions, parsed_cases

    password = sa.make_url(pg_service[0]).password
    assert password
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "suite.jsonl").write_text(json.dumps({"case_id": "pg", "expected_sql": "SELECT 1 AS a",
                                                    "actual_sql": "SELECT 2 AS a", "db": pg_service[0]}) + "\n",
                                        encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    instance.add_dynamic_partitions(cases_partitions.name, ["pg"])
    assert dg.materialize([parsed_cases, executions], instance=instance, resources=defs.resources,
                          partition_key="pg").success
    common.RECORDS.clear()
    assert dg.materialize(LAYERS, selection=[a.key for a in LAYERS if a not in (parsed_cases, executions)],
                          instance=instance, resources=defs.resources, partition_key="pg").success
    report = _reports(tmp_path / "store")["pg"]
    fix = (report.diagnostic_scores or {})["suggested_fix"]
    assert report.deterministic_verdict == "fail" and fix["found"] is True and fix["verified_by"] == "execution"
    stored = [pl.read_parquet(path).select(pl.col(pl.Utf8)).write_ndjson()
              for path in (tmp_path / "store").rglob("*.parquet")]
    assert len(stored) >= len(LAYERS) and any("SELECT 2" in text for text in stored)
    assert not any(f":{password}@" in text for text in stored)


def test_a_suite_url_changed_since_its_case_was_parsed_is_not_opened_with_the_hidden_password(
        tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance, pg_service: tuple[str, str]) -> None:
    """A record keeps a URL's password as ***; when the suite names another database for the case by the time a
    later step (in another process) reads the record, that step says so, where it logged in with *** as the
    password (a review's finding)."""
    import sqlalchemy as sa

    from sqlcmp_dagster.assets import common, parsed_cases

    folder = tmp_path / "cases"
    folder.mkdir()
    suite = folder / "suite.jsonl"

    def write(url: str) -> None:
        suite.write_text(json.dumps({"case_id": "pg", "expected_sql": "SELECT 1 AS a", "actual_sql": "SELECT 1 AS a",
                                     "db": url}) + "\n", encoding="utf-8")

    write(pg_service[0])
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    instance.add_dynamic_partitions(cases_partitions.name, ["pg"])
    assert dg.materialize([parsed_cases], instance=instance, resources=defs.resources, partition_key="pg").success
    common.RECORDS.clear()
    write(sa.make_url(pg_service[0]).set(host="localhost").render_as_string(hide_password=False))
    assert dg.materialize(LAYERS, selection=[a.key for a in LAYERS if a is not parsed_cases], instance=instance,
                          resources=defs.resources, partition_key="pg").success
    report = _reports(tmp_path / "store")["pg"]
    assert report.blocked_reason == "execution_failure"
    assert "the suite no longer names that database for case 'pg'" in report.explanations[0]


def _count_store_reads_and_decodes(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """Record each read of the case store (by asset) and each Layer 1 record decoded (by its text)."""
    storage = importlib.import_module("sqlcmp_dagster.resources.storage")
    common = importlib.import_module("sqlcmp_dagster.assets.common")
    reads: list[str] = []
    decodes: list[str] = []
    read_all, decode = storage.stored_rows, common.validation_from_record

    def read(folder, keys):  # noqa: ANN001, ANN202
        reads.append(folder.name)
        return read_all(folder, keys)

    def decoded(text, frames):  # noqa: ANN001, ANN202
        decodes.append(text)
        return decode(text, frames)

    monkeypatch.setattr(storage, "stored_rows", read)
    monkeypatch.setattr(common, "validation_from_record", decoded)
    common.RECORDS.clear()  # another test may have decoded the same records in this process
    return reads, decodes


def _failing_cases_are_found_per_partition(instance: dg.DagsterInstance, reports: dict[str, Report]) -> None:
    """case_reports' case_verdict check has one result per partition: failed (a warning) exactly for the cases
    that did not pass, while the run itself succeeded."""
    key = CASE_VERDICT.spec.key
    infos = instance.event_log_storage.get_asset_check_partition_info([key])
    # current = the result targets the partition's latest materialization; the UI shows any other as missing
    assert infos and all(info.is_current for info in infos)
    status = {info.partition_key: info.latest_execution_status.value for info in infos}
    assert status == {case_id: "SUCCEEDED" if outcome(report) == "pass" else "FAILED"
                      for case_id, report in reports.items()}
    assert "FAILED" in status.values() and "SUCCEEDED" in status.values()
    failed = instance.event_log_storage.get_asset_check_execution_history(
        key, limit=100, status={AssetCheckExecutionRecordStatus.FAILED})
    evaluations = [record.event.dagster_event.event_specific_data for record in failed]
    assert {e.partition for e in evaluations} == {k for k, v in status.items() if v == "FAILED"}
    assert {e.severity for e in evaluations} == {dg.AssetCheckSeverity.WARN}
    assert all(e.metadata["outcome"].value == outcome(reports[e.partition]) for e in evaluations)


def _layer_frames_convert_as_polars_does(store: Path) -> None:
    """Each layer's rows (every kind of value the layers store: nested structs, lists, binary records, floats)
    become the same frame through Arrow (``typed_frame``) as through polars' own conversion."""
    for name in LAYER_ASSETS:
        frame = read_asset(str(store), name)
        rows, schema = frame.to_dicts(), dict(frame.schema)
        assert frame.height == 34 and typed_frame(rows, schema).equals(frame), name
        assert pl.DataFrame(rows, schema=schema, orient="row").equals(frame), name


def _query_the_store_as_the_readme_does(store: Path, reports: list[Report]) -> None:
    """docs/dagster.md's queries over the Parquet store (DuckDB and polars) agree with the library's reports."""
    import duckdb

    clauses = dict(duckdb.sql(f"SELECT likely_source_clause, count(*) FROM '{store}/diagnostics/*.parquet' "
                              "GROUP BY 1").fetchall())
    assert clauses == Counter((r.diagnostic_scores or {}).get("likely_source_clause") for r in reports)
    failed = (pl.scan_parquet(f"{store}/case_reports/*.parquet").filter(pl.col("deterministic_verdict") == "fail")
              .select("case_id", "severity", pl.col("diagnostic_scores").struct.field("likely_source_clause"))
              .collect())
    assert sorted(failed["case_id"]) == sorted(r.case_id for r in reports if r.deterministic_verdict == "fail")
    assert dict(zip(failed["case_id"], failed["likely_source_clause"])) == {
        r.case_id: (r.diagnostic_scores or {}).get("likely_source_clause") for r in reports
        if r.deterministic_verdict == "fail"}


def test_only_the_edited_case_re_materializes(tmp_path: Path, sample_dir: Path,
                                              instance: dg.DagsterInstance) -> None:
    folder = tmp_path / "cases"
    cases = _write_cases(folder, 50)
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    first = sensor_tick(defs, instance, None)
    assert len(first.added) == 50 and len(first.runs) == 1 and first.runs[0].success  # one run, in batch
    before = {a.key.path[-1]: _materialized_partitions(instance, a.key.path[-1]) for a in LAYERS}
    assert all(counts == Counter({f"c{i:02d}": 1 for i in range(50)}) for counts in before.values())

    unchanged = sensor_tick(defs, instance, first.cursor)
    assert (unchanged.added, unchanged.deleted, unchanged.runs) == ([], [], [])

    cases[17] = {**cases[17], "actual_sql": "SELECT 42"}
    (folder / "suite.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    edited = sensor_tick(defs, instance, unchanged.cursor)
    assert [r.dagster_run.tags.get("dagster/partition") for r in edited.runs] == ["c17"]
    for asset in LAYERS:
        counts = _materialized_partitions(instance, asset.key.path[-1])
        assert counts == before[asset.key.path[-1]] + Counter({"c17": 1}), asset.key
    assert _reports(tmp_path / "store")["c17"].metrics["validation"]["normalized_sql_actual"] == "select 42"

    (folder / "suite.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases[:49]), encoding="utf-8")
    removed = sensor_tick(defs, instance, edited.cursor)
    assert removed.deleted == ["c49"] and removed.runs == []
    assert "c49" not in instance.get_dynamic_partitions(cases_partitions.name)


def test_a_case_is_stale_when_its_test_suite_or_the_database_resources_defaults_change(
        tmp_path: Path, instance: dg.DagsterInstance) -> None:
    """A review's findings: a case's data version held its database's content alone, so editing another database
    of its Spider test suite (which decides ``spider_test_suite_match``) requested no run and left the report
    stale; and it held the case as written, without the database resource's defaults (``max_result_rows``,
    ``query_timeout_ms``), which are the case's config where it sets none."""
    folder, databases = tmp_path / "cases", tmp_path / "dbs"
    (databases / "shop").mkdir(parents=True)
    for name in ("shop", "shop_ts1"):
        with sqlite3.connect(databases / "shop" / f"{name}.sqlite") as connection:
            connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
            connection.executemany("INSERT INTO t VALUES (?, ?, ?)", [(1, "a", 10.0), (2, "b", 20.0), (3, "c", 30.0)])
        connection.close()
    folder.mkdir()
    (folder / "suite.jsonl").write_text(json.dumps(
        {"case_id": "c", "expected_sql": "SELECT name FROM t WHERE price > 15", "db": "shop",
         "actual_sql": "SELECT name FROM t WHERE price >= 20"}) + "\n", encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(databases), storage_dir=str(tmp_path / "store"))

    def report() -> Report:
        return _reports(tmp_path / "store")["c"]

    first = sensor_tick(defs, instance, None)
    assert len(first.runs) == 1 and report().metrics["validation"]["spider_test_suite_match"] is True
    with sqlite3.connect(databases / "shop" / "shop_ts1.sqlite") as connection:
        connection.execute("INSERT INTO t VALUES (4, 'd', 17.0)")  # tells the two queries apart there
    connection.close()
    edited = sensor_tick(defs, instance, first.cursor)
    assert len(edited.runs) == 1 and report().metrics["validation"]["spider_test_suite_match"] is False
    assert sensor_tick(defs, instance, edited.cursor).runs == []

    capped = dg.Definitions(assets=defs.assets, jobs=defs.jobs, sensors=defs.sensors, resources={
        **(defs.resources or {}), "database": DatabaseResource(db_dir=str(databases), max_result_rows=1)})
    again = sensor_tick(capped, instance, edited.cursor)
    assert len(again.runs) == 1
    assert "result truncated to max_result_rows=1 rows" in report().warnings  # the resource's cap, now the case's


def test_databases_in_wal_mode_make_no_case_stale_by_being_read(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    """A review's finding: the names of SQLite's files beside a test suite's databases were in each case's data
    version; the run's own read-only connections create a WAL database's ``-wal`` and ``-shm``, and a read-write
    connection that closes deletes them, so unchanged cases ran again tick after tick. In a flat folder, where the
    databases are each other's test suite, a case on one database made the cases on the others stale."""
    folder, databases = tmp_path / "cases", tmp_path / "dbs"
    databases.mkdir()
    for name in ("a", "b"):
        with sqlite3.connect(databases / f"{name}.sqlite") as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
            connection.executemany("INSERT INTO t VALUES (?, ?)", [(1, "x"), (2, "y")])
        connection.close()
    folder.mkdir()
    (folder / "suite.jsonl").write_text("".join(json.dumps(
        {"case_id": name, "expected_sql": "SELECT name FROM t", "actual_sql": "SELECT name FROM t ORDER BY id",
         "db": name}) + "\n" for name in ("a", "b")), encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(databases), storage_dir=str(tmp_path / "store"))
    first = sensor_tick(defs, instance, None)
    assert len(first.runs) == 1 and sorted(_reports(tmp_path / "store")) == ["a", "b"]
    assert (databases / "a.sqlite-wal").exists()  # made by the run's own reads
    second = sensor_tick(defs, instance, first.cursor)
    assert second.runs == []
    reader = sqlite3.connect(databases / "a.sqlite")  # a reader that may write: closing, it deletes the two files
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (2,)
    reader.close()
    assert not (databases / "a.sqlite-wal").exists()
    assert sensor_tick(defs, instance, second.cursor).runs == []


def test_a_broken_case_gets_its_own_report_and_the_others_complete(tmp_path: Path, sample_dir: Path,
                                                                   instance: dg.DagsterInstance) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "suite.jsonl").write_text(
        '{"case_id": "good", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"}\n'
        '{"case_id": "nodb", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "missing"}\n'
        "this line is not JSON\n", encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    instance.add_dynamic_partitions(cases_partitions.name, ["ghost"])  # a partition whose case is gone
    tick = sensor_tick(defs, instance, None)
    assert tick.deleted == ["ghost"]
    instance.add_dynamic_partitions(cases_partitions.name, ["ghost"])
    run = dg.materialize(LAYERS, instance=instance, resources=defs.resources,
                         tags={"dagster/asset_partition_range_start": "good",
                               "dagster/asset_partition_range_end": "ghost"})
    assert run.success
    reports = _reports(tmp_path / "store")
    assert reports["good"].deterministic_verdict == "pass"
    assert reports["nodb"].blocked_reason == "execution_failure"
    assert "database 'missing' not found" in reports["nodb"].explanations[0]
    assert reports["ghost"].blocked_reason == "execution_failure"
    assert "case not found in the suite folder" in reports["ghost"].explanations[0]


def test_layer_assets_are_single_run_backfills_with_blocking_contracts() -> None:
    for asset in LAYERS:
        assert asset.backfill_policy == dg.BackfillPolicy.single_run()
        specs = {spec.name: spec for spec in asset.check_specs}
        assert specs[CONTRACT_CHECK].blocking
        # case_reports also records each case's verdict, per partition and never blocking
        assert set(specs) == ({CONTRACT_CHECK, "case_verdict"} if asset.key == case_reports_key else {CONTRACT_CHECK})
    assert not CASE_VERDICT.spec.blocking and CASE_VERDICT.spec.partitions_def == cases_partitions


def test_a_failed_contract_blocks_downstream_layers(tmp_path: Path, sample_dir: Path,
                                                    instance: dg.DagsterInstance,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("sqlcmp_dagster.assets.structural_diffs")  # the package exports the asset
    folder = tmp_path / "cases"
    _write_cases(folder, 2)
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    instance.add_dynamic_partitions(cases_partitions.name, ["c00", "c01"])
    monkeypatch.setattr(module, "structural_layer", lambda validation: {0: _distance_out_of_range()})
    run = dg.materialize(LAYERS, instance=instance, resources=defs.resources, partition_key="c00",
                         raise_on_error=False)
    assert not run.success
    checks = [e for e in run.get_asset_check_evaluations() if not e.passed]
    assert checks and "clause_weighted_distance" in (checks[0].description or "")
    assert _materialized_partitions(instance, "case_reports") == Counter()


def _distance_out_of_range() -> object:
    from sqlcmp_dagster.engine.structure import StructuralComparison

    return StructuralComparison(normalized_sql_match=False, clause_match={}, clause_weighted_distance=7.0)


def test_code_location_has_assets_jobs_schedule_and_sensor(tmp_path: Path) -> None:
    """What workspace.yaml loads: every asset, the on-demand and summary jobs, the nightly schedule, the sensor."""
    shutil.copytree(sample_suite_path().parent, tmp_path / "cases")
    defs = build_definitions(cases_dir=str(tmp_path / "cases"), storage_dir=str(tmp_path / "store"))
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"parsed_cases", "executions", "structural_diffs", "result_comparisons", "diagnostics",
                    "judgments", "case_reports", "evaluation_summary"}
    assert defs.get_schedule_def("nightly_evaluation").cron_schedule == "0 2 * * *"
    assert defs.get_sensor_def("case_sensor").name == "case_sensor"
    assert defs.resolve_job_def("evaluation_job").partitions_def == cases_partitions


@pytest.mark.parametrize(("store", "outcome"), [("s3://bucket/store", "True"), ("/tmp/sqlcmp-store", "False"),
                                                ("nosuch://bucket/store", "Protocol not known: nosuch")])
def test_the_store_s_filesystem_is_imported_as_the_code_location_loads(store: str, outcome: str) -> None:
    """A deployment's processes import the store's filesystem (s3fs) as they load the code location, not in the
    sensor's first tick or a run's first step; a store no filesystem serves fails the load, naming its protocol."""
    script = "import sys; import sqlcmp_dagster.definitions; print('s3fs' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "SQLCMP_STORAGE_DIR": store},
                          capture_output=True, text=True, timeout=300, check=False)
    said = done.stdout if done.returncode == 0 else done.stderr
    assert outcome in said.splitlines()[-1], done.stderr[-2000:]


def test_loading_the_code_location_changes_nothing_in_the_process_environment() -> None:
    """Importing the definitions (what ``dg dev``, a run worker and a Celery worker do) sets no variable: Dagster's
    event switches come with the batched event log storage, when an instance builds one (test_event_log.py)."""
    script = ("import json, os; import dagster, duckdb, polars, sqlalchemy, sqlglot; "  # their own settings first
              "before = dict(os.environ); import sqlcmp_dagster.definitions; "      # (polars sets its allocator's)
              "print(json.dumps(sorted(set(os.environ.items()) ^ set(before.items()))))")
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("DAGSTER_EVENT", "DAGSTER_EMIT", "SQLCMP_"))}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1], env=environment, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []


def test_resource_settings_from_the_environment_are_read_when_the_resources_are_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A location set in the environment reaches the resources as Dagster's EnvVar (the UI names the variable; a
    run reads it when it builds the resource); one that is not set is the default, fixed at load."""
    for name in ("SQLCMP_CASES_DIR", "SQLCMP_DB_DIR", "SQLCMP_DB_URL", "SQLCMP_STORAGE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SQLCMP_CASES_DIR", str(tmp_path / "first"))
    monkeypatch.setenv("SQLCMP_STORAGE_DIR", "")  # empty is unset
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    defs = build_definitions()
    resources = defs.resources or {}
    assert isinstance(resources["cases"].folder, dg.EnvVar) and resources["cases"].folder.env_var_name == \
        "SQLCMP_CASES_DIR"
    assert resources["database"].url is None and resources["database"].db_dir == str(sample_db_dir())
    assert resources["case_store"].base_path == str(tmp_path / "home" / "sqlcmp_storage")
    monkeypatch.setenv("SQLCMP_CASES_DIR", str(tmp_path / "second"))
    with dg.build_resources({"cases": resources["cases"]}) as built:
        assert built.cases.folder == str(tmp_path / "second")


def test_nightly_schedule_runs_all_cases_in_one_run(instance: dg.DagsterInstance) -> None:
    from sqlcmp_dagster.assets.jobs import nightly_evaluation

    context = dg.build_schedule_context(instance=instance)
    assert isinstance(nightly_evaluation(context), dg.SkipReason)
    instance.add_dynamic_partitions(cases_partitions.name, ["a", "b", "c"])
    requests = nightly_evaluation(dg.build_schedule_context(instance=instance))
    assert isinstance(requests, list) and len(requests) == 1
    assert requests[0].tags["dagster/asset_partition_range_start"] == "a"
    assert requests[0].tags["dagster/asset_partition_range_end"] == "c"


def test_nightly_schedule_splits_its_runs_as_the_backfill_policy_does(instance: dg.DagsterInstance,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With SQLCMP_CASES_PER_RUN=N the nightly evaluation is runs of at most N partitions, covering each once (one
    run over 100,000 cases would hold them all in one process)."""
    jobs = importlib.import_module("sqlcmp_dagster.assets.jobs")
    monkeypatch.setattr("sqlcmp_dagster.assets.common.LAYER_BACKFILL_POLICY", dg.BackfillPolicy.multi_run(2))
    instance.add_dynamic_partitions(cases_partitions.name, ["a", "b", "c", "d", "e"])
    requests = jobs.nightly_evaluation(dg.build_schedule_context(instance=instance))
    assert isinstance(requests, list)
    assert [(request.tags["dagster/asset_partition_range_start"], request.tags["dagster/asset_partition_range_end"])
            for request in requests] == [("a", "b"), ("c", "d"), ("e", "e")]
    assert len({request.run_key for request in requests}) == 3


def test_enabled_judge_annotates_reports_through_the_assets(tmp_path: Path, sample_dir: Path, serve: Any,
                                                            instance: dg.DagsterInstance,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlcmp_dagster.resources import LLMJudgeResource

    # Every deterministic report built from the stored layers, whichever asset builds it (issue 17 item 6: with
    # the judge on, the judgments asset builds it for the prompt and case_reports must not build it again).
    common = importlib.import_module("sqlcmp_dagster.assets.common")
    built: list[str] = []
    build = common.build_report
    monkeypatch.setattr(common, "build_report",
                        lambda validation, analysis: built.append(validation.request.case_id) or build(validation,
                                                                                                     analysis))

    answer = {**JUDGE_PASS, "acceptable_deviation_judgment": "critical", "confidence": 0.9}
    server = serve(lambda n: (200, json.dumps(answer), 0.0))
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "suite.jsonl").write_text(
        '{"case_id": "same", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"}\n'
        '{"case_id": "wrong", "expected_sql": "SELECT name FROM products", "actual_sql": "SELECT name FROM '
        'customers", "db": "shop"}\n', encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    resources = {**defs.resources, "judge": LLMJudgeResource(enabled=True, model="openai/local-test",
                                                             api_base=f"{server.base}", api_key="test")}
    instance.add_dynamic_partitions(cases_partitions.name, ["same", "wrong"])
    run = dg.materialize(LAYERS, instance=instance, resources=resources,
                         tags={"dagster/asset_partition_range_start": "same",
                               "dagster/asset_partition_range_end": "wrong"})
    assert run.success
    reports = _reports(tmp_path / "store")
    assert server.calls == 1, reports["wrong"].run_metadata["judge"]  # the confident pass was skipped
    assert reports["same"].ai_advisory_verdict is None
    assert "high confidence" in reports["same"].run_metadata["judge"]["skipped"]
    wrong = reports["wrong"]
    assert wrong.deterministic_verdict == "fail" and wrong.ai_advisory_verdict == "pass"
    assert wrong.verdict_consistency_flag is False and wrong.metrics["ai_judge"]["confidence"] == 0.9
    assert sorted(built) == ["same", "wrong"]  # once each, for the judge's prompt; case_reports reused them


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _old_garbage() -> weakref.ref[_Cycle]:
    """A weak reference to cyclic garbage in the oldest generation (alive through a full collection, then let go
    of), which only a full collection frees."""
    import gc

    cycle = _Cycle()
    gc.collect()
    alive = weakref.ref(cycle)
    del cycle
    return alive


def test_a_batch_that_collects_first_freezes_no_garbage() -> None:
    """batch_collector(collect_first=True) collects in full before it freezes the heap, so garbage left before it
    is freed; a plain batch freezes it with the rest (out of every collection's sight until the batch ends)."""
    import gc

    from sqlcmp_dagster.engine.collector import batch_collector

    gc.disable()  # no collection of the collector's own choosing in between
    try:
        kept = _old_garbage()
        with batch_collector():
            gc.collect()
            assert kept() is not None  # frozen with the heap
        gone = _old_garbage()
        with batch_collector(collect_first=True):
            assert gone() is None
        gc.collect()
        assert kept() is None
    finally:
        gc.enable()


def test_garbage_a_process_left_before_a_run_does_not_outlive_the_run(tmp_path: Path, sample_dir: Path,
                                                                      instance: dg.DagsterInstance) -> None:
    """A run's first step collects before it freezes the heap: one process running run after run (in-process
    runs, sqlcmp demo) froze each run's garbage again at the next run's steps and grew about 250 MiB a run."""
    folder = tmp_path / "cases"
    _write_cases(folder, 1)
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    instance.add_dynamic_partitions(cases_partitions.name, ["c00"])
    alive = _old_garbage()
    assert dg.materialize(LAYERS, instance=instance, resources=defs.resources, partition_key="c00").success
    assert alive() is None


def test_a_step_freezes_the_heap_it_started_with_and_only_its_own_freeze() -> None:
    """Inside ``batch_collector`` (each layer step's block) the objects alive at its start are frozen (out of the
    collector's full passes) and the collector runs at BATCH_THRESHOLDS; both are undone after it, also when the
    step's generator is closed early; a heap frozen by someone else stays frozen."""
    import gc

    from sqlcmp_dagster.engine.collector import BATCH_THRESHOLDS, batch_collector

    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    with batch_collector():
        assert gc.get_freeze_count() > 0 and gc.get_threshold() == BATCH_THRESHOLDS
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds

    def step() -> Iterator[int]:
        with batch_collector():
            yield 1
            yield 2

    steps = step()
    assert next(steps) == 1 and gc.get_freeze_count() > 0
    steps.close()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds

    # A few frozen objects may be freed meanwhile by threads that earlier tests left running, which the count shows
    # too; an unfreeze would empty it and a freeze of its own would grow it.
    freed_meanwhile = 100
    gc.freeze()
    try:
        theirs = gc.get_freeze_count()
        with batch_collector():
            assert theirs - freed_meanwhile <= gc.get_freeze_count() <= theirs
        assert theirs - freed_meanwhile <= gc.get_freeze_count() <= theirs
    finally:
        gc.unfreeze()


def test_a_behaviour_bump_re_runs_every_case_once_and_an_unchanged_version_nothing(
        tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report-behaviour version is part of every case's data version (the case sensor's cursor) and of each
    layer's code version: a bump requests every case partition again, in one run, and the summary's automation
    follows once; without a bump neither the sensor nor the automation requests anything."""
    from sqlcmp_dagster.engine import version

    folder = tmp_path / "cases"
    _write_cases(folder, 6)
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    graph = defs.resolve_asset_graph()
    assert {graph.get(a.key).code_version for a in LAYERS} == {version.ENGINE_VERSION}
    summary_only = dg.AssetSelection.assets(evaluation_summary)

    def automation(cursor: Any) -> Any:
        return dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=summary_only,
                                                 cursor=cursor)

    automated = automation(None)  # the automation's first tick: the point its "since" counts from
    first = sensor_tick(defs, instance, None)
    assert len(first.added) == 6 and [r.success for r in first.runs] == [True]
    automated = automation(automated.cursor)
    assert automated.total_requested == 1
    assert materialize_summary(defs, instance).success
    before = {a.key.path[-1]: _materialized_partitions(instance, a.key.path[-1]) for a in LAYERS}

    unchanged = sensor_tick(defs, instance, first.cursor)
    assert (unchanged.added, unchanged.deleted, unchanged.runs) == ([], [], [])
    automated = automation(automated.cursor)
    assert automated.total_requested == 0

    monkeypatch.setattr(version, "ENGINE_VERSION",
                        f"{version.PACKAGE_VERSION}+behaviour.{version.REPORT_BEHAVIOUR_VERSION + 1}")
    bumped = sensor_tick(defs, instance, unchanged.cursor)
    assert (bumped.added, bumped.deleted, [r.success for r in bumped.runs]) == ([], [], [True])
    done = CursorState.read(unchanged.cursor).done  # the versions the first run finished
    (request,) = CursorState.read(bumped.cursor).pending.values()
    assert request["cases"].keys() == done.keys() and all(request["cases"][k] != v for k, v in done.items())
    for asset in LAYERS:  # every case exactly once more, in every layer
        name = asset.key.path[-1]
        assert _materialized_partitions(instance, name) == before[name] + Counter(before[name].keys()), name
    automated = automation(automated.cursor)
    assert automated.total_requested == 1
    assert materialize_summary(defs, instance).success

    settled = sensor_tick(defs, instance, bumped.cursor)
    assert settled.runs == []
    assert automation(automated.cursor).total_requested == 0


def test_a_failed_run_s_cases_are_requested_again_and_a_success_settles_them(
        tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case sensor's cursor follows the runs: the cases of a run that failed are requested again on the next
    tick (its runs carry the request's tag), and once a run of them succeeds nothing is requested."""
    module = importlib.import_module("sqlcmp_dagster.assets.structural_diffs")
    folder = tmp_path / "cases"
    _write_cases(folder, 3)
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    with monkeypatch.context() as broken:  # a contract that fails: the run fails, as a lost worker's would
        broken.setattr(module, "structural_layer", lambda validation: {0: _distance_out_of_range()})
        failed = sensor_tick(defs, instance, None)
        assert [run.success for run in failed.runs] == [False]
    retried = sensor_tick(defs, instance, failed.cursor)
    assert [run.success for run in retried.runs] == [True]
    assert retried.runs[0].dagster_run.tags[REQUEST_TAG] == failed.runs[0].dagster_run.tags[REQUEST_TAG]
    assert _materialized_partitions(instance, "case_reports") == Counter({"c00": 1, "c01": 1, "c02": 1})
    assert sensor_tick(defs, instance, retried.cursor).runs == []


def test_the_sensor_waits_for_running_requests_and_gives_up_after_repeated_failures(
        tmp_path: Path, sample_dir: Path) -> None:
    """A request with a run still going is not requested again; one whose runs all failed is, until
    MAX_ATTEMPTS of them failed, when its cases count as done (until they change) with a warning; one that has
    no run at all is requested again after LAUNCH_GRACE_SECONDS."""
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

    folder = tmp_path / "cases"
    _write_cases(folder, 2)
    resources = CaseSuiteResource(folder=str(folder)), DatabaseResource(db_dir=str(sample_dir))
    warned: list[str] = []

    def tick(cursor: str | None, statuses: list[dg.DagsterRunStatus], now: float) -> dg.SensorResult:
        return changed_case_runs(*resources, ["c00", "c01"], cursor, lambda ids: {i: statuses for i in ids},
                                 warned.append, now=now)

    first = tick(None, [], 0)
    assert len(first.run_requests or []) == 1
    request = (first.run_requests or [])[0].tags[REQUEST_TAG]
    status = dg.DagsterRunStatus
    assert not tick(first.cursor, [status.STARTED], 1).run_requests  # still running
    assert not tick(first.cursor, [], LAUNCH_GRACE_SECONDS - 1).run_requests  # not launched yet
    assert [r.tags[REQUEST_TAG] for r in tick(first.cursor, [], LAUNCH_GRACE_SECONDS + 1).run_requests or []] == \
        [request]  # never launched: lost
    again = tick(first.cursor, [status.FAILURE] * (MAX_ATTEMPTS - 1), 2)
    assert [r.tags[REQUEST_TAG] for r in again.run_requests or []] == [request] and warned == []
    given_up = tick(again.cursor, [status.FAILURE] * MAX_ATTEMPTS, 3)
    assert not given_up.run_requests
    assert len(warned) == 1 and f"{MAX_ATTEMPTS} runs of 2 case(s) (c00, c01) failed" in warned[0]
    assert not tick(given_up.cursor, [], 4).run_requests  # settled: not requested until the cases change


def test_a_retry_covers_the_failed_run_s_cases_in_partition_order(tmp_path: Path, sample_dir: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The cursor keeps a request's cases by id (sorted); the retry of a failed range is still the range of
    exactly those cases in partition order (the suite's): before, it ran from the smallest id to the largest,
    an empty range when they were out of order, whose steps failed, or one that left cases out."""
    from sqlcmp_dagster.assets import sensors
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

    monkeypatch.setattr("sqlcmp_dagster.assets.common.LAYER_BACKFILL_POLICY", dg.BackfillPolicy.multi_run(3))
    source = [json.loads(line) for line in sample_suite_path().read_text().splitlines()]
    ids = ["slow", "pass_b", "pass_a", "zeta", "alpha", "mid"]  # two runs of three, neither in id order
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "suite.jsonl").write_text("".join(json.dumps({**source[i], "case_id": case_id}) + "\n"
                                                for i, case_id in enumerate(ids)), encoding="utf-8")
    resources = CaseSuiteResource(folder=str(folder)), DatabaseResource(db_dir=str(sample_dir))
    status = dg.DagsterRunStatus

    def ranges(result: dg.SensorResult) -> list[tuple[str, str]]:
        return [(r.tags[RANGE_START], r.tags[RANGE_END]) for r in result.run_requests or []]

    first = changed_case_runs(*resources, [], None, lambda request_ids: {})
    assert ranges(first) == [("slow", "pass_a"), ("zeta", "mid")]
    retried = changed_case_runs(*resources, ids, first.cursor,
                                lambda request_ids: {i: [status.FAILURE] for i in request_ids}, now=1)
    assert sorted(ranges(retried)) == sorted(ranges(first))
    assert sorted(r.tags[REQUEST_TAG] for r in retried.run_requests or []) == \
        sorted(r.tags[REQUEST_TAG] for r in first.run_requests or [])


def test_failed_summary_runs_are_retried_and_runs_past_their_time_limit_fail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary's automation asks Dagster to retry a failed run (its eager condition would otherwise wait for
    the next case change); the instance settings sqlcmp writes turn on the daemon's run retries and run
    monitoring, which fails a case run past SQLCMP_RUN_MAX_SECONDS so that its cases are requested again."""
    from sqlcmp_dagster.definitions import SUMMARY_RETRIES, summary_sensor
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

    assert summary_sensor.run_tags["dagster/max_retries"] == str(SUMMARY_RETRIES) and SUMMARY_RETRIES >= 1
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=local_instance(str(tmp_path / "runs"))) as local:
        assert local.run_retries_enabled and local.run_monitoring_enabled
        assert not local.telemetry_enabled and not local.nux_enabled
    folder = tmp_path / "cases"
    _write_cases(folder, 1)
    monkeypatch.setenv("SQLCMP_RUN_MAX_SECONDS", "900")
    result = changed_case_runs(CaseSuiteResource(folder=str(folder)), DatabaseResource(db_dir=str(tmp_path)), [],
                               None, lambda ids: {})
    assert [r.tags["dagster/max_runtime"] for r in result.run_requests or []] == ["900"]
    monkeypatch.setenv("SQLCMP_RUN_MAX_SECONDS", "soon")
    with pytest.raises(ValueError, match="SQLCMP_RUN_MAX_SECONDS must be a whole number of seconds"):
        changed_case_runs(CaseSuiteResource(folder=str(folder)), DatabaseResource(db_dir=str(tmp_path)), [], None,
                          lambda ids: {})
