"""The case sensor's view of the suite folder: every case's data version, recomputed only for the suite files that
changed since the last tick.

Loading and hashing every case was the sensor's whole tick (3.6 s at 10,000 cases; at 100,000: 5.8 s to load,
4.0 s to look up each case's database fingerprint, 4.4 s to hash). The scan keeps, in the case store
(:data:`SCAN_OBJECT`), each file's content digest with its cases' ids and versions and the databases they ran
on; a file whose bytes, whose cases' databases (their fingerprints) and whose settings (the engine version, the
database resource's) are all unchanged is not read again. A database fingerprint is computed once per database
per tick. The versions are those of :func:`~sqlcmp_dagster.cases.suite.case_version`, as before.

A database is named in the kept scan by its key as :func:`~sqlcmp_dagster.engine.redaction.redacted_url` shows it:
the case store (a folder, a bucket) is read by more people than the suite, and a case's ``db`` may be a URL with a
password (a review found it in the scan). The real key, which a fingerprint needs (a URL without its password
cannot connect), is kept in this process's memory only (:data:`_REAL_KEYS`), learned from each suite line read.
A kept file or line whose database hides a password is taken only from a scan this process wrote
(:data:`_WRITER`), whose keys it read itself. Two URLs that differ only in their password are stored under names
of their own (the second ``... (2)``), so that one's fingerprint never vouches for the other's cases and neither
makes the other's cases read again at every tick (a review found a suite read afresh at each tick, never whole,
while one stored name stood for two URLs). Anything else is read again, as a changed file is (a new process
reads such files once).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlcmp_dagster.cases.chunks import partition_key_problem
from sqlcmp_dagster.cases.suite import SUITE_SUFFIXES, Known, SuiteError, case_version, is_suite_file, \
    read_suite_known
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.redaction import hides_password, redacted_url
from sqlcmp_dagster.resources import DatabaseResource

#: The scan kept in the case store (beside the assets' folders).
SCAN_OBJECT = "_suite_scan.json"
#: The layout of a kept scan; another is scanned afresh (2: database keys without their password, and the
#: writing process's mark; a scan of 1 holds real keys, which this layout would take for keys without a password).
SCAN_FORMAT = 2

#: The real database keys this process read in suite lines, by the name the kept scan stores them under (only those
#: whose stored form shows ``***``), and those names by real key. Only ever added to (under :data:`_NAMING`).
_REAL_KEYS: dict[str, str] = {}
_STORED_NAMES: dict[str, str] = {}
_NAMING = threading.Lock()
#: This process's mark on the scans it writes: every real key behind a scan with it is in :data:`_REAL_KEYS`. A
#: scan of another process (another code server, the command line, a process before a restart) has keys this one
#: never read, so a stored key that is one real key here may be another there.
_WRITER = uuid.uuid4().hex


def forget_database_keys() -> None:
    """Forget the real database keys and take a new mark, as a new process starts: a forked child, whose parent
    goes on learning keys under the same mark, and a test of what a restarted code server does."""
    global _WRITER
    _REAL_KEYS.clear()
    _STORED_NAMES.clear()
    _WRITER = uuid.uuid4().hex


os.register_at_fork(after_in_child=forget_database_keys)


#: The longest a tick reads suite lines it has not read before: past it, the scan stops after the line it is on
#: and goes on at the next tick (a first tick over 100,000 cases took 5.7 s; Dagster's sensors should be short).
SCAN_SECONDS = 3.0


@dataclass(frozen=True)
class SuiteScan:
    """Every case Dagster evaluates, id -> data version in suite order, and what the sensor cannot take from the
    folder, a line each (``problems``): the lines that are not cases (each such case's partition is deleted, as a
    case taken out of the suite is) and the case ids Dagster cannot hold as a partition key (those cases are not
    added). The sensor logs them, as a terminal may show them: before, a case whose line broke lost its partition
    without a word, and one id with a NUL made the PostgreSQL instance refuse every new partition of the tick.
    ``complete`` is False when the tick's time ran out before every file was read: ``versions`` then
    holds only the cases read so far and must not be taken for the suite."""

    versions: dict[str, str]
    problems: list[str]
    complete: bool = True


def scan_suite(folder: Path, database: DatabaseResource, kept: dict[str, Any] | None, timed: bool = True) \
        -> tuple[SuiteScan, dict[str, Any]]:
    """The versions of every case directly in ``folder`` (suite files in name order, the first of duplicate ids
    kept, as :func:`~sqlcmp_dagster.cases.suite.load_suites` does) and the scan to keep for the next call;
    ``kept``: the scan the previous call returned (None: read every file). ``timed``: new lines are read for at
    most :data:`SCAN_SECONDS` (the scan is then incomplete, and goes on from the scan it returns); untimed, the
    whole folder is read."""
    settings = _settings(database)
    if not kept or kept.get("format") != SCAN_FORMAT or kept.get("settings") != settings:
        kept = {"files": {}, "databases": {}}
    ours = kept.get("writer") == _WRITER
    fingerprints: dict[str, str] = {}  # by real key: a stored one that hides a password would not connect

    def fingerprint(key: str, request: CompareRequest | None = None) -> str:
        """The fingerprint of the database of the real key ``key``, computed once a tick."""
        if key not in fingerprints:
            fingerprints[key] = database.fingerprint(request or _stand_in(key))
        return fingerprints[key]

    def unchanged(stored: str) -> bool:
        """Whether the kept cases on the database stored as ``stored`` may be kept: its real key known, and its
        fingerprint the kept one."""
        real = _real_key(stored, ours)
        return real is not None and kept["databases"].get(stored) == fingerprint(real)

    files: dict[str, Any] = {}
    deadline = time.monotonic() + SCAN_SECONDS if timed else float("inf")
    complete = True
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in SUITE_SUFFIXES):
        entry = kept["files"].get(path.name)
        if not complete:  # out of time: the file is looked at next tick (what was kept of it stays kept)
            if entry is not None and (ours or not any(hides_password(key) for key in entry["databases"])):
                files[path.name] = entry  # another process's keys would pass for this one's under its mark
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if entry is None or entry["digest"] != digest or not all(unchanged(key) for key in entry["databases"]):
            lines = {} if entry is None else {line: case for line, case in entry.get("lines", {}).items()
                                              if unchanged(case[2])}
            entry = _scan_file(path, digest, database, fingerprint, lines, deadline)
            complete = entry["digest"] == digest
        files[path.name] = entry
    versions: dict[str, str] = {}
    errors: list[str] = []
    unfit: list[str] = []
    seen: dict[str, str] = {}
    for name, entry in files.items():
        errors += entry["errors"]
        source = str(folder / name)
        for case_id, version in entry["cases"]:
            if case_id in seen:
                errors.append(str(SuiteError(source, 0, f"duplicate case_id {case_id!r} (first in {seen[case_id]})")))
                continue
            seen[case_id] = source
            if (problem := partition_key_problem(case_id)) is not None:
                unfit.append(f"case {case_id!r} is not evaluated in Dagster: its id {problem}")
            else:
                versions[case_id] = version
    used = sorted({key for entry in files.values() for key in entry["databases"]})
    reals = {key: _real_key(key, True) for key in used}
    scan = {"format": SCAN_FORMAT, "settings": settings, "writer": _WRITER, "files": files,
            "databases": {key: fingerprint(real) for key, real in reals.items() if real is not None}}
    return SuiteScan(versions, [f"suite line skipped: {error}" for error in errors] + unfit, complete), scan


def _scan_file(path: Path, digest: str, database: DatabaseResource,
               fingerprint: Callable[[str, CompareRequest | None], str], lines: dict[str, list[str]],
               deadline: float) -> dict[str, Any]:
    """One suite file read and each case's version computed; a file that is no suite holds no case. A JSONL
    line whose text the file's last scan read (``lines``: its digest -> case id, version, stored database key,
    kept only while that database's fingerprint is unchanged) is neither parsed nor hashed again: an edit of one
    case of a file of 100,000 reads one line. Past ``deadline`` a JSONL file's reading stops after the line it
    parsed: the entry's digest is then empty (never a file's), and the lines read so far are kept for the next
    tick."""
    if not is_suite_file(path):
        return {"digest": digest, "cases": [], "errors": [], "databases": []}
    cases, errors, keys, read = [], [], set(), {}
    last: list[str] = []  # the digest of the line read last: the case read_suite_known yields next is its

    def known(text: str) -> Known | None:
        line = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        last[:] = [line]
        case = lines.get(line)
        return None if case is None else Known(case[0], case)

    for item in read_suite_known(path, None, known if path.suffix.lower() == ".jsonl" else None):
        if isinstance(item, SuiteError):
            errors.append(str(item))
            continue
        if isinstance(item, Known):
            case_id, version, key = item.value
        else:  # a case read now, a case at a time: a file of 100,000 cases is never in memory whole
            request = database.with_defaults(item)
            case_id, real = item.case_id, _database_key(request)
            version = case_version(request, fingerprint(real, request))  # the resource's defaults are its config
            key = _stored_key(real)
        keys.add(key)
        cases.append([case_id, version])
        if last and not case_id.startswith(f"{path.stem}:"):
            read[last[0]] = [case_id, version, key]  # not an id from the line's number, which moves
            if not isinstance(item, Known) and time.monotonic() > deadline:
                digest = ""
                break
    return {"digest": digest, "cases": cases, "errors": errors, "databases": sorted(keys), "lines": read}


#: The database key of a case that carries both results (it opens no database).
_NO_DATABASE = "\0results"


def _database_key(request: CompareRequest) -> str:
    """What decides the database a case runs on, hence its fingerprint (``Evaluator.open``): its ``db`` (empty for
    the resource's default database), or nothing at all when it carries both results."""
    if request.actual_result is not None and request.expected_result is not None:
        return _NO_DATABASE
    return request.db or ""


def _stored_key(real: str) -> str:
    """The name the kept scan holds the database key ``real`` under: the key itself when it holds no password,
    else its password shown as ``***``, with `` (2)``, `` (3)``, ... after it for the second and later keys of
    this process that look the same so (URLs that differ only in their password); remembered
    (:data:`_REAL_KEYS`), to fingerprint its database at a later tick.

    >>> _stored_key("postgresql://u:a@h/db"), _stored_key("postgresql://u:b@h/db"), _stored_key("postgresql://u:a@h/db")
    ('postgresql://u:***@h/db', 'postgresql://u:***@h/db (2)', 'postgresql://u:***@h/db')
    """
    shown = redacted_url(real)
    if not hides_password(shown):
        return shown
    with _NAMING:
        stored = _STORED_NAMES.get(real)
        if stored is None:
            stored, number = shown, 1
            while stored in _REAL_KEYS:
                number += 1
                stored = f"{shown} ({number})"
            _STORED_NAMES[real], _REAL_KEYS[stored] = stored, real
        return stored


def _real_key(stored: str, ours: bool) -> str | None:
    """The real key of the stored name ``stored``: itself when it hides no password, else the real key this
    process stored under it, if the scan is this process's (``ours``); None when unknown."""
    if not hides_password(stored):
        return stored
    return _REAL_KEYS.get(stored) if ours else None


def _stand_in(key: str) -> CompareRequest:
    """A request that opens the database of ``key``, to fingerprint it again without reading a suite."""
    if key == _NO_DATABASE:
        empty: dict[str, list[Any]] = {"columns": [], "rows": []}
        return CompareRequest.model_validate({"case_id": "scan", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1",
                                              "expected_result": empty, "actual_result": empty})
    return CompareRequest(case_id="scan", expected_sql=["SELECT 1"], actual_sql="SELECT 1", db=key or None)


def _settings(database: DatabaseResource) -> str:
    """What every version depends on besides the cases and their databases: the engine version and the database
    resource's settings (its defaults go into each case)."""
    from sqlcmp_dagster.engine import version

    return hashlib.sha256(json.dumps([version.ENGINE_VERSION, database.db_dir, database.url,
                                      database.query_timeout_ms, database.max_result_rows]).encode()).hexdigest()
