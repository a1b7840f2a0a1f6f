"""The database of ``large_database.py``: a Spider database copied into one SQLite file of a given size, built
once, checked, and reused while its manifest and SHA-256 match (``large_database.py``'s docstring says how the
copies are made and why).
"""

from __future__ import annotations

import hashlib
import json
import re
import math
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Bumped whenever the way the database is built changes: a manifest of another version is rebuilt.
GENERATOR_VERSION = 1


@dataclass
class Source:
    """A Spider database read whole: its tables' DDL and rows, its indexes' DDL and which columns are keys."""

    tables: dict[str, str]  # name -> CREATE TABLE, in the file's order
    indexes: list[str]
    rows: dict[str, list[tuple[Any, ...]]]
    keyed: dict[str, set[int]] = field(default_factory=dict)  # table -> positions of the columns made fresh

    @property
    def stride(self) -> int:
        """A power of ten above every integer key value (negative ones included), so that ``value + copy *
        stride`` never meets another copy's value."""
        values = (_integer(row[i]) for name, rows in self.rows.items() for row in rows for i in self.keyed.get(name, ()))
        largest = max((abs(v) for v in values if v is not None), default=0)
        return 10 ** (len(str(largest)) + 1)


def _integer(value: Any) -> Any:
    """``value`` as an int when it is one or a text that spells one (a text column referencing an integer key,
    as car_1's ``car_makers.Country`` does), else None."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        return int(value)
    return None


def read_source(path: Path) -> Source:
    """The tables, rows, indexes and key columns of the Spider database at ``path`` (opened read-only)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        entries = connection.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                                     "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid").fetchall()
        tables = {name: sql for kind, name, sql in entries if kind == "table"}
        source = Source(tables, [sql for kind, _, sql in entries if kind == "index"],
                        {name: connection.execute(f"SELECT * FROM {_quoted(name)}").fetchall() for name in tables})
        source.keyed = _key_columns(connection, list(tables))
    finally:
        connection.close()
    return source


def _key_columns(connection: sqlite3.Connection, tables: list[str]) -> dict[str, set[int]]:
    """Per table, the positions of the columns each copy gives fresh values: both ends of every declared foreign
    key, and every column of a PRIMARY KEY or UNIQUE set that has none of those (a set that has one is unique
    per copy already: its other columns keep their values, so ``Language = 'English'`` still finds every copy)."""
    positions = {t.lower(): {row[1].lower(): row[0] for row in connection.execute(f"PRAGMA table_info({_quoted(t)})")}
                 for t in tables}
    names = {t.lower(): t for t in tables}
    keyed: dict[str, set[int]] = defaultdict(set)
    for table in tables:
        for row in connection.execute(f"PRAGMA foreign_key_list({_quoted(table)})"):
            parent, child_column, parent_column = row[2].lower(), row[3].lower(), row[4]
            if parent not in positions:
                continue
            if parent_column is None:  # REFERENCES parent: its primary key
                parent_column = next(r[1] for r in connection.execute(
                    f"PRAGMA table_info({_quoted(names[parent])})") if r[5] == 1)
            keyed[table].add(positions[table.lower()][child_column])
            keyed[names[parent]].add(positions[parent][parent_column.lower()])
    for table in tables:
        info = connection.execute(f"PRAGMA table_info({_quoted(table)})").fetchall()
        sets = [{r[0] for r in info if r[5]}]
        for index in connection.execute(f"PRAGMA index_list({_quoted(table)})"):
            if index[2]:
                sets.append({positions[table.lower()][r[2].lower()]
                             for r in connection.execute(f"PRAGMA index_info({_quoted(index[1])})") if r[2]})
        for unique in sets:
            if unique and not unique & keyed[table]:
                keyed[table] |= unique
    return dict(keyed)


def copies(source: Source, table: str, factor: int, stride: int) -> Iterator[tuple[Any, ...]]:
    """The rows of ``table`` in ``factor`` copies, the key columns of copy ``k`` made fresh (copy 0 is the
    original)."""
    keyed = sorted(source.keyed.get(table, ()))
    rows = source.rows[table]
    for copy in range(factor):
        if copy == 0 or not keyed:
            yield from rows
            continue
        for row in rows:
            values = list(row)
            for i in keyed:
                values[i] = _fresh(values[i], copy, stride)
            yield tuple(values)


def _fresh(value: Any, copy: int, stride: int) -> Any:
    """``value`` in copy ``copy``: the same function of the value at both ends of a foreign key."""
    number = _integer(value)
    if number is not None:
        moved = number + copy * stride
        return str(moved) if isinstance(value, str) else moved
    if isinstance(value, float):
        return value + copy * stride
    if isinstance(value, str):
        return f"{value}#{copy}"
    return value  # NULL (references nothing) and blobs (no Spider key is one)


def write_database(source: Source, path: Path, factor: int) -> None:
    """Write ``factor`` copies of ``source`` to a new SQLite file at ``path``: no journal, no syncs, one
    transaction, the indexes made after the rows."""
    path.unlink(missing_ok=True)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = OFF")
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("PRAGMA cache_size = -262144")  # 256 MiB: the autoindexes of text keys fill pages
        connection.execute("BEGIN")
        for sql in source.tables.values():
            connection.execute(sql)
        stride = source.stride
        for table in source.tables:
            width = len(source.rows[table][0]) if source.rows[table] else 0
            if width:
                connection.executemany(f"INSERT INTO {_quoted(table)} VALUES ({', '.join('?' * width)})",
                                       copies(source, table, factor, stride))
        for sql in source.indexes:
            connection.execute(sql)
        connection.execute("COMMIT")
    finally:
        connection.close()


def calibrated_factor(source: Source, target_bytes: int, work: Path) -> int:
    """The copies needed for ``target_bytes``: the size of a 16-copy build, extrapolated (the pages of a copy
    fill alike), plus 2% for the extrapolation's error."""
    trial = work / "calibration.sqlite"
    write_database(source, trial, 16)
    per_copy = trial.stat().st_size / 16
    trial.unlink()
    return max(1, math.ceil(target_bytes * 1.02 / per_copy))


def foreign_key_violations(path: Path) -> Counter[str]:
    """Rows whose declared foreign key finds no parent, per table (``PRAGMA foreign_key_check``)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return Counter(row[0] for row in connection.execute("PRAGMA foreign_key_check"))
    finally:
        connection.close()


def row_counts(path: Path, tables: list[str]) -> dict[str, int]:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {t: connection.execute(f"SELECT count(*) FROM {_quoted(t)}").fetchone()[0] for t in tables}
    finally:
        connection.close()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def large_database(original: Path, db_id: str, target_bytes: int, work: Path) -> tuple[Path, dict[str, Any]]:
    """The database built from ``original`` under ``work/<db_id>/<db_id>.sqlite`` (the layout a db id resolves
    to), reused when its manifest matches and its content is the one recorded, else built and checked."""
    folder = work / db_id
    folder.mkdir(parents=True, exist_ok=True)
    path, manifest_path = folder / f"{db_id}.sqlite", folder / "manifest.json"
    wanted = {"generator": GENERATOR_VERSION, "source_sha256": sha256(original), "target_bytes": target_bytes}
    if path.is_file() and manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        started = time.perf_counter()
        if {k: manifest.get(k) for k in wanted} == wanted and sha256(path) == manifest["sha256"]:
            print(f"reusing {path} (content checked against its manifest in {time.perf_counter() - started:.1f} s)")
            return path, manifest
        print(f"rebuilding {path}: its manifest or content does not match")
    manifest_path.unlink(missing_ok=True)
    started = time.perf_counter()
    source = read_source(original)
    factor = calibrated_factor(source, target_bytes, folder)
    print(f"building {path}: {factor} copies of {db_id} ...", flush=True)
    write_database(source, path, factor)
    built = time.perf_counter()
    counts = row_counts(path, list(source.tables))
    for table, rows in source.rows.items():
        if counts[table] != factor * len(rows):
            sys.exit(f"{table}: {counts[table]} rows, expected {factor} x {len(rows)}")
    violations, original_violations = foreign_key_violations(path), foreign_key_violations(original)
    for table in set(violations) | set(original_violations):
        if violations[table] != factor * original_violations[table]:
            sys.exit(f"{table}: {violations[table]} foreign-key violations, the original has "
                     f"{original_violations[table]} (x {factor} expected)")
    manifest = {**wanted, "factor": factor, "bytes": path.stat().st_size, "sha256": sha256(path), "rows": counts,
                "foreign_key_violations": dict(violations), "build_s": round(built - started, 1),
                "check_s": round(time.perf_counter() - built, 1)}
    manifest_path.write_text(json.dumps(manifest, indent=1))
    print(f"built in {manifest['build_s']} s, checked in {manifest['check_s']} s")
    return path, manifest


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
