"""The floor under issue 13's first target, as fractions of the official loop timed in the same round: the 2,068
queries of Spider dev (SuperSQL's predictions and the gold) executed by raw ``sqlite3``, by sqlcmp's sandboxed
adapter, and parsed with their canonical form; a process that only imports the engine; and the whole evaluation
without the neighbor search (``--neighbors 0``).

Target 1 asks for one worker's whole evaluation in at most half the official loop's wall time. The engine's
import, the parse and the sandboxed execution of the cases' own queries are steps no evaluation with every
metric skips (the structure metrics read the canonical form; the actual query is hostile and runs only through
the sandbox): their sum is what the whole evaluation cannot go under, before any comparison, diagnosis or search.

    python benchmarks/query_floor.py [--spider DIR] [--rounds 2]
                                     [--official DIR --official-python PY]

``--official`` and ``--official-python`` are those of ``spider_vs_official.py`` (a local checkout of the public
test-suite-sql-eval repository, never part of this project); without them the peer is this project's
re-implementation of the official loop.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from spider_vs_official import DEFAULT_SPIDER, compile_bytecode, import_suite, official_command, timed

from sqlcmp_dagster.cases.importers import import_spider
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.parsing import parse

ROOT = Path(__file__).resolve().parents[1]


def queries(spider: Path) -> list[tuple[Path, str]]:
    """``(database file, sql)`` of every case's expected and actual query, in the suite's order."""
    cases = import_spider(spider / "dev.json", spider / "dev_gold.sql", spider / "predictions" / "SuperSQL.sql",
                          spider / "database")
    out = []
    for case in (c.to_json() for c in cases):
        database = spider / "database" / case["db"] / f"{case['db']}.sqlite"
        expected = case["expected_sql"]
        out += [(database, expected if isinstance(expected, str) else expected[0]), (database, case["actual_sql"])]
    return out


def raw(work: list[tuple[Path, str]]) -> float:
    """Seconds to execute and fetch every query with ``sqlite3``, one read-only connection per database."""
    started, connections = time.perf_counter(), {}
    for database, sql in work:
        if database not in connections:
            connections[database] = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:
            connections[database].execute(sql).fetchall()
        except sqlite3.Error:
            pass  # a failing prediction costs what it costs
    seconds = time.perf_counter() - started
    for connection in connections.values():
        connection.close()
    return seconds


def sandboxed(work: list[tuple[Path, str]]) -> float:
    """Seconds through sqlcmp's adapter (the gate, authorizer, watchdog, bounded fetch, read-only transaction,
    result frame), one adapter per database, each query handed its parse as the engine hands it (parsed before
    the clock starts: :func:`parsed` counts that)."""
    adapters = {database: ExecutionAdapter(str(database)) for database in {database for database, _ in work}}
    handed = [(database, sql, parse(sql, "sqlite")) for database, sql in work]
    started = time.perf_counter()
    for database, sql, outcome in handed:
        adapters[database].execute(sql, parsed=outcome, timeout_ms=30_000)
    seconds = time.perf_counter() - started
    for adapter in adapters.values():
        adapter.close()
    return seconds


def parsed(work: list[tuple[Path, str]]) -> float:
    """Seconds to parse every query with its canonical form (what the parse layer does per side)."""
    started = time.perf_counter()
    for _, sql in work:
        parse(sql, "sqlite")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--official", type=Path, help="local checkout of taoyds/test-suite-sql-eval")
    parser.add_argument("--official-python", default=sys.executable,
                        help="interpreter for the official loop (a venv with its imports; default: this one)")
    args = parser.parse_args()
    work = queries(args.spider)
    compile_bytecode(sys.executable, ROOT / "sqlcmp_dagster")
    with tempfile.TemporaryDirectory() as folder:
        suite = import_suite(args.spider, Path(folder) / "spider.jsonl")
        peer = official_command(suite, args.spider, args.official, args.official_python)
        if args.official:
            compile_bytecode(peer[0], args.official.resolve())
        without_search = [sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate", str(suite), "--db-dir",
                          str(args.spider / "database"), "--out", str(Path(folder) / "reports.jsonl"), "--quiet",
                          "--neighbors", "0"]
        for round_ in range(1, args.rounds + 1):
            official_s = timed(peer)
            steps = {"the engine's import (a process that imports it and exits)":
                     timed([sys.executable, "-c", "import sqlcmp_dagster.engine.pipeline"]),
                     f"parse of the {len(work)} queries with canonical form": parsed(work),
                     f"the {len(work)} queries through sqlcmp's sandboxed adapter": sandboxed(work)}
            floor = sum(steps.values())
            print(f"round {round_}: the peer ({'official exec_eval loop' if args.official else 'spider_exec'}) "
                  f"{official_s:.2f} s; target 1 is <= {official_s / 2:.2f} s (0.5x)")
            for step, seconds in steps.items():
                print(f"  {step:62} {seconds:5.2f} s  {seconds / official_s:.2f}x")
            print(f"  {'floor: the three together':62} {floor:5.2f} s  {floor / official_s:.2f}x")
            print(f"  {'raw sqlite3, the same queries (not a floor: no sandbox)':62} {raw(work):5.2f} s")
            whole = timed(without_search)
            print(f"  {'sqlcmp evaluate --workers 1 --neighbors 0 (no search)':62} {whole:5.2f} s  "
                  f"{whole / official_s:.2f}x")


if __name__ == "__main__":
    main()
