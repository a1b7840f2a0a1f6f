"""The case sensor's scan of the suite folder (:mod:`sqlcmp_dagster.assets.suite_scan`) keeps no database password:
a review found a case's ``db`` URL, password and all, in the scan kept in the case store. The scan keeps each
database's key with its password shown as ``***``, and this process the real key, so that a kept scan is reused
where that is right (the same versions as a full scan) and read again where the real key is not known."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from conftest import ENGINE_POSTGRES
from sqlcmp_dagster.assets import suite_scan
from sqlcmp_dagster.assets.suite_scan import SCAN_OBJECT, forget_database_keys, scan_suite
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.redaction import redacted_url
from sqlcmp_dagster.resources import DatabaseResource
from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

#: A URL with a password to a port nothing listens on: the scan fingerprints it as unavailable, which is enough.
MADE_UP_URL = "postgresql+psycopg2://sqlcmp:Made-Up-Secret-4711@127.0.0.1:1/sqlcmp"
#: One database named with two passwords (as two suites may name it): the kept scan shows both as one key.
ONE = "postgresql+psycopg2://sqlcmp:first-secret-1@db.example:5432/shop"
OTHER = "postgresql+psycopg2://sqlcmp:second-secret-2@db.example:5432/shop"


@pytest.fixture(autouse=True)
def new_process() -> Iterator[None]:
    """Each test starts, and leaves, as a new process would: no real database key known."""
    forget_database_keys()
    yield
    forget_database_keys()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the suite files the scan reads (each time it reads one)."""
    read: list[str] = []
    reader = suite_scan.read_suite_known

    def counted(path: Path, *args: Any) -> Any:
        read.append(path.name)
        return reader(path, *args)

    monkeypatch.setattr(suite_scan, "read_suite_known", counted)
    return read


def _case(case_id: str, db: str) -> dict[str, Any]:
    return {"case_id": case_id, "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": db}


def _write(path: Path, *cases: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(case) + "\n" for case in cases), encoding="utf-8")


def _fingerprints(monkeypatch: pytest.MonkeyPatch, table: dict[str, str]) -> None:
    """Database fingerprints from ``table`` (by the case's real ``db``), never asked of a URL without its
    password (it cannot connect: its 'unavailable' would version the case wrongly)."""
    def fingerprint(self: DatabaseResource, request: CompareRequest) -> str:
        assert request.db is not None and "***" not in request.db
        return table[request.db]

    monkeypatch.setattr(DatabaseResource, "fingerprint", fingerprint)


@ENGINE_POSTGRES  # with SQLCMP_TEST_PG_URL, the fingerprint opens the engine role's session
def test_the_kept_scan_holds_no_database_password_and_is_reused_only_where_the_password_is_known(
        tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan written to the case store shows a suite URL's password as ``***``; a scan in the same process
    reuses it (the file is not read again) and one in a new process reads the file again, to learn the URL it
    fingerprints: the versions are the same each time."""
    url = os.environ.get("SQLCMP_TEST_PG_URL") or MADE_UP_URL
    password = urlsplit(url).password
    assert password
    asked: list[str | None] = []
    fingerprint = DatabaseResource.fingerprint

    def recorded(self: DatabaseResource, request: CompareRequest) -> str:
        asked.append(request.db)
        return fingerprint(self, request)

    monkeypatch.setattr(DatabaseResource, "fingerprint", recorded)
    folder = tmp_path / "cases"
    _write(folder / "suite.jsonl", _case("pg", url), {**_case("pg2", url), "actual_sql": "SELECT 2"})
    database = DatabaseResource(cache_dir=str(tmp_path / "cache"))
    store = PartitionedParquetIOManager(base_path=str(tmp_path / "store"))

    first, scanned = scan_suite(folder, database, None)
    store.write_note(SCAN_OBJECT, scanned)
    text = (tmp_path / "store" / SCAN_OBJECT).read_text(encoding="utf-8")
    assert redacted_url(url) in text and url not in text
    rest = text.replace(redacted_url(url), "<db>")  # the URL as shown (its user may be spelled as the password)
    assert password not in rest and unquote(password) not in rest
    assert reads == ["suite.jsonl"] and len(first.versions) == 2

    reads.clear()
    again, rescanned = scan_suite(folder, database, store.read_note(SCAN_OBJECT))
    assert again == first and reads == []  # the same process: the kept scan is taken as it is
    assert url not in json.dumps(rescanned)

    forget_database_keys()  # a new process: the stored URL hides the password it needs to fingerprint again
    anew, _ = scan_suite(folder, database, store.read_note(SCAN_OBJECT))
    assert anew == first and reads == ["suite.jsonl"]
    assert asked and all(db == url for db in asked)  # always the URL with its password, never the shown one


def test_urls_that_differ_only_in_their_password_never_vouch_for_each_others_cases(
        tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two suites name one database with two passwords, which look the same redacted: the kept scan names them
    apart (``... (2)``). When neither changed, no file is read again (a review found one name for both made every
    tick read both files afresh: a suite too large for one tick was never read whole); when one URL's fingerprint
    changes, only the file on it is read again, and the versions are a full scan's."""
    one, other = ONE, OTHER
    assert redacted_url(one) == redacted_url(other)
    table = {one: "same", other: "same"}
    _fingerprints(monkeypatch, table)
    folder = tmp_path / "cases"
    _write(folder / "a.jsonl", _case("a", one))
    _write(folder / "b.jsonl", _case("b", other))
    database = DatabaseResource(cache_dir=str(tmp_path / "cache"))
    first, kept = scan_suite(folder, database, None)
    assert "secret" not in json.dumps(kept) and len(kept["databases"]) == 2
    reads.clear()
    assert scan_suite(folder, database, kept)[0] == first and reads == []
    for url, fingerprint, file in ((other, "changed", "b.jsonl"), (one, "changed too", "a.jsonl")):
        table[url] = fingerprint
        reads.clear()
        scan, kept = scan_suite(folder, database, kept)
        assert reads == [file]
        assert scan == scan_suite(folder, database, None)[0] != first


def test_a_scan_another_process_wrote_is_read_again_where_it_hides_a_password(
        tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """This process knows one real URL behind a stored key; another process's scan has a case on another URL of
    that key (another password), whose fingerprint changed since: the case is read again, not kept on the
    strength of the URL this process knows."""
    one, other = ONE, OTHER
    table = {one: "same", other: "same"}
    _fingerprints(monkeypatch, table)
    database = DatabaseResource(cache_dir=str(tmp_path / "cache"))
    folder = tmp_path / "cases"
    _write(folder / "b.jsonl", _case("b", other))
    _, theirs = scan_suite(folder, database, None)  # another process's scan, as the case store keeps it
    forget_database_keys()  # this process
    _write(tmp_path / "elsewhere" / "a.jsonl", _case("a", one))
    scan_suite(tmp_path / "elsewhere", database, None)  # ... has read the first URL only
    table[other] = "changed"
    reads.clear()
    scan, _ = scan_suite(folder, database, json.loads(json.dumps(theirs)))
    assert reads == ["b.jsonl"] and scan == scan_suite(folder, database, None)[0]


def test_the_scan_format_changed_so_a_scan_with_real_keys_is_scanned_afresh(
        tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan of the former layout holds real keys, which this one would take for keys without a password: it is
    not reused, and what is kept then shows the password as ``***``."""
    _fingerprints(monkeypatch, {MADE_UP_URL: "same"})
    folder = tmp_path / "cases"
    _write(folder / "a.jsonl", _case("a", MADE_UP_URL))
    database = DatabaseResource(cache_dir=str(tmp_path / "cache"))
    _, kept = scan_suite(folder, database, None)
    shown, real = (json.dumps(url)[1:-1] for url in (redacted_url(MADE_UP_URL), MADE_UP_URL))
    former = {**json.loads(json.dumps(kept).replace(shown, real)), "format": 1}  # as the former layout kept it
    former.pop("writer")
    assert MADE_UP_URL in json.dumps(former)
    reads.clear()
    _, rescanned = scan_suite(folder, database, former)
    assert reads == ["a.jsonl"] and "Made-Up-Secret" not in json.dumps(rescanned)


def test_a_tick_out_of_time_keeps_no_file_of_another_process_that_hides_a_password(
        tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A tick that runs out of time keeps the files it did not look at as the kept scan has them; one of another
    process's scan whose database hides a password is not kept under this process's mark, where the next tick
    would take the URL this process knows for it."""
    table = {ONE: "same", OTHER: "same"}
    _fingerprints(monkeypatch, table)
    database = DatabaseResource(cache_dir=str(tmp_path / "cache"))
    folder = tmp_path / "cases"
    _write(folder / "a.jsonl", _case("a1", ONE), _case("a2", ONE))
    _write(folder / "b.jsonl", _case("b", OTHER))
    _, theirs = scan_suite(folder, database, None)  # another process's scan of both files
    forget_database_keys()  # this process, which reads a.jsonl's first line only, out of time
    table[OTHER] = "changed"
    monkeypatch.setattr(suite_scan, "SCAN_SECONDS", -1.0)
    partial, kept = scan_suite(folder, database, json.loads(json.dumps(theirs)))
    assert not partial.complete and "a2" not in partial.versions
    scan, _ = scan_suite(folder, database, kept, timed=False)
    assert scan == scan_suite(folder, database, None, timed=False)[0]
