"""The engine context: importing the engine sets nothing up, the first use does, and ``reset()`` empties the
caches a process keeps and closes the neighbor databases it holds."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sqlcmp_dagster.engine.context import current, reset
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.fingerprint import database_fingerprint
from sqlcmp_dagster.engine.neighbors.schema import read_schema
from sqlcmp_dagster.engine.neighbors.scratch import neighborhood, scratch
from sqlcmp_dagster.engine.parsing import parse
from sqlcmp_dagster.engine.sandbox.gate import gate_reason

ROOT = Path(__file__).resolve().parents[1]


def test_importing_the_engine_changes_nothing_in_the_process_until_its_first_parse() -> None:
    script = """
import json, logging, os
import duckdb, polars, sqlalchemy, sqlglot  # the libraries' own settings at import (polars sets its allocator's)
before = dict(os.environ)
import sqlcmp_dagster.engine.pipeline, sqlcmp_dagster.engine.judge, sqlcmp_dagster.engine.published_metrics
imported = (logging.getLogger("sqlglot").level, dict(os.environ) == before)
from sqlcmp_dagster.engine.parsing import parse
parse("SELECT 1", "sqlite")
print(json.dumps([imported, logging.getLogger("sqlglot").level]))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [[0, True], 40]  # NOTSET and the environment as it was; then ERROR


def test_the_query_watchdog_registers_its_fork_handler_at_its_first_query_not_at_import() -> None:
    """``sandbox.bounds`` (which DuckDB's query process also runs as a script) registers nothing when imported:
    its fork handler comes with its first armed query, once however many queries follow."""
    script = """
import json, os
registered = []
register = os.register_at_fork
def record(**handler):  # the package's handlers (the standard library registers its own as it is imported)
    registered.extend(f"{h.__module__}.{h.__name__}" for h in handler.values() if h.__module__.startswith("sqlcmp"))
    register(**handler)
os.register_at_fork = record
import sqlcmp_dagster.engine.sandbox.bounds as bounds
imported = list(registered)
for _ in range(3):
    with bounds.interrupt_after(lambda: None, 60_000):
        pass
print(json.dumps([imported, registered]))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [[], ["sqlcmp_dagster.engine.sandbox.bounds._fresh_watchdog"]]


def test_a_level_set_for_sqlglot_before_the_first_parse_is_kept() -> None:
    script = """
import logging
logging.getLogger("sqlglot").setLevel(logging.DEBUG)
from sqlcmp_dagster.engine.parsing import parse
parse("SELECT 1", "sqlite")
print(logging.getLogger("sqlglot").level)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "10"


def test_reset_empties_the_caches_and_closes_the_idle_neighbor_databases(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    database = ExecutionAdapter(str(path))
    try:
        schema = read_schema(database, 10, 5_000)
        assert not isinstance(schema, str)
        database.fingerprint()  # the file's digest, kept in the context (what a Dagster data version reads)
        outcome = parse("SELECT name FROM t", "sqlite")
        assert gate_reason(outcome, "sqlite", "SELECT name FROM t") is None
        tables = schema.scope({"t"})
        with neighborhood(database, schema, tables) as place, scratch(schema, tables, {"t": [(1, "a")]}, place):
            pass
        assert database_fingerprint(str(path)) is not None
        kept = current()
        assert kept.gate_answers.entries and kept.schemas.entries
        assert kept.idle_neighborhoods.entries and kept.fingerprints.entries
        fresh = reset()
        assert fresh is current() and fresh is not kept
        assert not (fresh.gate_answers.entries or fresh.schemas.entries
                    or fresh.idle_neighborhoods.entries or fresh.fingerprints.entries)
        assert place.writer is not None
        with pytest.raises(sqlite3.ProgrammingError):  # closed, not left open with nothing holding it
            place.writer.execute("SELECT 1")
        with neighborhood(database, read_schema(database, 10, 5_000), tables) as again:
            assert again is not place
    finally:
        database.close()


def test_the_schema_cache_follows_the_file_without_reading_it_whole(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The neighbor search's schema was kept per SHA-256 of the database file, so the first search of a process
    read the file whole: 1.4-2.1 s on a 1 GB database (benchmarks/large_database.py). It is kept per the file's
    state now, which still changes when the file is edited."""
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    database = ExecutionAdapter(str(path))

    def read_whole(adapter: ExecutionAdapter) -> str:
        raise AssertionError("the database file was read whole")

    monkeypatch.setattr(ExecutionAdapter, "fingerprint", read_whole)
    try:
        first = read_schema(database, 10, 5_000)
        assert not isinstance(first, str) and set(first.tables) == {"t"}
        assert read_schema(database, 10, 5_000) is first
        with sqlite3.connect(path) as edit:
            edit.execute("CREATE TABLE u (id INTEGER PRIMARY KEY)")
        edited = read_schema(database, 10, 5_000)
        assert not isinstance(edited, str) and set(edited.tables) == {"t", "u"}
    finally:
        database.close()
