"""The gold side's cache: what a suite's expected queries give, kept across cases, workers and runs.

A user evaluates model after model against one gold suite, and every run used to parse and execute the gold
queries again. :class:`ExpectedResults` keeps, per expected query, its canonical parse and its execution's
result: in memory for one batch (least recently used out, bounded by the cells held), and, with a
:class:`Store`, on disk for the next run (``sqlcmp evaluate`` keeps one under the user's cache folder unless
``--no-cache``). The actual query is never looked up here: whatever a model wrote is parsed and executed anew,
unless the whole case is one evaluated before (below).

A disk entry is keyed by everything its value depends on: the database's *content* (:func:`database_fingerprint`:
a copied or touched file still hits, a changed one misses exactly its entries), the dialect, the SQL text, the
case's options (``EvalConfig.config_hash``), and the engine and libraries that computed it
(:data:`ENVIRONMENT`, which holds ``REPORT_BEHAVIOUR_VERSION``: a release that may change a report misses every
entry).

Beside the gold side, a disk store also keeps whole deterministic reports (:func:`report_key`) of cases that no
clock decided (``pipeline``): a case whose every input is the same as an earlier run's (its queries' texts, the
database's content, its options) gets that report again, the model's query neither parsed nor run, as a model
evaluated again with most of its answers unchanged (another prompt, a CI run) needs. That is the only way the
actual query's work is kept: never for another text, database or options.

Entries are written to a temporary file and renamed into place, so workers and concurrent runs never see
half an entry; each carries a checksum, and one that does not verify (truncated, corrupt, from another layout)
is deleted and computed again, never used. The folder is bounded in bytes: past its bound, the least recently
used entries go (a hit refreshes an entry's modification time), under a file lock so that two processes evict
once; each process counts the folder again after writing a tenth of the bound, so N processes writing at once
exceed it by at most N tenths of it and N entries (:class:`Store`). Entries are pickles read only from a folder
this module creates for the user alone (mode 0700).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import pickle
import re
import secrets
import shutil
import sqlite3
import stat
import sys
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
import polars as pl
import sqlglot
from filelock import FileLock, Timeout

from sqlcmp_dagster.engine.atomic import file_state
from sqlcmp_dagster.engine.fingerprint import database_fingerprint
from sqlcmp_dagster.engine.models import EvalConfig
from sqlcmp_dagster.engine.parsing import ParseOutcome, parse
from sqlcmp_dagster.engine.relation import Execution, Relation, relation_from_rows
from sqlcmp_dagster.engine.version import ENGINE_VERSION

if TYPE_CHECKING:  # the adapter is only read here (its file and dialect)
    from sqlcmp_dagster.engine.execution import ExecutionAdapter

#: The layout of a disk entry and the rules of what one may hold; a change makes every older entry miss. 3: entries
#: written before SQLite's authorizer told the clock and chance apart may hold results that read them. 4: a
#: database's digest is the Dagster data version's (``fingerprint``), no longer a BLAKE2b of its own.
CACHE_FORMAT = 4
#: The releases that compute a report: the engine (package and report-behaviour version), the libraries whose
#: objects a value holds and SQLite, whose results and errors a report holds. ``--resume``'s case versions hold
#: them too (``journal.CaseVersions``).
RELEASES = (f"sqlcmp {ENGINE_VERSION}; sqlglot {sqlglot.__version__}; polars {pl.__version__}; "
            f"python {sys.version_info.major}.{sys.version_info.minor}; sqlite {sqlite3.sqlite_version}")
#: What computed an entry: the layout and :data:`RELEASES`. Part of every key, so an upgrade of any of them misses
#: instead of reading old values.
ENVIRONMENT = f"format {CACHE_FORMAT}; {RELEASES}"
#: The default bound of a cache folder, in bytes (``--cache-max-mb``).
DEFAULT_MAX_BYTES = 1 << 30
#: The environment variable naming the default cache folder (else the platform's user cache folder).
CACHE_DIR_VARIABLE = "SQLCMP_CACHE_DIR"
#: What a disk entry starts with; the SHA-256 of the rest follows it.
_MAGIC = b"sqlcmp-cache\x01"
#: What eviction brings a folder down to, as a share of its bound (so that the next entries do not evict again).
_EVICT_TO = 0.8
#: How long :meth:`Store.clear` waits for another process's lock: an eviction walks the folder once, well within
#: it, so a lock held longer is held by a process that is not evicting (a stuck one, or ``flock`` by hand).
CLEAR_WAIT_SECONDS = 10.0
#: What :meth:`Store.problem` says of a folder that does not exist: the first save creates it, and there is nothing
#: to clear.
MISSING = "does not exist"
#: The names of the files a store writes in an entry folder (``entries/<kind>/<2 hex digits>/``): an entry, named
#: by its key's digest, and a save's temporary file (:func:`_temporary`). The digest starts with the folder's name.
_STORED_NAME = re.compile(r"(?P<entry>[0-9a-f]{64})|\.(?P<temporary>[0-9a-f]{64})\.[0-9]+\.[0-9a-f]{8}\.tmp")


def default_cache_dir() -> Path:
    """``$SQLCMP_CACHE_DIR``, else the user's cache folder for sqlcmp (``~/.cache/sqlcmp`` on Linux)."""
    return Path(os.environ.get(CACHE_DIR_VARIABLE) or platformdirs.user_cache_dir("sqlcmp"))


@dataclass(frozen=True)
class StoreInfo:
    """What ``sqlcmp cache info`` prints: the folder, its bound, and its entries by kind."""

    root: str
    max_bytes: int
    entries: dict[str, int]
    bytes: int
    #: :meth:`Store.problem`: why the folder is not used, or None.
    problem: str | None

    @property
    def private(self) -> bool:
        """Whether the folder is used at all: it is a folder, and its user's alone (see :meth:`Store.private`)."""
        return self.problem is None


class StoreError(Exception):
    """Why :meth:`Store.clear` could not empty its folder, in one line: ``sqlcmp cache clear`` says it and fails."""


class Store:
    """A folder of values keyed by text, bounded in bytes, safe for concurrent readers and writers.

    Counting the folder walks it, so a process counts it at its first save and then adds its own saves to that
    count; it counts again (and evicts when the count is past the bound) once its saves since its last count reach
    a tenth of the bound. Another process's saves are seen only at a count, so the folder exceeds its bound by at
    most what no count has seen: for each process writing to it, less than a tenth of the bound plus the entry it
    is saving (itself at most a tenth). Counting only its own saves, each of N writers would fill the folder to
    the bound: N bounds in all."""

    def __init__(self, root: Path | str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._entries = self.root / "entries"
        self._lock = FileLock(str(self.root / "evict.lock"))
        self._held: int | None = None  # bytes in the folder as this process last counted them, plus its writes
        self._uncounted = 0  # what this process wrote since it last counted the folder
        self._private: bool | None = None
        self._folders: set[Path] = set()  # entry folders this process made or found (a mkdir costs a third of a save)

    def private(self) -> bool:
        """Whether the folder is its user's alone (it is created so when missing). Entries are unpickled, which
        may run code, so a folder someone else owns or may write to is neither read nor written: every lookup
        misses there."""
        if self._private is None:
            try:
                self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError:  # a file in its place, or no right to make it: problem() says which
                pass
            self._private = self.problem() is None
        return self._private

    def warning(self) -> str | None:
        """What a run should say of the folder as it starts, in one line, or None when the folder is used in full:
        that it is not used at all (:meth:`problem` says why), or that it cannot be written (a read-only mount:
        its entries are read, none is added). Each run then goes on as with ``--no-cache``; a review found that a
        folder shared with the group (mode 0775) was dropped without a word, every run executing every expected
        query again."""
        if not self.private():
            return f"cache not used: {self.root} {self.problem()}"
        if not os.access(self.root, os.W_OK):
            return f"cache not written: {self.root} is read-only; its entries are read, none is added"
        return None

    def problem(self) -> str | None:
        """Why the folder is not used, as words that follow its name (:data:`MISSING`, ``is not a folder``, ...),
        or None when it is used. Unlike :meth:`private` it creates nothing, so that ``sqlcmp cache info`` on a
        mistyped folder makes no folder there."""
        try:
            status = self.root.stat()
        except FileNotFoundError:
            return MISSING
        except OSError as error:
            return f"cannot be read: {error.strerror}"
        if not stat.S_ISDIR(status.st_mode):
            return "is not a folder"
        if hasattr(os, "getuid") and (status.st_uid != os.getuid() or status.st_mode & 0o022):
            return "is not yours, or other users may write to it: its entries would be unpickled, which may run code"
        return None

    def load(self, kind: str, key: str) -> Any | None:
        """The value saved under ``kind``/``key``, or None (never saved, evicted, or not verified: then deleted)."""
        if not self.private():
            return None
        path = self._path(kind, key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:  # a folder in its place, or unreadable: removed, so that the next save writes it again
            self._discard(path)
            return None
        head = len(_MAGIC) + 32
        if blob[:len(_MAGIC)] == _MAGIC and hashlib.sha256(blob[head:]).digest() == blob[len(_MAGIC):head]:
            try:
                value = pickle.loads(blob[head:])
            except Exception:  # a verified entry that no longer unpickles: treated as corrupt
                value = None
            if value is not None:
                _touch(path)
                return value
        _remove(path)
        return None

    def save(self, kind: str, key: str, value: Any) -> None:
        """Keep ``value`` under ``kind``/``key`` (renamed into place whole); a value over a tenth of the bound, or
        one that cannot be pickled, is not kept."""
        if not self.private():
            return
        try:
            body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            return
        blob = _MAGIC + hashlib.sha256(body).digest() + body
        if len(blob) > self.max_bytes // 10:
            return
        path = self._path(kind, key)
        temporary = _temporary(path)
        try:
            if path.parent not in self._folders:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._folders.add(path.parent)
            temporary.write_bytes(blob)
            os.replace(temporary, path)
        except OSError:  # a full or read-only disk makes the cache miss, never the case fail
            self._folders.discard(path.parent)  # removed meanwhile (``sqlcmp cache clear``): made again next time
            _remove(temporary)
            return
        self._uncounted += len(blob)
        if self._held is None or self._uncounted >= self.max_bytes // 10:
            self._held = sum(size for _, size, _ in self._files())
            self._uncounted = 0
        else:
            self._held += len(blob)
        if self._held > self.max_bytes:
            self.evict()

    def evict(self) -> None:
        """Delete the least recently used entries (and stray temporary files) until the folder holds at most
        :data:`_EVICT_TO` of its bound.

        Never waits for the lock: another process that holds it is evicting (or clearing) the same folder, and the
        next save past the bound tries again; a save that waited would hang its case for as long as that process
        holds the lock. A lock that cannot be taken at all (a folder in its file's place, say) leaves the folder as
        it is: a cache problem makes the cache miss or grow, never a case or the run fail."""
        self.private()  # the lock file's folder
        try:
            with self._lock.acquire(timeout=0):
                files = sorted(self._files(), key=lambda file: file[2])
                held = sum(size for _, size, _ in files)
                for path, size, _ in files:
                    if held <= self.max_bytes * _EVICT_TO:
                        break
                    _remove(path)
                    held -= size
                self._held, self._uncounted = held, 0
        except OSError:  # filelock's Timeout is one: another process holds the lock
            pass

    def info(self) -> StoreInfo:
        entries: dict[str, int] = {}
        total = 0
        for path, size, _ in self._files():
            if path.name.startswith("."):  # a write under way, or one a crash left (evicted in time)
                continue
            kind = path.relative_to(self._entries).parts[0]
            entries[kind] = entries.get(kind, 0) + 1
            total += size
        return StoreInfo(str(self.root), self.max_bytes, dict(sorted(entries.items())), total, self.problem())

    def clear(self) -> int:
        """Delete every entry and the temporary files of saves, nothing else; returns how many entries it deleted
        (none where the folder does not exist: it is not made). Waits for another process's lock at most
        :data:`CLEAR_WAIT_SECONDS`, so that a stuck process cannot hang the command; raises :class:`StoreError`
        when the lock cannot be taken (held that long, or a folder in its file's place), or when the folder is not
        used (:meth:`problem`): it may be any folder, and one that is not a store's should lose nothing."""
        problem = self.problem()
        if problem == MISSING:
            return 0
        if problem is not None:
            raise StoreError(f"{self.root} {problem}")
        try:
            self._lock.acquire(timeout=CLEAR_WAIT_SECONDS)
        except Timeout as error:
            raise StoreError(f"another process holds the cache's lock {self._lock.lock_file}") from error
        except OSError as error:
            raise StoreError(f"the cache's lock {self._lock.lock_file} cannot be taken: {error.strerror}") \
                from error
        try:
            files = [path for path, _, _ in self._files()]
            count = 0
            for path in files:
                try:
                    path.unlink()
                except OSError:  # gone meanwhile (a save's temporary file renamed into place), or not deletable
                    continue
                count += not path.name.startswith(".")
            for folder in {path.parent for path in files}:  # the folders left empty, and theirs
                for empty in (folder, folder.parent, self._entries):
                    try:
                        empty.rmdir()
                    except OSError:  # not empty: what is in it is not the store's, or a save's meanwhile
                        break
            self._folders.clear()
            self._held, self._uncounted = 0, 0
        finally:
            self._lock.release()
        return count

    def _path(self, kind: str, key: str) -> Path:
        digest = hashlib.sha256(f"{ENVIRONMENT}\x00{kind}\x00{key}".encode("utf-8", "surrogatepass")).hexdigest()
        return self._entries / kind / digest[:2] / digest

    def _discard(self, path: Path) -> None:
        """Delete the entry at ``path``, or the folder tree in its place: no entry could ever be renamed onto a
        folder, so it would never be written again. A tree is deleted only where it really is inside the store's
        entries folder: an entry folder that is a link to elsewhere leads nowhere the store may delete (a review's
        finding)."""
        try:
            path.unlink()
        except OSError:
            real, entries = os.path.realpath(path), os.path.realpath(self._entries)
            if os.path.commonpath([real, entries]) == entries and real != entries:
                shutil.rmtree(real, ignore_errors=True)

    def _files(self) -> Iterator[tuple[Path, int, int]]:
        """Every file the store wrote (entries, and temporary files of saves under way or that a crash left): path,
        size and modification time (nanoseconds). Only those, as :data:`_STORED_NAME` names them in an entry
        folder: the folder may be one that holds other files (given by mistake to ``--cache-dir``), which no
        eviction or clear may delete."""
        for folder, subfolders, names in os.walk(self._entries):
            if len(Path(folder).relative_to(self._entries).parts) < 2:  # entries/ or entries/<kind>/
                continue
            subfolders.clear()  # an entry folder holds no folder of the store's
            for name in names:
                stored = _STORED_NAME.fullmatch(name)
                if stored is None or (stored["entry"] or stored["temporary"])[:2] != os.path.basename(folder):
                    continue
                path = Path(folder, name)
                try:
                    status = path.lstat()
                except OSError:  # evicted by another process meanwhile
                    continue
                if stat.S_ISREG(status.st_mode):
                    yield path, status.st_size, status.st_mtime_ns


def _temporary(path: Path) -> Path:
    """Where a save writes the entry at ``path`` before renaming it into place: a name of its own for each save
    (its process and a random part), so that concurrent saves of one key never write one file."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class ExpectedResults:
    """The expected queries' parses and executions, so that N models answering the same questions parse and
    execute each expected query once, not N times (and, with a :class:`Store`, once across runs).

    In memory, executions are bounded by the cells they hold plus a fixed cost per entry (``capacity_cells``;
    least recently used first out), so memory stays bounded whatever the suite; a result larger than a tenth of
    that is not kept in memory.
    Only file databases (SQLite, DuckDB) are cached: a server's content cannot be fingerprinted cheaply, so its
    queries always run. Only successful parses and executions are kept (a failure may be a timeout, which
    another run may not hit).
    """

    def __init__(self, capacity_cells: int = 5_000_000, store: Store | None = None) -> None:
        self.capacity_cells = capacity_cells
        self.store = store
        self._entries: OrderedDict[str, Execution] = OrderedDict()
        self._cells = 0

    def __len__(self) -> int:
        """How many executions are held in memory."""
        return len(self._entries)

    def key(self, database: ExecutionAdapter, dialect: str, sql: str, config: EvalConfig) -> str | None:
        """The key of ``sql``'s execution on ``database`` under ``config``; None where it is not cached."""
        path = database.database_file
        if database.dialect not in ("sqlite", "duckdb") or not path:
            return None
        # In memory the file's state is enough (it changes with the content); across runs, the content decides.
        fingerprint = database_fingerprint(path, self.store) if self.store is not None else file_state(path)
        if fingerprint is None:
            return None
        return json.dumps([fingerprint, database.dialect, dialect, sql, config.config_hash(),
                           engine_release(database.dialect), *read_beside_content(database)])

    def get(self, key: str) -> Execution | None:
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit
        if self.store is None:
            return None
        hit = _execution_from_record(self.store.load("execution", key))
        if hit is not None:
            self._remember(key, hit)
        return hit

    def put(self, key: str, execution: Execution) -> None:
        """Keep a successful execution for the batch, and in the store unless it read the clock or chance
        (``Execution.unstable``: run tomorrow, ``date('now')`` gives another result)."""
        if not execution.success or key in self._entries:
            return
        if self.store is not None and not execution.unstable:
            record = _execution_record(execution)
            if record is not None:
                self.store.save("execution", key, record)
        self._remember(key, execution)

    def parse(self, sql: str, dialect: str, max_chars: int, deadline: float | None) -> ParseOutcome:
        """``parse(sql, dialect, ...)`` of an expected query, read from the store when it parsed before with the
        same dialect and length limit (a parse is kept on disk only: each case gets its own trees)."""
        if self.store is None:
            return parse(sql, dialect, max_chars=max_chars, deadline=deadline)
        key = json.dumps([dialect, max_chars, sql])
        stored = self.store.load("parse", key)
        if isinstance(stored, ParseOutcome) and stored.success:
            return stored
        outcome = parse(sql, dialect, max_chars=max_chars, deadline=deadline)
        if outcome.success:
            self.store.save("parse", key, outcome)
        return outcome

    def _remember(self, key: str, execution: Execution) -> None:
        if _cells(execution) > self.capacity_cells // 10:
            return
        self._entries[key] = execution
        self._cells += _cells(execution) + _ENTRY_CELLS
        while self._cells > self.capacity_cells:
            _, dropped = self._entries.popitem(last=False)
            self._cells -= _cells(dropped) + _ENTRY_CELLS


def report_key(database: ExecutionAdapter, case: str, store: Store, also: Sequence[str] = ()) -> str | None:
    """The disk key of the deterministic report of a case on ``database`` (``case``: the case's inputs as JSON,
    its id, question and context left out), or None where none is kept: the database's content
    (:func:`database_fingerprint`), its name (a report names its database) and engine (:func:`engine_release`),
    as only a file database has, and the content of the files ``also`` names (a test suite's other databases)."""
    path = database.database_file
    if database.dialect not in ("sqlite", "duckdb") or not path:
        return None
    fingerprints = [database_fingerprint(name, store) for name in (path, *also)]
    if None in fingerprints:
        return None
    return json.dumps([fingerprints, database.identifier, engine_release(database.dialect), case,
                       *read_beside_content(database)])


def read_beside_content(database: ExecutionAdapter) -> list[str]:
    """What a result on ``database`` may read besides the file's content, for the keys of what outlives a run. On
    DuckDB, the file's path (``current_database()`` is its name: two copies answer differently) and the time zone
    (a ``TIMESTAMPTZ`` printed as text is printed in it), as the engine reports it (``TZ`` and the system's zone
    are read by ICU in its own way: two reviews' findings, each result served from another file's or zone's
    entry). SQLite's results read neither: the path is behind a pragma the sandbox denies, local time behind a
    date function, which nothing keeps."""
    if database.dialect != "duckdb":
        return []
    return [database.identifier, database.duckdb_time_zone()]


@functools.cache
def engine_release(dialect: str) -> str:
    """The release of the database engine that runs a file database of ``dialect``, which its results and errors
    may depend on: SQLite's, or DuckDB's as its installed package's metadata names it (read without importing it:
    DuckDB runs in its own process)."""
    if dialect != "duckdb":
        return sqlite3.sqlite_version
    try:
        return importlib.metadata.version("duckdb")
    except importlib.metadata.PackageNotFoundError:  # no DuckDB here: no DuckDB database opens either
        return "none"


def _cells(execution: Execution) -> int:
    relation = execution.relation
    return 0 if relation is None else max(1, relation.height) * max(1, relation.width)


#: What an entry costs beyond its cells, counted as cells: its execution, relation and key, about 1.4 KB, where
#: a cell held as a Python value is about 60 bytes (Spider dev: 1.9 KB an entry of 9 cells on average). Without
#: it a suite of distinct queries with one-cell results could keep five million entries (gigabytes) per worker.
_ENTRY_CELLS = 32


def _execution_record(execution: Execution) -> tuple[Any, ...] | None:
    """A successful execution as plain values (its rows while the relation holds them, else its frame), so that
    a change to the engine's classes makes an old entry fail to load rather than load wrong."""
    relation = execution.relation
    if relation is None:
        return None
    held = relation.rows
    payload: Any = list(held) if held is not None else relation.frame
    return (relation.names, relation.truncated, held is not None, payload, execution.elapsed_ms, execution.warnings,
            execution.steps)


def _execution_from_record(record: Any) -> Execution | None:
    if record is None:
        return None
    try:
        names, truncated, as_rows, payload, elapsed_ms, warnings, steps = record
        relation: Relation = relation_from_rows(names, payload, truncated) if as_rows \
            else Relation(payload, list(names), truncated)
        return Execution(True, relation, None, float(elapsed_ms), list(warnings),
                         None if steps is None else int(steps))
    except (TypeError, ValueError):
        return None
