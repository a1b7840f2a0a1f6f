"""The disk store of the cache (engine/cache.py's Store) when its folder is not as it wrote it: its eviction lock
unusable or held by another process, several processes writing to one bounded folder."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlcmp_dagster.engine.cache import Store

#: How long a test waits for what should take a moment (a process to start, saves to finish): generous, so
#: that only a hang fails it.
PATIENCE_SECONDS = 60.0


def fill(store: Store, count: int, size: int, prefix: str = "k") -> None:
    """Save ``count`` values of about ``size`` bytes each."""
    for index in range(count):
        store.save("execution", f"{prefix}{index}", bytes(size))


@contextmanager
def lock_held_elsewhere(path: Path) -> Iterator[None]:
    """``path`` locked by another process (as ``flock`` or another sqlcmp would) until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, filelock\nwith filelock.FileLock(sys.argv[1]):\n"
                               "    print('held', flush=True)\n    sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.stdin.close()  # the holder's read ends: it releases the lock and exits
        holder.wait(PATIENCE_SECONDS)


def test_a_lock_that_cannot_be_opened_makes_saves_not_evict_never_fail(tmp_path: Path) -> None:
    """A folder in the lock file's place: saves past the bound keep their values and raise nothing."""
    (tmp_path / "evict.lock").mkdir(parents=True)
    store = Store(tmp_path, max_bytes=10_000)
    fill(store, 20, 900)
    assert store.load("execution", "k19") == bytes(900)
    assert store.info().bytes > store.max_bytes  # nothing could evict


def test_a_save_does_not_wait_for_another_process_holding_the_lock(tmp_path: Path) -> None:
    """While another process holds the lock, saves past the bound skip eviction instead of waiting for it; the
    first save past the bound after it lets go evicts."""
    store = Store(tmp_path, max_bytes=10_000)
    store.private()
    with lock_held_elsewhere(tmp_path / "evict.lock"):
        saving = threading.Thread(target=fill, args=(store, 20, 900), daemon=True)
        saving.start()
        saving.join(PATIENCE_SECONDS)
        assert not saving.is_alive()
        assert store.info().bytes > store.max_bytes
    store.save("execution", "after", bytes(900))
    assert store.info().bytes <= store.max_bytes
