"""Scratch databases for the neighbor search: in-memory copies built from row sets with every declared constraint
enforced by the engine (the schema and the sample they start from are read by :mod:`.schema`).

Nothing here writes to the user's database: each neighbor is an in-memory database of the case's engine whose rows
live only while its :class:`Scratch` is open: SQLite in this process, DuckDB in one of the case's bounded DuckDB
processes (:mod:`~sqlcmp_dagster.engine.sandbox.duckdb_process`), so that the queries run on a neighbor under the very
bounds of the case's own database. One search builds all its neighbors in one place (a :class:`Neighborhood`),
over connections opened once for the search rather than once per neighbor and per query.
"""

from __future__ import annotations

import itertools
import sqlite3
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import length_hint
from typing import Any

from sqlcmp_dagster.engine.context import Guarded, current
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import DEFAULT_MAX_RESULT_BYTES
from sqlcmp_dagster.engine.neighbors.schema import Rows, Schema, Table, memory_writer, quoted, scratch_name, stored_rows


@dataclass
class Scratch:
    """One neighbor database, open while in use: the rows the engine accepted per table, where they were in the
    rows given (``kept``: per table, their positions there, in order), and how many rows it rejected for a
    declared constraint. The positions say which rows went in where two rows are equal in Python but not to the
    engine (``1`` and ``1.0`` in a TEXT column, ``0.0`` and ``-0.0``)."""

    accepted: Rows
    rejected: int
    kept: dict[str, list[int]] = field(default_factory=dict)


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

    def close(self) -> None:
        """Close both connections: the writer once no query of the search is left inside a step of SQLite's
        (:attr:`~sqlcmp_dagster.engine.execution.ExecutionAdapter.stuck`), whose step holds the shared cache."""
        self.adapter.close()
        if self.writer is not None:
            self.adapter.when_free(self.writer.close)


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
        writer = memory_writer(name) if process is None else None
        place = Neighborhood(ExecutionAdapter(f"neighbor:{name}", scratch=name, neighbor_process=process), name,
                             writer)
    ended = False
    try:
        yield place
        ended = True
    finally:
        if ended and key is not None and schema is not None and not place.adapter.stuck and _holds_little(place):
            _keep_idle(key, schema, place)
        else:
            place.close()
        if process is not None:
            database.return_duckdb_process(process)


_Key = tuple[int, tuple[str, ...]]
#: At most this many idle neighborhoods per process (two connections and the emptied tables each).
_IDLE_KEPT = 16
#: A neighborhood whose emptied database holds more free pages than this is closed rather than kept.
_IDLE_MAX_FREE_BYTES = 1 << 20


def _idle() -> Guarded[OrderedDict[_Key, tuple[weakref.ref[Schema], Neighborhood]]]:
    """The engine context's idle SQLite neighborhoods, each with a weak reference to its schema: an entry whose
    schema is gone (and whose id may name another) is closed, not taken. A forked child starts with none."""
    return current().idle_neighborhoods


def _idle_place(key: _Key, schema: Schema | None) -> Neighborhood | None:
    idle = _idle()
    with idle.lock:
        kept = idle.entries.pop(key, None)
    if kept is None:
        return None
    if kept[0]() is not schema:
        kept[1].close()
        return None
    return kept[1]


def _keep_idle(key: _Key, schema: Schema, place: Neighborhood) -> None:
    """Keep ``place`` for the next search with ``key`` (one per key: a second, from a search that ran beside the
    first in another thread, is closed), closing the least recently kept beyond :data:`_IDLE_KEPT`."""
    idle = _idle()
    with idle.lock:
        if key in idle.entries:
            evicted = [place]
        else:
            idle.entries[key] = (weakref.ref(schema), place)
            evicted = [idle.entries.popitem(last=False)[1][1] for _ in range(max(0, len(idle.entries) - _IDLE_KEPT))]
    for old in evicted:
        old.close()


def _holds_little(place: Neighborhood) -> bool:
    """Whether ``place``'s emptied SQLite database holds at most :data:`_IDLE_MAX_FREE_BYTES` of free pages."""
    if place.writer is None:
        return False
    (free,) = place.writer.execute("PRAGMA freelist_count").fetchone()
    (size,) = place.writer.execute("PRAGMA page_size").fetchone()
    return bool(free * size <= _IDLE_MAX_FREE_BYTES)


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
        refusals: tuple[type[BaseException], ...] = (*writer.rejections, OverflowError)
        for position, row in enumerate(rows.get(table, [])):
            if (table, position) in refused:
                continue
            if not enforced and not _parents_present(spec, row, accepted):
                rejected += 1
                continue
            try:
                cursor = writer.execute(insert, row)
            except refusals:
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
    sandboxed adapter (:func:`stored_rows`); a table that cannot be read back keeps its ``inserted`` rows, and
    one into which no row went is not read (a shrunk counterexample leaves most of its tables so)."""
    rows: Rows = {}
    for table in tables:
        if not inserted.get(table):
            rows[table] = []
            continue
        spec = schema.tables[table]
        result = place.adapter.execute(f'SELECT * FROM {quoted(spec.name)}')
        rows[table] = stored_rows(result.relation) \
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
            if not place.adapter.stuck:  # a query left inside a step holds the shared cache the writer needs
                connection.rollback()
                if commit and place.created:
                    connection.execute("PRAGMA foreign_keys = OFF")  # children and parents emptied in any order
                    place.keys_enforced = False
                    for table in tables:
                        connection.execute(f'DELETE FROM {quoted(table)}')
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
        refusal = process.build(f'INSERT INTO {quoted(table.name)} VALUES {values}',
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
