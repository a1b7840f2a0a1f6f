"""Scratch databases for the neighbor search: the schema and a bounded sample read from the case's database,
and in-memory copies built from row sets with every declared constraint enforced by the engine.

Nothing here writes to the user's database: the schema and the sample are read through the case's own
read-only, time-limited :class:`ExecutionAdapter` (the same sandbox as the queries), and each neighbor is an
in-memory database of the case's engine whose rows live only while its :class:`Scratch` is open: SQLite in
this process, DuckDB in one of the case's bounded DuckDB processes
(:mod:`~sqlcmp_dagster.engine.sandbox.duckdb_process`), so that the queries run on a neighbor under the very bounds of
the case's own database. One search builds all its neighbors in one place (a :class:`Neighborhood`), over
connections opened once for the search rather than once per neighbor and per query.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import length_hint
from typing import Any

from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.relation import Relation
from sqlcmp_dagster.engine.models import DEFAULT_MAX_RESULT_BYTES

Rows = dict[str, list[tuple[Any, ...]]]

#: Declared-type fragments that give a SQLite column numeric affinity (INTEGER, REAL or NUMERIC), which also
#: name DuckDB's numeric types (INTEGER, BIGINT, DOUBLE, DECIMAL(p,s), ...).
_NUMERIC_TYPES = ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC", "BOOL")
#: A collation named in a table's DDL (:attr:`Schema.collates`).
_COLLATE = re.compile(r"\bCOLLATE\b", re.IGNORECASE)
#: A foreign key checked only at commit (``DEFERRABLE INITIALLY DEFERRED``) in a table's DDL, or a name that
#: reads ``deferred`` (taken for one: :attr:`Table.defers_keys` is then true for nothing worse than a commit).
_DEFERRED = re.compile(r"\bDEFERRED\b", re.IGNORECASE)
#: A conflict clause that undoes the whole transaction (``ON CONFLICT ROLLBACK``) in a table's DDL, or a name
#: that reads ``rollback`` (:attr:`Table.rolls_back`).
_ROLLBACK = re.compile(r"\bROLLBACK\b", re.IGNORECASE)
#: Engines whose neighbors can be built in memory here.
SCRATCH_DIALECTS = ("sqlite", "duckdb")
_CACHE: dict[tuple[str, str, int], Schema] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 64


@dataclass(frozen=True)
class Column:
    name: str
    declared_type: str
    not_null: bool
    primary_key: bool

    @functools.cached_property
    def numeric(self) -> bool:
        """Whether SQLite gives the column a numeric affinity (its values are then numbers, not text). Kept once
        computed: generating a Spider dev run's neighbors asks about 150,000 times."""
        declared = self.declared_type.upper()
        return any(fragment in declared for fragment in _NUMERIC_TYPES) and not any(
            fragment in declared for fragment in ("CHAR", "CLOB", "TEXT", "INTERVAL"))


    @property
    def affine(self) -> bool:
        """Whether SQLite gives the column an affinity at all: a declared type that names INT, CHAR, CLOB or TEXT,
        or that is not empty and does not name BLOB (SQLite's rules, in their order). Said no, conservatively,
        for a type that is not ASCII (SQLite folds ASCII letters only: ``BLOBıNT`` is BLOB to it, not INT) and
        for ``ANY`` (no affinity in a STRICT table)."""
        declared = self.declared_type.upper()
        if not self.declared_type.isascii() or declared.strip() == "ANY":
            return False
        return any(fragment in declared for fragment in ("INT", "CHAR", "CLOB", "TEXT")) \
            or (declared.strip() != "" and "BLOB" not in declared)


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[int, ...]  # positions in the child table
    parent: str
    parent_columns: tuple[int, ...]  # positions in the parent table


@dataclass
class Table:
    name: str
    ddl: str
    columns: list[Column]
    unique_sets: list[tuple[int, ...]] = field(default_factory=list)  # PRIMARY KEY and UNIQUE column positions
    foreign_keys: list[ForeignKey] = field(default_factory=list)
    # Its columns are exactly ``columns``: no generated or hidden column (``PRAGMA table_xinfo``), not virtual.
    declared_only: bool = True

    @functools.cached_property
    def keyed(self) -> frozenset[int]:
        """The positions of the columns of its PRIMARY KEY and UNIQUE constraints, kept once computed."""
        return frozenset(i for unique in self.unique_sets for i in unique)

    @functools.cached_property
    def defers_keys(self) -> bool:
        """Whether a foreign key of the table may be checked only at commit (its DDL says ``DEFERRED``)."""
        return bool(_DEFERRED.search(self.ddl))

    @functools.cached_property
    def rolls_back(self) -> bool:
        """Whether a row refused by one of the table's constraints may undo the whole transaction it is in
        (``ON CONFLICT ROLLBACK``) instead of its own statement only: its DDL says ``ROLLBACK``."""
        return bool(_ROLLBACK.search(self.ddl))

    @functools.cached_property
    def insert_sql(self) -> str:
        """The statement inserting one row, all its columns as parameters (kept: a neighbor inserts into each of
        its tables)."""
        return f'INSERT INTO {_quoted(self.name)} VALUES ({", ".join("?" * len(self.columns))})'

    @functools.cached_property
    def positions(self) -> dict[str, int]:
        """Lower-case column name -> position of the first column of that name. Kept once computed: generating
        a Spider dev run's neighbors looks a column up about 26,000 times."""
        found: dict[str, int] = {}
        for position, column in enumerate(self.columns):
            found.setdefault(column.name.lower(), position)
        return found


@dataclass
class Schema:
    """The tables of the case's database (by lower-case name), their indexes' DDL, and the sample of rows of
    the tables a search has needed so far (:func:`sample`, ``sample_rows`` rows at most per table)."""

    tables: dict[str, Table]
    index_ddl: dict[str, list[str]]
    malformed_keys: list[str]  # declared foreign keys SQLite itself cannot enforce (parent key not unique)
    sample_rows: int
    dialect: str = "sqlite"
    sample: Rows = field(default_factory=dict)
    # Two tables' names fold to one key of ``tables`` (Python's lower() folds more than SQLite's ASCII folding:
    # "Ä" and "ä" are two tables there), so one of them is missing from ``tables``.
    names_collide: bool = False
    _sampled: dict[str, tuple[list[tuple[Any, ...]], frozenset[tuple[Any, ...]]]] = \
        field(default_factory=dict, repr=False, compare=False)

    # The two properties below read only ``tables`` and ``names_collide``, fixed once the schema is read: each is
    # computed once per cached schema rather than once per case that the neighbor search looks at.
    @functools.cached_property
    def collates(self) -> bool:
        """Whether a table's DDL names a collation (a column's collation decides how ``=`` compares it, with the
        left operand's taking precedence): no proof of equal queries rests on operand order then."""
        return any(_COLLATE.search(table.ddl) for table in self.tables.values())

    @functools.cached_property
    def ascii_names(self) -> bool:
        """Whether every table and column name is ASCII. SQLite folds only ASCII letters when it matches a name
        (``"É"`` and ``"é"`` are two columns to it) while the canonical form lower-cases with Python, which folds
        the others too: no proof of equal queries rests on names folded so where a name is not ASCII."""
        return all(table.name.isascii() and all(c.name.isascii() for c in table.columns)
                   for table in self.tables.values())

    @functools.cached_property
    def plain_tables(self) -> dict[str, frozenset[str]] | None:
        """Lower-case name -> lower-case column names of the tables whose columns are exactly the declared ones
        (:attr:`Table.declared_only`), what :func:`~sqlcmp_dagster.engine.equivalence.proven_equivalent` resolves
        names against; None when :attr:`names_collide` (a table would be missing)."""
        if self.names_collide:
            return None
        return {name: frozenset(c.name.lower() for c in table.columns) for name, table in self.tables.items()
                if table.declared_only}

    @functools.cached_property
    def affine_columns(self) -> dict[str, frozenset[str]]:
        """Lower-case table name -> lower-case names of its columns to which SQLite gives an affinity (INTEGER,
        TEXT, REAL or NUMERIC: a declared type that is neither empty nor BLOB), for the tables of
        :attr:`plain_tables`. A comparison converts the value it compares such a column with first
        (:func:`~sqlcmp_dagster.engine.equivalence.numeric_text`)."""
        return {name: frozenset(c.name.lower() for c in table.columns if c.affine)
                for name, table in self.tables.items() if table.declared_only}

    def sampled(self, table: str) -> frozenset[tuple[Any, ...]]:
        """The rows of ``table``'s sample as a set, made once per sample (a table's sample is read once) rather
        than once per neighbor and per join: a neighbor tells the rows it added from the sampled ones."""
        rows = self.sample.get(table, [])
        kept = self._sampled.get(table)
        if kept is None or kept[0] is not rows:
            kept = self._sampled[table] = (rows, frozenset(rows))
        return kept[1]

    def scope(self, names: set[str]) -> list[str]:
        """``names`` (lower case) that exist, plus the parents their foreign keys need, parents first."""
        wanted = [n for n in sorted(names) if n in self.tables]
        closed: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in closed or name in path:
                return
            for key in self.tables[name].foreign_keys:
                if key.parent in self.tables:
                    visit(key.parent, (*path, name))
            closed.append(name)

        for name in wanted:
            visit(name, ())
        return closed


def read_schema(database: ExecutionAdapter, sample_rows: int, timeout_ms: int) -> Schema | str:
    """The schema, cached per database content with the rows :func:`sample` reads into it (at most
    ``sample_rows`` per table); a string says why it could not be read."""
    key = (database.identifier, database.fingerprint(), sample_rows)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    schema = _read_duckdb(database, sample_rows, timeout_ms) if database.dialect == "duckdb" \
        else _read(database, sample_rows, timeout_ms)
    if isinstance(schema, str):  # not kept: a read cut by a case's short budget may work for the next case
        return schema
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = schema
    return schema


def _read(database: ExecutionAdapter, sample_rows: int, timeout_ms: int) -> Schema | str:
    master = database.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                              "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid", timeout_ms=timeout_ms)
    if not master.success or master.relation is None:
        return f"cannot read the schema: {master.error.message if master.error else 'no result'}"
    entries = list(master.relation.frame.iter_rows())
    ddl = {name: sql for kind, name, _, sql in entries if kind == "table"}
    index_ddl: dict[str, list[str]] = {}
    for kind, _, table, sql in entries:
        if kind == "index":
            index_ddl.setdefault(table.lower(), []).append(sql)
    with _connection(scratch_name()) as connection:
        for sql in [*ddl.values(), *(s for group in index_ddl.values() for s in group)]:
            try:
                connection.execute(sql)
            except sqlite3.Error as error:
                return f"cannot recreate the schema in a scratch database: {error} (in {sql[:80]!r})"
        tables = {name.lower(): _describe(connection, name, sql) for name, sql in ddl.items()}
    return Schema(tables, {k: v for k, v in index_ddl.items() if k in tables}, _resolve_keys(tables), sample_rows,
                  names_collide=len(tables) < len(ddl))


def sample(database: ExecutionAdapter, schema: Schema, tables: list[str], deadline: float,
           timeout_ms: int) -> str | None:
    """Read into ``schema.sample`` the first ``schema.sample_rows`` rows (a bounded and reproducible read) of
    each of ``tables`` not read yet: a search reads only the tables in its scope (the queries' tables and their
    foreign-key parents, whose rows a child row needs), each query under ``timeout_ms`` cut to what is left
    before ``deadline`` (``time.monotonic()``). A string says which table could not be read, or that the time
    ran out."""
    for lower in tables:
        if lower in schema.sample:
            continue
        table = schema.tables[lower]
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            return f"the time ran out before table {table.name} was sampled"
        rows = database.execute(f"SELECT * FROM {_quoted(table.name)} LIMIT {int(schema.sample_rows)}",
                                timeout_ms=min(timeout_ms, left), max_rows=schema.sample_rows)
        if not rows.success or rows.relation is None:
            return f"cannot sample table {table.name}: {rows.error.message if rows.error else 'no result'}"
        schema.sample[lower] = _stored_rows(rows.relation) if rows.relation.width == len(table.columns) else []
    return None


def _read_duckdb(database: ExecutionAdapter, sample_rows: int, timeout_ms: int) -> Schema | str:
    """The schema of a DuckDB database's current schema from its catalog functions (``duckdb_tables``,
    ``duckdb_columns``, ``duckdb_constraints``, ``duckdb_indexes``)."""
    scope = "database_name = current_database() AND schema_name = current_schema()"
    queries = {
        "tables": f"SELECT table_name, sql FROM duckdb_tables() WHERE {scope} AND NOT temporary ORDER BY table_oid",
        "columns": f"SELECT table_name, column_name, data_type, NOT is_nullable FROM duckdb_columns() "
                   f"WHERE {scope} ORDER BY table_name, column_index",
        "constraints": f"SELECT table_name, constraint_type, array_to_string(constraint_column_names, chr(1)), "
                       f"referenced_table, array_to_string(referenced_column_names, chr(1)) FROM duckdb_constraints() "
                       f"WHERE {scope} AND constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY')",
        "indexes": f"SELECT table_name, sql FROM duckdb_indexes() WHERE {scope} AND sql IS NOT NULL",
    }
    found: dict[str, list[tuple[Any, ...]]] = {}
    for label, sql in queries.items():
        result = database.execute(sql, timeout_ms=timeout_ms)
        if not result.success or result.relation is None:
            return f"cannot read the schema ({label}): {result.error.message if result.error else 'no result'}"
        found[label] = list(result.relation.frame.iter_rows())
    columns: dict[str, list[tuple[str, str, bool]]] = {}
    for table, name, declared, not_null in found["columns"]:
        columns.setdefault(table, []).append((name, declared, bool(not_null)))
    constraints = [(t, kind, (names or "").split(chr(1)), parent, (parents or "").split(chr(1)) if parents else [])
                   for t, kind, names, parent, parents in found["constraints"]]
    tables: dict[str, Table] = {}
    for name, ddl in found["tables"]:
        positions = {c[0].lower(): i for i, c in enumerate(columns.get(name, []))}
        keyed = {positions.get(c.lower(), -1) for t, kind, names, _, _ in constraints
                 if t == name and kind == "PRIMARY KEY" for c in names}
        table = Table(name, ddl, [Column(c, declared, not_null, i in keyed)
                                  for i, (c, declared, not_null) in enumerate(columns.get(name, []))])
        for t, kind, names, parent, parent_names in constraints:
            cols = tuple(positions.get(c.lower(), -1) for c in names)
            if t != name or -1 in cols:
                continue
            if kind == "FOREIGN KEY":
                table.foreign_keys.append(ForeignKey(cols, parent, tuple(parent_names)))  # type: ignore[arg-type]
            elif cols not in table.unique_sets:
                table.unique_sets.insert(0 if kind == "PRIMARY KEY" else len(table.unique_sets), cols)
        tables[name.lower()] = table
    index_ddl: dict[str, list[str]] = {}
    for table, sql in found["indexes"]:
        if table.lower() in tables:
            index_ddl.setdefault(table.lower(), []).append(sql)
    return Schema(tables, index_ddl, _resolve_keys(tables), sample_rows, dialect="duckdb",
                  names_collide=len(tables) < len(found["tables"]))


def _quoted(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (an embedded quote doubled), as SQLite and DuckDB read it.

    >>> print(_quoted('a"b'))
    "a""b"
    """
    return '"' + name.replace('"', '""') + '"'


def _stored_rows(relation: Relation) -> list[tuple[Any, ...]]:
    """A table's rows, read through the adapter, as SQLite stores them: the values its frame would hold, read
    without making the frame where the result is small (:meth:`Relation.columns`). The adapter returns a column
    that mixes numbers and text as tagged text (``n:1.0``, ``s:a``, see ``execution.tagged_text``); such a
    column is decoded back so that a neighbor holds the database's own values."""
    columns = list(relation.columns()[1])  # the relation keeps its own lists: a decoded column replaces one here
    for index, values in enumerate(columns):
        present = [v for v in values if v is not None]
        if present and all(isinstance(v, str) and len(v) >= 2 and v[1] == ":" and v[0] in "nsbo" for v in present):
            columns[index] = [None if v is None else _untag(v) for v in values]
    return [tuple(r) for r in zip(*columns)] if columns else []


def _untag(value: str) -> Any:
    tag, text = value[0], value[2:]
    if tag == "n":
        number = float(text)
        return int(number) if number.is_integer() else number
    if tag == "b":
        return bytes.fromhex(text)
    return text


def _describe(connection: sqlite3.Connection, name: str, ddl: str) -> Table:
    quoted = _quoted(name)
    info = connection.execute(f"PRAGMA table_info({quoted})").fetchall()
    columns = [Column(row[1], row[2] or "", bool(row[3]), bool(row[5])) for row in info]
    positions = {c.name.lower(): i for i, c in enumerate(columns)}
    unique_sets = []
    keys = tuple(i for i, c in sorted(enumerate(columns), key=lambda p: info[p[0]][5]) if c.primary_key)
    if keys:
        unique_sets.append(keys)
    for index in connection.execute(f"PRAGMA index_list({quoted})").fetchall():
        if index[2]:  # unique
            index_name = _quoted(index[1])
            cols = tuple(positions.get((r[2] or "").lower(), -1)
                         for r in connection.execute(f"PRAGMA index_info({index_name})").fetchall())
            if cols and -1 not in cols and cols not in unique_sets:
                unique_sets.append(cols)
    hidden = any(row[6] for row in connection.execute(f"PRAGMA table_xinfo({quoted})").fetchall())
    table = Table(name, ddl, columns, unique_sets,
                  declared_only=not hidden and not ddl.lstrip().upper().startswith("CREATE VIRTUAL"))
    grouped: dict[int, list[Any]] = {}
    for row in connection.execute(f"PRAGMA foreign_key_list({quoted})").fetchall():
        grouped.setdefault(row[0], []).append(row)
    table.foreign_keys = [ForeignKey(tuple(positions.get(r[3].lower(), -1) for r in rows), rows[0][2],
                                     tuple(r[4] or "" for r in rows))  # type: ignore[arg-type]
                          for rows in grouped.values()]
    return table


def _resolve_keys(tables: dict[str, Table]) -> list[str]:
    """Turn each foreign key's parent column names into positions; a key whose parent table or columns do not
    exist, or whose parent columns are not a PRIMARY KEY or UNIQUE set, is one SQLite refuses every insert
    under ("foreign key mismatch"): it is listed and dropped from the keys the generator honours."""
    malformed = []
    for table in tables.values():
        kept = []
        for key in table.foreign_keys:
            parent = tables.get(key.parent.lower())
            names: tuple[str, ...] = key.parent_columns  # type: ignore[assignment]
            if parent is not None and not any(names):
                names = tuple(parent.columns[i].name for i in (parent.unique_sets[0] if parent.unique_sets else ()))
            positions = {c.name.lower(): i for i, c in enumerate(parent.columns)} if parent else {}
            resolved = tuple(positions.get(n.lower(), -1) for n in names)
            if (parent is None or -1 in key.columns or -1 in resolved or len(resolved) != len(key.columns)
                    or not any(set(resolved) == set(u) for u in parent.unique_sets)):
                malformed.append(f"{table.name} -> {key.parent}")
                continue
            kept.append(ForeignKey(key.columns, parent.name.lower(), resolved))
        table.foreign_keys = kept
    return malformed


@dataclass
class Scratch:
    """One neighbor database, open while in use: the rows the engine accepted per table, where they were in the
    rows given (``kept``: per table, their positions there, in order), and how many rows it rejected for a
    declared constraint. The positions say which rows went in where two rows are equal in Python but not to the
    engine (``1`` and ``1.0`` in a TEXT column, ``0.0`` and ``-0.0``)."""

    accepted: Rows
    rejected: int
    kept: dict[str, list[int]] = field(default_factory=dict)


def scratch_name() -> str:
    """A fresh name for a search's neighbor databases (one neighbor exists at a time)."""
    return f"sqlcmp-neighbor-{uuid.uuid4().hex}"


@dataclass
class Neighborhood:
    """Where one search builds its neighbors and runs the queries on them, open for the whole search.

    ``adapter`` is the sandboxed, time-limited adapter the queries run through. On SQLite it keeps one
    read-only connection (``query_only``, the authorizer, a progress handler and the watchdog's deadline per
    query, every query's transaction rolled back) to the shared in-memory database ``name``, and ``writer`` is
    the one writable connection to it: it creates the search's tables once (every neighbor of a search has the
    same tables) and builds each neighbor in a transaction that the read-only connection reads uncommitted
    (``read_uncommitted``, which shared-cache databases allow) and that is rolled back after it
    (:func:`_writable`), so that a neighbor costs no connection, no schema and no commit. On DuckDB both are the
    in-memory neighbor database of the process borrowed from the case's database (``adapter.neighbor_process``)."""

    adapter: ExecutionAdapter
    name: str
    writer: sqlite3.Connection | None = None
    created: bool = False  # SQLite: the search's tables exist (the first neighbor created them)
    #: SQLite: whether the database has ``sqlite_sequence`` (created with the first AUTOINCREMENT table, so known
    #: once the tables are), None until asked.
    sequenced: bool | None = None
    #: SQLite: the writer's ``PRAGMA foreign_keys``, None until set.
    keys_enforced: bool | None = None


@contextmanager
def neighborhood(database: ExecutionAdapter, schema: Schema | None = None, tables: list[str] | None = None) \
        -> Iterator[Neighborhood]:
    """The :class:`Neighborhood` of a search on ``database``: SQLite's shared in-memory database (alive while
    the search's connections are open), or the in-memory neighbor database of a DuckDB process borrowed from
    ``database`` for the search (already started, and given back afterwards).

    On SQLite, given the search's ``schema`` and ``tables``, the neighborhood of an earlier search over the same
    tables of the same schema is taken again when one is idle, and kept for the next one afterwards: its tables
    were emptied after its last neighbor (:func:`_writable`), so it holds what a new one would once its first
    neighbor has created them. Opening the two connections and creating the tables cost about 1.2 ms a search on
    Spider dev. What is kept is bounded: at most :data:`_IDLE_KEPT` neighborhoods per process (the least recently
    used closed first), none whose emptied database still holds more than :data:`_IDLE_MAX_FREE_BYTES` of free
    pages (an in-memory database keeps the pages of its largest committed neighbor until it is closed; a
    neighbor rolled back leaves none), none of a schema no longer in use elsewhere (held weakly), none inherited
    across a fork. A search that ends with an error closes its neighborhood."""
    key = (id(schema), tuple(tables)) if schema is not None and tables is not None \
        and database.dialect != "duckdb" else None
    place = _idle_place(key, schema) if key is not None else None
    process = None
    if place is None:
        name = scratch_name()
        process = database.borrow_duckdb_process() if database.dialect == "duckdb" else None
        writer = _writer(name) if process is None else None
        place = Neighborhood(ExecutionAdapter(f"neighbor:{name}", scratch=name, neighbor_process=process), name,
                             writer)
    ended = False
    try:
        yield place
        ended = True
    finally:
        if ended and key is not None and schema is not None and _holds_little(place):
            _keep_idle(key, schema, place)
        else:
            _close(place)
        if process is not None:
            database.return_duckdb_process(process)


_Key = tuple[int, tuple[str, ...]]
#: Idle SQLite neighborhoods by (id of their schema, tables), each with a weak reference to that schema: an
#: entry whose schema is gone (and whose id may name another) is closed, not taken.
_IDLE: OrderedDict[_Key, tuple[weakref.ref[Schema], Neighborhood]] = OrderedDict()
_IDLE_LOCK = threading.Lock()
#: At most this many idle neighborhoods per process (two connections and the emptied tables each).
_IDLE_KEPT = 16
#: A neighborhood whose emptied database holds more free pages than this is closed rather than kept.
_IDLE_MAX_FREE_BYTES = 1 << 20
#: What a forked child inherited: held, never used nor closed (SQLite's connections must not cross a fork).
_INHERITED: list[object] = []


def _idle_place(key: _Key, schema: Schema | None) -> Neighborhood | None:
    with _IDLE_LOCK:
        kept = _IDLE.pop(key, None)
    if kept is None:
        return None
    if kept[0]() is not schema:
        _close(kept[1])
        return None
    return kept[1]


def _keep_idle(key: _Key, schema: Schema, place: Neighborhood) -> None:
    """Keep ``place`` for the next search with ``key`` (one per key: a second, from a search that ran beside the
    first in another thread, is closed), closing the least recently kept beyond :data:`_IDLE_KEPT`."""
    with _IDLE_LOCK:
        if key in _IDLE:
            evicted = [place]
        else:
            _IDLE[key] = (weakref.ref(schema), place)
            evicted = [_IDLE.popitem(last=False)[1][1] for _ in range(max(0, len(_IDLE) - _IDLE_KEPT))]
    for old in evicted:
        _close(old)


def _holds_little(place: Neighborhood) -> bool:
    """Whether ``place``'s emptied SQLite database holds at most :data:`_IDLE_MAX_FREE_BYTES` of free pages."""
    if place.writer is None:
        return False
    (free,) = place.writer.execute("PRAGMA freelist_count").fetchone()
    (size,) = place.writer.execute("PRAGMA page_size").fetchone()
    return bool(free * size <= _IDLE_MAX_FREE_BYTES)


def _close(place: Neighborhood) -> None:
    place.adapter.close()
    if place.writer is not None:
        place.writer.close()


def _forget_idle() -> None:
    """In a forked child: no idle neighborhood, and a new lock (another thread may have held it at the fork)."""
    global _IDLE, _IDLE_LOCK
    _INHERITED.append(_IDLE)
    _IDLE, _IDLE_LOCK = OrderedDict(), threading.Lock()


os.register_at_fork(after_in_child=_forget_idle)


@contextmanager
def scratch(schema: Schema, tables: list[str], rows: Rows, place: Neighborhood,
            max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> Iterator[Scratch]:
    """Build a neighbor in ``place`` in the case's engine: ``tables`` (parents first; on SQLite created by the
    search's first neighbor, emptied after each), then ``rows`` inserted with foreign keys, NOT NULL, CHECK,
    PRIMARY KEY and UNIQUE enforced by the engine; a rejected row is left out. A foreign key SQLite checks only
    at commit (``DEFERRABLE INITIALLY DEFERRED``) refuses the whole commit: the rows it names are left out and the
    neighbor is built again without them, until the commit holds. Where a malformed foreign key in scope makes
    SQLite refuse every insert, enforcement is off and the well-formed keys are checked here instead
    (:func:`_parents_present`). A DuckDB neighbor is written into the search adapter's process (where its
    queries run with ``max_bytes`` as their ``max_result_bytes``) and gets each table in one statement, row by
    row only when that statement is refused."""
    enforced = not any(_in_scope(m, tables) for m in schema.malformed_keys)
    one_by_one = any(schema.tables[t].rolls_back for t in tables)
    committed = one_by_one or any(schema.tables[t].defers_keys for t in tables)
    with _writable(place, [schema.tables[t].name for t in tables], max_bytes, enforce_keys=enforced,
                   commit=committed, autocommit=one_by_one) as writer:
        if not place.created:
            for table in tables:
                writer.execute(schema.tables[table].ddl)
                for sql in schema.index_ddl.get(table, []):
                    writer.execute(sql)
            place.created = place.writer is not None  # DuckDB drops its tables after each neighbor
        refused: set[tuple[str, int]] = set()  # (table, position in rows) a deferred foreign key refused
        batched = True  # a table's rows in one batch, until a deferred foreign key needs each row's rowid
        while True:
            accepted, kept, rejected, positions = _insert(writer, schema, tables, rows, enforced, refused, batched)
            deferred = writer.finish()
            if not deferred:
                break
            if batched:  # built again row by row, which names the rowids the refused rows got
                batched = False
                continue
            before = len(refused)
            for name, rowid in deferred:
                table = name.lower()  # a WITHOUT ROWID table names no row: all its rows go
                refused |= {(table, p) for p in range(len(rows.get(table, [])))} if rowid is None else \
                    {(table, positions[table][rowid])} if rowid in positions.get(table, {}) else set()
            if len(refused) == before:  # nothing left to name (never seen): no row of the scope is kept
                refused |= {(t, p) for t in tables for p in range(len(rows.get(t, [])))}
        yield Scratch(accepted, rejected + len(refused), kept)


def _insert(writer: _Writer, schema: Schema, tables: list[str], rows: Rows, enforced: bool,
            refused: set[tuple[str, int]], batched: bool = True) \
        -> tuple[Rows, dict[str, list[int]], int, dict[str, dict[int, int]]]:
    """Insert ``rows`` but the ``refused`` ones: the rows accepted per table and their positions in ``rows``
    (:attr:`Scratch.kept`), how many the engine rejected, and
    on SQLite the rowid each accepted row got (by table, rowid -> position in ``rows``), which names the rows a
    deferred foreign key refuses at commit. When ``batched``, a table's rows go in as one batch where the writer
    has one (:attr:`_Writer.batch`): the table then holds what inserting row by row would give, but no rowid
    is recorded for its rows; a batch the writer refuses as a whole (DuckDB's) goes row by row."""
    accepted: Rows = {}
    kept_at: dict[str, list[int]] = {}
    rejected = 0
    positions: dict[str, dict[int, int]] = {}
    for table in tables:
        spec = schema.tables[table]
        kept = accepted.setdefault(table, [])
        at = kept_at.setdefault(table, [])
        taken = writer.batch(spec, rows[table]) if batched and writer.batch is not None and rows.get(table) \
            else None
        if taken is not None:
            at.extend(itertools.compress(range(len(taken)), taken))
            kept.extend(itertools.compress(rows[table], taken))
            rejected += taken.count(False)
            continue
        insert = spec.insert_sql
        for position, row in enumerate(rows.get(table, [])):
            if (table, position) in refused:
                continue
            if not enforced and not _parents_present(spec, row, accepted):
                rejected += 1
                continue
            try:
                cursor = writer.execute(insert, row)
            except (*writer.rejections, OverflowError):
                rejected += 1
                continue
            kept.append(row)
            at.append(position)
            rowid = getattr(cursor, "lastrowid", None)  # a SQLite cursor's; DuckDB's writer returns nothing
            if rowid is not None:
                positions.setdefault(table, {})[rowid] = position
    return accepted, kept_at, rejected, positions


def stored(schema: Schema, tables: list[str], place: Neighborhood, inserted: Rows) -> Rows:
    """The rows of the neighbor open in ``place`` read back as the engine stored them (a key SQLite assigned to
    an ``INTEGER PRIMARY KEY`` given as NULL, a value converted to its column's type), through the search's
    sandboxed adapter (:func:`_stored_rows`); a table that cannot be read back keeps its ``inserted`` rows."""
    rows: Rows = {}
    for table in tables:
        spec = schema.tables[table]
        result = place.adapter.execute(f'SELECT * FROM {_quoted(spec.name)}')
        rows[table] = _stored_rows(result.relation) \
            if result.success and result.relation is not None and result.relation.width == len(spec.columns) \
            else inserted.get(table, [])
    return rows


@dataclass
class _Writer:
    """A writable connection to a neighbor being built: ``execute(sql, params)``, the engine's errors that
    mean a row was rejected, and ``finish`` before the neighbor is queried, which returns the rows (table name,
    rowid or None) a foreign key checked only at commit refuses (then nothing is committed): on SQLite, where a
    table in scope may defer a key, a commit, else nothing (the neighbor is read uncommitted)."""

    execute: Callable[..., Any]
    rejections: tuple[type[BaseException], ...]
    finish: Callable[[], list[tuple[str, int | None]]]
    #: Insert a table's rows in one go, exactly as one at a time would, and say which the engine accepted; or
    #: insert none and say None (then they go one at a time).
    batch: Callable[[Table, list[tuple[Any, ...]]], list[bool] | None] | None = None


class _Refused(Exception):
    """DuckDB refused a statement building a neighbor (a row breaking a constraint)."""


@contextmanager
def _writable(place: Neighborhood, tables: list[str], max_bytes: int, *, enforce_keys: bool = True,
              commit: bool = True, autocommit: bool = False) -> Iterator[_Writer]:
    """The writable neighbor database of ``place``: its DuckDB process's (its queries to come bounded by
    ``max_bytes``; every table is dropped when this closes), else SQLite's, whose ``tables`` are empty again
    when this closes. Emptied rather than dropped, the tables are as a fresh database would hold them: each
    table's rows go, and so do the AUTOINCREMENT counters (``sqlite_sequence``); the schema, root pages
    included, is the one the first neighbor created (its DDL commits as it runs, outside the neighbor's
    transaction). Without ``commit`` the neighbor's rows stay in the writer's transaction, which the search's
    read-only connection reads uncommitted, and emptying them is rolling it back; with it (a foreign key in
    scope may be deferred, and only a commit checks it) the rows are committed and then deleted. With
    ``autocommit`` (a table in scope may resolve a conflict ``ON CONFLICT ROLLBACK``, which would undo every row
    inserted before it in one transaction) each row commits as it goes, as inserting one row at a time into a
    fresh database does; a deferred key is then checked at each row's own commit."""
    process = place.adapter.neighbor_process
    if process is None:
        connection = place.writer
        assert connection is not None
        if place.keys_enforced is not enforce_keys:
            connection.execute(f"PRAGMA foreign_keys = {'ON' if enforce_keys else 'OFF'}")
            place.keys_enforced = enforce_keys
        level = connection.isolation_level
        if autocommit:
            connection.isolation_level = None
        rejections = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.OperationalError)

        def sqlite_batch(table: Table, rows: list[tuple[Any, ...]]) -> list[bool]:
            """The rows through ``executemany``, which stops at a row the engine rejects (that row's statement
            undone, the rows before it kept, as one at a time): the rejected row is the last one taken from the
            list's iterator (``executemany`` takes the next row only when it runs it; what is left says how many
            it took), and the batch goes on after it with the same iterator. A statement refused before any row
            (a table that is missing) rejects the next row. A Spider dev neighbor has about 25 rows, 27% of them
            rejected (a generated row repeating a key, a child whose parent a shrinking step left out), so the
            batches are short; searched passes still take 4% less."""
            insert, accepted, remaining = table.insert_sql, list[bool](), iter(rows)
            while left := length_hint(remaining):
                try:
                    connection.executemany(insert, remaining)
                except (*rejections, OverflowError):
                    taken = left - length_hint(remaining)
                    if taken == 0:
                        next(remaining)
                    accepted += [True] * (taken - 1) + [False]
                    continue
                accepted += [True] * left
            return accepted

        try:
            yield _Writer(connection.execute, rejections, (lambda: _commit(connection)) if commit else list,
                          sqlite_batch if enforce_keys else None)
        finally:
            connection.rollback()
            if commit and place.created:
                connection.execute("PRAGMA foreign_keys = OFF")  # children and parents emptied in any order
                place.keys_enforced = False
                for table in tables:
                    connection.execute(f'DELETE FROM {_quoted(table)}')
                if place.sequenced is None:
                    place.sequenced = connection.execute(
                        "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone() is not None
                if place.sequenced:
                    connection.execute("DELETE FROM sqlite_sequence")
                connection.commit()
            connection.isolation_level = level
        return

    def execute(sql: str, params: Any = ()) -> None:
        refusal = process.build(sql, list(params), max_bytes=max_bytes)
        if refusal is not None:
            raise _Refused(refusal)

    def batch(table: Table, rows: list[tuple[Any, ...]]) -> list[bool] | None:
        """Every row in one INSERT (a statement either inserts all or nothing in DuckDB)."""
        values = ", ".join("(" + ", ".join("?" * len(table.columns)) + ")" for _ in rows)
        refusal = process.build(f'INSERT INTO {_quoted(table.name)} VALUES {values}',
                                [v for row in rows for v in row], max_bytes=max_bytes)
        return [True] * len(rows) if refusal is None else None

    try:
        yield _Writer(execute, (_Refused,), list, batch)
    finally:
        process.build("", max_bytes=max_bytes)  # drops every table, children first


def _commit(connection: sqlite3.Connection) -> list[tuple[str, int | None]]:
    """Commit, or, when a deferred foreign key refuses the commit (the transaction then stays open), the rows
    that break it (``PRAGMA foreign_key_check``), with the transaction rolled back."""
    try:
        connection.commit()
    except sqlite3.IntegrityError:
        broken = [(row[0], row[1]) for row in connection.execute("PRAGMA foreign_key_check").fetchall()]
        connection.rollback()
        return broken
    return []


def _parents_present(table: Table, row: tuple[Any, ...], accepted: Rows) -> bool:
    """SQLite's foreign-key rule, for the rare scope where SQLite cannot check it (a malformed key elsewhere
    turns enforcement off): a key with a NULL part holds; otherwise a parent row must carry the same values."""
    for key in table.foreign_keys:
        values = tuple(row[i] for i in key.columns)
        if None in values:
            continue
        if not any(tuple(p[i] for i in key.parent_columns) == values for p in accepted.get(key.parent, [])):
            return False
    return True


def _in_scope(malformed: str, tables: list[str]) -> bool:
    return malformed.split(" -> ")[0].lower() in tables


def _writer(name: str) -> sqlite3.Connection:
    """A writable connection to the shared in-memory database called ``name`` (created by the first connection,
    gone when the last one closes)."""
    return sqlite3.connect(f"file:{name}?mode=memory&cache=shared", uri=True, check_same_thread=False)


@contextmanager
def _connection(name: str) -> Iterator[sqlite3.Connection]:
    """A writable shared in-memory database called ``name`` with foreign keys enforced; it disappears when this
    closes."""
    connection = _writer(name)
    try:
        connection.execute("PRAGMA foreign_keys = ON")
        yield connection
    finally:
        connection.close()
