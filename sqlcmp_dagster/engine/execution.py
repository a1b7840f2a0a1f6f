"""Layer 1 execution: a read-only, time-limited SQLAlchemy adapter that materializes results as polars frames.

The adapter is the only place that talks to a database (architecture.txt component B). Every query is hostile
input, so there are two walls. The gate (:func:`~sqlcmp_dagster.engine.parsing.unsafe_reason`) refuses anything
but a single read-only query calling nothing on the engine's deny list before the engine sees it. The engine is
then opened so that it cannot do harm anyway: SQLite read-only (``mode=ro``, ``query_only``) with a length limit
per value; DuckDB read-only without external access (no files, URLs or extensions) with its configuration
locked; PostgreSQL in a READ ONLY transaction, and only under a role that is neither superuser nor able to read
server files or signal other backends (unless the operator opts in). Each call runs on its own connection in a
transaction that is rolled back, is interrupted from a timer at its timeout, and stops fetching at
``max_result_rows`` rows or ``max_result_bytes`` bytes; a cell longer than ``max_cell_bytes`` is cut.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from sqlcmp_dagster.engine.models import DEFAULT_MAX_CELL_BYTES, DEFAULT_MAX_RESULT_BYTES, ExecutionError, \
    binary_text
from sqlcmp_dagster.engine.parsing import ParseOutcome, parse, unsafe_reason
from sqlcmp_dagster.engine.taxonomy import execution_error

#: SQLAlchemy backend name -> sqlglot dialect name.
_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "duckdb": "duckdb"}
#: File suffixes opened with DuckDB when a path (not a URL) is given.
DUCKDB_SUFFIXES = (".duckdb", ".ddb")
#: How many SQLite virtual-machine steps pass between two deadline checks: small enough to stop within a few ms.
_SQLITE_PROGRESS_STEPS = 10_000
#: DuckDB settings of every connection, applied when the read-only file is opened and then locked: no file,
#: URL or extension access (``read_text``, ``glob``, ``COPY``, ``ATTACH``, httpfs, ``FROM 'file.csv'``), no
#: extension installed or loaded behind the query's back, no ``SET`` or ``enable_logging`` that changes them.
DUCKDB_SANDBOX = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}
#: PostgreSQL predefined roles whose members reach past the database (server files, programs, other backends).
PRIVILEGED_PG_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                       "pg_signal_backend")
#: Rows fetched per round trip at most; fewer when rows are wide, so one round trip stays near a MiB.
_FETCH_ROWS = 1024
_FETCH_BYTES = 1 << 20
#: Characters of text (bytes of binary) of one cell that a report's samples and result tables show.
SAMPLE_CELL_CHARS = 200


class PrivilegedRoleError(ValueError):
    """The database role may reach past the database (superuser, replication, server files, signalling)."""


@dataclass(frozen=True)
class Relation:
    """A materialized result set.

    ``frame`` has positional column names ``c0, c1, ...`` because result columns may share a name
    (``SELECT a.id, b.id``); the names the database gave are in ``names``.
    """

    frame: pl.DataFrame
    names: list[str]
    truncated: bool = False

    @property
    def height(self) -> int:
        return self.frame.height

    @property
    def width(self) -> int:
        return self.frame.width

    def schema(self) -> list[dict[str, str]]:
        """``*_schema``: attribute names and data types."""
        return [{"name": n, "type": str(t)} for n, t in zip(self.names, self.frame.dtypes)]

    def to_rows(self, limit: int | None = None) -> dict[str, Any]:
        """``{columns, rows}`` as a report or prompt shows them (cells as :func:`shown_rows`), optionally only
        the first ``limit`` rows."""
        frame = self.frame if limit is None else self.frame.head(limit)
        return {"columns": list(self.names), "rows": shown_rows(frame.iter_rows())}


@dataclass(frozen=True)
class Execution:
    """``execution_success_*``, ``execution_error_*``, ``execution_time_*_ms`` and the materialized relation."""

    success: bool
    relation: Relation | None
    error: ExecutionError | None
    elapsed_ms: float
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Fetched:
    """The rows :func:`fetch_bounded` kept, whether it stopped early, and why (one warning per cap hit)."""

    rows: list[tuple[Any, ...]]
    truncated: bool
    warnings: list[str]


@dataclass(frozen=True)
class Plan:
    """What ``explain`` learned: the plan's operators and the optimizer's cost when the engine reports one."""

    operators: list[str]
    cost: float | None


def _plan_operator(name: str, relation: str | None = None) -> str:
    """An engine's operator name in the words of SQLite's plans, which plan_complexity_score weighs.

    >>> _plan_operator("Index Only Scan", "items"), _plan_operator("HASH_GROUP_BY"), _plan_operator("TOP_N")
    ('SEARCH items', 'HASH GROUP BY', 'SORT')
    """
    words = name.upper().replace("_", " ")
    if "INDEX" in words or "BITMAP" in words:
        words = "SEARCH"
    elif words in ("ORDER BY", "TOP N", "SORT", "INCREMENTAL SORT"):
        words = "SORT"
    return f"{words} {relation}" if relation else words


def _postgres_plan(root: dict[str, Any]) -> Plan:
    operators: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        name = "Hash Aggregate" if node.get("Strategy") == "Hashed" else str(node.get("Node Type", ""))
        if node.get("Parent Relationship") == "SubPlan":
            name = f"correlated {name}"
        operators.append(_plan_operator(name, node.get("Relation Name")))
        stack.extend(reversed(node.get("Plans", [])))
    return Plan(operators=operators, cost=float(root["Total Cost"]))


def _duckdb_plan(nodes: list[dict[str, Any]]) -> Plan:
    operators: list[str] = []
    rows = 0.0
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        info = node.get("extra_info") or {}
        table = info.get("Table") if isinstance(info, dict) else None
        operators.append(_plan_operator(str(node.get("name", "")), str(table).split(".")[-1] if table else None))
        estimate = info.get("Estimated Cardinality") if isinstance(info, dict) else None
        rows += float(estimate) if isinstance(estimate, (int, float, str)) and str(estimate).isdigit() else 0.0
        stack.extend(reversed(node.get("children", [])))
    return Plan(operators=operators, cost=rows or None)


def relation_from_rows(names: Sequence[str], rows: Sequence[Sequence[Any]], truncated: bool = False) -> Relation:
    """Build a :class:`Relation` from database rows, tolerating SQLite's per-value typing.

    A column whose values share a type becomes a typed polars column; one mixing numbers and text (possible in
    SQLite) becomes text with type tags (see :func:`tagged_text`), so ``1`` and ``'1'`` stay different.
    """
    columns = [f"c{i}" for i in range(len(names))]
    # Column-wise construction with strict typing: polars' row-wise constructor would silently coerce a
    # column holding 1 and 'a' to text, making the number 1 equal to the string '1'.
    values = list(zip(*rows)) if rows else [() for _ in columns]
    frame = pl.DataFrame([_column_series(c, list(v)) for c, v in zip(columns, values)])
    return Relation(frame=frame, names=list(names), truncated=truncated)


def tagged_text(series: pl.Series) -> pl.Series:
    """Text form of ``series`` prefixed by its type family, the common type of columns of different families.

    >>> tagged_text(pl.Series([1, None])).to_list()
    ['n:1.0', None]
    """
    dtype = series.dtype
    if dtype == pl.Boolean:  # a boolean is not a number: true never equals 1
        text, tag = series.cast(pl.Utf8), "l:"
    elif dtype.is_numeric():
        text, tag = series.cast(pl.Float64).cast(pl.Utf8), "n:"
    elif dtype == pl.Utf8:
        text, tag = series, "s:"
    elif dtype == pl.Binary:
        text, tag = series.bin.encode("hex"), "b:"
    else:
        text, tag = series.cast(pl.Utf8), "o:"
    return (tag + text).alias(series.name) if len(series) else text.alias(series.name)


def _column_series(name: str, values: list[Any]) -> pl.Series:
    try:
        return pl.Series(name, values, strict=True)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        pass
    kinds = {_family(v) for v in values if v is not None}
    if kinds <= {"n"}:
        return pl.Series(name, [None if v is None else float(v) for v in values], dtype=pl.Float64)
    parts: dict[str, list[int]] = {}
    for index, value in enumerate(values):
        if value is not None:
            parts.setdefault(_family(value), []).append(index)
    text: list[str | None] = [None] * len(values)
    for family, indexes in parts.items():
        subset = [values[i] for i in indexes]
        if family == "n":
            subset = [float(v) for v in subset]
        elif family == "o":
            subset = [str(v) for v in subset]
        for i, rendered in zip(indexes, tagged_text(pl.Series(subset)).to_list()):
            text[i] = rendered
    return pl.Series(name, text, dtype=pl.Utf8)


def _family(value: Any) -> str:
    if isinstance(value, (bool, int, float, Decimal)):
        return "n"
    if isinstance(value, str):
        return "s"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "b"
    return "o"


class ExecutionAdapter:
    """Read-only execution over one database, addressed by a SQLAlchemy URL or a SQLite file path.

    ``execute(sql)`` returns an :class:`Execution` and never raises for a query's own failure; ``explain(sql)``
    returns a :class:`Plan` or None.
    """

    def __init__(self, target: str, *, timeout_ms: int = 10_000, max_result_rows: int = 1_000_000,
                 allow_privileged_role: bool = False, scratch: str | None = None,
                 scratch_dialect: str = "sqlite") -> None:
        """``allow_privileged_role`` is the operator's explicit opt-in to run untrusted SQL on PostgreSQL under a
        role that could read server files or signal other sessions; without it such a role is refused here
        (:class:`PrivilegedRoleError`), before any case runs. ``scratch`` names a shared in-memory database of
        ``scratch_dialect`` (a neighbor database, :mod:`sqlcmp_dagster.engine.neighbors`) to open instead of
        ``target``, which then only labels it: SQLite read-only (``query_only``); DuckDB under the sandbox
        settings of a DuckDB file (:func:`duckdb_memory_engine`; an in-memory DuckDB cannot be opened
        read-only, so the safety gate and the rolled-back transaction keep it unwritten)."""
        self.timeout_ms = timeout_ms
        self.max_result_rows = max_result_rows
        self._sqlite_path: Path | None = None
        if scratch is not None:
            self.identifier = target
            self.engine = duckdb_memory_engine(scratch) if scratch_dialect == "duckdb" else sa.create_engine(
                "sqlite+pysqlite://", creator=lambda: sqlite_memory_read_only(scratch), poolclass=NullPool)
        else:
            self.engine = self._open(target)
        backend = self.engine.dialect.name
        self.dialect = _DIALECTS.get(backend, backend)
        dbapi = self.engine.dialect.loaded_dbapi
        self._driver_errors: tuple[type[BaseException], ...] = (dbapi.Error,) if hasattr(dbapi, "Error") else ()
        if self.dialect == "duckdb":
            import duckdb

            self._driver_errors += (duckdb.Error,)
        if self.dialect == "postgres" and not allow_privileged_role:
            privileges = postgres_privileges(self.engine)
            if privileges:
                self.engine.dispose()
                raise PrivilegedRoleError(
                    f"refusing to run untrusted SQL as a privileged PostgreSQL role ({', '.join(privileges)}): "
                    "connect as a role granted SELECT on the evaluated tables only, or opt in with "
                    "--allow-privileged-role")

    def _open(self, target: str) -> sa.Engine:
        """A read-only engine over ``target`` (URL or file path); sets ``identifier`` and the SQLite path."""
        if "://" not in target and Path(target).suffix.lower() in DUCKDB_SUFFIXES:
            target = f"duckdb:///{Path(target).resolve()}"
        if "://" in target:
            url = sa.make_url(target)
            self.identifier = url.render_as_string(hide_password=True)
            if url.get_backend_name() == "sqlite" and url.database:
                self._sqlite_path = Path(url.database)
        else:
            self._sqlite_path = Path(target)
            self.identifier = str(self._sqlite_path)
        if "://" in target and sa.make_url(target).get_backend_name() == "duckdb":
            database = sa.make_url(target).database
            if database and database != ":memory:" and not Path(database).is_file():
                raise FileNotFoundError(f"DuckDB database not found: {database}")
            return sa.create_engine(target, poolclass=NullPool,
                                    connect_args={"read_only": True, "config": dict(DUCKDB_SANDBOX)})
        if self._sqlite_path is not None:
            path = self._sqlite_path.resolve()
            if not path.is_file():
                raise FileNotFoundError(f"SQLite database not found: {path}")
            self._sqlite_path = path
            self.identifier = f"sqlite:///{path}"
            return sa.create_engine(
                "sqlite+pysqlite://", creator=lambda: sqlite_read_only(path), poolclass=NullPool
            )
        return sa.create_engine(target, poolclass=NullPool)

    def execute(
        self,
        sql: str,
        *,
        parsed: ParseOutcome | None = None,
        timeout_ms: int | None = None,
        max_rows: int | None = None,
        max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES,
    ) -> Execution:
        """Run one read-only query and materialize its result: at most ``max_rows`` rows and about ``max_bytes``
        bytes (then truncated, with a warning), each text or binary cell cut at ``max_cell_bytes``."""
        outcome = parsed if parsed is not None else parse(sql, self.dialect)
        reason = unsafe_reason(outcome, self.dialect) if outcome.success else None
        if reason is not None:
            return Execution(False, None, ExecutionError(category="unsafe_statement", message=reason), 0.0)
        limit = self.max_result_rows if max_rows is None else max_rows
        started = time.perf_counter()
        try:
            with self._session(self.timeout_ms if timeout_ms is None else timeout_ms, max_cell_bytes) as connection:
                # The DBAPI cursor, given no parameters: drivers then leave '%' and ':' in the SQL alone. On
                # PostgreSQL a server-side cursor, so that only the rows kept ever reach this process.
                raw = connection.connection
                cursor = raw.cursor(name="sqlcmp_result") if self.dialect == "postgres" else raw.cursor()
                cursor.execute(_strip_terminator(sql))
                fetched = fetch_bounded(cursor, limit, max_bytes, max_cell_bytes)
                if cursor.description is None:
                    raise _NoRows()
                names = [str(column[0]) for column in cursor.description]
                elapsed = (time.perf_counter() - started) * 1000
        except _NoRows:
            error = ExecutionError(category="unsafe_statement", message="statement returned no result set")
            return Execution(False, None, error, (time.perf_counter() - started) * 1000)
        except sa.exc.DBAPIError as failure:
            return Execution(False, None, execution_error(_db_message(failure)), (time.perf_counter() - started) * 1000)
        except self._driver_errors as failure:
            message = str(failure).strip()
            if isinstance(failure, sqlite3.DataError) and "too big" in message:  # the length limit of _session
                message += f" (a value longer than max_cell_bytes={max_cell_bytes:,})"
            return Execution(False, None, execution_error(message), (time.perf_counter() - started) * 1000)
        except sa.exc.SQLAlchemyError as failure:
            return Execution(False, None, execution_error(str(failure)), (time.perf_counter() - started) * 1000)
        except (ValueError, OverflowError, UnicodeError, sqlite3.Error) as failure:  # driver-side conversions
            message = f"{type(failure).__name__}: {failure}"
            return Execution(False, None, execution_error(message), (time.perf_counter() - started) * 1000)
        relation = relation_from_rows(names, fetched.rows, fetched.truncated)
        return Execution(True, relation, None, elapsed, fetched.warnings)

    def explain(self, sql: str) -> Plan | None:
        """The engine's plan for ``sql``, estimated only (a query is never run for its plan: no ANALYZE).

        SQLite: ``EXPLAIN QUERY PLAN`` operators, no cost. PostgreSQL: ``EXPLAIN (FORMAT JSON)``, its node types
        and the root's estimated total cost. DuckDB: ``EXPLAIN (FORMAT JSON)``, its operators and, as the cost,
        the estimated rows summed over the operators (DuckDB reports no cost of its own). Operator names are
        put in SQLite's words (``SCAN``, ``SEARCH`` for index access, ``HASH``, ``NESTED LOOP``, ``SORT``).
        """
        prefix = {"sqlite": "EXPLAIN QUERY PLAN ", "postgres": "EXPLAIN (FORMAT JSON) ",
                  "duckdb": "EXPLAIN (FORMAT JSON) "}.get(self.dialect)
        if prefix is None:
            return None
        try:
            with self._session(self.timeout_ms) as connection:
                rows = connection.exec_driver_sql(prefix + _strip_terminator(sql)).fetchall()
        except (sa.exc.SQLAlchemyError, *self._driver_errors):
            return None
        if self.dialect == "sqlite":
            return Plan(operators=[str(row[-1]) for row in rows], cost=None)
        try:
            document = rows[0][-1]
            nodes = json.loads(document) if isinstance(document, str) else document
            return _postgres_plan(nodes[0]["Plan"]) if self.dialect == "postgres" else _duckdb_plan(nodes)
        except (ValueError, KeyError, IndexError, TypeError):
            return None

    def fingerprint(self) -> str:
        """A content hash of the database: what a cached result depends on besides the case itself."""
        if self._sqlite_path is not None:
            return _file_digest(self._sqlite_path)
        return hashlib.sha256(self.identifier.encode()).hexdigest()[:16]

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _session(self, timeout_ms: int, max_cell_bytes: int = 0) -> Iterator[sa.Connection]:
        """A fresh connection in a read-only transaction that is always rolled back, with the engine's own
        interruption armed: SQLite's progress handler and interrupt timer, PostgreSQL's statement_timeout,
        DuckDB's interrupt timer. On SQLite, no value may grow past ``max_cell_bytes`` (when given)."""
        with self.engine.connect() as connection:
            driver = connection.connection.driver_connection
            if isinstance(driver, sqlite3.Connection):
                if max_cell_bytes:
                    driver.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_cell_bytes)
                guard = sqlite_deadline(driver, timeout_ms)
            elif self.dialect == "duckdb":
                guard = _interrupt_after(driver, timeout_ms)
            else:
                guard = _noop()
            with guard:
                transaction = connection.begin()
                try:
                    if self.dialect == "postgres":
                        connection.exec_driver_sql("SET TRANSACTION READ ONLY")
                        connection.exec_driver_sql(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
                    yield connection
                finally:
                    transaction.rollback()


def fetch_bounded(cursor: Any, max_rows: int, max_bytes: int, max_cell_bytes: int) -> Fetched:
    """Fetch at most ``max_rows`` rows and about ``max_bytes`` bytes from a DBAPI ``cursor``, cutting each cell
    at ``max_cell_bytes`` as it arrives (:func:`cut_cell`).

    The caps are enforced while fetching: rows come in round trips of about a MiB (one row at a time while rows
    are huge), so the process never holds more than the kept rows plus one round trip. Size is approximate:
    the length of text and binary values plus 8 bytes per cell.
    """
    rows: list[tuple[Any, ...]] = []
    size, batch, cells_cut = 0, 1, 0
    while True:
        want = min(batch, max_rows + 1 - len(rows))
        chunk = cursor.fetchmany(want)
        for raw in chunk:
            row = tuple(cut_cell(value, max_cell_bytes) for value in raw)
            cells_cut += sum(a is not b for a, b in zip(raw, row) if isinstance(a, (str, bytes)))
            size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
            rows.append(row)
            if size > max_bytes:
                warnings = [f"result truncated at max_result_bytes={max_bytes:,} (about {size:,} bytes in "
                            f"{len(rows):,} rows)"]
                return Fetched(rows, True, _cut_warning(cells_cut, max_cell_bytes) + warnings)
        if len(rows) > max_rows:
            warnings = [f"result truncated to max_result_rows={max_rows} rows"]
            return Fetched(rows[:max_rows], True, _cut_warning(cells_cut, max_cell_bytes) + warnings)
        if len(chunk) < want:
            return Fetched(rows, False, _cut_warning(cells_cut, max_cell_bytes))
        batch = max(1, min(_FETCH_ROWS, _FETCH_BYTES * len(rows) // max(size, 1)))


def cut_cell(value: Any, limit: int) -> Any:
    """A driver's cell as the engine keeps it: binary as ``bytes`` (psycopg2 returns ``memoryview``), and text
    or binary longer than ``limit`` cut there with a marker naming the full length and a digest of the whole
    value, so that two cut cells are still equal exactly when the values were.

    >>> cut_cell("abcdef", 3)
    'abc…[cut at 3 of 6 characters, sha256 bef57ec7f53a6d40]'
    >>> cut_cell(memoryview(b"\\x00\\xff"), 3)
    b'\\x00\\xff'
    """
    if isinstance(value, (memoryview, bytearray)):
        value = bytes(value)
    if isinstance(value, (str, bytes)) and len(value) > limit:
        whole = value if isinstance(value, bytes) else value.encode("utf-8", errors="surrogatepass")
        unit = "bytes" if isinstance(value, bytes) else "characters"
        marker = f"…[cut at {limit} of {len(value)} {unit}, sha256 {hashlib.sha256(whole).hexdigest()[:16]}]"
        return value[:limit] + (marker.encode() if isinstance(value, bytes) else marker)
    return value


def shown_rows(rows: Iterable[Sequence[Any]], limit: int = SAMPLE_CELL_CHARS) -> list[list[Any]]:
    r"""Rows as a report shows them: text longer than ``limit`` characters cut with a marker naming its length,
    binary as :func:`~sqlcmp_dagster.engine.models.binary_text` of its first ``limit`` bytes (also marked).

    >>> shown_rows([("x" * 5, b"\x00\xff", 1)], limit=3)
    [['xxx…[5 characters]', '\\x00ff', 1]]
    """
    return [[_shown(value, limit) for value in row] for row in rows]


def _shown(value: Any, limit: int) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value)
        return binary_text(value[:limit]) + (f"…[{len(value)} bytes]" if len(value) > limit else "")
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}…[{len(value)} characters]"
    return value


def _cut_warning(count: int, limit: int) -> list[str]:
    return [f"{count} cell(s) longer than max_cell_bytes={limit:,} were cut (compared by prefix and digest)"] \
        if count else []


def postgres_privileges(engine: sa.Engine) -> list[str]:
    """What makes the engine's PostgreSQL role privileged: superuser, replication, or membership (direct or
    inherited) in one of :data:`PRIVILEGED_PG_ROLES`; empty for a SELECT-only or ``pg_read_all_data`` role."""
    with engine.connect() as connection:
        row = connection.exec_driver_sql(
            "SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user").one()
        members = connection.exec_driver_sql(
            "SELECT rolname FROM pg_roles WHERE rolname = ANY(%(names)s) "
            "AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY rolname",
            {"names": list(PRIVILEGED_PG_ROLES)}).scalars().all()
    if row[0]:
        return ["superuser"]  # a member of every role: naming them adds nothing
    return (["replication"] if row[1] else []) + [str(m) for m in members]


def resolve_database(db: str, db_dir: Path | None) -> str:
    """Turn a suite's ``db`` (a URL, a SQLite path, or a db id under ``db_dir``) into an adapter target.

    A db id looks for ``DIR/<id>/<id>.sqlite`` (the Spider and BIRD layout), then ``DIR/<id>.sqlite``,
    ``DIR/<id>.db`` and ``DIR/<id>.duckdb``.
    """
    if "://" in db:
        return db
    if db_dir is not None:
        candidates = (db_dir / db / f"{db}.sqlite", db_dir / f"{db}.sqlite", db_dir / f"{db}.db",
                      db_dir / f"{db}.duckdb", db_dir / db)
        for candidate in candidates:
            if candidate.is_file():
                return str(candidate)
        raise FileNotFoundError(f"database {db!r} not found under {db_dir}")
    if Path(db).is_file():
        return db
    raise FileNotFoundError(f"database {db!r} is neither a URL nor an existing file (no --db-dir given)")


def sqlite_read_only(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file at ``path`` that cannot write: opened ``mode=ro`` and ``query_only``."""
    connection = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, check_same_thread=False)
    connection.execute("PRAGMA query_only = ON")
    # Text that is not valid UTF-8 comes back as replacement characters instead of failing the whole query.
    connection.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    return connection


def sqlite_memory_read_only(name: str) -> sqlite3.Connection:
    """A connection to the shared in-memory SQLite database ``name`` (``file:NAME?mode=memory&cache=shared``,
    alive while its builder holds a connection) that cannot write: ``query_only``, as :func:`sqlite_read_only`."""
    connection = sqlite3.connect(f"file:{quote(name)}?mode=memory&cache=shared", uri=True, check_same_thread=False)
    connection.execute("PRAGMA query_only = ON")
    connection.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    return connection


def duckdb_memory_engine(name: str) -> sa.Engine:
    """An engine over the in-memory DuckDB database ``name``, shared by every connection of this process that
    opens it with the same settings (the sandbox of :data:`DUCKDB_SANDBOX`: no file or network access, no
    extension loading, settings locked), alive while one of them is open."""
    return sa.create_engine(f"duckdb:///:memory:{name}", poolclass=NullPool,
                            connect_args={"config": dict(DUCKDB_SANDBOX)})


@contextmanager
def sqlite_deadline(connection: sqlite3.Connection, timeout_ms: int) -> Iterator[None]:
    """Interrupt SQLite once ``timeout_ms`` has passed: from inside its VM loop (the progress handler), and
    from a timer thread, because one VM step can take minutes (``replace`` over a 20 MB string in a recursive
    CTE) and the progress handler only runs between steps, while an interrupt stops at the next opcode."""
    deadline = time.monotonic() + timeout_ms / 1000
    handler: Callable[[], int] = lambda: 1 if time.monotonic() > deadline else 0  # noqa: E731
    connection.set_progress_handler(handler, _SQLITE_PROGRESS_STEPS)
    try:
        with _interrupt_after(connection, timeout_ms):
            yield
    finally:
        connection.set_progress_handler(None, 0)


@contextmanager
def _interrupt_after(connection: Any, timeout_ms: int) -> Iterator[None]:
    """Interrupt a DuckDB or SQLite connection from a timer thread once ``timeout_ms`` has passed."""
    timer = threading.Timer(timeout_ms / 1000, connection.interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@contextmanager
def _noop() -> Iterator[None]:
    yield


class _NoRows(Exception):
    """The statement ran but produced no result set (it was not a query)."""


def _db_message(failure: sa.exc.DBAPIError) -> str:
    original = failure.orig
    return str(original).strip() if original is not None else str(failure).splitlines()[0]


def _strip_terminator(sql: str) -> str:
    return sql.strip().rstrip(";").strip()


_DIGESTS: dict[tuple[str, int, int], str] = {}
_DIGEST_LOCK = threading.Lock()


def _file_digest(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _DIGEST_LOCK:
        if key not in _DIGESTS:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            _DIGESTS[key] = digest.hexdigest()[:16]
        return _DIGESTS[key]
