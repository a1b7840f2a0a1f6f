"""Batch scheduling: the cases of ``evaluate --workers N`` in worker processes, grouped so that each worker's
expected-result cache serves them, a worker's death confined to the cases it held, and no worker left running
once the batch is given up (an exception, SIGINT or SIGTERM in this process) or this process is gone.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
from collections import deque
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
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
#: Cases scheduled together when a batch comes as a stream (:func:`in_processes`): large enough that a run of
#: Spider dev (1,034 cases) is one window, scheduled as before streaming, small enough that two windows of
#: cases and what the reports that finish ahead of their turn leave waiting stay a few tens of megabytes. A question answered in
#: two windows may be computed by each worker once; the disk store (``evaluate``'s default) serves it after.
WINDOW = 2048
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


def chunks(cases: Sequence[tuple[int, CompareRequest]], workers: int, *, last: bool = True) \
        -> list[list[tuple[int, CompareRequest]]]:
    """``cases`` (numbered) grouped by database and expected SQL (stable), cut into chunks: a worker sees a
    question's answers together, so its expected-result cache serves them, and it keeps few databases open.

    The workers should run out of work at nearly the same time, so the batch ends with its cheapest cases in
    its smallest chunks: groups whose answers all look cheap (:func:`looks_cheap`) come last, and, in the
    ``last`` window of a batch, chunks shrink towards the end (a quarter of what is left per worker, at most
    :data:`_CHUNK`, at least one case). On Spider dev one chunk of eight takes 0.08 s at the median and up to
    0.5 s."""
    def group(i: int) -> tuple[str, tuple[str, ...]]:
        return cases[i][1].db or "", tuple(cases[i][1].expected_sql)

    costly = {group(i) for i in range(len(cases)) if not looks_cheap(cases[i][1])}
    order = sorted(range(len(cases)), key=lambda i: (group(i) not in costly, group(i)))
    cut, start = [], 0
    while start < len(order):
        size = max(1, min(_CHUNK, (len(order) - start) // (workers * 4))) if last else _CHUNK
        cut.append([cases[i] for i in order[start:start + size]])
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


def in_processes(runner: CaseRunner, cases: Iterable[CompareRequest], workers: int, *,
                 window: int | None = None) -> Iterator[tuple[int, Done]]:
    """Each case's index (its place in ``cases``) and outcome, computed in ``workers`` processes, as each
    finishes.

    ``cases`` is read ``window`` cases (:data:`WINDOW` unless given) at a time, and each window is scheduled as a
    whole (:func:`chunks`); at
    most two windows are in the workers' hands at once, the next read when the older one is done. So a batch
    of any length holds a few windows of cases, and of the outcomes only those the caller has not taken yet.

    A case that kills its worker (the operating system's out-of-memory killer, a crash in a driver) must not
    sink the batch: the chunks lost with that worker are retried one case at a time in a fresh pool, and a case
    that kills its worker again gets a fault report of its own; then the rest of the batch goes on in a fresh
    pool. When no worker can run anything at all (a script that calls this without an
    ``if __name__ == "__main__":`` guard), the batch runs in this process instead. A single case runs here too.
    """
    windows = _windows(cases, window or WINDOW)
    first = next(windows, None)
    if first is None:
        return
    if first[1] and len(first[0]) <= 1:
        for index, case in first[0]:
            yield index, runner.deterministic(case)
        return
    windows = itertools.chain([first], windows)
    started = False  # whether any worker has given an outcome
    while True:
        lost: list[tuple[int, CompareRequest]] = []
        with worker_pool(runner, workers) as pool:
            for outcome in _through_pool(pool, windows, workers, lost):
                started = True
                yield outcome
        if not lost:
            return
        if not started:  # no worker could run anything: not a case's fault
            for index, case in itertools.chain(lost, (item for cut, _ in windows for item in cut)):
                yield index, runner.deterministic(case)
            return
        yield from _one_at_a_time(runner, lost, workers)


def _windows(cases: Iterable[CompareRequest], size: int) \
        -> Iterator[tuple[list[tuple[int, CompareRequest]], bool]]:
    """``cases`` numbered and cut into lists of ``size``, each with whether it is the last (one case read ahead)."""
    source = enumerate(cases)
    current = list(itertools.islice(source, size))
    while current:
        following = next(source, None)
        yield current, following is None
        current = [] if following is None else [following, *itertools.islice(source, size - 1)]


def _through_pool(pool: ProcessPoolExecutor, windows: Iterator[tuple[list[tuple[int, CompareRequest]], bool]],
                  workers: int, lost: list[tuple[int, CompareRequest]]) -> Iterator[tuple[int, Done]]:
    """The outcomes of the cases of ``windows`` as ``pool`` finishes them, two windows at most submitted at a
    time. When the pool breaks (a worker died), every case it had not finished goes to ``lost`` and this ends;
    the windows not read yet stay in ``windows``. Each chunk's future tells a queue when it is done, so taking
    the next one costs the same whatever is running (waiting on every running future cost their number)."""
    running: dict[Future[list[tuple[int, Done]]], tuple[int, list[tuple[int, CompareRequest]]]] = {}
    finished: queue.Queue[Future[list[tuple[int, Done]]]] = queue.Queue()
    outstanding: dict[int, int] = {}  # futures not done, per window
    numbers = itertools.count()
    broken = False

    def submit() -> None:
        nonlocal broken
        while len(outstanding) < 2 and not broken:
            read = next(windows, None)
            if read is None:
                return
            number = next(numbers)
            for chunk in chunks(read[0], workers, last=read[1]):
                if broken:
                    lost.extend(chunk)
                    continue
                try:
                    future = pool.submit(_work, chunk)
                except BrokenProcessPool:
                    broken = True
                    lost.extend(chunk)
                    continue
                running[future] = number, chunk
                outstanding[number] = outstanding.get(number, 0) + 1
                future.add_done_callback(finished.put)

    submit()
    while running:
        future = finished.get()
        number, chunk = running.pop(future)
        outstanding[number] -= 1
        if not outstanding[number]:
            del outstanding[number]
        try:
            outcomes = future.result()  # a pool that broke fails the futures it had not finished at once
        except BrokenProcessPool:
            broken = True
            lost.extend(chunk)
            continue
        yield from outcomes
        submit()


def _one_at_a_time(runner: CaseRunner, cases: list[tuple[int, CompareRequest]], workers: int) \
        -> Iterator[tuple[int, Done]]:
    """The outcomes of ``cases``, lost with a worker that died: each case a chunk of its own, ``workers`` at a
    time in a fresh pool; the few that were running when a worker died again are then run alone, and one whose
    worker dies while it runs alone gets a fault report. (A pool that breaks fails every case it was given, so
    cases are handed over only as workers free up, and the cases not handed over yet are not lost with it.)"""
    def killed(case: CompareRequest) -> Done:
        report = fault_report(case, "internal engine error: the worker process evaluating this case died (out of "
                                    "memory or a crash in a database driver)")
        finish_timings(report, 0.0)
        return report, None

    queue, suspects = deque(cases), deque[tuple[int, CompareRequest]]()
    while queue:
        yield from _singly(runner, queue, workers, workers, suspects)
    while suspects:
        died: list[tuple[int, CompareRequest]] = []
        yield from _singly(runner, suspects, workers, 1, died)
        yield from ((index, killed(case)) for index, case in died)


def _singly(runner: CaseRunner, queue: deque[tuple[int, CompareRequest]], workers: int, limit: int,
            lost: MutableSequence[tuple[int, CompareRequest]]) -> Iterator[tuple[int, Done]]:
    """The outcomes of the cases taken from ``queue``, one a chunk, at most ``limit`` running at a time, in a
    fresh pool of ``workers``, until the queue is empty or the pool breaks: then the cases running go to
    ``lost`` and the rest stay in the queue."""
    with worker_pool(runner, workers) as pool:
        running: dict[Future[list[tuple[int, Done]]], tuple[int, CompareRequest]] = {}
        broken = False
        while (queue or running) and not broken:
            while queue and len(running) < limit:
                item = queue.popleft()
                try:
                    running[pool.submit(_work, [item])] = item
                except BrokenProcessPool:
                    queue.appendleft(item)
                    broken = True
                    break
            finished = set(running) if broken else wait(running, return_when=FIRST_COMPLETED).done
            for future in finished:
                item = running.pop(future)
                try:
                    outcomes = future.result()
                except BrokenProcessPool:
                    lost.append(item)
                    broken = True
                    continue
                yield from outcomes
        for future, item in running.items():  # the pool broke: what it ran is lost with it, or finished first
            try:
                yield from future.result()
            except BrokenProcessPool:
                lost.append(item)
