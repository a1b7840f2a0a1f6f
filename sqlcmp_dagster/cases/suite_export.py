"""Export the neighbor databases of a run as a Spider test suite: a folder per db id holding the case's database and
one ``.sqlite`` file per neighbor database that told two queries apart, the layout of the official distilled test
suites. The official ``evaluation.py --etype exec`` computes test-suite accuracy on it, and so does ``sqlcmp
evaluate --db-dir`` on it (``metrics.validation.spider_test_suite_match``).

The reports keep each counterexample the neighbor search found (its rows, shrunk to a minimal set, for the tables
the two queries read); the other neighbors it tried told nothing apart and are not kept. Each exported database
has the whole schema of the case's database (its tables, indexes and views, from its own DDL) so that every other
case's gold query on that database runs there too, as the official script requires, and the counterexample's rows
in its tables; every other table is empty.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.neighbor_report import neighborhood_of
from sqlcmp_dagster.engine.sandbox.sqlite import sqlite_read_only

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass
class Export:
    """What an export wrote: the neighbor databases per db id (each db id's own database copied beside them), and
    each case it could not write and why."""

    databases: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def export_test_suite(reports: Iterable[Report], out: Path) -> Export:
    """Write ``reports``' databases and counterexamples under ``out`` in the test-suite layout: ``out/<db id>/<db
    id>.sqlite``, a copy of each SQLite database a case ran on (so that ``out`` serves as the run's ``--db-dir``),
    beside ``out/<db id>/<db id>_<case>.sqlite`` per counterexample. A counterexample of a case on another engine
    is named in :attr:`Export.skipped`."""
    export = Export()
    for report in reports:
        example = neighborhood_of(report).get("counterexample")
        database = str(report.run_metadata.get("database") or "")
        if not database.startswith("sqlite:///"):
            if example:
                export.skipped.append(f"{report.case_id}: not on a SQLite file ({database or 'no database'})")
            continue
        source = Path(database.removeprefix("sqlite:///"))
        db_id = source.parent.name if source.stem == source.parent.name else source.stem
        folder = out / db_id
        try:
            if not (folder / f"{db_id}.sqlite").exists():
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, folder / f"{db_id}.sqlite")
                export.databases.setdefault(db_id, 0)
            if example:
                _write(source, folder / f"{db_id}_{_file_name(report.case_id)}.sqlite", example["tables"])
                export.databases[db_id] += 1
        except (OSError, sqlite3.Error) as error:
            export.skipped.append(f"{report.case_id}: {type(error).__name__}: {error}")
    return export


def _write(source: Path, target: Path, tables: dict[str, Any]) -> None:
    """A new SQLite file at ``target``: ``source``'s schema (tables, then indexes and views) and ``tables``' rows."""
    reader = sqlite_read_only(source)
    try:
        ddl = [row[0] for row in reader.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "AND type IN ('table', 'index', 'view') ORDER BY type = 'view', type = 'index', rowid")]
    finally:
        reader.close()
    target.unlink(missing_ok=True)
    writer = sqlite3.connect(target)
    try:
        for statement in ddl:
            writer.execute(statement)
        for name, table in tables.items():
            columns = ", ".join(_quoted(column) for column in table["columns"])
            marks = ", ".join("?" for _ in table["columns"])
            writer.executemany(f"INSERT INTO {_quoted(name)} ({columns}) VALUES ({marks})", table["rows"])
        writer.commit()
    except sqlite3.Error:
        writer.close()
        target.unlink(missing_ok=True)
        raise
    writer.close()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _file_name(case_id: str) -> str:
    """A file name part for ``case_id``: its letters, digits, ``-`` and ``_`` (at most 60), and a digest of the
    whole id so that two ids never share a file.

    >>> _file_name("spider-0042"), _file_name("../x y")
    ('spider-0042_f55835fc', '_x_y_46c740c6')
    """
    digest = hashlib.sha256(case_id.encode()).hexdigest()[:8]
    return f"{_UNSAFE_NAME.sub('_', case_id)[:60]}_{digest}"
