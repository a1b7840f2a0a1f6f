"""The gold side's cache (engine/cache.py): the disk store's keys, bound, eviction, concurrency and damage, and
what the expected-result cache keeps across runs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from unittest import mock

import dagster as dg
import polars as pl
import pytest

from conftest import forget_reports, sqlite_file, untimed
from sqlcmp_dagster.assets import LAYERS
from sqlcmp_dagster.assets.common import cases_partitions
from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import main
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster import journal
from sqlcmp_dagster.engine import cache, fingerprint, published_metrics, spider_execution
from sqlcmp_dagster.engine.atomic import file_state
from sqlcmp_dagster.engine.cache import ENVIRONMENT, ExpectedResults, Store
from sqlcmp_dagster.engine.context import current, reset
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.fingerprint import database_fingerprint
from sqlcmp_dagster.engine.layers import validate
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report
from sqlcmp_dagster.engine.parsing import ParseOutcome
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.records import reports_from_frame
from sqlcmp_dagster.engine.relation import Execution, relation_from_rows
from sqlcmp_dagster.engine.version import REPORT_BEHAVIOUR_VERSION
from sqlcmp_dagster.journal import CaseVersions
from sqlcmp_dagster.resources.database import DatabaseResource


def entry_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and path.name != "evict.lock"]


def test_config_hash_follows_the_options_of_a_config_changed_after_it_was_hashed() -> None:
    """config_hash is remembered by the options' printed JSON, not by the object: a config edited in place (the
    models allow assignment) hashes as a new one with those options would, and back again."""
    config = EvalConfig()
    first = config.config_hash()
    config.neighbor_count = 3
    assert config.config_hash() == EvalConfig(neighbor_count=3).config_hash() != first
    config.neighbor_count = EvalConfig().neighbor_count
    assert config.config_hash() == first == hashlib.sha256(
        json.dumps(EvalConfig().model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]


def test_a_saved_value_loads_back_and_an_unknown_key_misses(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save("execution", "a", {"rows": [(1, "x"), (None, -0.0)]})
    assert store.load("execution", "a") == {"rows": [(1, "x"), (None, -0.0)]}
    assert store.load("execution", "b") is None
    assert store.load("parse", "a") is None  # kinds do not share keys
    assert (tmp_path.stat().st_mode & 0o777) == 0o700


def test_a_folder_others_may_write_to_is_never_read(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    store.save("execution", "a", 1)
    (tmp_path / "cache").chmod(0o777)
    shared = Store(tmp_path / "cache")
    assert shared.load("execution", "a") is None and not shared.info().private
    shared.save("execution", "b", 2)
    (tmp_path / "cache").chmod(0o700)
    assert Store(tmp_path / "cache").load("execution", "a") == 1
    assert Store(tmp_path / "cache").load("execution", "b") is None  # nothing was written there either


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_damaged_entry_is_ignored_deleted_and_rebuilt(tmp_path: Path, damage: str) -> None:
    store = Store(tmp_path)
    store.save("execution", "a", list(range(1000)))
    [path] = entry_files(tmp_path)
    blob = path.read_bytes()
    path.write_bytes({"truncate": blob[: len(blob) // 2], "flip": blob[:-1] + bytes([blob[-1] ^ 1]), "empty": b"",
                      "garbage": os.urandom(len(blob))}[damage])
    assert store.load("execution", "a") is None
    assert not path.exists()
    store.save("execution", "a", list(range(1000)))
    assert store.load("execution", "a") == list(range(1000))


def test_another_engine_or_library_version_misses_every_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert f"+behaviour.{REPORT_BEHAVIOUR_VERSION}" in ENVIRONMENT
    store = Store(tmp_path)
    store.save("execution", "a", 1)
    monkeypatch.setattr(cache, "ENVIRONMENT", ENVIRONMENT.replace(f"+behaviour.{REPORT_BEHAVIOUR_VERSION}",
                                                                  f"+behaviour.{REPORT_BEHAVIOUR_VERSION + 1}"))
    assert store.load("execution", "a") is None
    store.save("execution", "a", 2)
    assert store.load("execution", "a") == 2
    monkeypatch.undo()
    assert store.load("execution", "a") == 1


def test_past_its_bound_the_least_recently_used_entries_go(tmp_path: Path) -> None:
    filling = Store(tmp_path, max_bytes=10**9)
    for index in range(10):
        filling.save("execution", f"k{index}", bytes(2000))
        for path in entry_files(tmp_path):  # the entry just written is the only one with a recent time
            if path.stat().st_mtime > 10**6:
                os.utime(path, (index + 1, index + 1))
    size = entry_files(tmp_path)[0].stat().st_size
    assert filling.load("execution", "k0") is not None  # used again: now the most recent
    bounded = Store(tmp_path, max_bytes=10 * size + size // 2)
    bounded.save("execution", "k10", bytes(2000))  # 11 entries past a bound of 10.5: down to 8.4 entries' bytes
    kept = {f"k{index}" for index in range(11) if bounded.load("execution", f"k{index}") is not None}
    assert kept == {"k0", "k4", "k5", "k6", "k7", "k8", "k9", "k10"}
    assert bounded.info().bytes <= bounded.max_bytes


def test_a_value_over_a_tenth_of_the_bound_is_not_kept(tmp_path: Path) -> None:
    store = Store(tmp_path, max_bytes=10_000)
    store.save("execution", "big", bytes(2000))
    store.save("execution", "small", bytes(100))
    assert store.load("execution", "big") is None and store.load("execution", "small") == bytes(100)


def hammer(root: str, max_bytes: int) -> tuple[list[str], int]:
    """Save and load 30 keys many times over: every wrong value is named, and the loads that missed counted."""
    store = Store(root, max_bytes=max_bytes)
    wrong, missed = [], 0
    for round_ in range(10):
        for index in range(30):
            key, value = f"key{index}", (f"key{index}", bytes(10_000 + index))
            store.save("execution", key, value)
            loaded = store.load("execution", key)
            missed += loaded is None
            if loaded is not None and loaded != value:
                wrong.append(f"round {round_}: {key}")
    return wrong, missed


def test_concurrent_writers_never_expose_half_an_entry(tmp_path: Path) -> None:
    """Three processes write the same keys at once. Within the bound, a value just saved always loads (another
    writer's copy of it is whole too); past the bound, entries go but none is ever read wrong."""
    for max_bytes, folder in ((10**8, tmp_path / "roomy"), (200_000, tmp_path / "tight")):
        with ProcessPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(hammer, [str(folder)] * 3, [max_bytes] * 3))
        assert [wrong for wrong, _ in results] == [[], [], []]
        if max_bytes == 10**8:
            assert [missed for _, missed in results] == [0, 0, 0]
        assert not [path for path in entry_files(folder) if path.name.endswith(".tmp")]  # every write renamed
    assert Store(tmp_path / "tight").info().bytes <= 200_000 + 3 * 11_000  # each writer evicts past the bound


def test_info_counts_entries_by_kind_and_clear_removes_them(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for key in "abc":
        store.save("execution", key, key)
    store.save("parse", "a", "a")
    info = store.info()
    assert info.entries == {"execution": 3, "parse": 1} and info.bytes > 0 and info.root == str(tmp_path)
    assert store.clear() == 4
    assert store.info().entries == {} and store.load("execution", "a") is None


def make_db(path: Path, rows: list[tuple[int, str]]) -> Path:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (id INTEGER, name TEXT)")
        connection.executemany("INSERT INTO t VALUES (?, ?)", rows)
    connection.close()
    return path


def test_a_fingerprint_follows_the_content_not_the_file(tmp_path: Path) -> None:
    first = make_db(tmp_path / "a.sqlite", [(1, "x")])
    copy = tmp_path / "b.sqlite"
    copy.write_bytes(first.read_bytes())
    os.utime(copy, (1, 1))
    assert database_fingerprint(str(first)) == database_fingerprint(str(copy)) is not None
    with sqlite3.connect(copy) as connection:
        connection.execute("UPDATE t SET name = 'y'")
    connection.close()
    assert database_fingerprint(str(copy)) != database_fingerprint(str(first))
    assert database_fingerprint(str(tmp_path / "missing.sqlite")) is None


def test_the_fingerprints_a_process_remembers_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine context keeps the digests of at most FINGERPRINTS_KEPT file states, the least recently used
    dropped first, and reset() forgets them; a rewritten file is digested anew."""
    monkeypatch.setattr(fingerprint, "FINGERPRINTS_KEPT", 2)
    reset()
    paths = [make_db(tmp_path / f"{name}.sqlite", [(1, name)]) for name in "abc"]
    digests = {path: database_fingerprint(str(path)) for path in (paths[0], paths[1], paths[0], paths[2])}
    assert [state[0][0] for state in current().fingerprints.entries] == [str(paths[0]), str(paths[2])]
    assert len(set(digests.values())) == 3
    with sqlite3.connect(paths[0]) as connection:
        connection.execute("INSERT INTO t VALUES (2, 'z')")
    connection.close()
    os.utime(paths[0], ns=(1, 1))  # another version even where the clock's tick would hide the write
    assert database_fingerprint(str(paths[0])) != digests[paths[0]]
    assert not reset().fingerprints.entries


def test_a_log_checkpointed_away_while_the_file_is_read_is_read_again(tmp_path: Path) -> None:
    """A review's suspicion, reproduced: the write-ahead log named in a file's state was deleted before its read (the
    last connection closing checkpoints it), and the digest was None, which a Dagster data version raises on. The
    file is now read again as it is."""
    path = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE t (x INTEGER)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.commit()
    assert (tmp_path / "wal.sqlite-wal").stat().st_size > 0
    digest = hashlib.file_digest

    def checkpointed_meanwhile(file: object, name: str) -> object:
        writer.close()  # the last connection: SQLite checkpoints the log into the file and deletes it
        return digest(file, name)  # type: ignore[arg-type]

    reset()
    with mock.patch.object(hashlib, "file_digest", side_effect=checkpointed_meanwhile):
        adapter = ExecutionAdapter(str(path))
        try:
            first = adapter.fingerprint()
        finally:
            adapter.close()
    assert not (tmp_path / "wal.sqlite-wal").exists()
    assert first == database_fingerprint(str(path)) == hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def test_the_data_version_and_the_cache_read_one_digest_of_a_file(tmp_path: Path) -> None:
    """A case's Dagster data version (the adapter's fingerprint) and the cache's keys hold one digest, computed
    once per file state: the file is read once whichever asks first, and a digest a store kept from an earlier
    run is the data version's too."""
    path = make_db(tmp_path / "one.sqlite", [(1, "x")])
    store = Store(tmp_path / "cache")
    reset()
    adapter = ExecutionAdapter(str(path))
    try:
        digest = adapter.fingerprint()
        assert digest == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        assert database_fingerprint(str(path), store) == digest
        reset()
        with mock.patch.object(hashlib, "file_digest", side_effect=AssertionError("read again")):
            assert database_fingerprint(str(path), store) == digest  # from the store, not the file
            assert adapter.fingerprint() == digest  # from the context the store's answer filled
    finally:
        adapter.close()


def executions(cache_: ExpectedResults, adapter: ExecutionAdapter, sql: str, config: EvalConfig) -> Execution | None:
    key = cache_.key(adapter, "sqlite", sql, config)
    assert key is not None
    return cache_.get(key)


def test_a_changed_database_misses_exactly_its_entries(tmp_path: Path) -> None:
    one, two = make_db(tmp_path / "one.sqlite", [(1, "x")]), make_db(tmp_path / "two.sqlite", [(2, "y")])
    config, sql = EvalConfig(), "SELECT * FROM t"
    adapters = [ExecutionAdapter(str(one)), ExecutionAdapter(str(two))]
    writing = ExpectedResults(store=Store(tmp_path / "cache"))
    for adapter in adapters:
        key = writing.key(adapter, "sqlite", sql, config)
        assert key is not None
        writing.put(key, adapter.execute(sql, timeout_ms=1000, max_rows=100, max_bytes=10**6, max_cell_bytes=1000))
    for adapter in adapters:
        adapter.close()
    with sqlite3.connect(one) as connection:
        connection.execute("INSERT INTO t VALUES (3, 'z')")
    connection.close()
    adapters = [ExecutionAdapter(str(one)), ExecutionAdapter(str(two))]
    reading = ExpectedResults(store=Store(tmp_path / "cache"))  # another run: nothing in memory
    assert executions(reading, adapters[0], sql, config) is None
    hit = executions(reading, adapters[1], sql, config)
    assert hit is not None and hit.relation is not None and hit.relation.to_rows()["rows"] == [[2, "y"]]
    assert executions(reading, adapters[1], sql, EvalConfig(max_result_rows=5)) is None  # other options miss
    assert executions(reading, adapters[1], sql + " ", config) is None  # so does other text
    for adapter in adapters:
        adapter.close()


def test_an_expected_result_that_read_the_clock_or_chance_is_kept_for_its_run_only(tmp_path: Path) -> None:
    """A gold query that reads the clock (in its text, or in a view it reads) or chance may give another result
    tomorrow: the batch reuses it, the disk store does not keep it (a review's finding: an answer identical to
    such a gold query failed against yesterday's result)."""
    path = make_db(tmp_path / "one.sqlite", [(1, "x")])
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE VIEW stamped AS SELECT id, strftime('%s', 'now') AS at FROM t")
    connection.close()
    adapter, config = ExecutionAdapter(str(path)), EvalConfig()
    for sql, kept in (("SELECT id FROM t", True), ("SELECT id, date() FROM t", False),
                      ("SELECT id FROM stamped", False), ("SELECT id FROM t WHERE random() IS NOT NULL", False)):
        batch = ExpectedResults(store=Store(tmp_path / "cache"))
        key = batch.key(adapter, "sqlite", sql, config)
        assert key is not None
        batch.put(key, adapter.execute(sql, timeout_ms=1000, max_rows=100, max_bytes=10**6, max_cell_bytes=1000))
        assert batch.get(key) is not None, sql
        assert (executions(ExpectedResults(store=Store(tmp_path / "cache")), adapter, sql, config) is not None) \
            == kept, sql
    adapter.close()


def test_a_restored_execution_holds_what_was_kept(tmp_path: Path) -> None:
    writing = ExpectedResults(store=Store(tmp_path))
    rows = [(1, "a", None, 2.5, b"\x00"), (None, "b", 3, float("nan"), b"")]
    kept = Execution(True, relation_from_rows(["x", "y", "z", "w", "v"], rows, truncated=True), None, 12.5, ["w1"],
                     steps=2_340_000)
    writing.put("k", kept)
    restored = ExpectedResults(store=Store(tmp_path)).get("k")
    assert restored is not None and restored.relation is not None and kept.relation is not None
    assert restored.relation.names == kept.relation.names and restored.relation.truncated
    assert restored.relation.rows is not None  # rows, as the database gave them: compared as cheaply
    assert restored.relation.frame.equals(kept.relation.frame)
    # the steps decide whether a failing case's fix search runs: a warm run decides as the cold one did
    assert (restored.success, restored.elapsed_ms, restored.warnings, restored.steps) == (True, 12.5, ["w1"], 2_340_000)


def test_failures_are_never_kept(tmp_path: Path) -> None:
    store = Store(tmp_path)
    results = ExpectedResults(store=store)
    results.put("k", Execution(False, None, None, 1.0))
    assert ExpectedResults(store=store).get("k") is None and store.info().entries == {}
    assert not results.parse("SELECT (", "sqlite", 10_000, None).success
    assert store.info().entries == {}


def test_a_parse_is_read_back_as_it_was_computed(tmp_path: Path) -> None:
    sql = "SELECT name FROM t WHERE id IN (SELECT id FROM t) ORDER BY name"
    first = ExpectedResults(store=Store(tmp_path)).parse(sql, "sqlite", 10_000, None)
    second = ExpectedResults(store=Store(tmp_path)).parse(sql, "sqlite", 10_000, None)
    assert Store(tmp_path).info().entries == {"parse": 1}
    assert second is not first and second.tree is not first.tree
    assert (second.normalized_sql, second.tree, second.ast) == (first.normalized_sql, first.tree, first.ast)
    assert ExpectedResults(store=Store(tmp_path)).parse(sql, "duckdb", 10_000, None) is not None
    assert Store(tmp_path).info().entries == {"parse": 2}  # another dialect is another entry


def test_cached_runs_report_as_an_uncached_run_and_skip_the_gold_side(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled suite, cold then warm then with every entry damaged: the reports never change; a warm run
    parses and executes no expected query (none that parsed and ran); a damaged entry is rebuilt."""
    cases = load_suite(sample_suite_path()).cases
    actual_texts = {case.actual_sql for case in cases}
    gold_texts = {sql for case in cases for sql in case.expected_sql} - actual_texts
    executed: Counter[str] = Counter()
    parsed: Counter[str] = Counter()
    execute, parse = ExecutionAdapter.execute, cache.parse

    def counting_execute(self: ExecutionAdapter, sql: str, **kwargs: object) -> Execution:
        if kwargs.get("parsed") is not None and self.database_file == str(sample_dir / f"{SAMPLE_DB_ID}.sqlite"):
            executed[sql] += 1  # Layer 1's executions (not the fix search's, nor any on a neighbor database)
        return execute(self, sql, **kwargs)  # type: ignore[arg-type]

    def counting_parse(sql: str, dialect: str, **kwargs: object) -> ParseOutcome:
        parsed[sql] += 1
        return parse(sql, dialect, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ExecutionAdapter, "execute", counting_execute)
    monkeypatch.setattr(cache, "parse", counting_parse)

    def run(cache_dir: Path | None, workers: int = 1) -> list[object]:
        executed.clear()
        parsed.clear()
        forget_reports()  # each run as a new process
        evaluator = Evaluator(db_dir=sample_dir, default_db=SAMPLE_DB_ID, cache_dir=cache_dir)
        try:
            return [untimed(r.model_dump(mode="json")) for r in evaluator.evaluate_all(cases, workers=workers)]
        finally:
            evaluator.close()

    uncached = run(None)
    gold_run = {sql for sql in gold_texts if executed[sql]}
    assert gold_run  # the suite does execute expected queries
    assert run(tmp_path / "cache") == uncached  # cold: fills the store
    shutil.rmtree(tmp_path / "cache" / "entries" / "report")  # the gold side's entries alone: each case evaluated
    assert run(tmp_path / "cache") == uncached  # warm
    assert not {sql for sql in gold_run if executed[sql]}
    assert not {sql for sql in gold_run if parsed[sql]}
    for path in entry_files(tmp_path / "cache"):
        path.write_bytes(path.read_bytes()[:-7])
    assert run(tmp_path / "cache") == uncached  # every entry damaged: ignored, computed again
    assert {sql for sql in gold_run if executed[sql]} == gold_run
    assert run(tmp_path / "cache", workers=2) == uncached  # rebuilt, and read by worker processes
    shutil.rmtree(tmp_path / "cache" / "entries" / "report")
    assert run(tmp_path / "cache") == uncached and not {sql for sql in gold_run if executed[sql]}


def test_a_database_files_state_holds_its_write_ahead_log_sqlites_and_duckdbs(tmp_path: Path) -> None:
    """A write that sits in the write-ahead log leaves the file's size and time as they were: the state (and so
    every key made from it) holds the log, SQLite's ``-wal`` and DuckDB's ``.wal`` (a review's finding)."""
    path = tmp_path / "db.duckdb"
    path.write_bytes(b"database")
    before = file_state(str(path))
    for log in ("db.duckdb.wal", "db.duckdb-wal"):
        (tmp_path / log).write_bytes(b"a pending write")
        assert file_state(str(path)) != before
        before = file_state(str(path))


def test_the_engines_own_reads_of_a_database_in_wal_mode_leave_its_state_as_it_was(tmp_path: Path) -> None:
    """A read-only connection to a database in WAL mode creates an empty ``-wal`` when there is none and, run as
    root, gives it its owner again at every connection (its change time moves): neither changes the state, or
    nothing would be kept, reused or resumed on such a database (a review's finding)."""
    path = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (x INTEGER)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.commit()
    writer.close()  # the last connection checkpoints and removes the log
    assert not (tmp_path / "wal.sqlite-wal").exists()
    before = file_state(str(path))
    for _ in range(3):
        adapter = ExecutionAdapter(str(path))
        assert adapter.execute("SELECT x FROM t").success
        adapter.close()
    assert (tmp_path / "wal.sqlite-wal").exists() and file_state(str(path)) == before


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL texts every adapter executes, in order (the test clears it between its runs)."""
    executed: list[str] = []
    execute = ExecutionAdapter.execute

    def recording(self: ExecutionAdapter, sql: str, **kwargs: object) -> Execution:
        executed.append(sql)
        return execute(self, sql, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ExecutionAdapter, "execute", recording)
    return executed


def test_a_case_on_a_database_in_wal_mode_gets_its_report_again(tmp_path: Path, ran: list[str]) -> None:
    """The ``-wal`` and ``-shm`` beside a database in WAL mode count among its Spider test suite's databases by
    name (the official rule), and its readers change them: their names key the report, not their states, or no
    case on such a database would be given its report again (a review's finding)."""
    path = sqlite_file(tmp_path / "shop.sqlite", "CREATE TABLE products (name TEXT, price REAL); "
                       "INSERT INTO products VALUES ('a', 20), ('b', 5);")
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
    connection.close()
    case = CompareRequest(case_id="c", user_query="q", expected_sql="SELECT name FROM products WHERE price > 10",
                          actual_sql="SELECT name FROM products WHERE price >= 11")
    for run in range(3):  # each a new process: the first evaluates, the others read the store
        forget_reports()
        ran.clear()
        evaluator = Evaluator(default_db=str(path), cache_dir=tmp_path / "cache")
        try:
            assert evaluator.evaluate_all([case])[0].deterministic_verdict == "pass"
        finally:
            evaluator.close()
        assert (tmp_path / "shop.sqlite-shm").exists() and (case.actual_sql in ran) == (run == 0), run


def test_an_expected_query_served_from_the_cache_counts_its_time_in_the_case_budget(tmp_path: Path) -> None:
    """A review's finding: a cached expected query cost the case nothing, so with a warm cache the actual query got
    the whole of ``case_timeout_ms`` and passed where a run without the cache timed out. Its recorded time now
    counts (``cached_execution_ms``), apart from the time spent executing."""
    path = make_db(tmp_path / "shop.sqlite", [(1, "a"), (2, "b")])
    case = CompareRequest(case_id="c", user_query="q", expected_sql="SELECT name FROM t",
                          actual_sql="SELECT name FROM t ORDER BY 1", db=str(path),
                          config=EvalConfig(query_timeout_ms=5000, case_timeout_ms=1000))
    adapter, kept = ExecutionAdapter(str(path)), ExpectedResults()
    try:
        cold = validate(case, adapter, cache=kept)
        assert cold.actual.execution is not None and cold.actual.execution.success
        assert "cached_execution_ms" not in cold.timings
        key = kept.key(adapter, "sqlite", case.expected_sql[0], case.config)
        assert key is not None and (hit := kept.get(key)) is not None
        earlier = ExpectedResults()  # as an earlier run left it, measured on a busy machine
        earlier.put(key, dataclasses.replace(hit, elapsed_ms=1500.0))
        warm = validate(case, adapter, cache=earlier)
    finally:
        adapter.close()
    assert warm.timings["cached_execution_ms"] == 1500.0
    assert warm.actual.execution is not None and warm.actual.execution.error is not None
    assert warm.actual.execution.error.category == "timeout"  # as it would be had the expected query run that long
    assert "case_timeout_ms=1000 was spent" in warm.actual.execution.error.message


def test_an_expected_result_of_a_database_written_during_its_query_is_not_kept(tmp_path: Path) -> None:
    """A review's finding: a write committed while the expected query ran left the new content's result under the
    old content's key; once the old content was back (a backup restored), every later run read that wrong result
    and failed a right answer. An execution is now kept only when the file's state did not move during it."""
    path = make_db(tmp_path / "shop.sqlite", [(1, "a"), (2, "b")])
    backup = tmp_path / "backup.sqlite"
    shutil.copy(path, backup)
    gold = "SELECT name FROM t ORDER BY name"
    case = CompareRequest(case_id="c", user_query="q", expected_sql=gold, actual_sql="SELECT name FROM t ORDER BY 1",
                          db=str(path))
    execute = ExecutionAdapter.execute
    writes = [True]

    def written_meanwhile(self: ExecutionAdapter, sql: str, **options: object) -> object:
        if sql == gold and writes:
            writes.clear()
            with sqlite3.connect(path) as writer:
                writer.execute("UPDATE t SET name = 'z' WHERE id = 1")
            writer.close()
        return execute(self, sql, **options)  # type: ignore[arg-type]

    def run(cache_dir: Path | None) -> Report:
        forget_reports()
        evaluator = Evaluator(cache_dir=cache_dir)
        try:
            return evaluator.evaluate_all([case])[0]
        finally:
            evaluator.close()

    with mock.patch.object(ExecutionAdapter, "execute", written_meanwhile):
        run(tmp_path / "cache")
    shutil.copy(backup, path)  # the content of before, exactly
    cached, fresh = run(tmp_path / "cache"), run(None)
    assert fresh.deterministic_verdict == "pass"
    assert untimed(cached.model_dump(mode="json")) == untimed(fresh.model_dump(mode="json"))


def _test_suite(folder: Path, *databases: tuple[str, str]) -> Path:
    """A Spider test suite's folder: one SQLite file per (name, script), the first the cases' database."""
    folder.mkdir(parents=True)
    for name, script in databases:
        sqlite_file(folder / f"{name}.sqlite", script)
    return folder / f"{databases[0][0]}.sqlite"


def test_a_report_is_given_again_only_for_the_test_suite_files_it_was_computed_with(tmp_path: Path) -> None:
    """A review's finding: a WAL database of the test suite gets its ``-wal`` and ``-shm`` from the test-suite
    metric's first read of it, after the folder was listed; the report, computed without them, was kept under the
    names found after the case and given to the next case, whose own evaluation counts them (the official rule)."""
    path = _test_suite(tmp_path / "db", ("db", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"),
                       ("db2", "PRAGMA journal_mode=WAL; CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (3);"))
    case = CompareRequest(case_id="a", user_query="q", expected_sql="SELECT a FROM t WHERE a < 3",
                          actual_sql="SELECT a FROM t WHERE a <= 2", db=str(path))
    again = case.model_copy(update={"case_id": "b"})
    forget_reports()
    evaluator = Evaluator(cache_dir=tmp_path / "cache")
    try:
        first, second = evaluator.evaluate_all([case, again])
    finally:
        evaluator.close()
    assert (tmp_path / "db" / "db2.sqlite-wal").exists()
    forget_reports()
    alone = Evaluator()
    try:
        fresh = alone.evaluate_all([again])[0]
    finally:
        alone.close()
    assert untimed(second.model_dump(mode="json")) == untimed(fresh.model_dump(mode="json"))


def test_a_report_whose_test_suite_read_chance_is_not_given_again(tmp_path: Path, ran: list[str]) -> None:
    """A review's finding: another database of the test suite holds a view that reads ``random()``, so the
    test-suite verdict is a draw; the report was kept and the draw given again in every later run."""
    path = _test_suite(tmp_path / "db", ("db", "CREATE TABLE v (d INTEGER); INSERT INTO v VALUES (0);"),
                       ("db2", "CREATE VIEW v AS SELECT abs(random()) % 2 AS d;"))
    case = CompareRequest(case_id="a", user_query="q", expected_sql="SELECT d FROM v",
                          actual_sql="SELECT 0 AS d FROM v", db=str(path))
    for run in range(2):
        forget_reports()
        ran.clear()
        evaluator = Evaluator(cache_dir=tmp_path / "cache")
        try:
            assert evaluator.evaluate_all([case])[0].metrics["validation"]["spider_test_suite_match"] is not None
        finally:
            evaluator.close()
        assert case.actual_sql in ran, run  # evaluated again, the draw made again


def test_a_report_whose_test_suite_grew_during_the_case_is_not_given_again(
        tmp_path: Path, ran: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A review's finding: a database another process added to the folder during the case (before the verdict
    listed it) was read by the verdict but was not among the files whose states keyed the report, which a case with
    the same inputs then got after the database was gone again."""
    path = _test_suite(tmp_path / "db", ("db", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"),
                       ("db2", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"))
    added = tmp_path / "db" / "db3.sqlite"
    listing = published_metrics.suite_databases

    def grown(database: Path) -> list[Path]:
        if not added.exists():
            sqlite_file(added, "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (2.5);")  # tells them apart
        return listing(database)

    case = CompareRequest(case_id="a", user_query="q", expected_sql="SELECT a FROM t WHERE a < 3",
                          actual_sql="SELECT a FROM t WHERE a <= 2", db=str(path))
    forget_reports()
    with monkeypatch.context() as patch:
        patch.setattr(published_metrics, "suite_databases", grown)
        evaluator = Evaluator()
        try:
            assert evaluator.evaluate_all([case])[0].metrics["validation"]["spider_test_suite_match"] is False
        finally:
            evaluator.close()
    added.unlink()
    ran.clear()
    evaluator = Evaluator()
    try:
        again = evaluator.evaluate_all([case.model_copy(update={"case_id": "b"})])[0]
    finally:
        evaluator.close()
    assert case.actual_sql in ran and again.metrics["validation"]["spider_test_suite_match"] is True


def test_a_damaged_database_of_the_test_suite_does_not_keep_its_cases_from_being_given_again(
        tmp_path: Path, ran: list[str]) -> None:
    """A damaged database fails every query the same way ("database disk image is malformed"), as its content
    decides: a case whose test-suite verdict met it is given its report again (a review's finding: never was)."""
    path = _test_suite(tmp_path / "db", ("db", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"))
    damaged = path.read_bytes()
    (tmp_path / "db" / "aa.sqlite").write_bytes(damaged[:100] + bytes(len(damaged) - 100))
    case = CompareRequest(case_id="a", user_query="q", expected_sql="SELECT a FROM t",
                          actual_sql="SELECT a FROM t ORDER BY a", db=str(path))
    forget_reports()
    reports = []
    for copy in (case, case.model_copy(update={"case_id": "b"})):
        ran.clear()
        evaluator = Evaluator()
        try:
            reports.append(evaluator.evaluate_all([copy])[0])
        finally:
            evaluator.close()
    assert case.actual_sql not in ran  # the second case got the first one's report
    assert reports[0].metrics["validation"]["spider_test_suite_match"] is None  # the official rule: no verdict
    assert untimed(reports[1].model_dump(mode="json")) == untimed(reports[0].model_dump(mode="json")) | {"case_id": "b"}


def test_a_resumed_run_evaluates_again_a_case_whose_test_suite_changed(tmp_path: Path) -> None:
    """A review's finding: ``--resume``'s case version stamped the case's database alone, so a report whose
    test-suite verdict read another database of the folder was kept after that one was rewritten."""
    path = _test_suite(tmp_path / "db", ("db", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"),
                       ("db2", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"))
    case = CompareRequest(case_id="a", user_query="q", expected_sql="SELECT a FROM t WHERE a < 3",
                          actual_sql="SELECT a FROM t WHERE a <= 2", db="db")
    before = CaseVersions(tmp_path, None)(case)
    assert CaseVersions(tmp_path, None)(case) == before
    with sqlite3.connect(tmp_path / "db" / "db2.sqlite") as writer:
        writer.execute("INSERT INTO t VALUES (3)")
    writer.close()
    assert CaseVersions(tmp_path, None)(case) != before
    assert path.exists()


def test_a_case_version_of_a_database_that_is_no_url_is_its_text(tmp_path: Path) -> None:
    """A case's ``db`` is untrusted text: one that holds ``://`` but is no URL got a version (its text) before the
    journal read URLs' files; reading them must not make it raise and end the run."""
    (tmp_path / "loop.sqlite").symlink_to(tmp_path / "loop.sqlite")
    for db in ("no url://at all", "sqlite:///%00x", f"sqlite:///{tmp_path / 'loop.sqlite'}", "x\0.sqlite",
               str(tmp_path / "loop.sqlite")):
        case = CompareRequest(case_id="a", user_query="q", expected_sql="SELECT 1", actual_sql="SELECT 1", db=db)
        assert CaseVersions(None, None)(case) == CaseVersions(None, None)(case), db


def test_a_flat_folder_of_databases_is_read_once_for_their_versions(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """In a flat folder every database is in the others' test suite (the official rule). A review found each
    database's version reading all the others: 800 databases took 20 s of `evaluate`'s start and of every sensor
    tick. The folder's suite is now read once for all of them, by the journal and by the Dagster resource."""
    count = 30
    for index in range(count):
        sqlite_file(tmp_path / f"d{index}.sqlite", f"CREATE TABLE t (a INTEGER); INSERT INTO t VALUES ({index});")
    cases = [CompareRequest(case_id=f"c{index}", user_query="q", expected_sql="SELECT a FROM t",
                            actual_sql="SELECT a FROM t", db=f"d{index}") for index in range(count)]
    states = Counter[str]()
    state_of = journal.file_state
    monkeypatch.setattr(journal, "file_state", lambda path: states.update([str(path)]) or state_of(path))
    versions = CaseVersions(tmp_path, None)
    assert len({versions(case) for case in cases}) == count
    assert max(states.values()) == 2  # each file: once as a case's database, once as a database of the suite
    digests = Counter[str]()
    digest_of = spider_execution.database_fingerprint
    monkeypatch.setattr(spider_execution, "database_fingerprint",
                        lambda path, store=None: digests.update([path]) or digest_of(path, store))
    resource = DatabaseResource(db_dir=str(tmp_path), use_cache=False)
    assert len({resource.fingerprint(case) for case in cases}) == count
    assert max(digests.values()) == 1


def test_a_resumed_run_evaluates_again_a_case_whose_test_suite_read_other_files(tmp_path: Path) -> None:
    """A review's findings: the case version must follow the files the test-suite verdict lists and reads, as the
    engine finds them: a WAL database there that got its ``-wal`` and ``-shm`` (the official rule counts them), a
    database reached through a link into another folder, and one named by a ``sqlite:///`` URL (which was stamped
    by its text alone, as a server is)."""
    real = _test_suite(tmp_path / "real", ("db", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"),
                       ("db2", "PRAGMA journal_mode=WAL; CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);"))
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "db.sqlite").symlink_to(real)
    cases = [CompareRequest(case_id=name, user_query="q", expected_sql="SELECT a FROM t", actual_sql="SELECT a FROM t",
                            db=db) for name, db in (("link", str(tmp_path / "linked" / "db.sqlite")),
                                                    ("url", f"sqlite:///{real}"))]
    before = [CaseVersions(None, None)(case) for case in cases]
    with sqlite3.connect(f"file:{tmp_path / 'real' / 'db2.sqlite'}?mode=ro", uri=True) as reader:
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (2,)  # a reader makes its -wal and -shm
        assert (tmp_path / "real" / "db2.sqlite-shm").exists()
        gained = [CaseVersions(None, None)(case) for case in cases]
    reader.close()
    assert all(after != earlier for after, earlier in zip(gained, before, strict=True))
    with sqlite3.connect(tmp_path / "real" / "db2.sqlite") as writer:
        writer.execute("INSERT INTO t VALUES (3)")
    writer.close()
    assert all(CaseVersions(None, None)(case) not in (earlier, middle)
               for case, earlier, middle in zip(cases, before, gained, strict=True))


def test_a_dagster_step_reads_a_databases_digest_from_the_cache_folder(tmp_path: Path) -> None:
    """Each Dagster step is a process of its own, and a case's data version holds its database's digest: with a
    cache folder, a step reads it from there while the file's state is the one it was kept for, instead of reading
    a large file whole again; a changed file is read again, and without a cache folder every process reads it."""
    path = make_db(tmp_path / "shop.sqlite", [(1, "x")])
    case = CompareRequest(case_id="c", user_query="q", expected_sql="SELECT 1", actual_sql="SELECT 1", db="shop")

    def step(**options: object) -> str:
        reset()  # a new process
        resource = DatabaseResource(db_dir=str(tmp_path), **options)
        try:
            return resource.fingerprint(case)
        finally:
            resource.teardown_after_execution(mock.Mock())

    first = step(cache_dir=str(tmp_path / "cache"))
    assert first == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    with mock.patch.object(hashlib, "file_digest", side_effect=AssertionError("read again")):
        assert step(cache_dir=str(tmp_path / "cache")) == first
        with pytest.raises(AssertionError, match="read again"):
            step(use_cache=False)
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO t VALUES (2, 'y')")
    connection.close()
    assert step(cache_dir=str(tmp_path / "cache")) == hashlib.sha256(path.read_bytes()).hexdigest()[:16] != first


def test_a_sqlite_databases_content_digest_holds_a_write_left_in_its_log(tmp_path: Path) -> None:
    """The adapter's content digest (a case's Dagster data version) read the SQLite file alone: a write sitting in
    the ``-wal`` left it as it was. An empty log adds nothing, so a file without writes there keeps its digest."""
    path = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(path)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("CREATE TABLE t (x INTEGER)")
        writer.commit()
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = ExecutionAdapter(str(path)).fingerprint()
        assert before == hashlib.sha256(path.read_bytes()).hexdigest()[:16]  # the file's alone, as it always was
        writer.execute("INSERT INTO t VALUES (1)")
        writer.commit()
        assert ExecutionAdapter(str(path)).fingerprint() != before
    finally:
        writer.close()


def test_a_duckdb_result_is_kept_for_its_file_and_time_zone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DuckDB result may read the file's name (``current_database()``) and the time zone (a ``TIMESTAMPTZ`` as
    text): a copy of the file, or another ``TZ``, is another key (a review's finding). A SQLite copy hits."""
    duckdb = pytest.importorskip("duckdb")
    connection = duckdb.connect(str(tmp_path / "a.duckdb"))
    connection.execute("CREATE TABLE t AS SELECT 1 AS x")
    connection.close()
    shutil.copy(tmp_path / "a.duckdb", tmp_path / "b.duckdb")
    sqlite_copies = [make_db(tmp_path / "a.sqlite", [(1, "x")])]
    shutil.copy(sqlite_copies[0], tmp_path / "b.sqlite")
    sqlite_copies.append(tmp_path / "b.sqlite")
    batch, config = ExpectedResults(store=Store(tmp_path / "cache")), EvalConfig()

    def key(path: Path, dialect: str) -> str | None:
        adapter = ExecutionAdapter(str(path))
        try:
            return batch.key(adapter, dialect, "SELECT 1", config)
        finally:
            adapter.close()

    first = key(tmp_path / "a.duckdb", "duckdb")
    assert first is not None and key(tmp_path / "b.duckdb", "duckdb") != first
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert key(tmp_path / "a.duckdb", "duckdb") != first
    assert key(sqlite_copies[0], "sqlite") == key(sqlite_copies[1], "sqlite") is not None


def test_a_case_evaluated_again_in_a_later_run_reads_its_report_from_the_store(tmp_path: Path,
                                                                              ran: list[str]) -> None:
    """A model evaluated again with an answer unchanged (another prompt, a CI run) gets that case's report from
    the disk store: no query runs, not even the model's, and the report is the one computed (made the new
    case's own). Another answer, or the database's content changed, is evaluated anew; so is every case without
    the store."""
    path = sqlite_file(tmp_path / "shop.sqlite", "CREATE TABLE products (name TEXT, price REAL); "
                       "INSERT INTO products VALUES ('a', 20), ('b', 5), ('c', 12);")

    def run(case_id: str, actual: str, cache_dir: Path | None) -> dict[str, object]:
        forget_reports()  # each run as a new process
        ran.clear()
        evaluator = Evaluator(default_db=str(path), cache_dir=cache_dir)
        case = CompareRequest(case_id=case_id, user_query=case_id, expected_sql="SELECT name FROM products "
                              "WHERE price > 10", actual_sql=actual)
        try:
            report = evaluator.evaluate_all([case])[0]
        finally:
            evaluator.close()
        assert report.case_id == case_id and report.run_metadata["user_query"] == case_id
        return untimed(report.model_dump(mode="json", exclude={"case_id", "run_metadata"}))

    answer = "SELECT name FROM products WHERE price >= 11"
    first = run("first", answer, tmp_path / "cache")
    assert answer in ran and Store(tmp_path / "cache").info().entries["report"] == 1
    assert run("again", answer, tmp_path / "cache") == first and ran == []
    run("no store", answer, None)
    assert answer in ran
    run("another answer", "SELECT name FROM products WHERE price > 11", tmp_path / "cache")
    assert "SELECT name FROM products WHERE price > 11" in ran
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO products VALUES ('d', 10.5)")  # now the answer differs
    connection.close()
    changed = run("changed", answer, tmp_path / "cache")
    assert answer in ran and changed["deterministic_verdict"] == "fail" != first["deterministic_verdict"]


def test_a_database_rewritten_to_the_same_size_with_its_modification_time_set_back_is_read_again(
        tmp_path: Path) -> None:
    """``cp -p``, ``rsync -t`` or ``os.utime`` give a changed file its old size and modification time: its change
    time, which no call sets back, still tells it, so neither the earlier report nor the gold side's result is
    given again, in the same process or in the next one."""
    path = sqlite_file(tmp_path / "shop.sqlite", "CREATE TABLE products (name TEXT, price REAL); "
                       "INSERT INTO products VALUES ('a', 20), ('b', 5), ('c', 12);")
    case = CompareRequest(case_id="c", user_query="q", expected_sql="SELECT name FROM products WHERE price > 10",
                          actual_sql="SELECT name FROM products WHERE price >= 11")

    def verdict(*, new_process: bool) -> str:
        if new_process:
            reset()
        evaluator = Evaluator(default_db=str(path), cache_dir=tmp_path / "cache")
        try:
            return evaluator.evaluate_all([case])[0].deterministic_verdict
        finally:
            evaluator.close()

    assert verdict(new_process=True) == "pass"
    before = os.stat(path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE products SET price = 10.5 WHERE name = 'a'")  # now the answer misses 'a'
    connection.close()
    while True:  # the old times back, once the clock has moved past the file's first change time
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(path)
        if after.st_ctime_ns != before.st_ctime_ns:
            break
        time.sleep(0.01)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert verdict(new_process=False) == "fail"
    assert verdict(new_process=True) == "fail"


def test_a_fix_search_skipped_for_a_cached_expected_querys_time_is_not_given_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix search's time bound reads the expected query's time, an earlier run's when the result is cached:
    a skip that time decided is no input's, so the report is not kept (a review's finding: a first run on a busy
    machine skipped the search, and every later run was given that report)."""
    path = sqlite_file(tmp_path / "shop.sqlite", "CREATE TABLE products (name TEXT, price REAL); "
                       "INSERT INTO products VALUES ('a', 20), ('b', 5), ('c', 12);")
    expected, answer = "SELECT name FROM products WHERE price > 10", "SELECT name FROM products WHERE price > 15"
    case = CompareRequest(case_id="c", user_query="q", expected_sql=expected, actual_sql=answer,
                          config=EvalConfig(fix_search_budget_ms=150))
    ran: list[str] = []
    execute = ExecutionAdapter.execute

    def slow_gold(self: ExecutionAdapter, sql: str, **kwargs: object) -> Execution:
        ran.append(sql)
        execution = execute(self, sql, **kwargs)  # type: ignore[arg-type]
        return dataclasses.replace(execution, elapsed_ms=400.0) if sql == expected and slow else execution

    monkeypatch.setattr(ExecutionAdapter, "execute", slow_gold)
    warnings = []
    for slow in (True, False, False):  # a busy machine's run, then two runs of a quiet one, each a new process
        forget_reports()
        ran.clear()
        evaluator = Evaluator(default_db=str(path), cache_dir=tmp_path / "cache")
        try:
            warnings.append(evaluator.evaluate_all([case])[0].warnings)
        finally:
            evaluator.close()
        assert answer in ran  # evaluated: no report of an earlier run given
    assert all(any(w.startswith("fix search skipped: the two queries took") for w in run) for run in warnings)


def test_evaluate_keeps_its_cache_where_told_and_cache_info_and_clear_read_it(
        tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    suite = sample_suite_path()
    default, chosen = tmp_path / "default", tmp_path / "chosen"
    monkeypatch.setenv("SQLCMP_CACHE_DIR", str(default))

    def evaluate(out: str, *options: str) -> list[object]:
        forget_reports()  # each run as a new process
        main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(tmp_path / out), "--quiet", *options])
        return [untimed(json.loads(line)) for line in (tmp_path / out).read_text(encoding="utf-8").splitlines()]

    uncached = evaluate("none.jsonl", "--no-cache")
    assert not default.exists()
    assert evaluate("cold.jsonl") == uncached and Store(default).info().entries["execution"] > 0
    assert evaluate("chosen.jsonl", "--cache-dir", str(chosen), "--cache-max-mb", "1") == uncached
    assert evaluate("warm.jsonl", "--cache-dir", str(chosen)) == uncached
    capsys.readouterr()
    assert main(["cache", "info", "--cache-dir", str(chosen)]) == 0
    info = capsys.readouterr().out
    assert f"folder: {chosen}" in info and "execution " in info and "parse " in info
    assert main(["cache", "clear"]) == 0
    assert f"from {default}" in capsys.readouterr().out and Store(default).info().entries == {}
    assert Store(chosen).info().entries != {}  # only the folder named was cleared
    assert main(["evaluate", str(suite), "--out", str(tmp_path / "x.jsonl"), "--cache-max-mb", "0"]) == 2


def test_dagster_re_materializing_cases_runs_no_unchanged_gold_query_again(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gold = "SELECT name FROM products WHERE price > 17"
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "suite.jsonl").write_text("".join(
        json.dumps({"case_id": case_id, "expected_sql": gold, "actual_sql": actual, "db": SAMPLE_DB_ID}) + "\n"
        for case_id, actual in (("a", gold.lower()), ("b", "SELECT name FROM products WHERE price > 18"))),
        encoding="utf-8")
    monkeypatch.setenv("SQLCMP_CACHE_DIR", str(tmp_path / "cache"))
    executed: Counter[str] = Counter()
    execute = ExecutionAdapter.execute

    def counting_execute(self: ExecutionAdapter, sql: str, **kwargs: object) -> Execution:
        if kwargs.get("parsed") is not None and self.database_file == str(sample_dir / f"{SAMPLE_DB_ID}.sqlite"):
            executed[sql] += 1  # Layer 1's executions
        return execute(self, sql, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ExecutionAdapter, "execute", counting_execute)
    reports = []
    for run in range(2):
        (tmp_path / f"home{run}").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / f"home{run}")) as instance:
            defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir),
                                     storage_dir=str(tmp_path / f"store{run}"))
            instance.add_dynamic_partitions(cases_partitions.name, ["a", "b"])
            result = dg.materialize(LAYERS, instance=instance, resources=defs.resources,
                                    tags={"dagster/asset_partition_range_start": "a",
                                          "dagster/asset_partition_range_end": "b"})
            assert result.success
        frames = [pl.read_parquet(p) for p in (tmp_path / f"store{run}" / "case_reports").glob("*.parquet")]
        reports.append(sorted((untimed(r.model_dump(mode="json")) for f in frames for r in reports_from_frame(f)),
                              key=str))
        assert executed.pop(gold, 0) == (1 if run == 0 else 0)  # once for both cases, then never
    assert reports[0] == reports[1] and len(reports[0]) == 2
