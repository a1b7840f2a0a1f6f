"""The disk store of the cache (engine/cache.py's Store) when its folder is not as it wrote it: its eviction lock
unusable or held by another process, several processes writing to one bounded folder, a folder that cannot be
used."""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import TypeVar

import pytest

from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import EXIT_FAIL, EXIT_PASS, main
from sqlcmp_dagster.engine import cache
from sqlcmp_dagster.engine.cache import Store
from sqlcmp_dagster.resources.database import DatabaseResource

#: How long a test waits for what should take a moment (a process to start, saves to finish): generous, so
#: that only a hang fails it.
PATIENCE_SECONDS = 60.0

T = TypeVar("T")


def fill(store: Store, count: int, size: int, prefix: str = "k") -> None:
    """Save ``count`` values of about ``size`` bytes each."""
    for index in range(count):
        store.save("execution", f"{prefix}{index}", bytes(size))


def promptly(call: Callable[[], T]) -> T:
    """``call()``, asserting that it returns within :data:`PATIENCE_SECONDS`: it runs in a thread, so that a
    hang fails the test instead of hanging it."""
    results: list[T] = []
    thread = threading.Thread(target=lambda: results.append(call()), daemon=True)
    thread.start()
    thread.join(PATIENCE_SECONDS)
    assert results, f"still running after {PATIENCE_SECONDS} s"
    return results[0]


def clear_fails(root: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``sqlcmp cache clear`` says on stderr, asserting that it fails promptly, in one line and with
    nothing on stdout."""
    capsys.readouterr()
    assert promptly(lambda: main(["cache", "clear", "--cache-dir", str(root)])) == EXIT_FAIL
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and "Traceback" not in err
    return err


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
        promptly(lambda: fill(store, 20, 900))
        assert store.info().bytes > store.max_bytes
    store.save("execution", "after", bytes(900))
    assert store.info().bytes <= store.max_bytes


def test_clear_says_in_one_line_that_its_lock_cannot_be_taken(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path)
    fill(store, 3, 100)
    (tmp_path / "evict.lock").mkdir()
    assert "evict.lock cannot be taken" in clear_fails(tmp_path, capsys)
    assert store.info().entries == {"execution": 3}


def test_clear_waits_a_bounded_time_for_another_process_holding_the_lock(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "CLEAR_WAIT_SECONDS", 0.1)
    store = Store(tmp_path)
    fill(store, 3, 100)
    with lock_held_elsewhere(tmp_path / "evict.lock"):
        assert "another process holds the cache's lock" in clear_fails(tmp_path, capsys)
    assert store.info().entries == {"execution": 3}
    assert store.clear() == 3


def write_and_measure(root: str, max_bytes: int, name: str, start: Barrier, peaks: Queue[int]) -> None:
    """Save 100 values of 4 KB once every writer is ready, and put the largest size of the folder's entries seen
    after a save."""
    store = Store(root, max_bytes)
    start.wait(PATIENCE_SECONDS)
    peak = 0
    for index in range(100):
        store.save("execution", f"{name}{index}", bytes(4000))
        peak = max(peak, store.info().bytes)
    peaks.put(peak)


def test_concurrent_writers_exceed_the_bound_by_at_most_a_tenth_of_it_and_an_entry_each(tmp_path: Path) -> None:
    """Four processes each save twice the bound at once: each counts the folder again after a tenth of the bound
    of its own saves, so none sees it past the bound by more than that and an entry per writer (counting only
    its own saves, each filled it to the bound: four writers kept up to four bounds)."""
    writers, max_bytes = 4, 200_000
    single = Store(tmp_path / "single")
    single.save("execution", "k", bytes(4000))
    entry = single.info().bytes
    context = multiprocessing.get_context()
    start, peaks = context.Barrier(writers), context.Queue()
    processes = [context.Process(target=write_and_measure,
                                 args=(str(tmp_path / "shared"), max_bytes, f"w{index}-", start, peaks))
                 for index in range(writers)]
    for process in processes:
        process.start()
    seen = [peaks.get(timeout=PATIENCE_SECONDS) for _ in processes]
    for process in processes:
        process.join(PATIENCE_SECONDS)
    assert max(seen) <= max_bytes + writers * (max_bytes // 10 + entry)


def test_a_folder_in_an_entrys_place_is_removed_and_the_entry_written_again(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save("execution", "a", 1)
    [path] = [path for path in (tmp_path / "entries").rglob("*") if path.is_file()]
    path.unlink()
    (path / "inside").mkdir(parents=True)
    (path / "inside" / "file").write_text("x")
    assert store.load("execution", "a") is None
    assert not path.exists()
    store.save("execution", "a", 2)
    assert store.load("execution", "a") == 2


def test_an_entry_folder_linked_elsewhere_leads_nowhere_the_store_deletes(tmp_path: Path) -> None:
    """An entry folder that is a symbolic link to another folder: a folder there named as the entry is the user's,
    and stays (a review's finding: the load's clean-up deleted it)."""
    store = Store(tmp_path / "cache")
    store.save("execution", "a", 1)
    [path] = [path for path in (tmp_path / "cache" / "entries").rglob("*") if path.is_file()]
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / path.name).mkdir(parents=True)
    (elsewhere / path.name / "keep.txt").write_text("mine")
    path.unlink()
    path.parent.rmdir()
    path.parent.symlink_to(elsewhere, target_is_directory=True)
    assert store.load("execution", "a") is None
    assert (elsewhere / path.name / "keep.txt").read_text() == "mine"


def info(root: Path, capsys: pytest.CaptureFixture[str], status: int = EXIT_PASS) -> tuple[str, str]:
    """What ``sqlcmp cache info`` says on stdout and stderr, its exit status checked."""
    capsys.readouterr()
    assert main(["cache", "info", "--cache-dir", str(root)]) == status
    return capsys.readouterr()


def test_info_and_clear_of_a_missing_folder_create_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, err = info(tmp_path / "typo" / "cache", capsys)
    assert not (tmp_path / "typo").exists()
    assert "entries: none" in out and err == f"not used: {tmp_path / 'typo' / 'cache'} does not exist\n"
    assert Store(tmp_path / "typo" / "cache").clear() == 0
    assert not (tmp_path / "typo").exists()


def test_a_file_given_as_the_folder_is_said_to_be_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    assert info(tmp_path / "file", capsys, EXIT_FAIL)[1] == f"not used: {tmp_path / 'file'} is not a folder\n"
    assert clear_fails(tmp_path / "file", capsys) == f"sqlcmp: cache not cleared: {tmp_path / 'file'} is not a folder\n"
    assert (tmp_path / "file").read_text() == "x"


def test_clear_refuses_a_folder_that_is_not_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder others may write to is neither read nor written, nor cleared: it may be no cache at all."""
    store = Store(tmp_path / "shared")
    fill(store, 3, 100)
    (tmp_path / "shared").chmod(0o777)
    assert "other users may write to it" in clear_fails(tmp_path / "shared", capsys)
    assert "other users may write to it" in info(tmp_path / "shared", capsys, EXIT_FAIL)[1]
    (tmp_path / "shared").chmod(0o700)
    assert store.info().entries == {"execution": 3}


def test_clear_deletes_only_the_files_the_store_wrote_and_the_folders_it_left_empty(tmp_path: Path) -> None:
    store = Store(tmp_path)
    fill(store, 3, 100)
    entry = next(path for path in (tmp_path / "entries").rglob("*") if path.is_file())
    crashed = entry.with_name(f".{entry.name}.123.0badc0de.tmp")  # a save's temporary file that a crash left
    crashed.write_bytes(b"half")
    elsewhere = ("1" if entry.name[0] == "0" else "0") * 64  # a digest of another entry folder
    others = [tmp_path / "entries" / "index.md", tmp_path / "entries" / "2024" / "diary.txt",
              entry.parent / "notes.txt", entry.parent / elsewhere, tmp_path / "entries" / "execution" / entry.name]
    for path in others:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
    assert store.clear() == 3
    assert [path.read_text() for path in others] == ["mine"] * len(others)
    left = {*others, *(path.parent for path in others)} - {tmp_path / "entries"}
    assert set((tmp_path / "entries").rglob("*")) == left


def test_evaluate_says_when_its_cache_folder_cannot_be_used_and_goes_on(
        tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A review's finding: a folder that is no folder, or that the group may write to (mode 0775, as a umask of
    002 makes it), was dropped without a word, and every run executed every expected query again."""
    (tmp_path / "file").write_text("x")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    suite = load_suite(sample_suite_path())
    for folder, why in ((tmp_path / "file", "is not a folder"), (shared, "other users may write to it")):
        out = tmp_path / f"{folder.name}.jsonl"
        status = main(["evaluate", str(sample_suite_path()), "--db-dir", str(sample_dir), "--out", str(out),
                       "--cache-dir", str(folder), "--quiet"])
        err = capsys.readouterr().err
        assert err.startswith(f"sqlcmp: cache not used: {folder} ") and why in err.splitlines()[0]
        assert status in (EXIT_PASS, EXIT_FAIL) and len(out.read_text().splitlines()) == len(suite.cases)
    assert list(shared.iterdir()) == [] and (tmp_path / "file").read_text() == "x"


def test_the_database_resource_says_once_when_its_cache_folder_cannot_be_used(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The Dagster side of the finding above: the step's log says it, once per resource."""
    (tmp_path / "file").write_text("x")
    resource = DatabaseResource(db_dir=str(tmp_path), cache_dir=str(tmp_path / "file"))
    usable = DatabaseResource(db_dir=str(tmp_path), cache_dir=str(tmp_path / "folder"))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert resource.cache().store is not None and usable.cache().store is not None
    assert [r.getMessage() for r in caplog.records if "cache" in r.getMessage()] == [
        f"cache not used: {tmp_path / 'file'} is not a folder"]


def test_a_folder_that_cannot_be_written_is_said_to_be_read_only(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount (a CI job's cache restored read-only) is still read: the warning says so, not that the
    folder is unused. Root may write any folder not on a read-only mount, so the mount is stood for by access()."""
    store = Store(tmp_path / "cache")
    fill(store, 1, 10)
    assert Store(tmp_path / "cache").warning() is None
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK)
    read_only = Store(tmp_path / "cache")
    assert read_only.warning() == \
        f"cache not written: {tmp_path / 'cache'} is read-only; its entries are read, none is added"
    assert read_only.load("execution", "k0") == bytes(10)
