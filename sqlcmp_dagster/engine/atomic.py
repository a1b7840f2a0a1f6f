"""Files with guarantees: a write that readers see whole or not at all, and a text read whose every failure
names the file and what was wrong with it."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


#: The name a writer's private file has beside its target: ``<target name>.<pid>-<thread id>.partial``.
PARTIAL_NAME = re.compile(r"(?P<target>.+)\.(?P<pid>\d+)-\d+\.partial")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a private path beside ``target`` to write to; it replaces ``target`` only if the block succeeds,
    and is removed if it fails. The name carries the process and thread, so concurrent writers never share it;
    what writers of ``target`` that died (``kill -9``, a crash) left is removed first (:func:`remove_debris`).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with atomic_path(folder / "out.txt") as partial:
    ...     _ = partial.write_text("done")
    >>> (folder / "out.txt").read_text(), sorted(p.name for p in folder.iterdir())
    ('done', ['out.txt'])
    """
    partial = _fresh_partial(target)
    try:
        yield partial
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _fresh_partial(target: Path) -> Path:
    """The private path of this writer of ``target``, its folder made and the debris of dead writers removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_debris(target.parent, target.name)
    return _partial(target)


def _partial(target: Path) -> Path:
    return target.with_name(f"{target.name}.{os.getpid()}-{threading.get_ident()}.partial")


class StreamedFile:
    """A text file written whole or not at all, as :func:`atomic_path` writes one, but filled as a long run goes
    instead of at its end, so that what it holds need not be held in memory: :meth:`write` appends to the
    private file, :meth:`commit` renames it into place, :meth:`discard` removes it. A write that fails (a full
    disk) ends the writing, not the run: :attr:`failure` keeps the error, later writes are dropped, and
    :meth:`commit` removes the private file and returns it, leaving ``target`` as it was."""

    def __init__(self, target: Path, *, newline: str | None = None) -> None:
        self.target = target
        self.partial = _partial(target)
        self.failure: OSError | None = None
        self._handle: TextIO | None = None
        try:
            self._handle = _fresh_partial(target).open("w", encoding="utf-8", newline=newline)
        except OSError as failure:
            self.failure = failure

    def write(self, text: str) -> None:
        if self._handle is None:
            return
        try:
            self._handle.write(text)
        except OSError as failure:
            self._fail(failure)

    def commit(self) -> OSError | None:
        """Close the file and put it in place of ``target``; the failure that kept it from being written, if any."""
        if self._handle is not None:
            try:
                self._handle.close()
                self._handle = None
                self.partial.replace(self.target)
            except OSError as failure:
                self._fail(failure)
        self.discard()
        return self.failure

    def discard(self) -> None:
        """Close and remove the private file (an interrupted run: ``target`` stays as it was)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            try:
                handle.close()
            except OSError:  # what it could not flush is discarded with it
                pass
        self.partial.unlink(missing_ok=True)

    def _fail(self, failure: OSError) -> None:
        self.failure = self.failure or failure
        self.discard()


def read_bytes(path: Path, error: type[Exception]) -> bytes:
    """The bytes of ``path``, or ``error`` naming the file and why it cannot be read (missing, unreadable). A
    caller that needs both the bytes and the text decodes these (:func:`decode_utf8`) rather than opening the file
    again: a pipe (``--pred <(cut -f1 gold.sql)``, ``/dev/stdin``) is read once, and is empty after that."""
    try:
        return path.read_bytes()
    except OSError as failure:
        raise error(f"{path}: {failure.strerror}") from failure


def write_text_atomically(target: Path, text: str) -> None:
    """Write ``text`` (UTF-8) as the whole new content of ``target``, or leave the old file as it was."""
    with atomic_path(target) as partial:
        partial.write_text(text, encoding="utf-8")


def output_problem(target: Path) -> str | None:
    """Why ``target`` cannot be written (None when it can): checked before a long run, so that a bad path costs
    a message, not the run. Its folder is made when missing, and a private file (see :func:`atomic_path`) is
    created and removed there: only trying tells (permissions, ``/proc``, a read-only mount, root's rights).

    >>> output_problem(Path("/proc/nope/out.jsonl"))
    '/proc/nope/out.jsonl: cannot make its folder: No such file or directory'
    """
    if target.is_dir():
        return f"{target}: is a folder"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        return f"{target}: a part of its folder {target.parent} is a file"
    except OSError as failure:
        return f"{target}: cannot make its folder: {failure.strerror or failure}"
    probe = _partial(target)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        probe.unlink()
    except OSError as failure:
        return f"{target}: cannot write in {target.parent}: {failure.strerror or failure}"
    return None


def remove_debris(folder: Path, target: str | None = None) -> list[Path]:
    """Remove the private files (:data:`PARTIAL_NAME`) in ``folder`` (of ``target`` only, when given) whose
    writing process no longer exists, and return them. A live writer's file is left alone, whoever it is.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> dead, live = folder / "r.jsonl.999999999-1.partial", folder / f"r.jsonl.{os.getpid()}-1.partial"
    >>> _ = dead.write_text("x"), live.write_text("y")
    >>> [p.name for p in remove_debris(folder)], sorted(p.name for p in folder.iterdir()) == [live.name]
    (['r.jsonl.999999999-1.partial'], True)
    """
    removed: list[Path] = []
    try:
        names = [entry.name for entry in os.scandir(folder)]
    except OSError:  # no folder yet, or not readable: nothing of ours is there
        return removed
    for name in names:
        match = PARTIAL_NAME.fullmatch(name)
        if match is None or (target is not None and match["target"] != target) or running(int(match["pid"])):
            continue
        try:
            (folder / name).unlink()
        except FileNotFoundError:  # another cleaner was first
            continue
        removed.append(folder / name)
    return removed


#: What :func:`file_version` gives: path, size, modification time, change time (both in ns) and inode.
FileVersion = tuple[str, int, int, int, int]


def file_version(path: str | Path) -> FileVersion | None:
    """What changes whenever a file's content does, read without reading it, or None when there is no such file:
    its path, size, modification and change times (nanoseconds) and inode. The change time is set by the kernel
    at every write, ``touch`` or rename, and no call sets it back: a file rewritten to the same size with its
    modification time restored (``cp -p``, ``rsync -t``, ``os.utime``) still gets another version. Only a
    write within one tick of the file system's clock, or a clock set back, could keep it; on the ext4, XFS and
    tmpfs of a Linux machine that tick is a few milliseconds or finer.

    >>> import tempfile
    >>> file = Path(tempfile.mkdtemp()) / "db"
    >>> file_version(file) is None
    True
    >>> _ = file.write_bytes(b"one")
    >>> file_version(file)[1]
    3
    """
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return None
    return str(path), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


def file_state(path: str) -> tuple[FileVersion, ...] | None:
    """A database file's state as the file system tells it, or None when it does not exist: what changes whenever
    its content does, read without reading the content. That is the file's :func:`file_version` and its
    write-ahead log's (SQLite's ``-wal``, DuckDB's ``.wal``: a write that sits in the log leaves the file itself
    as it was; beside the file a link leads to) when the log holds anything.

    The log's change time is left out, and an empty log counts as none: a read-only SQLite connection to a
    database in WAL mode creates an empty ``-wal`` when there is none, and, run as root, gives it its owner again
    at every connection, which moves its change time. Counted, they made the state change under the engine's own
    reads (a review's finding: nothing was kept, reused or resumed on such a database).

    >>> import sqlite3, tempfile
    >>> db = str(Path(tempfile.mkdtemp()) / "wal.sqlite")
    >>> writer = sqlite3.connect(db)
    >>> writer.execute("PRAGMA journal_mode=WAL").fetchone(), writer.execute("PRAGMA wal_autocheckpoint=0").fetchone()
    (('wal',), (0,))
    >>> _ = writer.execute("CREATE TABLE t (x)"); writer.commit(); _ = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    >>> before = file_state(db); len(before)  # the file alone: its log is empty
    1
    >>> _ = writer.execute("INSERT INTO t VALUES (1)"); writer.commit()
    >>> after = file_state(db); after[0] == before[0], len(after)  # the write is in the log alone
    (True, 2)
    >>> writer.close()
    """
    main = file_version(path)
    if main is None:
        return None
    real = os.path.realpath(path) if os.path.islink(path) else path  # a linked file's log is beside the file
    logs = [log[:3] + (0,) + log[4:] for log in map(file_version, (f"{real}-wal", f"{real}.wal"))
            if log is not None and log[1] > 0]
    return (main, *logs)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts: it may be a writer we cannot see into)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no pid at all
        return False
    except PermissionError:
        return True
    return True


def read_utf8(path: Path, error: type[Exception]) -> str:
    """The text of ``path``, or ``error`` naming the file and why it cannot be read (missing, unreadable, not
    UTF-8 with the offending byte's offset); callers pass their own error type so each reader keeps its own.

    >>> import tempfile
    >>> bad = Path(tempfile.mkdtemp()) / "bad.txt"
    >>> _ = bad.write_bytes(b"ok\\xff")
    >>> read_utf8(bad, ValueError)
    Traceback (most recent call last):
    ...
    ValueError: ...bad.txt: not UTF-8 text (byte 2)
    """
    return decode_utf8(read_bytes(path, error), path, error)


def decode_utf8(raw: bytes, path: Path, error: type[Exception]) -> str:
    r"""``raw``, read from ``path``, as a text read gives it: a byte-order mark dropped (it stuck to the first
    line), ``\r\n`` and ``\r`` read as ``\n``; ``error`` names the file and the first byte that is not UTF-8.

    >>> decode_utf8(b"\xef\xbb\xbfa\r\nb\rc", Path("x"), ValueError)
    'a\nb\nc'
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as failure:
        raise error(f"{path}: not UTF-8 text (byte {failure.start})") from failure
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_lines(path: Path, error: type[Exception]) -> list[str]:
    r"""The lines of ``path`` as :func:`read_utf8` reads it (``\r\n`` and ``\r`` already read as ``\n``): split at
    ``\n`` only, as a file's line iterator and Spider's own evaluator (``readlines``) split them, not at the
    other characters ``str.splitlines`` breaks at (U+2028, U+2029, U+0085, ``\x1c``...), which a JSON string or
    a SQL literal on one line may hold. A final newline ends the last line (no empty line after it).

    >>> import tempfile
    >>> lines = Path(tempfile.mkdtemp()) / "lines.txt"
    >>> _ = lines.write_bytes("a\u2028b\r\nc\n".encode())
    >>> read_lines(lines, ValueError)
    ['a\u2028b', 'c']
    """
    return text_lines(read_utf8(path, error))


def text_lines(text: str) -> list[str]:
    """``text`` split as :func:`read_lines` splits a file's."""
    return text.removesuffix("\n").split("\n") if text else []
