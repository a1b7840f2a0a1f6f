"""Reconcile a benchmark database whose identifiers differ from its published schema (Spider's ``tables.json``).

Some distributed copies of Spider rename every table and column (the copy in ``../shared/data/spider`` has
German identifiers: ``sänger`` for ``singer``) while the questions, gold SQL and predictions keep the English
names of ``tables.json``; every query then fails with ``no such table``. Rewriting the queries would change what
is being evaluated, so instead the *database* is copied and its tables and columns renamed back to the names in
``tables.json``. The rename is derived from structure, never from a dictionary of words:

* a table of ``tables.json`` pairs with a database table of the same number of columns, and columns pair by
  position inside it;
* among all such pairings the one that agrees best on foreign keys, column type classes and identical names wins;
* a tie between two different best pairings is an :class:`SchemaMismatchError` naming the tables, as is any
  table that has no partner of its shape.

The pairing found is written beside the renamed copy (``names.json``) so a reader can check every rename.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlcmp_dagster.engine.atomic import atomic_path
_SYSTEM_TABLES = {"sqlite_sequence", "sqlite_stat1", "sqlite_stat4"}
_MAX_PAIRINGS = 200_000


class SchemaMismatchError(ValueError):
    """The database cannot be paired with its published schema; the message names the database and tables."""


@dataclass(frozen=True)
class Table:
    """One table: its name, its columns in order with their type class, and foreign keys by column position."""

    name: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    foreign_keys: frozenset[tuple[int, str, int]] = field(default_factory=frozenset)  # (column, parent, parent column)


@dataclass(frozen=True)
class Rename:
    """How one database table maps back onto its published name."""

    table: str
    published_table: str
    columns: tuple[tuple[str, str], ...]  # (database column, published column), by position

    @property
    def changes(self) -> int:
        return (self.table != self.published_table) + sum(a != b for a, b in self.columns)


def published_tables(entry: dict[str, Any]) -> list[Table]:
    """The tables of one ``tables.json`` entry (system tables such as ``sqlite_sequence`` left out).

    >>> entry = {"table_names_original": ["a", "b"], "column_names_original": [[-1, "*"], [0, "id"], [1, "a_id"]],
    ...          "column_types": ["text", "number", "number"], "foreign_keys": [[2, 1]]}
    >>> [(t.name, t.columns, sorted(t.foreign_keys)) for t in published_tables(entry)]
    [('a', ('id',), []), ('b', ('a_id',), [(0, 'a', 0)])]
    """
    names: list[str] = entry["table_names_original"]
    columns: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for index, ((table, column), kind) in enumerate(zip(entry["column_names_original"], entry["column_types"],
                                                        strict=True)):
        if table >= 0:
            columns[table].append((index, column, _type_class(kind)))
    position = {index: (table, offset) for table, cols in columns.items() for offset, (index, _, _) in enumerate(cols)}
    keys: dict[int, set[tuple[int, str, int]]] = defaultdict(set)
    for child, parent in entry.get("foreign_keys", []):
        (child_table, child_offset), (parent_table, parent_offset) = position[child], position[parent]
        keys[child_table].add((child_offset, names[parent_table], parent_offset))
    return [Table(name, tuple(c for _, c, _ in columns[i]), tuple(k for _, _, k in columns[i]),
                  frozenset(keys[i]))
            for i, name in enumerate(names) if name.lower() not in _SYSTEM_TABLES]


def database_tables(path: Path) -> list[Table]:
    """The user tables of the SQLite database at ``path``, read-only."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        tables = []
        for name in names:
            if name.lower() in _SYSTEM_TABLES:
                continue
            info = connection.execute(f'PRAGMA table_info("{_quote(name)}")').fetchall()
            columns = tuple(row[1] for row in info)
            offset = {column.lower(): i for i, column in enumerate(columns)}
            keys = set()
            for row in connection.execute(f'PRAGMA foreign_key_list("{_quote(name)}")'):
                parent, child_column, parent_column = row[2], row[3], row[4]
                keys.add((offset.get(child_column.lower(), -1), parent, parent_column))
            tables.append(Table(name, columns, tuple(_type_class(row[2]) for row in info), frozenset(keys)))
    finally:
        connection.close()
    # Foreign keys name the parent column; turn it into a position once every table is known.
    by_name = {t.name.lower(): t for t in tables}
    resolved = []
    for table in tables:
        keys = set()
        for child, parent, parent_column in table.foreign_keys:
            target = by_name.get(str(parent).lower())
            if target is None:
                continue
            columns = [c.lower() for c in target.columns]
            keys.add((child, target.name,
                      columns.index(parent_column.lower()) if parent_column and parent_column.lower() in columns else 0))
        resolved.append(Table(table.name, table.columns, table.types, frozenset(keys)))
    return resolved


def pair_tables(database: list[Table], published: list[Table], where: str) -> list[Rename]:
    """The pairing of ``database`` tables with ``published`` ones that agrees best; see the module docstring.

    >>> db = [Table("b2", ("x",), ("number",), frozenset({(0, "a2", 0)})), Table("a2", ("y",), ("number",))]
    >>> pub = [Table("a", ("id",), ("number",)), Table("b", ("a_id",), ("number",), frozenset({(0, "a", 0)}))]
    >>> [(r.table, r.published_table) for r in pair_tables(db, pub, "demo")]
    [('b2', 'b'), ('a2', 'a')]
    """
    if len(database) != len(published):
        raise SchemaMismatchError(f"{where}: the database has {len(database)} tables "
                                  f"({', '.join(t.name for t in database)}), the published schema {len(published)} "
                                  f"({', '.join(t.name for t in published)})")
    groups: dict[int, tuple[list[Table], list[Table]]] = defaultdict(lambda: ([], []))
    for table in database:
        groups[len(table.columns)][0].append(table)
    for table in published:
        groups[len(table.columns)][1].append(table)
    for width, (ours, theirs) in groups.items():
        if len(ours) != len(theirs):
            raise SchemaMismatchError(
                f"{where}: tables with {width} columns do not pair: database {[t.name for t in ours]}, "
                f"published {[t.name for t in theirs]}")
    choices = [list(itertools.permutations(theirs)) for ours, theirs in groups.values()]
    if math.prod(len(c) for c in choices) > _MAX_PAIRINGS:
        raise SchemaMismatchError(f"{where}: too many tables of the same shape to pair them reliably")
    scored: list[tuple[int, dict[str, Table]]] = []
    for combination in itertools.product(*choices):
        mapping = {mine.name: theirs for (ours, _), chosen in zip(groups.values(), combination, strict=True)
                   for mine, theirs in zip(ours, chosen, strict=True)}
        scored.append((_agreement(database, mapping), mapping))
    scored.sort(key=lambda item: -item[0])
    best_score, best = scored[0]
    rivals = [m for s, m in scored[1:] if s == best_score]
    if rivals:
        differ = sorted(name for name in best if best[name].name != rivals[0][name].name)
        raise SchemaMismatchError(f"{where}: tables {differ} could each be more than one published table "
                                  "(same shape, same keys); cannot tell them apart")
    return [Rename(t.name, best[t.name].name, tuple(zip(t.columns, best[t.name].columns, strict=True)))
            for t in database]


def restore_names(source: Path, target: Path, renames: list[Rename]) -> None:
    """Copy the database at ``source`` to ``target`` with every table and column renamed as ``renames`` say.

    Renames go through temporary names first, so swaps and case-only changes (``semesters`` to ``Semesters``)
    work; SQLite rewrites foreign keys, indexes and views that refer to a renamed table or column.
    """
    with atomic_path(target) as partial:
        shutil.copyfile(source, partial)
        connection = sqlite3.connect(partial)
        try:
            connection.execute("PRAGMA legacy_alter_table = OFF")
            for number, rename in enumerate(renames):
                for offset, (column, _) in enumerate(rename.columns):
                    connection.execute(f'ALTER TABLE "{_quote(rename.table)}" RENAME COLUMN "{_quote(column)}" '
                                       f'TO "__sqlcmp_c{offset}"')
                for offset, (_, published) in enumerate(rename.columns):
                    connection.execute(f'ALTER TABLE "{_quote(rename.table)}" RENAME COLUMN "__sqlcmp_c{offset}" '
                                       f'TO "{_quote(published)}"')
                connection.execute(f'ALTER TABLE "{_quote(rename.table)}" RENAME TO "__sqlcmp_t{number}"')
            for number, rename in enumerate(renames):
                connection.execute(f'ALTER TABLE "__sqlcmp_t{number}" RENAME TO "{_quote(rename.published_table)}"')
            connection.commit()
        finally:
            connection.close()
    names = {r.published_table: {"database_table": r.table, "columns": {b: a for a, b in r.columns}} for r in renames}
    (target.parent / "names.json").write_text(json.dumps(names, indent=2, ensure_ascii=False) + "\n",
                                              encoding="utf-8")


def needs_renaming(renames: list[Rename]) -> bool:
    """Whether any identifier differs from its published name beyond letter case (SQLite ignores case)."""
    return any(r.table.lower() != r.published_table.lower() or any(a.lower() != b.lower() for a, b in r.columns)
               for r in renames)


def _agreement(database: list[Table], mapping: dict[str, Table]) -> int:
    """How well a pairing agrees: each foreign key that maps onto a published one counts 4, each column whose
    type class agrees 1, each identical column name 1 (case-insensitive)."""
    score = 0
    for table in database:
        theirs = mapping[table.name]
        mapped_keys = {(child, mapping[parent].name, column) for child, parent, column in table.foreign_keys
                       if parent in mapping}
        score += 4 * len(mapped_keys & theirs.foreign_keys)
        score += sum(a == b or "any" in (a, b) for a, b in zip(table.types, theirs.types, strict=True))
        score += sum(a.lower() == b.lower() for a, b in zip(table.columns, theirs.columns, strict=True))
    return score


def _type_class(declared: str) -> str:
    """A coarse type class shared by ``tables.json`` types (number, text, time, ...) and SQLite declarations."""
    kind = (declared or "").lower()
    if kind in ("number",) or any(word in kind for word in ("int", "real", "floa", "doub", "dec", "num")):
        return "number"
    if kind == "text" or any(word in kind for word in ("char", "text", "clob", "string")):
        return "text"
    if any(word in kind for word in ("time", "date", "year")):
        return "time"
    return "any"


def _quote(identifier: str) -> str:
    return identifier.replace('"', '""')
