"""Engine time beyond executing the two queries, on a Spider database scaled up to >= 1 GB.

    SQLCMP_SPIDER_DIR=$S python benchmarks/large_database.py [--db world_1] [--gigabytes 1.0]
                                      [--work DIR] [--cases N] [--seed 0] [--bare] [--profile N]
                                      [--fix-search-budget-ms MS]

Issue 35's large-database goal: on a database of at least 1 GB, the time a case spends beyond executing its two
queries is at most 10% of the case's time.

**The database.** One Spider dev database (``--db``, default world_1: 120 dev cases, the largest of the small
ones) is copied ``factor`` times into one SQLite file of at least ``--gigabytes`` GB: every row once per copy,
its key columns made fresh per copy (an integer plus ``copy * stride``, a text ``value#copy``) and its foreign-key
columns remapped the same way, so that each copy's rows reference their own copy's parents. Key columns are the
columns of declared foreign keys (both ends) and of each PRIMARY KEY or UNIQUE set none of whose columns is one;
every other value is copied as it is. So aggregates keep their values, counts and listings grow ``factor``
times, a lookup by a declared key still finds one row, and every ORDER BY ... LIMIT cut falls inside a tie of
``factor`` equal rows. It is built once with journaling off, in one transaction, indexes after the rows, then
checked: row counts ``factor`` times the original's, and ``PRAGMA foreign_key_check`` finds ``factor`` times the
original's violations (Spider's own: world_1 has none). It is kept in ``--work`` (default: a folder under the
system's temporary directory) with a manifest, and reused when the manifest's parameters match and the file's
SHA-256 is the one recorded.

**The cases.** Spider dev imported with SuperSQL's predictions by ``sqlcmp import spider`` (as the test suite
does), the cases of ``--db`` kept (``--cases N``: N of them, a seeded sample in suite order), evaluated one at a
time with the default configuration by ``Evaluator.evaluate_all`` in this process, first on the original
database (the reference: the same cases where executing costs next to nothing), then on the large one.
``--fix-search-budget-ms`` sets the one option that decides how much the verified-fix search runs (10000, the
query timeout, searches as the engine did before the option existed); each case's line says what the search
did (found a fix, searched without one, skipped), and the summary counts them.

**What counts as executing the two queries.** The actual query's and the expected query's executions on the
case's database, as the engine times them (``Execution.elapsed_ms``: from taking a connection to the last row
fetched, the fetch's size accounting included): the runs ``layers._execute`` makes. An expected query the batch
cache already ran (a question asked twice with the same gold) is not executed again and counts nothing.
Everything else in the case's ``total_ms`` is beyond, and listed by kind: the statement gate's parse and the
result frame of the two queries; queries of their own that the engine runs on the case's database, namely the
LIMIT tie re-check (the expected query without its LIMIT), the verified-fix search's probes (candidate queries)
and the neighbor search's reads of the schema and sample rows; the queries on neighbor databases; the
database's content hash; and the rest (parsing, comparing, the published metrics, generating neighbors, the
report). Each adapter call is attributed to the engine function that made it, read from the call stack.

A run prints each case, then, for the original and the large database: the median and p95 over the cases of the
share of time beyond the two queries, and the sum-weighted share (the time beyond summed over the case times
summed), for every case and per verdict; the same for the engine's own work (beyond every query it ran, its
own probes and re-checks included); and the time by kind. ``--bare`` also runs each case's two queries through
a plain read-only sqlite3 connection right after the case (the same rows fetched, no sandbox), the peer: what
executing them costs without the engine. ``--profile N`` prints the N functions with the most own time in the
large run.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import inspect
import json
import math
import os
import pstats
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import main as sqlcmp
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.relation import Execution

#: Bumped whenever the way the database is built changes: a manifest of another version is rebuilt.
GENERATOR_VERSION = 1
#: The label of the two queries' executions (:class:`Recorder`).
QUERIES = "the two queries"
#: Labels of the time beyond executing them, in the order they are printed.
GATE, TIE, PROBES = "gate parse and result frame of the two queries", "LIMIT tie re-check", "fix-search probes"
SCHEMA, NEIGHBORS, HASH = "schema and sample reads", "neighbor-database queries", "database content hash"
REST = "the rest (parse, compare, metrics, neighbors, report)"
BEYOND = (GATE, TIE, PROBES, SCHEMA, NEIGHBORS, HASH, REST)


# ------------------------------------------------------------------------------------------------ the database


@dataclass
class Source:
    """A Spider database read whole: its tables' DDL and rows, its indexes' DDL and which columns are keys."""

    tables: dict[str, str]  # name -> CREATE TABLE, in the file's order
    indexes: list[str]
    rows: dict[str, list[tuple[Any, ...]]]
    keyed: dict[str, set[int]] = field(default_factory=dict)  # table -> positions of the columns made fresh

    @property
    def stride(self) -> int:
        """A power of ten above every integer key value (negative ones included), so that ``value + copy *
        stride`` never meets another copy's value."""
        values = (_integer(row[i]) for name, rows in self.rows.items() for row in rows for i in self.keyed.get(name, ()))
        largest = max((abs(v) for v in values if v is not None), default=0)
        return 10 ** (len(str(largest)) + 1)


def _integer(value: Any) -> Any:
    """``value`` as an int when it is one or a text that spells one (a text column referencing an integer key,
    as car_1's ``car_makers.Country`` does), else None."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        return int(value)
    return None


def read_source(path: Path) -> Source:
    """The tables, rows, indexes and key columns of the Spider database at ``path`` (opened read-only)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        entries = connection.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                                     "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid").fetchall()
        tables = {name: sql for kind, name, sql in entries if kind == "table"}
        source = Source(tables, [sql for kind, _, sql in entries if kind == "index"],
                        {name: connection.execute(f"SELECT * FROM {_quoted(name)}").fetchall() for name in tables})
        source.keyed = _key_columns(connection, list(tables))
    finally:
        connection.close()
    return source


def _key_columns(connection: sqlite3.Connection, tables: list[str]) -> dict[str, set[int]]:
    """Per table, the positions of the columns each copy gives fresh values: both ends of every declared foreign
    key, and every column of a PRIMARY KEY or UNIQUE set that has none of those (a set that has one is unique
    per copy already: its other columns keep their values, so ``Language = 'English'`` still finds every copy)."""
    positions = {t.lower(): {row[1].lower(): row[0] for row in connection.execute(f"PRAGMA table_info({_quoted(t)})")}
                 for t in tables}
    names = {t.lower(): t for t in tables}
    keyed: dict[str, set[int]] = defaultdict(set)
    for table in tables:
        for row in connection.execute(f"PRAGMA foreign_key_list({_quoted(table)})"):
            parent, child_column, parent_column = row[2].lower(), row[3].lower(), row[4]
            if parent not in positions:
                continue
            if parent_column is None:  # REFERENCES parent: its primary key
                parent_column = next(r[1] for r in connection.execute(
                    f"PRAGMA table_info({_quoted(names[parent])})") if r[5] == 1)
            keyed[table].add(positions[table.lower()][child_column])
            keyed[names[parent]].add(positions[parent][parent_column.lower()])
    for table in tables:
        info = connection.execute(f"PRAGMA table_info({_quoted(table)})").fetchall()
        sets = [{r[0] for r in info if r[5]}]
        for index in connection.execute(f"PRAGMA index_list({_quoted(table)})"):
            if index[2]:
                sets.append({positions[table.lower()][r[2].lower()]
                             for r in connection.execute(f"PRAGMA index_info({_quoted(index[1])})") if r[2]})
        for unique in sets:
            if unique and not unique & keyed[table]:
                keyed[table] |= unique
    return dict(keyed)


def copies(source: Source, table: str, factor: int, stride: int) -> Iterator[tuple[Any, ...]]:
    """The rows of ``table`` in ``factor`` copies, the key columns of copy ``k`` made fresh (copy 0 is the
    original)."""
    keyed = sorted(source.keyed.get(table, ()))
    rows = source.rows[table]
    for copy in range(factor):
        if copy == 0 or not keyed:
            yield from rows
            continue
        for row in rows:
            values = list(row)
            for i in keyed:
                values[i] = _fresh(values[i], copy, stride)
            yield tuple(values)


def _fresh(value: Any, copy: int, stride: int) -> Any:
    """``value`` in copy ``copy``: the same function of the value at both ends of a foreign key."""
    number = _integer(value)
    if number is not None:
        moved = number + copy * stride
        return str(moved) if isinstance(value, str) else moved
    if isinstance(value, float):
        return value + copy * stride
    if isinstance(value, str):
        return f"{value}#{copy}"
    return value  # NULL (references nothing) and blobs (no Spider key is one)


def write_database(source: Source, path: Path, factor: int) -> None:
    """Write ``factor`` copies of ``source`` to a new SQLite file at ``path``: no journal, no syncs, one
    transaction, the indexes made after the rows."""
    path.unlink(missing_ok=True)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = OFF")
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("PRAGMA cache_size = -262144")  # 256 MiB: the autoindexes of text keys fill pages
        connection.execute("BEGIN")
        for sql in source.tables.values():
            connection.execute(sql)
        stride = source.stride
        for table in source.tables:
            width = len(source.rows[table][0]) if source.rows[table] else 0
            if width:
                connection.executemany(f"INSERT INTO {_quoted(table)} VALUES ({', '.join('?' * width)})",
                                       copies(source, table, factor, stride))
        for sql in source.indexes:
            connection.execute(sql)
        connection.execute("COMMIT")
    finally:
        connection.close()


def calibrated_factor(source: Source, target_bytes: int, work: Path) -> int:
    """The copies needed for ``target_bytes``: the size of a 16-copy build, extrapolated (the pages of a copy
    fill alike), plus 2% for the extrapolation's error."""
    trial = work / "calibration.sqlite"
    write_database(source, trial, 16)
    per_copy = trial.stat().st_size / 16
    trial.unlink()
    return max(1, math.ceil(target_bytes * 1.02 / per_copy))


def foreign_key_violations(path: Path) -> Counter[str]:
    """Rows whose declared foreign key finds no parent, per table (``PRAGMA foreign_key_check``)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return Counter(row[0] for row in connection.execute("PRAGMA foreign_key_check"))
    finally:
        connection.close()


def row_counts(path: Path, tables: list[str]) -> dict[str, int]:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {t: connection.execute(f"SELECT count(*) FROM {_quoted(t)}").fetchone()[0] for t in tables}
    finally:
        connection.close()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def large_database(original: Path, db_id: str, target_bytes: int, work: Path) -> tuple[Path, dict[str, Any]]:
    """The database built from ``original`` under ``work/<db_id>/<db_id>.sqlite`` (the layout a db id resolves
    to), reused when its manifest matches and its content is the one recorded, else built and checked."""
    folder = work / db_id
    folder.mkdir(parents=True, exist_ok=True)
    path, manifest_path = folder / f"{db_id}.sqlite", folder / "manifest.json"
    wanted = {"generator": GENERATOR_VERSION, "source_sha256": sha256(original), "target_bytes": target_bytes}
    if path.is_file() and manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        started = time.perf_counter()
        if {k: manifest.get(k) for k in wanted} == wanted and sha256(path) == manifest["sha256"]:
            print(f"reusing {path} (content checked against its manifest in {time.perf_counter() - started:.1f} s)")
            return path, manifest
        print(f"rebuilding {path}: its manifest or content does not match")
    manifest_path.unlink(missing_ok=True)
    started = time.perf_counter()
    source = read_source(original)
    factor = calibrated_factor(source, target_bytes, folder)
    print(f"building {path}: {factor} copies of {db_id} ...", flush=True)
    write_database(source, path, factor)
    built = time.perf_counter()
    counts = row_counts(path, list(source.tables))
    for table, rows in source.rows.items():
        if counts[table] != factor * len(rows):
            sys.exit(f"{table}: {counts[table]} rows, expected {factor} x {len(rows)}")
    violations, original_violations = foreign_key_violations(path), foreign_key_violations(original)
    for table in set(violations) | set(original_violations):
        if violations[table] != factor * original_violations[table]:
            sys.exit(f"{table}: {violations[table]} foreign-key violations, the original has "
                     f"{original_violations[table]} (x {factor} expected)")
    manifest = {**wanted, "factor": factor, "bytes": path.stat().st_size, "sha256": sha256(path), "rows": counts,
                "foreign_key_violations": dict(violations), "build_s": round(built - started, 1),
                "check_s": round(time.perf_counter() - built, 1)}
    manifest_path.write_text(json.dumps(manifest, indent=1))
    print(f"built in {manifest['build_s']} s, checked in {manifest['check_s']} s")
    return path, manifest


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --------------------------------------------------------------------------------------------- the attribution


@dataclass
class Recorder:
    """The time each case spends in the adapter's calls and in the database's content hash, by kind.

    ``ExecutionAdapter.execute`` and ``ExecutionAdapter.fingerprint`` are wrapped for the run; a call is labelled
    by the engine function that made it (the first frame outside ``execution``), and by its adapter: one that
    reads no file is a neighbor database's.
    """

    times: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: Counter[str] = field(default_factory=Counter)
    #: The two queries' texts and the rows the engine kept of each (what ``--bare`` runs again).
    queries: list[tuple[str, int]] = field(default_factory=list)

    def install(self) -> Callable[[], None]:
        """Wrap the adapter's methods; returns what restores them."""
        execute, fingerprint = ExecutionAdapter.execute, ExecutionAdapter.fingerprint
        recorder = self

        def timed_execute(adapter: ExecutionAdapter, sql: str, **options: Any) -> Execution:
            started = time.perf_counter()
            execution = execute(adapter, sql, **options)
            wall = (time.perf_counter() - started) * 1000
            label = recorder.label(adapter, inspect.currentframe())
            recorder.calls[label] += 1
            recorder.times[label] += execution.elapsed_ms
            if label == QUERIES:
                recorder.times[GATE] += wall - execution.elapsed_ms
                recorder.queries.append((sql, execution.relation.height if execution.relation is not None else 0))
            else:
                recorder.times[label] += wall - execution.elapsed_ms
            return execution

        def timed_fingerprint(adapter: ExecutionAdapter) -> str:
            started = time.perf_counter()
            try:
                return fingerprint(adapter)
            finally:
                recorder.times[HASH] += (time.perf_counter() - started) * 1000
                recorder.calls[HASH] += 1

        ExecutionAdapter.execute = timed_execute  # type: ignore[method-assign]
        ExecutionAdapter.fingerprint = timed_fingerprint  # type: ignore[method-assign]

        def restore() -> None:
            ExecutionAdapter.execute = execute  # type: ignore[method-assign]
            ExecutionAdapter.fingerprint = fingerprint  # type: ignore[method-assign]
        return restore

    @staticmethod
    def label(adapter: ExecutionAdapter, frame: FrameType | None) -> str:
        if adapter.database_file is None:
            return NEIGHBORS
        caller = frame.f_back if frame is not None else None
        while caller is not None and caller.f_globals.get("__name__") == "sqlcmp_dagster.engine.execution":
            caller = caller.f_back
        module = caller.f_globals.get("__name__", "") if caller is not None else ""
        function = caller.f_code.co_name if caller is not None else ""
        if module == "sqlcmp_dagster.engine.layers":
            labels = {"_execute": QUERIES, "_cut_inside_tie": TIE, "execute": PROBES}
            if function in labels:
                return labels[function]
        if module == "sqlcmp_dagster.engine.neighbors.schema":
            return SCHEMA
        return f"other queries: {module}.{function}"

    def take(self) -> tuple[dict[str, float], Counter[str], list[tuple[str, int]]]:
        """What the case that just finished spent, and a fresh start for the next one."""
        taken = dict(self.times), self.calls, self.queries
        self.times, self.calls, self.queries = defaultdict(float), Counter(), []
        return taken


#: What the engine runs on top of the two queries, each a query of its own: the time beyond them that is not the
#: engine's own work (:attr:`CaseTime.own_ms`).
OTHER_QUERIES = (TIE, PROBES, SCHEMA, NEIGHBORS)


@dataclass
class CaseTime:
    case_id: str
    verdict: str
    total_ms: float
    queries_ms: float
    kinds: dict[str, float]
    calls: Counter[str]
    queries: list[tuple[str, int]]
    fix: str = ""  # what the verified-fix search did (:func:`fix_outcome`)
    bare_ms: float | None = None  # the two queries through a bare sqlite3 connection (--bare)

    @property
    def beyond_ms(self) -> float:
        return self.total_ms - self.queries_ms

    @property
    def share(self) -> float:
        return self.beyond_ms / self.total_ms if self.total_ms else 0.0

    @property
    def own_ms(self) -> float:
        """The engine's own work: the time beyond every query it ran (the two, the tie re-check, the probes, the
        schema reads and the neighbor databases' queries)."""
        return self.beyond_ms - sum(self.kinds.get(kind, 0.0) for kind in OTHER_QUERIES) \
            - sum(v for k, v in self.kinds.items() if k.startswith("other queries"))

    @property
    def own_share(self) -> float:
        return self.own_ms / self.total_ms if self.total_ms else 0.0


def fix_outcome(report: Report) -> str:
    """What the verified-fix search did for a case: ``found``, ``no fix``, ``skipped`` (a warning says why:
    ``fix_search_budget_ms`` or the case's budget), or nothing (not searched: a pass, a case that did not run)."""
    fix = (report.diagnostic_scores or {}).get("suggested_fix")
    if fix is not None:
        return "found" if fix["found"] else "no fix"
    return "skipped" if any(w.startswith("fix search skipped") for w in report.warnings) else ""


def bare_ms(connection: sqlite3.Connection, queries: list[tuple[str, int]], timeout_ms: int) -> float:
    """The time ``queries`` take through a plain read-only sqlite3 connection (the driver's own text decoding,
    no sandbox, no size accounting), each fetching as many rows as the engine kept: what executing them costs
    without the engine."""
    spent = 0.0
    for sql, rows in queries:
        timer = threading.Timer(timeout_ms / 1000, connection.interrupt)  # no per-step callback to pay for
        timer.start()
        started = time.perf_counter()
        try:
            cursor = connection.execute(sql)
            left = rows
            while left > 0 and (chunk := cursor.fetchmany(min(left, 1024))):
                left -= len(chunk)
            cursor.close()
        except sqlite3.Error:
            pass  # the engine's run failed too (a timeout): the time until the failure counts
        spent += (time.perf_counter() - started) * 1000
        timer.cancel()
    return spent


def evaluate(cases: list[CompareRequest], db_dir: Path, profile: cProfile.Profile | None = None,
             bare: Path | None = None) -> list[CaseTime]:
    """Evaluate ``cases`` one at a time on the databases under ``db_dir``, each case's time attributed; with
    ``bare`` (the database file), each case's two queries are run bare right after it (:func:`bare_ms`), so
    that both see the machine as it was."""
    recorder, timed = Recorder(), []
    evaluator = Evaluator(db_dir=db_dir)
    plain = sqlite3.connect(f"file:{bare}?mode=ro", uri=True) if bare is not None else None
    timeouts = {case.case_id: case.config.query_timeout_ms for case in cases}

    def finished(report: Report) -> None:
        kinds, calls, queries_run = recorder.take()
        timings = report.run_metadata["timings"]
        queries = kinds.pop(QUERIES, 0.0)
        kinds[REST] = timings["total_ms"] - queries - sum(kinds.values())
        timed.append(CaseTime(report.case_id, report.deterministic_verdict if report.blocked_reason is None
                              else report.blocked_reason, timings["total_ms"], queries, kinds, calls, queries_run,
                              fix_outcome(report)))
        if plain is not None:
            if profile is not None:
                profile.disable()
            timed[-1].bare_ms = bare_ms(plain, queries_run, timeouts[report.case_id])
            if profile is not None:
                profile.enable()

    restore = recorder.install()
    try:
        if profile is not None:
            profile.enable()
        evaluator.evaluate_all(cases, progress=finished)
    finally:
        if profile is not None:
            profile.disable()
        restore()
        evaluator.close()
        if plain is not None:
            plain.close()
    return timed


# ------------------------------------------------------------------------------------------------- the figures


def shares(label: str, timed: list[CaseTime], share: Callable[[CaseTime], float],
           part: Callable[[CaseTime], float]) -> str:
    """One line of figures: the median and p95 of ``share`` over the cases, the sum of ``part`` over the sum of
    case times, and the cases at 10% or less."""
    values = [share(t) for t in timed]
    p95 = statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]
    weighted = sum(part(t) for t in timed) / sum(t.total_ms for t in timed)
    return (f"  {label:<44} median {statistics.median(values):6.1%}, p95 {p95:6.1%}, sum-weighted {weighted:6.1%};"
            f" <= 10% in {sum(v <= 0.10 for v in values)} of {len(values)}")


def summary(label: str, timed: list[CaseTime]) -> None:
    total, beyond = sum(t.total_ms for t in timed), sum(t.beyond_ms for t in timed)
    print(f"{label}: {len(timed)} cases, {total / 1000:.1f} s in all, the two queries {(total - beyond) / 1000:.1f} s")
    groups = {"every case": timed}
    for verdict in sorted({t.verdict for t in timed}):
        groups[f"{verdict} cases"] = [t for t in timed if t.verdict == verdict]
    for name, group in groups.items():
        print(shares(f"time beyond the two queries, {name}", group, lambda t: t.share, lambda t: t.beyond_ms))
    print(shares("the engine's own work (beyond every query)", timed, lambda t: t.own_share, lambda t: t.own_ms))
    searched = Counter(t.fix for t in timed if t.fix)
    print(f"  verified-fix search: {searched['found']} fixes found, {searched['no fix']} searched without one, "
          f"{searched['skipped']} skipped")
    bare = [t for t in timed if t.bare_ms is not None]
    if bare:
        print(shares("time beyond the two queries run bare", bare,
                     lambda t: 1 - (t.bare_ms or 0.0) / t.total_ms if t.total_ms else 0.0,
                     lambda t: t.total_ms - (t.bare_ms or 0.0)))
        engine, plain = sum(t.queries_ms for t in bare), sum(t.bare_ms or 0.0 for t in bare)
        print(f"  the two queries through the engine {engine / 1000:.1f} s, bare {plain / 1000:.1f} s, each case's "
              f"right after it ({engine / plain:.2f}x: the sandbox, the text decoding and the size accounting)")


def breakdown(timed: list[CaseTime]) -> None:
    total = sum(t.total_ms for t in timed)
    calls: Counter[str] = Counter()
    for t in timed:
        calls.update(t.calls)
    print(f"  {'the two queries':<55} {sum(t.queries_ms for t in timed) / 1000:8.2f} s "
          f"{sum(t.queries_ms for t in timed) / total:6.1%}  ({calls[QUERIES]} executions)")
    others = sorted({kind for t in timed for kind in t.kinds} - set(BEYOND))
    for kind in (*BEYOND[:-1], *others, REST):
        spent = sum(t.kinds.get(kind, 0.0) for t in timed)
        count = f"  ({calls[kind]} calls)" if calls[kind] else ""
        print(f"  {kind:<55} {spent / 1000:8.2f} s {spent / total:6.1%}{count}")


def per_case(timed: list[CaseTime], reference: dict[str, CaseTime]) -> None:
    print(f"{'case':<12} {'verdict':<17} {'total ms':>9} {'queries':>9} {'bare':>8} {'beyond':>8} {'share':>6} "
          f"{'own':>6} {'original':>8} {'fix':>8}  largest beyond")
    for t in timed:
        largest = max(t.kinds.items(), key=lambda item: item[1])
        small = reference.get(t.case_id)
        bare = f"{t.bare_ms:8.1f}" if t.bare_ms is not None else f"{'-':>8}"
        print(f"{t.case_id:<12} {t.verdict:<17} {t.total_ms:9.1f} {t.queries_ms:9.1f} {bare} {t.beyond_ms:8.1f} "
              f"{t.share:6.1%} {t.own_share:6.1%} {small.share if small else float('nan'):8.1%} {t.fix or '-':>8}  "
              f"{largest[0]} {largest[1]:.1f} ms")


def imported_cases(spider: Path, db_id: str, work: Path) -> list[CompareRequest]:
    """Spider dev with SuperSQL's predictions, imported by the CLI, the cases of ``db_id``."""
    suite = work / "spider-supersql.jsonl"
    if not suite.is_file():
        code = sqlcmp(["import", "spider", "--questions", str(spider / "dev.json"), "--gold",
                       str(spider / "dev_gold.sql"), "--pred", str(spider / "predictions" / "SuperSQL.sql"),
                       "--db-dir", str(spider / "database"), "--tables", str(spider / "tables.json"),
                       "--out", str(suite)])
        if code != 0:
            sys.exit("sqlcmp import spider failed")
    return [case for case in load_suite(suite).cases if case.db == db_id]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=os.environ.get("SQLCMP_SPIDER_DIR"),
                        help="the Spider dev folder (default: $SQLCMP_SPIDER_DIR)")
    parser.add_argument("--db", default="world_1", help="the Spider dev db id to scale up (default world_1)")
    parser.add_argument("--gigabytes", type=float, default=1.0, help="the database's least size (default 1.0)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sqlcmp-large-database",
                        help="where the database is built and kept between runs (never the repository)")
    parser.add_argument("--cases", type=int, default=0, help="evaluate a seeded sample of N cases (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=int, default=0, help="print the N functions with the most own time")
    parser.add_argument("--fix-search-budget-ms", type=int, default=None,
                        help="the cases' fix_search_budget_ms (default: the option's default; 10000, the query "
                             "timeout, searches as before it existed)")
    parser.add_argument("--bare", action="store_true",
                        help="also time each case's two queries through a bare sqlite3 connection (the peer)")
    args = parser.parse_args()
    if args.spider is None or not (Path(args.spider) / "dev_gold.sql").is_file():
        sys.exit("the Spider dev set is needed: set SQLCMP_SPIDER_DIR or pass --spider")
    spider, work = Path(args.spider), args.work.resolve()
    if Path(__file__).resolve().parents[1] in (work, *work.parents):
        sys.exit(f"--work {work} is inside the repository: the database is built elsewhere")
    work.mkdir(parents=True, exist_ok=True)
    original = spider / "database" / args.db / f"{args.db}.sqlite"
    path, manifest = large_database(original, args.db, int(args.gigabytes * 1e9), work)
    print(f"database: {path.stat().st_size / 1e9:.2f} GB ({path.stat().st_size / 2 ** 30:.2f} GiB), "
          f"{manifest['factor']} copies of {args.db} ({original.stat().st_size / 1e3:.0f} kB); rows: "
          + ", ".join(f"{t} {n:,}" for t, n in manifest["rows"].items()))

    cases = imported_cases(spider, args.db, work)
    if args.cases and args.cases < len(cases):
        chosen = set(random.Random(args.seed).sample(range(len(cases)), args.cases))
        cases = [case for index, case in enumerate(cases) if index in chosen]
    if args.fix_search_budget_ms is not None:
        cases = [case.model_copy(update={"config": case.config.model_copy(
            update={"fix_search_budget_ms": args.fix_search_budget_ms})}) for case in cases]
    print(f"cases: {len(cases)} of {args.db} (SuperSQL against gold), fix_search_budget_ms="
          f"{cases[0].config.fix_search_budget_ms if cases else '-'}, otherwise the default configuration, "
          "one at a time")
    reference = evaluate(cases, spider / "database")  # also the warm-up: imports, sqlglot's caches
    profile = cProfile.Profile() if args.profile else None
    started = time.perf_counter()
    large = evaluate(cases, work, profile, path if args.bare else None)
    print(f"large database evaluated in {time.perf_counter() - started:.1f} s\n")
    per_case(large, {t.case_id: t for t in reference})
    print()
    summary(f"original {args.db}", reference)
    breakdown(reference)
    summary(f"large {args.db}", large)
    breakdown(large)
    if profile is not None:
        print()
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
