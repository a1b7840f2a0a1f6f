"""The reports of ``sqlcmp evaluate`` as its cases finish: a journal beside ``--out`` that a crash, a signal or a
full disk leaves readable, that ``--resume`` continues from, and that becomes ``--out`` at the end.

The journal ``<out>.journal`` holds one line per finished case, in the order they finished::

    {"case_version":"<sha256>","report":<the report, exactly as its --out line>}

The case version (:class:`CaseVersions`) is a hash of everything that decides the report: the case, its
database (path, size and modification time of a file; the address of a server), the run's judge settings and the
releases of the engine and its libraries. ``--resume``
keeps every report whose case still has the same version and evaluates the rest; the final file is then the
kept and the new lines in suite order, the file a clean run writes (timings aside). A line a kill cut short is
dropped. The journal is locked while a run writes it (``flock``, which the system releases when the process
dies, so a crash never blocks the next run), so two runs cannot write one ``--out``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

from sqlcmp_dagster.cases.suite import case_version
from sqlcmp_dagster.engine.atomic import file_state
from sqlcmp_dagster.engine.cache import RELEASES
from sqlcmp_dagster.engine.execution import database_file_of, resolve_database
from sqlcmp_dagster.engine.judge import JudgeConfig
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.spider_execution import folder_suite

_HEAD = '{"case_version":"'
_MIDDLE = '","report":'


class JournalBusy(Exception):
    """Another live run holds the journal of the same ``--out``."""


def journal_path(out: Path) -> Path:
    """Where the journal of ``out`` is: beside it, named after it."""
    return out.with_name(out.name + ".journal")


class CaseVersions:
    """Each case's version for the journal (call it with the case). A database file is stamped by its path and
    its state on disk (``atomic.file_state``, its write-ahead log's included: hashing every database's bytes on
    every run would cost more than many runs' cases), with the states of the other databases of its Spider test
    suite and the names of the files SQLite keeps beside them (``spider_execution.suite_files``: each report's
    test-suite verdict lists and reads them; a review found a report kept by ``--resume`` after one was
    rewritten, or after a WAL database there got its ``-wal`` and ``-shm``), the file being the one the engine
    reads (a link followed, a ``sqlite:///`` URL's); a server by its address; a database that cannot be resolved,
    by the text that names it (its cases' reports say why). The stamps are kept per database, not per case. A run
    on a WAL database whose files SQLite had not made yet evaluates its cases again when resumed, once: its own
    reads made them.

    What the run decides for every case is in each version too: the advisory ``judge``'s settings (a run resumed
    with another judge model kept the first model's judgments before), whether a privileged role is
    allowed (a PostgreSQL case's report is a refusal without it), and the releases of the engine, its libraries
    and SQLite (``cache.RELEASES``). The judge's key, concurrency and cache folder are left out: they change no
    judgment."""

    def __init__(self, db_dir: Path | None, default_db: str | None, *, judge: JudgeConfig | None = None,
                 allow_privileged_role: bool = False) -> None:
        self.db_dir, self.default_db = db_dir, default_db
        self._stamps: dict[str, str] = {}
        self._suites: dict[Path, str] = {}
        settings = None if judge is None else judge.model_dump(mode="json",
                                                               exclude={"api_key", "concurrency", "cache_dir"})
        self._run = json.dumps({"judge": settings, "allow_privileged_role": allow_privileged_role,
                                "releases": RELEASES}, sort_keys=True, default=str)

    def __call__(self, case: CompareRequest) -> str:
        case_part = case_version(case, self._stamp(case.db or self.default_db or ""))
        return hashlib.sha256(f"{case_part}\x00{self._run}".encode()).hexdigest()

    def _stamp(self, target: str) -> str:
        if target not in self._stamps:
            self._stamps[target] = self._stamp_of(target)
        return self._stamps[target]

    def _stamp_of(self, target: str) -> str:
        try:
            resolved = resolve_database(target, self.db_dir)
        except (OSError, ValueError):
            return f"unresolved:{target}"
        file = database_file_of(resolved)
        if file is None:  # a server, by its address
            return resolved
        state = file_state(str(file))
        if state is None:
            return f"unresolved:{target}"
        return f"{file}|{state}|{self._suite(file)}"

    def _suite(self, database: Path) -> str:
        """The states of the databases of ``database``'s Spider test suite and the names of SQLite's files beside
        them (``spider_execution.folder_suite``), as the report lists and reads them; once per folder, which holds
        one suite for all its databases (a flat folder of 800 databases took 20 s when each of them listed it)."""
        folder = database.parent
        if folder not in self._suites:
            databases, companions = folder_suite(folder)
            self._suites[folder] = f"{[file_state(name) for name in databases]}|{companions}"
        return self._suites[folder]


class Journal:
    """The journal of one run of ``evaluate --out out``: locked, then (``resume``) indexed or emptied; reports
    are appended with :meth:`record` as they finish. A write that fails (a full disk) stops the journal, not the
    run: :attr:`failure` says why, and the reports still reach ``--out`` if the disk allows it.

    Resuming reads the journal a line at a time and keeps only where each case version's report line starts
    (:meth:`take_kept`); :meth:`line_at` reads one back when its turn comes, as it does a report recorded in
    this run that finished ahead of its turn (so that such a report need not wait in memory)."""

    def __init__(self, out: Path, *, resume: bool) -> None:
        self.path = journal_path(out)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.failure: OSError | None = None
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise JournalBusy(f"{self.path}: another sqlcmp evaluate is writing this --out now") from None
        self._kept, self._size = _index(self._fd) if resume else ({}, 0)
        if self._size != os.fstat(self._fd).st_size:  # emptied, or a cut line at the end: the next starts a line
            os.ftruncate(self._fd, self._size)

    def take_kept(self) -> dict[str, int]:
        """Where the report of each case version the journal held when it was opened starts (a later line of a
        version wins), for :meth:`line_at`; handed over once, so that it is not held for the whole run."""
        kept, self._kept = self._kept, {}
        return kept

    def line_at(self, offset: int) -> str:
        """The report line (ending in a newline) of the journal line at ``offset`` (from :meth:`take_kept` or
        :meth:`record`)."""
        assert self._fd is not None, "the journal is open"
        data = b""
        while not data.endswith(b"\n"):
            more = os.pread(self._fd, max(1 << 16, len(data)), offset + len(data))
            if not more:
                raise OSError(f"{self.path}: the journal line at byte {offset} is gone")
            end = more.find(b"\n")
            data += more if end < 0 else more[:end + 1]
        return data[len(_HEAD) + 64 + len(_MIDDLE):-2].decode() + "\n"

    def record(self, version: str, line: str) -> int | None:
        """Append the report ``line`` (ending in a newline) of the case of ``version``; where its journal line
        starts (for :meth:`line_at`), None when it could not be written."""
        if self._fd is None or self.failure is not None:
            return None
        data = f"{_HEAD}{version}{_MIDDLE}{line[:-1]}}}\n".encode()
        offset, size = self._size, len(data)
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as failure:
            self.failure = failure
            return None
        self._size += size
        return offset

    def close(self, *, done: bool) -> None:
        """Release the journal; ``done`` (``--out`` holds every report now) also removes it."""
        if self._fd is None:
            return
        if done:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


def _index(fd: int) -> tuple[dict[str, int], int]:
    """Where the report of each case version starts in the journal open as ``fd`` (a later line of a version
    wins), and the length of its whole lines; lines that are not whole journal lines (the last one, cut by a
    kill) are skipped. Read a line at a time: a journal of 100,000 reports is hundreds of megabytes."""
    kept: dict[str, int] = {}
    offset = 0
    with open(os.dup(fd), "rb") as handle:
        handle.seek(0)
        for raw in handle:
            if not raw.endswith(b"\n"):  # what follows the last newline is a line cut short
                break
            start, offset = offset, offset + len(raw)
            try:
                line = raw[:-1].decode("utf-8")
            except UnicodeDecodeError:
                continue
            version = line[len(_HEAD):len(_HEAD) + 64]
            rest = line[len(_HEAD) + 64:]
            if line.startswith(_HEAD) and rest.startswith(_MIDDLE) and rest.endswith("}"):
                kept[version] = start
    return kept, offset
