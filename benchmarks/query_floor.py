"""The floor under issue 13's first target: the 2,068 queries of Spider dev (SuperSQL's predictions and the gold)
executed by raw ``sqlite3``, by sqlcmp's sandboxed adapter, and parsed with their canonical form, nothing else.

The official loop (``spider_vs_official.py``) executes the same queries; whatever sqlcmp spends on one of these
three steps alone is time the whole evaluation cannot go under. Each round runs all three in turn.

    python benchmarks/query_floor.py [--spider ../shared/data/spider] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from pathlib import Path

from spider_vs_official import DEFAULT_SPIDER

from sqlcmp_dagster.cases.importers import import_spider
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.parsing import parse


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
    args = parser.parse_args()
    work = queries(args.spider)
    for round_ in range(1, args.rounds + 1):
        print(f"round {round_}: {len(work)} queries: raw sqlite3 {raw(work):.2f} s; sqlcmp's sandboxed adapter "
              f"{sandboxed(work):.2f} s; parse with canonical form {parsed(work):.2f} s")


if __name__ == "__main__":
    main()
