"""Engine time beyond executing the two queries, on a Spider database scaled up to >= 1 GB.

    SQLCMP_SPIDER_DIR=$S python benchmarks/large_database.py [--db world_1] [--gigabytes 1.0]
                                      [--work DIR] [--cases N] [--seed 0] [--bare] [--profile N]
                                      [--fix-search-budget-ms MS] [--fix-search-max-steps N]

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
SHA-256 is the one recorded (``scaled_database.py``).

**The cases.** Spider dev imported with SuperSQL's predictions by ``sqlcmp import spider`` (as the test suite
does), the cases of ``--db`` kept (``--cases N``: N of them, a seeded sample in suite order), evaluated one at a
time with the default configuration by ``Evaluator.evaluate_all`` in this process, first on the original
database (the reference: the same cases where executing costs next to nothing), then on the large one.
``--fix-search-budget-ms`` and ``--fix-search-max-steps`` set the two options that decide whether and how long the
verified-fix search runs (by default a failing case is not searched when its two queries took more than 4 million
SQLite virtual-machine steps together, as every case here does but one; a larger bound searches them, and
``--fix-search-budget-ms 1000`` bounds each search to a second); each case's line says what the search did (found a
fix, searched without one, skipped), and the summary counts them.

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
import inspect
import os
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from scaled_database import large_database

from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import main as sqlcmp
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.relation import Execution

#: The label of the two queries' executions (:class:`Recorder`).
QUERIES = "the two queries"
#: Labels of the time beyond executing them, in the order they are printed.
GATE, TIE, PROBES = "gate parse and result frame of the two queries", "LIMIT tie re-check", "fix-search probes"
SCHEMA, NEIGHBORS, HASH = "schema and sample reads", "neighbor-database queries", "database content hash"
REST = "the rest (parse, compare, metrics, neighbors, report)"
BEYOND = (GATE, TIE, PROBES, SCHEMA, NEIGHBORS, HASH, REST)


# ------------------------------------------------------------------------------------------------ the database


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
    ``fix_search_max_steps``, ``fix_search_budget_ms`` or the case's budget), or nothing (not searched: a pass, a case that did not run)."""
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
    parser.add_argument("--fix-search-max-steps", type=int, default=None,
                        help="the cases' fix_search_max_steps (default: the option's default, 4000000)")
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
    options = {name: value for name, value in (("fix_search_budget_ms", args.fix_search_budget_ms),
                                               ("fix_search_max_steps", args.fix_search_max_steps)) if value is not None}
    cases = [case.model_copy(update={"config": case.config.model_copy(update=options)}) for case in cases]
    print(f"cases: {len(cases)} of {args.db} (SuperSQL against gold), fix_search_budget_ms="
          f"{cases[0].config.fix_search_budget_ms if cases else '-'}, fix_search_max_steps="
          f"{cases[0].config.fix_search_max_steps if cases else '-'}, otherwise the default configuration, "
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
