"""Python's cyclic garbage collector, set for a batch of cases (the library's and the CLI's batch, and each step
of a Dagster layer asset).

A case allocates tens of thousands of container objects (sqlglot trees, whose nodes point at their parents, so
only the cyclic collector frees them; rows; reports), and most live until the case ends. Under CPython's default
thresholds (700, 10, 10) the collector examined them again and again: on Spider dev (1,034 cases, one process)
1,500 young and 9 full collections took 0.95 s of an 8.3 s run, and each full collection, which walks every
object the process holds (the imported libraries' too), stopped one case for 50-80 ms. A Dagster step also
runs beside everything its run has kept (the earlier layers' frames, the Layer 1 records with their trees: about
500,000 objects on Spider dev), and its full collections walked all of them again: 12 of them, 2.7 s of a 38 s
run.

For the length of a batch, :func:`batch_collector` moves what exists when the batch starts out of the
collector's sight (``gc.freeze``), collects the young generation every 5,000 allocations instead of 700 and the
middle one every 50 young collections instead of 10: 0.36 s of collection in all on Spider dev, 1.5 s instead
of 3.4 s on three models' answers to it (3,102 cases, where the reports a batch keeps make each full collection
longer). Objects the batch makes are collected as before, only later, which is what it costs in memory: the
peak of ``evaluate`` stayed at 208 MB on Spider dev and went from 257 to 295 MB on the 3,102 cases. The frozen
objects become collectable again when the batch ends.

A batch that starts where an earlier one's objects were let go of (each run's first Dagster step, in a process
that ran runs before; each ``evaluate_stream``) collects in full before it freezes (``collect_first``), so that
no garbage is frozen: frozen, it is out of every collection's sight until the batch ends, and when batches
follow each other closely the next one froze it again before any full collection came. One process running 40
Dagster runs of 2,500 cases in turn grew by about 250 MiB a run, to 10.2 GiB (``benchmarks/dagster_scale.py``);
collecting at each run's first step, its heap stops growing once the bounded caches are full. Collecting at
every step's end instead stopped the growth too, but cost seven full collections a run (2.7-3.2 s of a 5-6 s
run of 150 cases on a loaded machine) instead of one. A worker process of ``evaluate --workers N`` keeps the
setting for its life (:func:`tune_worker`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The collector's thresholds during a batch (generation 0, 1, 2), against CPython's (700, 10, 10).
BATCH_THRESHOLDS = (5_000, 50, 10)

# What this module changed in ``gc`` and must undo when the last batch ends: process state, as ``gc`` is, and
# not the engine context's, whose reset() must not lose track of a running batch (context.py says why).
#: Guards the three below.
_lock = threading.Lock()
#: Batches running now (threads of one process, nested steps).
_batches = 0
#: The thresholds the first running batch found, restored by the last to end; None while no batch runs.
_saved: tuple[int, int, int] | None = None
#: Whether the first running batch froze the heap (it does not when someone else froze it before).
_froze = False


@contextmanager
def batch_collector(*, collect_first: bool = False) -> Iterator[None]:
    """Run a batch under :data:`BATCH_THRESHOLDS`, with what the process holds when it starts frozen (with
    ``collect_first``, after a full collection, so that no garbage is frozen). Batches that overlap (threads of
    one process, nested steps) share the setting: the first to start sets it, the last to end restores the
    thresholds it found and unfreezes, also when a generator holding the block is closed early. A heap someone
    else froze before the first batch is left as it is (not unfrozen at the end)."""
    global _batches, _saved, _froze
    if collect_first and _batches == 0 and not gc.get_freeze_count():
        gc.collect()  # outside the lock: a finalizer it runs may start a batch (a race costs one collection more)
    with _lock:
        if _batches == 0:
            _saved = gc.get_threshold()
            _froze = not gc.get_freeze_count()
            if _froze:
                gc.freeze()
            gc.set_threshold(*BATCH_THRESHOLDS)
        _batches += 1
    try:
        yield
    finally:
        with _lock:
            _batches -= 1
            if _batches == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                if _froze:
                    gc.unfreeze()
                _saved, _froze = None, False


def tune_worker() -> None:
    """A worker process's setting for its life: what it has imported frozen, :data:`BATCH_THRESHOLDS`."""
    gc.freeze()
    gc.set_threshold(*BATCH_THRESHOLDS)
