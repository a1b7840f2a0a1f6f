"""The schema and a bounded sample read from the case's database, for the neighbor search.

Nothing here writes to the user's database: the schema and the sample are read through the case's own
read-only, time-limited :class:`ExecutionAdapter` (the same sandbox as the queries); the schema is recreated in a
private in-memory SQLite database (:func:`memory_connection`) to read its columns, keys and indexes.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlcmp_dagster.engine.context import Guarded, current
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.relation import Relation

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
#: Schemas kept in the engine context, the oldest dropped first (:func:`read_schema`).
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
    def primary_positions(self) -> tuple[int, ...]:
        """The positions of the columns of its PRIMARY KEY, kept once computed (every neighbor drops the rows
        holding NULL there)."""
        return tuple(i for i, column in enumerate(self.columns) if column.primary_key)

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
        return f'INSERT INTO {quoted(self.name)} VALUES ({", ".join("?" * len(self.columns))})'

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
    def catalog(self) -> dict[str, list[str]] | None:
        """:attr:`plain_tables` with each table's columns in order: Layer 2's catalog
        (:func:`~sqlcmp_dagster.engine.rewrites.read_catalog`). One object per cached schema, shared by every case
        on the database (and read, never changed, by each), so that what Layer 2 derives from a query and this
        catalog is remembered by the catalog's identity (:meth:`~sqlcmp_dagster.engine.validation.Side.structural`)."""
        tables = self.plain_tables
        return None if tables is None else {name: sorted(columns) for name, columns in tables.items()}

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
    """The schema, cached per database version (:meth:`~ExecutionAdapter.version`: its files' state, not their
    bytes) with the rows :func:`sample` reads into it (at most ``sample_rows`` per table); a string says why it
    could not be read."""
    key, kept = (database.identifier, database.version(), sample_rows), _schemas()
    with kept.lock:
        if key in kept.entries:
            return kept.entries[key]
    schema = _read_duckdb(database, sample_rows, timeout_ms) if database.dialect == "duckdb" \
        else _read(database, sample_rows, timeout_ms)
    if isinstance(schema, str):  # not kept: a read cut by a case's short budget may work for the next case
        return schema
    with kept.lock:
        if len(kept.entries) >= _CACHE_SIZE:
            kept.entries.pop(next(iter(kept.entries)))
        kept.entries[key] = schema
    return schema


def _schemas() -> Guarded[dict[tuple[str, str, int], Schema]]:
    """The engine context's schemas, typed."""
    return current().schemas


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
    with memory_connection(scratch_name()) as connection:
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
        rows = database.execute(f"SELECT * FROM {quoted(table.name)} LIMIT {int(schema.sample_rows)}",
                                timeout_ms=min(timeout_ms, left), max_rows=schema.sample_rows)
        if not rows.success or rows.relation is None:
            return f"cannot sample table {table.name}: {rows.error.message if rows.error else 'no result'}"
        schema.sample[lower] = stored_rows(rows.relation) if rows.relation.width == len(table.columns) else []
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


def quoted(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (an embedded quote doubled), as SQLite and DuckDB read it.

    >>> print(quoted('a"b'))
    "a""b"
    """
    return '"' + name.replace('"', '""') + '"'


def stored_rows(relation: Relation) -> list[tuple[Any, ...]]:
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
    name_sql = quoted(name)
    info = connection.execute(f"PRAGMA table_info({name_sql})").fetchall()
    columns = [Column(row[1], row[2] or "", bool(row[3]), bool(row[5])) for row in info]
    positions = {c.name.lower(): i for i, c in enumerate(columns)}
    unique_sets = []
    keys = tuple(i for i, c in sorted(enumerate(columns), key=lambda p: info[p[0]][5]) if c.primary_key)
    if keys:
        unique_sets.append(keys)
    for index in connection.execute(f"PRAGMA index_list({name_sql})").fetchall():
        if index[2]:  # unique
            index_name = quoted(index[1])
            cols = tuple(positions.get((r[2] or "").lower(), -1)
                         for r in connection.execute(f"PRAGMA index_info({index_name})").fetchall())
            if cols and -1 not in cols and cols not in unique_sets:
                unique_sets.append(cols)
    hidden = any(row[6] for row in connection.execute(f"PRAGMA table_xinfo({name_sql})").fetchall())
    table = Table(name, ddl, columns, unique_sets,
                  declared_only=not hidden and not ddl.lstrip().upper().startswith("CREATE VIRTUAL"))
    grouped: dict[int, list[Any]] = {}
    for row in connection.execute(f"PRAGMA foreign_key_list({name_sql})").fetchall():
        grouped.setdefault(row[0], []).append(row)
    table.foreign_keys = [ForeignKey(tuple(positions.get(r[3].lower(), -1) for r in rows), rows[0][2],
                                     tuple(r[4] or "" for r in rows))  # type: ignore[misc]  # names until resolved below
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


def scratch_name() -> str:
    """A fresh name for a search's neighbor databases (one neighbor exists at a time)."""
    return f"sqlcmp-neighbor-{uuid.uuid4().hex}"


def memory_writer(name: str) -> sqlite3.Connection:
    """A writable connection to the shared in-memory database called ``name`` (created by the first connection,
    gone when the last one closes)."""
    return sqlite3.connect(f"file:{name}?mode=memory&cache=shared", uri=True, check_same_thread=False)


@contextmanager
def memory_connection(name: str) -> Iterator[sqlite3.Connection]:
    """A writable shared in-memory database called ``name`` with foreign keys enforced; it disappears when this
    closes."""
    connection = memory_writer(name)
    try:
        connection.execute("PRAGMA foreign_keys = ON")
        yield connection
    finally:
        connection.close()
