"""Partitions of chunks of cases (``SQLCMP_CASE_CHUNKS``): stable chunk keys, chunk versions from their cases',
only the changed cases of a chunk re-evaluated, per-case verdicts readable on the chunk, broken cases isolated."""

from __future__ import annotations

import importlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from sqlcmp_dagster.assets import LAYERS
from sqlcmp_dagster.assets.case_reports import CASE_VERDICT
from sqlcmp_dagster.assets.chunked import RECOMPUTE_TAG
from sqlcmp_dagster.assets.common import cases_partitions
from sqlcmp_dagster.assets.evaluation_summary import failures_table
from sqlcmp_dagster.assets.sensors import CursorState
from sqlcmp_dagster.cases import chunks
from sqlcmp_dagster.cases.chunks import case_chunks_setting as chunks_setting, chunk_of, partition_versions
from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.cases.suite import load_suites
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.records import reports_from_frame
from sqlcmp_dagster.engine.summary import summarize
from sqlcmp_dagster.event_log import local_instance
from sqlcmp_dagster.local import materialize_summary, sensor_tick
from sqlcmp_dagster.resources.storage import read_asset

#: Chunks in these tests: few, so that chunks hold several cases each.
CHUNKS = 3


@pytest.fixture
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dg.DagsterInstance]:
    home = tmp_path_factory.mktemp("dagster_home")
    with dg.instance_for_test(temp_dir=str(home), overrides=local_instance(str(home / "history" / "runs"))) \
            as test_instance:
        yield test_instance


@pytest.fixture(autouse=True)
def chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions of CHUNKS chunks, as SQLCMP_CASE_CHUNKS=3 at import would set them."""
    monkeypatch.setattr(chunks, "CASE_CHUNKS", CHUNKS)


def _write_cases(folder: Path, cases: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")


def _cases(count: int) -> list[dict[str, Any]]:
    source = [json.loads(line) for line in sample_suite_path().read_text().splitlines()]
    return [{**source[i % len(source)], "case_id": f"c{i:02d}"} for i in range(count)]


def _reports(store: Path) -> dict[str, Report]:
    return {r.case_id: r for r in reports_from_frame(read_asset(str(store), "case_reports"))}


def _evaluated(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """The case ids parsed (Layer 1a) and executed (Layer 1b), as the engine is called for them."""
    parsed_module = importlib.import_module("sqlcmp_dagster.assets.parsed_cases")
    executions_module = importlib.import_module("sqlcmp_dagster.assets.executions")
    parsed: list[str] = []
    executed: list[str] = []
    parse, execute = parsed_module.parse_layer, executions_module.execute_layer

    def counted_parse(request, *rest):  # noqa: ANN001, ANN202
        parsed.append(request.case_id)
        return parse(request, *rest)

    def counted_execute(validation, *rest):  # noqa: ANN001, ANN202
        executed.append(validation.request.case_id)
        return execute(validation, *rest)

    monkeypatch.setattr(parsed_module, "parse_layer", counted_parse)
    monkeypatch.setattr(executions_module, "execute_layer", counted_execute)
    return parsed, executed


def _materialized(instance: dg.DagsterInstance, asset: str) -> Counter[str]:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=10_000).records
    return Counter(r.asset_materialization.partition for r in records if r.asset_materialization)


def test_a_case_s_chunk_depends_on_its_id_only_and_a_chunk_version_on_its_cases() -> None:
    """Adding, removing or editing one case changes its own chunk's version and no other chunk's key or
    version (chunks of consecutive cases would shift every later one)."""
    ids = [f"case-{i}" for i in range(1000)]
    assert {chunk_of(i, 200) for i in ids} <= {f"chunk-{n:03d}" for n in range(200)}
    assert len({chunk_of(i, 200) for i in ids}) > 190  # spread over (nearly) every chunk
    assert max(Counter(chunk_of(i, 200) for i in ids).values()) < 20
    versions = {case_id: "v1" for case_id in ids}
    before = partition_versions(versions)
    assert len(before) == len({chunk_of(i, CHUNKS) for i in ids}) == CHUNKS

    def changed(after: dict[str, str]) -> set[str]:
        return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}

    assert changed(partition_versions({**versions, "case-7": "v2"})) == {chunk_of("case-7", CHUNKS)}
    assert changed(partition_versions({k: v for k, v in versions.items() if k != "case-7"})) == \
        {chunk_of("case-7", CHUNKS)}
    assert changed(partition_versions({**versions, "new": "v1"})) == {chunk_of("new", CHUNKS)}
    assert changed(partition_versions({k: "v2" for k in versions})) == set(before)  # a bump: every chunk


def test_chunks_evaluate_every_case_as_the_library_does_and_show_per_case_verdicts(
        tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance) -> None:
    folder = tmp_path / "cases"
    _write_cases(folder, [{**json.loads(line)} for line in sample_suite_path().read_text().splitlines()])
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    tick = sensor_tick(defs, instance, None)
    cases = load_suites(folder).cases
    assert sorted(tick.added) == sorted({chunk_of(c.case_id, CHUNKS) for c in cases})  # chunks, not cases
    assert instance.get_dynamic_partitions(cases_partitions.name) == tick.added
    assert len(tick.runs) == 1 and tick.runs[0].success
    reports = _reports(tmp_path / "store")
    library = Evaluator(db_dir=sample_dir)
    assert reports.keys() == {c.case_id for c in cases}
    for case in cases:
        expected, got = library.evaluate(case), reports[case.case_id]
        assert (got.deterministic_verdict, got.severity, got.overall_score, got.blocked_reason) == (
            expected.deterministic_verdict, expected.severity, expected.overall_score, expected.blocked_reason)

    # each chunk's materialization and case_verdict result count its cases' outcomes and list those not passed
    by_chunk: dict[str, list[Report]] = {}
    for report in reports.values():
        by_chunk.setdefault(chunk_of(report.case_id, CHUNKS), []).append(report)
    records = instance.fetch_materializations(dg.AssetKey("case_reports"), limit=100).records
    metadata = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
    infos = {info.partition_key: info for info in
             instance.event_log_storage.get_asset_check_partition_info([CASE_VERDICT.spec.key])}
    assert metadata.keys() == infos.keys() == by_chunk.keys()
    for chunk, members in by_chunk.items():
        passed = [r for r in members if r.deterministic_verdict == "pass" and not r.blocked_reason]
        assert (metadata[chunk]["cases"].value, metadata[chunk]["passed"].value) == (len(members), len(passed))
        assert infos[chunk].is_current
        assert infos[chunk].latest_execution_status.value == ("SUCCEEDED" if len(passed) == len(members)
                                                              else "FAILED")
        table = metadata[chunk]["not_passed"].value
        assert all((f"| {r.case_id} |" in table) == (r not in passed) for r in members), chunk
    fail_filter = chunk_of("fail_filter", CHUNKS)
    assert "| fail_filter | fail | moderate issue | selection_predicate |" in metadata[fail_filter]["not_passed"].value

    # the summary's failing cases link to their chunks' pages; it is the library's summary of the reports in
    # their ids' order (the store holds them in its own), ties and lists in the same order
    summary = materialize_summary(defs, instance)
    assert summary.success
    assert read_asset(str(tmp_path / "store"), "case_reports")["case_id"].to_list() != sorted(reports)
    assert json.dumps(summary.output_for_node("evaluation_summary")) == json.dumps(
        summarize(sorted(reports.values(), key=lambda r: r.case_id)))
    failing = summary.get_asset_materialization_events()[0].materialization.metadata["failing_cases"].value
    assert f"[fail_filter](/assets/case_reports?view=partitions&partition={fail_filter})" in failing
    assert failures_table([reports["fail_filter"]]).count(f"partition={fail_filter})") == 1


def test_only_the_edited_case_is_evaluated_again_in_its_chunk(tmp_path: Path, sample_dir: Path,
                                                              instance: dg.DagsterInstance,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "cases"
    cases = _cases(12)
    _write_cases(folder, cases)
    store = tmp_path / "store"
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(store))
    parsed, executed = _evaluated(monkeypatch)
    first = sensor_tick(defs, instance, None)
    assert [run.success for run in first.runs] == [True]
    assert sorted(parsed) == sorted(executed) == [c["case_id"] for c in cases]
    before = read_asset(str(store), "executions")

    unchanged = sensor_tick(defs, instance, first.cursor)
    assert (unchanged.added, unchanged.deleted, unchanged.runs) == ([], [], [])

    parsed.clear(), executed.clear()
    edited = "c05"
    cases[5] = {**cases[5], "actual_sql": "SELECT 42"}
    _write_cases(folder, cases)
    tick = sensor_tick(defs, instance, unchanged.cursor)
    chunk = chunk_of(edited, CHUNKS)
    assert [run.dagster_run.tags.get("dagster/partition") for run in tick.runs] == [chunk]  # its chunk only
    assert tick.runs[0].success
    assert (parsed, executed) == ([edited], [edited])  # its chunk's other cases: their stored rows
    for asset in LAYERS:
        counts = _materialized(instance, asset.key.path[-1])
        assert counts == Counter({key: 1 for key in first.added}) + Counter({chunk: 1}), asset.key
    assert _reports(store)[edited].metrics["validation"]["normalized_sql_actual"] == "select 42"
    after = read_asset(str(store), "executions")
    neighbours = [c["case_id"] for c in cases if chunk_of(c["case_id"], CHUNKS) == chunk and c["case_id"] != edited]
    assert neighbours  # the chunk holds other cases, whose rows are the ones the first run stored
    for case_id in neighbours:
        old, new = (frame.filter(pl.col("case_id") == case_id).to_dicts() for frame in (before, after))
        assert old == new, case_id

    # a case taken out: its chunk runs again (evaluating nothing) and its rows leave the store
    parsed.clear(), executed.clear()
    removed = cases.pop(0)["case_id"]
    _write_cases(folder, cases)
    tick = sensor_tick(defs, instance, tick.cursor)
    assert [run.dagster_run.tags.get("dagster/partition") for run in tick.runs] == [chunk_of(removed, CHUNKS)]
    assert tick.runs[0].success and (parsed, executed) == ([], [])
    assert removed not in _reports(store) and len(_reports(store)) == 11
    quiet = sensor_tick(defs, instance, tick.cursor)
    assert quiet.runs == []

    # every case of a chunk taken out: its partition goes, and its rows and marks leave the store
    gone = chunk_of(cases[0]["case_id"], CHUNKS)
    marks = {path.stem for path in (store / "_case_marks").glob("*.json")}
    assert gone in marks
    cases = [c for c in cases if chunk_of(c["case_id"], CHUNKS) != gone]
    _write_cases(folder, cases)
    last = sensor_tick(defs, instance, quiet.cursor)
    assert last.deleted == [gone]
    assert {path.stem for path in (store / "_case_marks").glob("*.json")} == marks - {gone}
    assert sorted(_reports(store)) == sorted(c["case_id"] for c in cases)


def test_a_behaviour_bump_re_evaluates_every_case_of_every_chunk_once(
        tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunk-mode counterpart of the per-case test: the report-behaviour version is part of every case's
    version, so of every chunk's; a bump requests every chunk again and re-evaluates every case once."""
    from sqlcmp_dagster.engine import version

    folder = tmp_path / "cases"
    _write_cases(folder, _cases(8))
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    parsed, _ = _evaluated(monkeypatch)
    first = sensor_tick(defs, instance, None)
    assert [r.success for r in first.runs] == [True] and len(parsed) == 8
    unchanged = sensor_tick(defs, instance, first.cursor)
    assert unchanged.runs == []

    parsed.clear()
    monkeypatch.setattr(version, "ENGINE_VERSION",
                        f"{version.PACKAGE_VERSION}+behaviour.{version.REPORT_BEHAVIOUR_VERSION + 1}")
    bumped = sensor_tick(defs, instance, unchanged.cursor)
    assert [r.success for r in bumped.runs] == [True]
    done = CursorState.read(unchanged.cursor).done  # chunk -> version
    (request,) = CursorState.read(bumped.cursor).pending.values()
    assert request["cases"].keys() == done.keys() == set(first.added)
    assert all(request["cases"][k] != v for k, v in done.items())
    assert sorted(parsed) == [f"c{i:02d}" for i in range(8)]  # every case once, none reused at the old version
    assert sensor_tick(defs, instance, bumped.cursor).runs == []


def test_a_failed_run_s_cases_are_evaluated_again_and_a_recompute_tag_forces_it(
        tmp_path: Path, sample_dir: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case is reused only once every layer stored its rows at its version: after a run that failed past its
    first layers, the retry evaluates its cases again. A run tagged sqlcmp/recompute re-evaluates everything."""
    structural = importlib.import_module("sqlcmp_dagster.assets.structural_diffs")
    from sqlcmp_dagster.engine.structure import StructuralComparison

    folder = tmp_path / "cases"
    _write_cases(folder, _cases(4))
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    parsed, _ = _evaluated(monkeypatch)
    with monkeypatch.context() as broken:  # a failed contract: parsed_cases and executions stored, nothing after
        broken.setattr(structural, "structural_layer", lambda validation: {0: StructuralComparison(
            normalized_sql_match=False, clause_match={}, clause_weighted_distance=7.0)})
        failed = sensor_tick(defs, instance, None)
        assert [run.success for run in failed.runs] == [False]
    parsed.clear()
    retried = sensor_tick(defs, instance, failed.cursor)
    assert [run.success for run in retried.runs] == [True]
    assert sorted(parsed) == ["c00", "c01", "c02", "c03"]  # not reused: their later layers never stored them
    assert len(_reports(tmp_path / "store")) == 4

    parsed.clear()
    run = dg.materialize(LAYERS, instance=instance, resources=defs.resources,
                         partition_key=retried.runs[0].dagster_run.tags.get("dagster/partition") or
                         instance.get_dynamic_partitions(cases_partitions.name)[0])
    assert run.success and parsed == []  # unchanged: reused
    forced = dg.materialize(LAYERS, instance=instance, resources=defs.resources, tags={RECOMPUTE_TAG: "1"},
                            partition_key=instance.get_dynamic_partitions(cases_partitions.name)[0])
    assert forced.success and parsed  # evaluated again


def test_a_broken_case_never_sinks_the_others_of_its_chunk(tmp_path: Path, sample_dir: Path,
                                                           instance: dg.DagsterInstance,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "CASE_CHUNKS", 1)  # every case in one chunk
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "suite.jsonl").write_text(
        '{"case_id": "good", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"}\n'
        '{"case_id": "nodb", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "missing"}\n'
        '{"case_id": "bad", "expected_sql": "SELECT 1", "actual_sql": "SELEC nothing FROM", "db": "shop"}\n'
        "this line is not JSON\n", encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    tick = sensor_tick(defs, instance, None)
    assert tick.added == ["chunk-0"] and [r.success for r in tick.runs] == [True]
    reports = _reports(tmp_path / "store")
    assert reports.keys() == {"good", "nodb", "bad"}
    assert reports["good"].deterministic_verdict == "pass"
    assert reports["nodb"].blocked_reason == "execution_failure"
    assert "database 'missing' not found" in reports["nodb"].explanations[0]
    assert reports["bad"].deterministic_verdict != "pass"


def test_the_sensor_reads_again_only_the_suite_files_or_databases_that_changed(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sensor keeps its scan of the suite folder in the case store: an unchanged tick reads no suite file, an
    edited case's line is read again (and only it), a database whose content changed re-versions its cases, and
    the versions are those of a full scan every time."""
    import shutil

    from sqlcmp_dagster.assets import suite_scan
    from sqlcmp_dagster.assets.sensors import changed_case_runs
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource
    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    folder = tmp_path / "cases"
    _write_cases(folder, _cases(6))
    (folder / "other.jsonl").write_text(json.dumps({**_cases(1)[0], "case_id": "o1"}) + "\n", encoding="utf-8")
    databases = tmp_path / "db"
    shutil.copytree(sample_dir, databases)
    read: list[str] = []  # the case ids whose line was parsed and hashed
    version_of = suite_scan.case_version

    def counted(case, fingerprint):  # noqa: ANN001, ANN202
        read.append(case.case_id)
        return version_of(case, fingerprint)

    monkeypatch.setattr(suite_scan, "case_version", counted)
    store = PartitionedParquetIOManager(base_path=str(tmp_path / "store"))
    resources = CaseSuiteResource(folder=str(folder)), DatabaseResource(db_dir=str(databases))

    def versions(kept: bool = True) -> dict[str, str]:
        """The version of each case, as a first tick (no cursor) requests them."""
        result = changed_case_runs(*resources, [], None, lambda ids: {}, store=store if kept else None)
        return {case: version for request in CursorState.read(result.cursor).pending.values()
                for case, version in request["cases"].items()}

    monkeypatch.setattr(chunks, "CASE_CHUNKS", 0)  # versions by case, to compare them one by one
    first = versions()
    assert sorted(read) == sorted(first) and len(first) == 7
    read.clear()
    assert versions() == first and read == []  # nothing changed: nothing read
    cases = _cases(6)
    cases[2] = {**cases[2], "actual_sql": "SELECT 42"}
    _write_cases(folder, cases)
    edited = versions()
    assert read == ["c02"] and {k for k in first if edited[k] != first[k]} == {"c02"}  # its line alone
    assert versions(kept=False) == edited  # as a full scan has them
    read.clear()
    with (databases / next(p.name for p in databases.iterdir())).open("ab") as handle:
        handle.write(b"\0" * 512)  # the database's content changed: every case of it has a new version
    changed = versions()
    assert sorted(read) == sorted(edited)
    assert all(changed[k] != edited[k] for k in edited)


def test_a_tick_reads_new_suite_lines_for_a_bounded_time_and_the_next_goes_on(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SCAN_SECONDS a tick stops reading the suite (after the line it is on), keeps what it read, requests and
    deletes nothing, and the next tick goes on from there: a first tick over 100,000 cases stays short."""
    from sqlcmp_dagster.assets import suite_scan
    from sqlcmp_dagster.assets.sensors import changed_case_runs
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource
    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    folder = tmp_path / "cases"
    _write_cases(folder, _cases(3))
    store = PartitionedParquetIOManager(base_path=str(tmp_path / "store"))
    resources = CaseSuiteResource(folder=str(folder)), DatabaseResource(db_dir=str(sample_dir))
    monkeypatch.setattr(suite_scan, "SCAN_SECONDS", -1.0)  # out of time at once: one new line a tick
    skipped = []
    cursor = None
    for _ in range(3):
        result = changed_case_runs(*resources, ["chunk-0"], cursor, lambda ids: {}, store=store)
        assert not result.run_requests and not result.dynamic_partitions_requests  # nothing deleted meanwhile
        skipped.append(result.skip_reason.skip_message if result.skip_reason else None)
        cursor = result.cursor
    assert skipped == [f"reading the suite folder: {n} case(s) read so far, the rest at the next tick"
                       for n in (1, 2, 3)]
    done = changed_case_runs(*resources, [], cursor, lambda ids: {}, store=store)
    assert len(done.run_requests or []) == 1  # the whole suite known: its chunks requested
    assert {k for r in CursorState.read(done.cursor).pending.values() for k in r["cases"]} == \
        {chunk_of(f"c{i:02d}", CHUNKS) for i in range(3)}


def test_the_nightly_run_evaluates_every_case_again(instance: dg.DagsterInstance) -> None:
    """The nightly schedule evaluates all cases, as it says: its run carries sqlcmp/recompute, without which a
    run of unchanged chunks would reuse every case."""
    from sqlcmp_dagster.assets.jobs import nightly_evaluation

    instance.add_dynamic_partitions(cases_partitions.name, ["chunk-0", "chunk-1", "chunk-2"])
    requests = nightly_evaluation(dg.build_schedule_context(instance=instance))
    assert isinstance(requests, list) and len(requests) == 1
    request = requests[0]
    assert RECOMPUTE_TAG in request.tags
    assert (request.tags["dagster/asset_partition_range_start"], request.tags["dagster/asset_partition_range_end"]) \
        == ("chunk-0", "chunk-2")


@pytest.mark.parametrize(("value", "chunks"), [("", 0), ("0", 0), ("200", 200), (" 7 ", 7)])
def test_the_setting_reads_a_number_of_chunks_and_unset_means_per_case(monkeypatch: pytest.MonkeyPatch, value: str,
                                                                       chunks: int) -> None:
    monkeypatch.setenv("SQLCMP_CASE_CHUNKS", value)
    assert chunks_setting() == chunks


@pytest.mark.parametrize("value", ["-1", "ten", "2.5"])
def test_a_setting_that_is_no_whole_number_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SQLCMP_CASE_CHUNKS", value)
    with pytest.raises(ValueError, match="SQLCMP_CASE_CHUNKS must be a whole number of chunks"):
        chunks_setting()


def test_the_failure_table_keeps_the_most_severe_cases_first_whatever_their_number() -> None:
    """Fed one report at a time (the summary never holds every report), the table lists the ``limit`` failures
    a full sort puts first (the most severe, invalid cases last, then by id) and counts the others."""
    import random
    import types

    from sqlcmp_dagster.assets.evaluation_summary import FailureTable

    severities = ["minor issue", "moderate issue", "major issue", "critical failure"]
    reports = [types.SimpleNamespace(
        case_id=f"c{i:03d}", deterministic_verdict="pass" if i % 5 == 0 else "fail", validity={},
        severity="pass" if i % 5 == 0 else severities[i % 4], explanations=[f"why {i}"],
        diagnostic_scores={"likely_source_clause": "join"}, blocked_reason=None, evidence={}, metrics={})
        for i in range(300)]
    random.Random(7).shuffle(reports)
    table = FailureTable(limit=7)
    for report in reports:
        table.add(report)  # type: ignore[arg-type]
    failing = sorted((r for r in reports if r.deterministic_verdict == "fail"),
                     key=lambda r: (-severities.index(r.severity), r.case_id))
    listed = [line.split("]")[0].removeprefix("| [") for line in table.table().splitlines()[2:9]]
    assert listed == [r.case_id for r in failing[:7]]
    assert table.table().endswith(f"{len(failing) - 7} more: case_reports, Checks, case_verdict, Partitions lists "
                                  "them all.")
    assert failures_table(reports, limit=7) == table.table()  # type: ignore[arg-type]
