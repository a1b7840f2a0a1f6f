"""The metric processing pipeline: one request in, one report out (docs/design.md, the layers).

:func:`compare` chains the layers (:mod:`sqlcmp_dagster.engine.layers`) and the final synthesis under the
failure precedence for library and CLI use; :class:`Evaluator` runs many cases, in this process or in worker
processes (:mod:`sqlcmp_dagster.engine.batch`). Nothing a case contains can make these functions raise: bad
SQL, a missing database or an engine fault all end in a report.
"""

from __future__ import annotations

import json
import pickle
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sqlcmp_dagster.engine.batch import Done, in_processes
from sqlcmp_dagster.engine.atomic import file_state
from sqlcmp_dagster.engine.cache import DEFAULT_MAX_BYTES, ExpectedResults, Store, report_key
from sqlcmp_dagster.engine.collector import batch_collector
from sqlcmp_dagster.engine.context import current, keep_recent, recall
from sqlcmp_dagster.engine.execution import ExecutionAdapter, resolve_database
from sqlcmp_dagster.engine.judge import Budget, JudgeConfig, PendingJudgment, apply_judgment, judge_reports, prepare
from sqlcmp_dagster.engine.layers import CASE_FAULTS, analyze, engine_fault_report, finish_timings, validate
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.redaction import redact, redacted_url
from sqlcmp_dagster.engine.relation import Relation
from sqlcmp_dagster.engine.sandbox.duckdb_process import BUILD_TIMEOUT_S
from sqlcmp_dagster.engine.sandbox.sqlite import BUSY_TIMEOUT_S
from sqlcmp_dagster.engine.spider_execution import suite_files
from sqlcmp_dagster.engine.taxonomy import decided_by_inputs
from sqlcmp_dagster.engine.report import blocked_report, build_report, for_case
from sqlcmp_dagster.engine.validation import Validation

#: Deterministic reports kept for the next case with the same queries, database and options
#: (:func:`_deterministic`).
REPORTS_KEPT = 512
#: Cases whose deterministic reports wait for the judge together (:meth:`Evaluator.evaluate_stream`): enough for
#: its concurrency to be used, few enough that the waiting reports and prompts stay bounded.
JUDGED_TOGETHER = 256


def compare(request: CompareRequest, database: ExecutionAdapter | None = None, *,
            database_error: str | None = None, judge: JudgeConfig | None = None) -> Report:
    """Compare one case end to end and return its report; never raises for anything the case contains.

    With ``judge`` (and ``enable_ai_judge`` in the case's config) the advisory judgment is added last.
    """
    report, pending = _deterministic(request, database, database_error, judge)
    if pending is None or judge is None:
        return report
    return apply_judgment(report, judge_reports([pending], judge)[0])


def _deterministic(request: CompareRequest, database: ExecutionAdapter | None, database_error: str | None,
                   judge: JudgeConfig | None, cache: ExpectedResults | None = None) \
        -> Done:
    """Layers 1-4 and the report; with a judge configured, also the judge's prompt (while results are here).

    Without a judge, a case with the same queries, given results, database file and state, and options as one of
    the last :data:`REPORTS_KEPT` kept gets that one's report as its own (:func:`~.report.for_case`), timings
    included: what computing it cost. A report is kept only when the case's inputs alone decided it
    (:func:`_inputs_alone_decided`: above all, the case took less time than the shortest time limit that applies to
    it, so no clock cut anything in it and every limit it obeyed was a count), so a case with the same inputs gets
    the same report, kept or not (a suite asks most questions twice, and a model often answers both alike: 173 of
    Spider dev's 1,034 cases with SuperSQL's predictions). An engine fault is never kept, nor a report no file state
    can key (:func:`_report_keys`). With ``cache``'s disk store, reports are kept there too, for the next run
    (:func:`~sqlcmp_dagster.engine.cache.report_key`)."""
    started = time.perf_counter()
    store = cache.store if cache is not None else None
    keys = _report_keys(request, database, store) if judge is None else None
    kept = _kept_report(keys, store) if keys is not None else None
    if kept is not None:
        return for_case(kept, request), None
    validation = None
    try:
        validation = validate(request, database, database_error, cache)
        report = blocked_report(validation) or build_report(validation, analyze(validation, database))
    except CASE_FAULTS as error:  # an engine fault on one case must not sink a batch: it becomes that case's report
        report, keys = engine_fault_report(request, error), None
    total_ms = (time.perf_counter() - started) * 1000
    finish_timings(report, total_ms)
    if keys is not None and validation is not None and _inputs_alone_decided(validation, report, total_ms) \
            and database is not None and _file_states(database, keys.suite) == keys.states:  # none changed meanwhile
        others, companions = _suite_files(database)
        if _listed_as_now(validation, database, keys, others, companions):  # the suite the report read is now's
            if companions != keys.companions:  # SQLite made its files beside the database meanwhile
                keys = _report_keys(request, database, store)  # kept under the names the report was computed with
            if keys is not None:
                _keep_report(report, keys, store)
    if judge is None:
        return report, None
    return report, prepare(request, report, *_judge_samples(validation, report), judge)


#: The time limits a case obeys that are no option: SQLite's wait for a lock, DuckDB's process start.
_FIXED_LIMITS_MS = min(BUSY_TIMEOUT_S, BUILD_TIMEOUT_S) * 1000


class _Keys(NamedTuple):
    """Where a case's report is kept: in this process (``memory``) and in the disk store (``disk``, None without
    one), with the database files' states ``memory`` holds (the database's, then ``suite``'s, its test suite's
    other databases) and the names of SQLite's files beside them (:func:`_suite_files`)."""

    memory: str
    disk: str | None
    suite: list[str]
    states: list[str]
    companions: list[str]


def _suite_files(database: ExecutionAdapter) -> tuple[list[str], list[str]]:
    """The files a report on ``database`` reads of its Spider test suite, when it is a SQLite file
    (:func:`~sqlcmp_dagster.engine.spider_execution.suite_files`): the other databases, then SQLite's files beside
    them."""
    path = database.database_file
    if database.dialect != "sqlite" or path is None:
        return [], []
    return suite_files(Path(path))


def _listed_as_now(validation: Validation, database: ExecutionAdapter, keys: _Keys, others: list[str],
                   companions: list[str]) -> bool:
    """Whether the Spider test-suite metric listed the files beside the database that are there now (``others``
    and ``companions``, :func:`_suite_files` after the case), the databases among them those whose states ``keys``
    checked, so that a case with the same inputs would read what this one read. A WAL database of the test suite
    gets its ``-wal`` and ``-shm`` from the metric's own first read of it, after the listing: the first case's
    verdict was computed without them (the official rule counts them as databases), so it is not the next case's;
    and a database that another process added or removed during the case is not in the states the key was
    checked by (two reviews' findings)."""
    if others != keys.suite:
        return False
    if validation.suite_listing is None:
        return True
    own = Path(database.database_file or "")
    return sorted(name for name in validation.suite_listing if Path(name) != own) == sorted([*others, *companions])


def _file_states(database: ExecutionAdapter, suite: list[str]) -> list[str]:
    """The states on disk of ``database``'s file and of the files ``suite`` names, read without reading them."""
    return [database.version(), *(repr(file_state(name)) for name in suite)]


def _report_keys(request: CompareRequest, database: ExecutionAdapter | None, store: Store | None) -> _Keys | None:
    """What a deterministic report depends on: everything in the case but its id, question and context
    (:func:`~sqlcmp_dagster.engine.report.for_case`), and the database files it reads (the database, and the other
    databases of its Spider test suite: :func:`~sqlcmp_dagster.engine.spider_execution.suite_databases`): in this
    process by their state on disk (read without reading them), in ``store`` by their content
    (:func:`~sqlcmp_dagster.engine.cache.report_key`; None without a store). None where no report is kept: a case
    on a server, whose content another client may change between two cases; with no database; with a result
    given in the case (its printed form, JSON, does not tell NaN, infinity and NULL apart); and anything that
    cannot be read or printed (then the case is only evaluated)."""
    if database is None or database.database_file is None \
            or request.expected_result is not None or request.actual_result is not None:
        return None
    try:
        suite, companions = _suite_files(database)
        case = json.dumps([companions, request.model_dump_json(exclude={"case_id", "user_query", "context"})])
        states = _file_states(database, suite)
        return _Keys(json.dumps([database.identifier, states, case]),
                     report_key(database, case, store, suite) if store is not None else None, suite, states,
                     companions)
    except Exception:  # a case the report key cannot hold is evaluated, never lost
        return None


def _inputs_alone_decided(validation: Validation, report: Report, total_ms: float) -> bool:
    """Whether nothing but the case's inputs decided ``report``, so that a case with the same inputs gets it
    again: the case spent less time than every time limit it obeys (no deadline cut or limited anything: every
    other bound is a count), counted both by the clock (``total_ms``) and as its budget counts it (the recorded
    parse and probe times, and every query's execution time, an expected query's included when it is an earlier
    run's, from the cache, which the fix search's time bound reads), each query of the case that failed failed
    for its text (:func:`~sqlcmp_dagster.engine.taxonomy.decided_by_inputs`), no query read the clock or chance
    (``Execution.unstable``), no query failed on a neighbor database, and none of the Spider test suite's runs on
    the databases beside it may go otherwise another time (``Validation.suite_undecided``)."""
    request = validation.request
    sides = [validation.actual, *validation.expected]
    timings = report.run_metadata.get("timings") or {}
    counted_ms = sum(timings.get(name, 0.0) for name in ("parse_ms", "probe_execution_ms")) \
        + sum(side.execution.elapsed_ms for side in sides if side.execution is not None)
    if max(total_ms, counted_ms) >= min(request.config.shortest_time_limit_ms(), _FIXED_LIMITS_MS):
        return False
    if any(side.execution is not None and side.execution.error is not None
           and not decided_by_inputs(side.execution.error) for side in sides):
        return False
    if any(side.execution is not None and side.execution.unstable for side in sides) or validation.suite_undecided:
        return False
    neighborhood = report.evidence.get("neighborhood") or {}
    return not neighborhood.get("query_failures")


def _keep_report(report: Report, keys: _Keys, store: Store | None) -> None:
    """Keep ``report`` in this process and in ``store`` under ``keys``, pickled: a copy that gives back every
    value as it was (JSON text gave an infinity back as the text ``"Infinity"``); a report that cannot be
    pickled is not kept (and is the case's report all the same)."""
    try:
        kept = pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return
    keep_recent(current().reports, keys.memory, kept, REPORTS_KEPT)
    if store is not None and keys.disk is not None:
        store.save("report", keys.disk, kept)


def _kept_report(keys: _Keys, store: Store | None) -> Report | None:
    """A copy of the report kept under ``keys`` in this process, else in ``store`` (then kept in this process
    too); None when there is none, or the store's entry is no report (its checksum verified it, so only a store
    written by another program could hold one: then the case is evaluated)."""
    kept = recall(current().reports, keys.memory)
    if kept is None and store is not None and keys.disk is not None:
        loaded = store.load("report", keys.disk)
        kept = loaded if isinstance(loaded, bytes) else None
        if kept is not None:
            keep_recent(current().reports, keys.memory, kept, REPORTS_KEPT)
    if kept is None:
        return None
    try:
        report = pickle.loads(kept)
    except Exception:  # a pickle of classes this release no longer has: evaluated again
        return None
    return report if isinstance(report, Report) else None


def _judge_samples(validation: Validation | None, report: Report) -> tuple[Relation | None, Relation | None]:
    """The expected result the verdict used and the actual result, for the judge's bounded samples."""
    if validation is None:
        return None, None
    index = report.evidence.get("matched_expected_index")
    expected = validation.expected[index].relation if isinstance(index, int) else None
    return expected, validation.actual.relation


class Evaluator:
    """Evaluates many cases, opening each database once and sharing it across the cases of a process.

    A case's ``db`` is a URL, a SQLite path, or a db id resolved under ``db_dir``; ``default_db`` serves cases
    that name none. ``allow_privileged_role`` is the operator's opt-in (never a case's) to run cases on
    PostgreSQL under a privileged role (see :class:`~sqlcmp_dagster.engine.execution.ExecutionAdapter`).
    ``cache_dir`` keeps the expected queries' parses and results there for the next batch (at most
    ``cache_max_bytes``; :mod:`~sqlcmp_dagster.engine.cache`); without it they are kept for one batch only.
    """

    def __init__(self, *, db_dir: Path | str | None = None, default_db: str | None = None,
                 judge: JudgeConfig | None = None, allow_privileged_role: bool = False,
                 cache_dir: Path | str | None = None, cache_max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.db_dir = Path(db_dir) if db_dir is not None else None
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.cache_max_bytes = cache_max_bytes
        self.default_db = default_db
        self.judge = judge
        self.allow_privileged_role = allow_privileged_role
        self._adapters: dict[str, ExecutionAdapter] = {}
        self._lock = threading.Lock()
        self._cache: ExpectedResults | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process needs: the settings, not the open adapters, lock or batch cache."""
        state = dict(self.__dict__)
        state.update(_adapters={}, _lock=None, _cache=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def evaluate(self, request: CompareRequest) -> Report:
        database, error = self.open(request)
        return compare(request, database, database_error=error, judge=self.judge)

    def begin_batch(self) -> None:
        """Start the batch's expected-result cache (:meth:`batch_cache`)."""
        self._cache = self.batch_cache()

    def batch_cache(self) -> ExpectedResults:
        """A new expected-result cache (:class:`~sqlcmp_dagster.engine.cache.ExpectedResults`), over the store
        of ``cache_dir`` when there is one."""
        store = Store(self.cache_dir, self.cache_max_bytes) if self.cache_dir is not None else None
        return ExpectedResults(store=store)

    def deterministic(self, request: CompareRequest) -> Done:
        """Layers 1-4 and the report of one case, and the judge's prompt when a judge is configured."""
        database, error = self.open(request)
        return _deterministic(request, database, error, self.judge, self._cache)

    def open(self, request: CompareRequest) -> tuple[ExecutionAdapter | None, str | None]:
        """The case's database adapter, or None and the reason it cannot be opened (a report, not a raise)."""
        if request.actual_result is not None and request.expected_result is not None:
            return None, None
        target = request.db or self.default_db
        if target is None:
            return None, "no database given: the case names no db and no default database is configured"
        shown = f"cannot open database {redacted_url(target)!r}"  # never a password, in a report or a log
        try:
            return self.adapter(target), None
        except (FileNotFoundError, ValueError, ImportError) as failure:
            return None, f"{shown}: {redact(str(failure), target)}"
        except Exception as failure:  # a driver's own failure to connect
            return None, f"{shown}: {type(failure).__name__}: {redact(str(failure), target)}"

    def evaluate_all(self, cases: Sequence[CompareRequest], *, workers: int = 1,
                     progress: Callable[[Report], None] | None = None) -> list[Report]:
        """Reports of ``cases`` in their order, identical whatever ``workers`` is (:meth:`evaluate_stream`, the
        cases scheduled as one window: they are in memory already)."""
        reports = dict(self.evaluate_stream(cases, workers=workers, progress=progress, window=max(1, len(cases))))
        return [reports[index] for index in range(len(cases))]

    def evaluate_stream(self, cases: Iterable[CompareRequest], *, workers: int = 1,
                        progress: Callable[[Report], None] | None = None,
                        window: int | None = None) -> Generator[tuple[int, Report], None, None]:
        """Each case's index in ``cases`` and final report, as soon as that is known; the reports are those
        :meth:`evaluate_all` gives, whatever ``workers`` is. ``cases`` is read as the work goes (with workers,
        ``window`` cases at a time, :data:`~sqlcmp_dagster.engine.batch.WINDOW` unless given): a stream of any
        length holds a few windows of cases and reports, never all of them.

        ``workers`` > 1 runs the cases in that many processes (the engine's own work is Python that holds the
        GIL, so threads would not scale), and the reports come in the order they finish; one worker runs them
        here, in order. Cases that share a database and expected SQL go to the same worker within a window, so
        the batch's expected-result cache (:class:`~sqlcmp_dagster.engine.cache.ExpectedResults`) serves them
        there. The advisory judge, when configured, runs in this process on :data:`JUDGED_TOGETHER` cases at a
        time (and on the rest at the end), with its own bounded concurrency, one budget for the batch and a memory
        of the model's answers per such group (its ``cache_dir`` keeps them across groups and runs). The
        deterministic part runs with Python's garbage collector set for a batch
        (:func:`~sqlcmp_dagster.engine.collector.batch_collector`; a tenth of a Spider dev run was collection).

        ``progress`` is given each case's deterministic report as it finishes (before the judge). A report
        yielded is what an interrupted batch (an exception, or a stop signal turned into one, in ``progress``
        or while the caller holds the stream) has done; close the stream (``contextlib.closing``) when leaving
        it early: its workers are ended then.
        """
        judge = self.judge
        budget = Budget(judge.max_total_tokens, judge.max_total_cost_usd) if judge is not None else None
        waiting: list[tuple[int, Report, PendingJudgment]] = []

        def judged() -> Iterator[tuple[int, Report]]:
            assert judge is not None
            outcomes = judge_reports([item for _, _, item in waiting], judge, budget=budget)
            yield from ((index, apply_judgment(report, outcome))
                        for (index, report, _), outcome in zip(waiting, outcomes, strict=True))
            waiting.clear()

        self.begin_batch()
        try:
            with batch_collector(collect_first=True):
                outcomes = in_processes(self, cases, workers, window=window) if workers > 1 \
                    else ((index, self.deterministic(case)) for index, case in enumerate(cases))
                for index, (report, item) in outcomes:
                    if progress is not None:
                        progress(report)
                    if judge is None or item is None:
                        yield index, report
                        continue
                    waiting.append((index, report, item))
                    if len(waiting) >= JUDGED_TOGETHER:
                        yield from judged()
        finally:
            self._cache = None
        if waiting:
            yield from judged()

    def adapter(self, target: str) -> ExecutionAdapter:
        """The shared adapter of ``target`` (timeouts and row caps come from each case's config per call)."""
        resolved = resolve_database(target, self.db_dir)
        with self._lock:
            if resolved not in self._adapters:
                self._adapters[resolved] = ExecutionAdapter(
                    resolved, allow_privileged_role=self.allow_privileged_role)
            return self._adapters[resolved]

    def close(self) -> None:
        for adapter in self._adapters.values():
            adapter.close()
        self._adapters.clear()
