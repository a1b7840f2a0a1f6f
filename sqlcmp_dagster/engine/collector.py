"""Python's cyclic garbage collector, set for a batch of cases.

A case allocates tens of thousands of container objects (sqlglot trees, whose nodes point at their parents, so
only the cyclic collector frees them; rows; reports), and most live until the case ends. Under CPython's default
thresholds (700, 10, 10) the collector examined them again and again: on Spider dev (1,034 cases, one process)
1,500 young and 9 full collections took 0.95 s of an 8.3 s run, and each full collection, which walks every
object the process holds (the imported libraries' too), stopped one case for 50-80 ms.

For the length of a batch, :func:`batch_collector` moves what exists when the batch starts (the imported
libraries, the suite) out of the collector's sight (``gc.freeze``) and collects the young generation every 5,000
allocations instead of 700: 0.3 s of collection in all, no full collection of the imported objects, for about
15 MB more memory at the peak (garbage waits longer before it is collected; nothing is kept that a collection
would free). Both are undone when the last batch running in the process ends. A worker process of
``evaluate --workers N`` keeps them for its whole life (:func:`tune_worker`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The collector's thresholds during a batch (generation 0, 1, 2), against CPython's (700, 10, 10).
BATCH_THRESHOLDS = (5_000, 50, 10)

_lock = threading.Lock()
_batches = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def batch_collector() -> Iterator[None]:
    """Run a batch under :data:`BATCH_THRESHOLDS`, with what the process holds when it starts frozen. Batches
    that overlap (threads of one process) share the setting: the first to start sets it, the last to end
    restores the thresholds it found and unfreezes (the frozen objects are then collected as usual)."""
    global _batches, _saved
    with _lock:
        if _batches == 0:
            _saved = gc.get_threshold()
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
                gc.unfreeze()
                _saved = None


def tune_worker() -> None:
    """A worker process's setting for its life: what it has imported frozen, :data:`BATCH_THRESHOLDS`."""
    gc.freeze()
    gc.set_threshold(*BATCH_THRESHOLDS)
