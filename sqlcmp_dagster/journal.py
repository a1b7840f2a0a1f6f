"""The reports of ``sqlcmp evaluate`` as its cases finish: a journal beside ``--out`` that a crash, a signal or a
full disk leaves readable, that ``--resume`` continues from, and that becomes ``--out`` at the end.

The journal ``<out>.journal`` holds one line per finished case, in the order they finished::

    {"case_version":"<sha256>","report":<the report, exactly as its --out line>}

The case version (:func:`case_versions`) is a hash of everything that decides the report: the case, the engine
version and its database (path, size and modification time of a file; the address of a server). ``--resume``
keeps every report whose case still has the same version and evaluates the rest; the final file is then the
kept and the new lines in suite order, the file a clean run writes (timings aside). A line a kill cut short is
dropped. The journal is locked while a run writes it (``flock``, which the system releases when the process
dies, so a crash never blocks the next run), so two runs cannot write one ``--out``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

from sqlcmp_dagster.cases.suite import case_version
from sqlcmp_dagster.engine.execution import resolve_database
from sqlcmp_dagster.engine.models import CompareRequest

_HEAD = '{"case_version":"'
_MIDDLE = '","report":'


class JournalBusy(Exception):
    """Another live run holds the journal of the same ``--out``."""


def journal_path(out: Path) -> Path:
    """Where the journal of ``out`` is: beside it, named after it."""
    return out.with_name(out.name + ".journal")


def case_versions(cases: Sequence[CompareRequest], db_dir: Path | None, default_db: str | None) -> list[str]:
    """Each case's version for the journal. A database file is stamped by its path, size and modification time
    (hashing every database's bytes on every run would cost more than many runs' cases); a database that cannot
    be resolved by the text that names it (its cases' reports say why)."""
    stamps: dict[str, str] = {}

    def stamp(target: str) -> str:
        if target not in stamps:
            try:
                resolved = resolve_database(target, db_dir)
                info = os.stat(resolved) if "://" not in resolved else None
                stamps[target] = resolved if info is None else f"{resolved}|{info.st_size}|{info.st_mtime_ns}"
            except (OSError, ValueError):
                stamps[target] = f"unresolved:{target}"
        return stamps[target]

    return [case_version(case, stamp(case.db or default_db or "")) for case in cases]


def parse_journal(data: bytes) -> dict[str, str]:
    """The report lines of a journal's bytes by case version (a later line of a version wins); lines that are
    not whole journal lines (the last one, cut by a kill) are skipped."""
    kept: dict[str, str] = {}
    for raw in data.split(b"\n")[:-1]:  # what follows the last newline is a line cut short
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        version = line[len(_HEAD):len(_HEAD) + 64]
        rest = line[len(_HEAD) + 64:]
        if line.startswith(_HEAD) and rest.startswith(_MIDDLE) and rest.endswith("}"):
            kept[version] = rest[len(_MIDDLE):-1] + "\n"
    return kept


class Journal:
    """The journal of one run of ``evaluate --out out``: locked, then (``resume``) read or emptied; reports are
    appended with :meth:`record` as they finish. A write that fails (a full disk) stops the journal, not the
    run: :attr:`failure` says why, and the reports still reach ``--out`` at the end if the disk allows it."""

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
        data = self.path.read_bytes() if resume else b""
        self.kept = parse_journal(data)
        whole = data.rfind(b"\n") + 1
        if whole != os.fstat(self._fd).st_size:  # emptied, or a cut line at the end: the next starts a line
            os.ftruncate(self._fd, whole)

    def record(self, version: str, line: str) -> None:
        """Append the report ``line`` (ending in a newline) of the case of ``version``."""
        if self._fd is None or self.failure is not None:
            return
        data = f"{_HEAD}{version}{_MIDDLE}{line[:-1]}}}\n".encode()
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as failure:
            self.failure = failure

    def close(self, *, done: bool) -> None:
        """Release the journal; ``done`` (``--out`` holds every report now) also removes it."""
        if self._fd is None:
            return
        if done:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
