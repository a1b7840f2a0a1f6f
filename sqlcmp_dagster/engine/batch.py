"""Batch scheduling: the cases of ``evaluate --workers N`` in worker processes, grouped so that each worker's
expected-result cache serves them, a worker's death confined to the cases it held, and no worker left running
once the batch is given up (an exception, SIGINT or SIGTERM in this process) or this process is gone.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Protocol

from sqlcmp_dagster.engine.collector import tune_worker
from sqlcmp_dagster.engine.context import current
from sqlcmp_dagster.engine.judge import PendingJudgment
from sqlcmp_dagster.engine.layers import finish_timings
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.report import fault_report
from sqlcmp_dagster.engine.workers import follow_owner, start_server

#: Most cases handed to a worker process at a time: enough to amortize the hand-over (about a millisecond).
_CHUNK = 8
#: Seconds a worker told to end (SIGTERM) gets before it is killed.
STOP_GRACE_S = 1.0
#: What evaluating one case gives: its report, and the judge's prompt when a judge is configured.
Done = tuple[Report, PendingJudgment | None]


class CaseRunner(Protocol):
    """What the batch runs cases with (the :class:`~sqlcmp_dagster.engine.pipeline.Evaluator`): sent once to
    each worker process, which keeps one batch cache for its life."""

    def begin_batch(self) -> None:
        """Start the state a batch shares between its cases (the expected-result cache)."""

    def deterministic(self, request: CompareRequest) -> Done:
        """One case's report and the judge's prompt; never raises for anything the case contains."""


def _start_worker(runner: CaseRunner, owner: int) -> None:
    """The pool's initializer: the worker process's runner goes into its engine context."""
    follow_owner(owner)
    tune_worker()
    runner.begin_batch()  # one cache per worker, for the whole batch
    current().runner = runner


def _work(chunk: list[tuple[int, CompareRequest]]) -> list[tuple[int, Done]]:
    runner: CaseRunner | None = current().runner
    assert runner is not None, "a worker process starts with its runner"
    return [(index, runner.deterministic(case)) for index, case in chunk]


def chunks(cases: Sequence[CompareRequest], workers: int) -> list[list[tuple[int, CompareRequest]]]:
    """Cases grouped by database and expected SQL (stable), cut into chunks: a worker sees a question's
    answers together, so its expected-result cache serves them, and it keeps few databases open.

    The workers should run out of work at nearly the same time, so the batch ends with its cheapest cases in
    its smallest chunks: groups whose answers all look cheap (:func:`looks_cheap`) come last, and chunks shrink
    towards the end (a quarter of what is left per worker, at most :data:`_CHUNK`, at least one case). On
    Spider dev one chunk of eight takes 0.08 s at the median and up to 0.5 s."""
    def group(i: int) -> tuple[str, tuple[str, ...]]:
        return cases[i].db or "", tuple(cases[i].expected_sql)

    costly = {group(i) for i in range(len(cases)) if not looks_cheap(cases[i])}
    order = sorted(range(len(cases)), key=lambda i: (group(i) not in costly, group(i)))
    cut, start = [], 0
    while start < len(order):
        size = max(1, min(_CHUNK, (len(order) - start) // (workers * 4)))
        cut.append([(i, cases[i]) for i in order[start:start + size]])
        start += size
    return cut


def looks_cheap(case: CompareRequest) -> bool:
    """Whether the answer is one of its expected queries but for spacing and letter case: such a case usually
    passes with neither the fix search (it runs on failures) nor the neighbor search (identical canonical SQL is
    not searched). On Spider dev (SuperSQL) 361 of 1,034 cases, 5.9 ms each on average against 28.9 ms for the
    others. A guess for scheduling only: it changes no report."""
    def text(sql: str) -> str:
        return " ".join(sql.split()).casefold()

    return text(case.actual_sql) in {text(sql) for sql in case.expected_sql}


@contextmanager
def worker_pool(runner: CaseRunner, workers: int) -> Iterator[ProcessPoolExecutor]:
    """Worker processes forked from a server that has imported the engine once (no fork of this process's
    threads, and no re-import per worker; see :func:`~sqlcmp_dagster.engine.workers.start_server`), each
    ending with this process (:func:`~sqlcmp_dagster.engine.workers.follow_owner`).

    When the block ends normally the pool is shut down as usual, after its work. When it raises (SIGINT and
    SIGTERM included: the CLI turns them into an exception), the work not started is cancelled and the workers
    are ended at once (:func:`stop_workers`): leaving the block must not wait for every remaining case."""
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=start_server(), initializer=_start_worker,
                               initargs=(runner, os.getpid()))
    try:
        yield pool
    except BaseException:
        stop_workers(pool, [p for p in multiprocessing.active_children() if p not in before])
        raise
    pool.shutdown(wait=True)


def stop_workers(pool: ProcessPoolExecutor, processes: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """Cancel what ``pool`` has not started, and end its worker ``processes``: SIGTERM, then SIGKILL for any
    still running after :data:`STOP_GRACE_S` (a worker inside a database call may not get to its handler)."""
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(STOP_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()


def in_processes(runner: CaseRunner, cases: Sequence[CompareRequest], workers: int,
                 progress: Callable[[int, Done], None] | None) -> list[Done]:
    """Every case's outcome, computed in ``workers`` processes; ``progress`` is told each case's index and
    outcome as it arrives.

    A case that kills its worker (the operating system's out-of-memory killer, a crash in a driver) must not
    sink the batch: the chunks lost with that worker are retried one case at a time in a fresh pool, and a case
    that kills its worker again gets a fault report of its own. When no worker can start at all (a script that
    calls this without an ``if __name__ == "__main__":`` guard), the batch runs in this process instead.
    """
    done: dict[int, Done] = {}

    def record(index: int, outcome: Done) -> None:
        done[index] = outcome
        if progress is not None:
            progress(index, outcome)

    pending = chunks(cases, workers)
    single = False
    while pending:
        lost: list[list[tuple[int, CompareRequest]]] = []
        with worker_pool(runner, workers) as pool:
            futures: dict[Future[list[tuple[int, Done]]], list[tuple[int, CompareRequest]]] = {}
            for chunk in pending:
                try:
                    futures[pool.submit(_work, chunk)] = chunk
                except BrokenProcessPool:
                    lost.append(chunk)
            for future in as_completed(futures):
                try:
                    outcomes = future.result()
                except BrokenProcessPool:
                    lost.append(futures[future])
                    continue
                for index, outcome in outcomes:
                    record(index, outcome)
        lost_cases = [item for chunk in lost for item in chunk]
        if not done and len(lost_cases) == len(cases):  # no worker could run anything: not a case's fault
            for index, case in lost_cases:
                record(index, runner.deterministic(case))
            break
        if single:
            for index, case in lost_cases:
                report = fault_report(case, "internal engine error: the worker process evaluating this case "
                                            "died (out of memory or a crash in a database driver)")
                finish_timings(report, 0.0)
                record(index, (report, None))
            break
        pending, single = [[item] for item in lost_cases], True
    return [done[i] for i in range(len(cases))]
