"""Layer 1 execution: the adapter that runs one read-only, time-limited query and materializes its result.

The adapter is the only place that talks to a database (docs/security.md), and every query it runs is hostile input. It sends
nothing the statement gate (:mod:`~sqlcmp_dagster.engine.sandbox.gate`) has not read and passed, and runs
what passes inside the engine's own sandbox, each readable whole in one module of
:mod:`sqlcmp_dagster.engine.sandbox`: :mod:`~.sandbox.sqlite`, :mod:`~.sandbox.postgres` and
:mod:`~.sandbox.duckdb_process`. Each call runs on a connection of its own while it runs, in a transaction that
is rolled back, is interrupted at its timeout, and stops fetching at ``max_result_rows`` rows or
``max_result_bytes`` bytes (:mod:`~.sandbox.bounds`); a cell longer than ``max_cell_bytes`` is cut.
"""

from __future__ import annotations

import errno
import hashlib
import re
import sqlite3
import sys
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlcmp_dagster.engine.atomic import file_state
from sqlcmp_dagster.engine.fingerprint import DigestStore, database_fingerprint
from sqlcmp_dagster.engine.models import DEFAULT_MAX_CELL_BYTES, DEFAULT_MAX_RESULT_BYTES, ExecutionError
from sqlcmp_dagster.engine.parsing import ParseOutcome, parse, query_text
from sqlcmp_dagster.engine.plans import Plan, plan_of
from sqlcmp_dagster.engine.redaction import redacted_url
from sqlcmp_dagster.engine.relation import Execution, relation_from_rows
from sqlcmp_dagster.engine.sandbox import postgres
from sqlcmp_dagster.engine.sandbox.bounds import Fetched, fetch_bounded, interrupt_after
from sqlcmp_dagster.engine.sandbox.duckdb_process import DUCKDB_SANDBOX, NEIGHBOR_DATABASE, PLAN_PREFIX, \
    DuckdbProcess, Request, memory_bound
from sqlcmp_dagster.engine.sandbox.gate import gate_reason
from sqlcmp_dagster.engine.sandbox.postgres import PrivilegedRoleError
from sqlcmp_dagster.engine.sandbox.sqlite import CLOCK_AND_CHANCE, HEAP_LIMIT_BYTES, Progress, SqliteConnections, \
    calls_noted, heap_held_elsewhere, narrow_for_width, sqlite_memory_read_only, sqlite_read_only, utf8_first
from sqlcmp_dagster.engine.taxonomy import execution_error

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["DUCKDB_SUFFIXES", "ExecutionAdapter", "PrivilegedRoleError", "database_file_of", "resolve_database"]

#: SQLAlchemy backend name -> sqlglot dialect name.
_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "duckdb": "duckdb"}
#: File suffixes opened with DuckDB when a path (not a URL) is given.
DUCKDB_SUFFIXES = (".duckdb", ".ddb")


class ExecutionAdapter:
    """Read-only execution over one database, addressed by a SQLAlchemy URL or a SQLite file path.

    ``execute(sql)`` returns an :class:`Execution` and never raises for a query's own failure; ``explain(sql)``
    returns a :class:`Plan` or None.
    """

    def __init__(self, target: str, *, timeout_ms: int = 10_000, max_result_rows: int = 1_000_000,
                 allow_privileged_role: bool = False, scratch: str | None = None,
                 neighbor_process: DuckdbProcess | None = None) -> None:
        """``allow_privileged_role`` is the operator's explicit opt-in to run untrusted SQL on PostgreSQL under a
        role that could read server files or signal other sessions; without it such a role is refused here
        (:class:`PrivilegedRoleError`), before any case runs. A neighbor database
        (:mod:`sqlcmp_dagster.engine.neighbors`) is opened instead of ``target``, which then only labels it:
        ``scratch`` names a shared in-memory SQLite database, opened read-only (``query_only``) with the rules
        of a SQLite file; ``neighbor_process`` is the DuckDB process whose in-memory neighbor database the
        queries run on, under the sandbox and the memory bound of a DuckDB file (the safety gate and a
        rolled-back transaction keep it unwritten: an in-memory DuckDB cannot be opened read-only)."""
        self.timeout_ms = timeout_ms
        self.max_result_rows = max_result_rows
        self._sqlite_path: Path | None = None
        self._duckdb_database: str | None = None
        self._duckdb_idle: list[DuckdbProcess] = []
        self._idle_lock = threading.Lock()
        self._sqlite: SqliteConnections | None = None  # a SQLite file's or neighbor's kept connections
        self._catalog: tuple[str, bool, str] | None = None  # a DuckDB file's version, then :meth:`_duckdb_catalog`
        #: What the adapter found when it connected and the operator should know (a PostgreSQL role without the
        #: recommended role-level defaults): said once, by whoever opened the adapter.
        self.setup_warnings: list[str] = []
        self.neighbor_process = neighbor_process
        self.engine: sa.Engine | None = None  # SQLAlchemy's, for a server, DuckDB or a URL; none for SQLite files
        if neighbor_process is not None:
            self.identifier = target
            self._duckdb_database = NEIGHBOR_DATABASE
            # Never connected by a query (they run in the neighbor's process); it names the dialect.
            self.engine = _create_engine("duckdb:///:memory:", connect_args={"config": dict(DUCKDB_SANDBOX)})
        elif scratch is not None:
            # One connection for every query of the search, as for a SQLite file; its statement is closed before
            # the next neighbor is built.
            self.identifier = target
            self._sqlite = SqliteConnections(lambda: sqlite_memory_read_only(scratch), None)
        else:
            self.engine = self._open(target)
        if self.engine is None:  # a SQLite file or neighbor: the adapter's own connections, no engine
            self.dialect = "sqlite"
            self._driver_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        else:
            backend = self.engine.dialect.name
            self.dialect = _DIALECTS.get(backend, backend)
            dbapi = self.engine.dialect.loaded_dbapi
            self._driver_errors = (dbapi.Error,) if hasattr(dbapi, "Error") else ()
        if self.dialect == "duckdb":
            import duckdb

            self._driver_errors += (duckdb.Error,)
        if self.dialect == "postgres" and self.engine is not None:
            privileges, self.setup_warnings = postgres.role_check(self.engine)
            for missing in self.setup_warnings:  # said once per process and message (Python's warning filter)
                warnings.warn(f"PostgreSQL role of {self.identifier}: {missing}", postgres.RoleDefaultsWarning,
                              stacklevel=2)
            if privileges and not allow_privileged_role:
                self.engine.dispose()
                raise PrivilegedRoleError(
                    f"refusing to run untrusted SQL as a privileged PostgreSQL role ({', '.join(privileges)}): "
                    "connect as a role granted SELECT on the evaluated tables only, or opt in with "
                    "--allow-privileged-role")

    def _open(self, target: str) -> sa.Engine | None:
        """A read-only engine over ``target`` (URL or file path), None for a SQLite file (the adapter opens its
        own connections to it); sets ``identifier`` and the SQLite path."""
        if "://" not in target and Path(target).suffix.lower() in DUCKDB_SUFFIXES:
            target = f"duckdb:///{Path(target).resolve()}"
        if "://" in target:
            import sqlalchemy as sa

            url = sa.make_url(target)
            self.identifier = redacted_url(url.render_as_string(hide_password=True))  # ?password= too
            if url.get_backend_name() == "postgresql":
                return _create_engine(postgres.sandbox_url(url), connect_args=postgres.connect_args())
            if url.get_backend_name() == "duckdb":
                database = url.database
                if database and database != ":memory:" and not Path(database).is_file():
                    raise FileNotFoundError(f"DuckDB database not found: {database}")
                self._duckdb_database = str(Path(database).resolve()) if database and database != ":memory:" \
                    else ":memory:"
                return _create_engine(target, connect_args={"read_only": True, "config": dict(DUCKDB_SANDBOX)})
            if url.get_backend_name() == "sqlite" and url.database:
                self._sqlite_path = Path(url.database)
        else:
            self._sqlite_path = Path(target)
            self.identifier = str(self._sqlite_path)
        if self._sqlite_path is not None:
            path = self._sqlite_path.resolve()
            if not path.is_file():
                raise FileNotFoundError(f"SQLite database not found: {path}")
            self._sqlite_path = path
            self.identifier = f"sqlite:///{path}"
            self._sqlite = SqliteConnections(lambda: sqlite_read_only(path), path)
            return None
        return _create_engine(target)

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
        limit = self.max_result_rows if max_rows is None else max_rows
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        # The gate's own parse counts against the query's timeout (a pathological text stops there); the gate
        # reads the tree only, so the text is not canonicalized (the fix search hands every candidate as text).
        outcome = parsed if parsed is not None else self.gate_parse(sql, timeout)
        # Only what the gate has read may run: text it cannot read (too long, cut by the clock, beyond sqlglot)
        # is refused, never sent to the engine unchecked.
        reason = gate_reason(outcome, self.dialect, sql) if outcome.success else \
            f"not run: the safety gate could not read the query ({outcome.error})"
        if reason is not None:
            return Execution(False, None, ExecutionError(category="unsafe_statement", message=reason), 0.0)
        if self._duckdb_database is not None:
            return self._execute_duckdb(Request(self._duckdb_database, _strip_terminator(sql), timeout, limit,
                                                max_bytes, max_cell_bytes))
        started = time.perf_counter()
        for attempt in (1, 2):
            watches: list[postgres.Watch] = []
            try:
                # the calls matter on a SQLite file alone (``_unstable``), not on the searches' neighbors
                with calls_noted() if self._sqlite_path is not None else nullcontext(frozenset[str]()) as calls:
                    names, fetched, elapsed, steps = self._fetch(sql, timeout, limit, max_bytes, max_cell_bytes,
                                                                 watches)
            except Exception as failure:
                terminated = any(watch.terminated for watch in watches)
                if self.dialect == "postgres" and not terminated and postgres.connection_lost(failure):
                    # Ended from outside (a sibling's pg_terminate_backend, a restart): once more on a fresh
                    # connection, then the case's engine fault, never the query's failure.
                    if attempt == 1:
                        continue
                    raise postgres.ConnectionLost(
                        f"the PostgreSQL connection was ended from outside, twice: {_db_message(failure)}") \
                        from failure
                return Execution(False, None, self._error(failure, timeout, max_cell_bytes, terminated),
                                 (time.perf_counter() - started) * 1000, unstable=self._unstable(sql, calls))
            relation = relation_from_rows(names, fetched.rows, fetched.truncated)
            return Execution(True, relation, None, elapsed, fetched.warnings, steps,
                             unstable=self._unstable(sql, calls))
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _fetch(self, sql: str, timeout: int, limit: int, max_bytes: int, max_cell_bytes: int,
               watches: list[postgres.Watch]) -> tuple[list[str], Fetched, float, int | None]:
        """Run ``sql`` in the engine's sandbox: its column names, the rows kept, the milliseconds it took and, on
        SQLite, the virtual-machine steps (:attr:`~.sandbox.sqlite.Progress.steps`). A PostgreSQL session's watch
        is appended to ``watches`` (the caller reads whether it terminated)."""
        started = time.perf_counter()
        if self.dialect == "postgres":
            assert self.engine is not None, "a PostgreSQL adapter has an engine"
            with postgres.session(self.engine, timeout) as (raw, watch):
                watches.append(watch)
                # no FETCH starts past the watchdog's deadline, armed once connected
                deadline = time.monotonic() + timeout / 1000
                names, fetched = postgres.fetch(raw, query_text(sql, self.dialect), deadline, limit, max_bytes,
                                                max_cell_bytes)
                return names, fetched, (time.perf_counter() - started) * 1000, None

        def run(raw: Any) -> tuple[list[str], Fetched, float]:
            # The DBAPI cursor, given no parameters: drivers then leave '%' and ':' in the SQL alone.
            cursor = raw.cursor()
            narrowed = None
            try:
                if self._sqlite is not None:  # a row of a wide result is bounded before it is computed
                    narrowed = narrow_for_width(raw, _strip_terminator(sql), max_bytes)
                cursor.execute(_strip_terminator(sql))
                fetched = fetch_bounded(cursor, limit, max_bytes, max_cell_bytes)
                if cursor.description is None:
                    raise _NoRows()
                return [str(c[0]) for c in cursor.description], fetched, (time.perf_counter() - started) * 1000
            except sqlite3.DataError as error:
                if narrowed is None or "too big" not in str(error):
                    raise
                raise sqlite3.DataError(
                    f"{error} (a value longer than {narrowed:,} bytes: a row of a result this wide may hold at "
                    f"most max_result_bytes={max_bytes:,})") from error
            finally:
                if self.dialect == "sqlite":  # a statement cut short keeps reading until it is closed
                    cursor.close()

        if self._sqlite is not None:  # a step of SQLite's may outlast an interrupt: SqliteConnections.run
            return self._sqlite.run(sql, timeout, max_cell_bytes, lambda raw, progress: (
                *utf8_first(raw, lambda: run(raw)), progress.steps))
        with self._session(timeout, max_cell_bytes) as (raw, _):
            return *run(raw), None

    @property
    def stuck(self) -> bool:
        """Whether a query of this adapter is still inside a step of SQLite's that its case stopped waiting for
        (:class:`~.sandbox.sqlite.Stuck`): its connection is not this thread's to use until the step ends."""
        return self._sqlite is not None and self._sqlite.stuck

    def when_free(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` now, or, while the adapter is :attr:`stuck`, once the stuck step ends (in its
        thread): closing what shares a database with that call (a neighbor's writer) would wait for it."""
        if self._sqlite is not None:
            self._sqlite.when_free(callback)
        else:
            callback()

    def _error(self, failure: Exception, timeout: int, max_cell_bytes: int, terminated: bool) -> ExecutionError:
        """The query's own failure as the report names it; anything that is not one is raised again (an engine
        fault of the case)."""
        if isinstance(failure, _NoRows):
            return ExecutionError(category="unsafe_statement", message="statement returned no result set")
        if isinstance(failure, postgres.PastDeadline):
            return execution_error(f"{postgres.timeout_message(timeout)}: no FETCH starts past it")
        if isinstance(failure, (*_sqlalchemy_errors("DBAPIError"), *self._driver_errors)):
            message = _db_message(failure) if isinstance(failure, _sqlalchemy_errors("DBAPIError")) \
                else str(failure).strip()
            if isinstance(failure, sqlite3.DataError) and "too big" in message \
                    and "max_result_bytes" not in message:  # the length limit of a session
                message += f" (a value longer than max_cell_bytes={max_cell_bytes:,})"
            elif self.dialect == "postgres" and (terminated or postgres.CANCELLED in message):
                message = f"{postgres.timeout_message(timeout)}: {message}"  # the watchdog's cancel or terminate
            return execution_error(message)
        if isinstance(failure, _sqlalchemy_errors("SQLAlchemyError")):
            return execution_error(str(failure))
        if isinstance(failure, MemoryError) and self._sqlite is not None and not heap_held_elsewhere():
            # SQLite's heap limit reached by this query (with steps left running that hold it: a fault)
            return ExecutionError(category="unknown_error", message=(
                f"out of memory: SQLite may hold at most {HEAP_LIMIT_BYTES >> 20} MiB in this process "
                f"(HEAP_LIMIT_BYTES), and the query needed more: {failure or 'MemoryError'}"))
        if isinstance(failure, (ValueError, OverflowError, UnicodeError, sqlite3.Error)):  # driver conversions
            return execution_error(f"{type(failure).__name__}: {failure}")
        raise failure

    def gate_parse(self, sql: str, timeout_ms: int) -> ParseOutcome:
        """The parse of ``sql`` that the statement gate reads (no canonical form), cut at ``timeout_ms``: what
        :meth:`execute` makes of a query given as text, for a caller that runs one text many times and hands
        it this parse instead (the neighbor search's tie check runs one on every neighbor)."""
        return parse(sql, self.dialect, deadline=time.monotonic() + timeout_ms / 1000,
                     budget=f"the query's timeout ({timeout_ms} ms)", canonical=False)

    def _execute_duckdb(self, request: Request) -> Execution:
        """Run ``request`` in a DuckDB process of this adapter (:mod:`~sqlcmp_dagster.engine.sandbox.duckdb_process`),
        whose memory is bounded by :func:`~sqlcmp_dagster.engine.sandbox.duckdb_process.memory_bound` of ``max_bytes``."""
        process = self.neighbor_process or self.borrow_duckdb_process()
        started = time.perf_counter()
        answer = process.run(request)
        elapsed = (time.perf_counter() - started) * 1000
        if process is not self.neighbor_process:
            self.return_duckdb_process(process)
        unstable = self._unstable(request.sql)
        if answer.outcome == "ok":
            assert answer.names is not None and answer.fetched is not None
            relation = relation_from_rows(answer.names, answer.fetched.rows, answer.fetched.truncated)
            return Execution(True, relation, None, elapsed, answer.fetched.warnings, unstable=unstable)
        if answer.outcome == "no_rows":
            error = ExecutionError(category="unsafe_statement", message="statement returned no result set")
        elif answer.outcome == "refused":
            error = ExecutionError(category="unsafe_statement", message=answer.message)
        elif answer.outcome == "memory":
            error = ExecutionError(category="unknown_error", message=(
                f"result_too_large: the query needed more than {memory_bound(request.max_bytes) >> 20} MiB of "
                f"memory in DuckDB (the bound set by max_result_bytes={request.max_bytes:,}): {answer.message}"))
        elif answer.outcome == "timeout":
            error = ExecutionError(category="timeout", message=f"interrupted: {answer.message}")
        else:
            error = execution_error(answer.message)
        return Execution(False, None, error, elapsed, unstable=unstable)

    def _unstable(self, sql: str, calls: Collection[str] = ()) -> bool:
        """``Execution.unstable`` of ``sql`` run here, which called ``calls`` (SQLite's, as its authorizer saw
        them): :func:`reads_clock_or_chance`, or, on a DuckDB file, a file whose catalog hides calls
        (:meth:`_duckdb_catalog`). Asked of a database file only: a neighbor's and a server's results are never
        kept past their run, and the neighbor search's queries are most executions (8 us of the check each)."""
        if self.database_file is None:
            return False
        return reads_clock_or_chance(sql, calls) or (self.dialect == "duckdb" and self._duckdb_catalog()[0])

    def duckdb_time_zone(self) -> str:
        """The time zone this DuckDB file's queries run in, as its engine reports it (``TimeZone``, which ICU
        takes from ``TZ`` or the system's zone, each in its own way): a ``TIMESTAMPTZ`` printed as text is printed
        in it. Asked once per :meth:`version`, of a process started then; '' where it cannot be read."""
        return self._duckdb_catalog()[1]

    def _duckdb_catalog(self) -> tuple[bool, str]:
        """Asked of this DuckDB file once per :meth:`version`: whether it defines a view, a macro, or a table whose
        definition names the clock or chance (a generated column ``AS (random() * x)``): what they call is not in
        the text of a query that reads them, and DuckDB has no authorizer to tell it (two reviews' findings); and
        its engine's time zone. A file that cannot say counts as one that hides calls."""
        version = self.version()
        if self._catalog is None or self._catalog[0] != version:
            process = self.borrow_duckdb_process()
            try:
                answer = process.run(Request(str(self._duckdb_database), _DUCKDB_CATALOG, self.timeout_ms, 1,
                                             1 << 16, 1 << 10))
            finally:
                self.return_duckdb_process(process)
            rows = list(answer.fetched.rows) if answer.outcome == "ok" and answer.fetched is not None else []
            hides, zone = (rows[0][0] != 0, str(rows[0][1])) if len(rows) == 1 else (True, "")
            self._catalog = (version, hides, zone)
        return self._catalog[1], self._catalog[2]

    def borrow_duckdb_process(self) -> DuckdbProcess:
        """One of this adapter's idle DuckDB processes (a new one when none is idle), the caller's until
        :meth:`return_duckdb_process`: each query borrows one, and so does a neighbor search, which builds its
        neighbors in it (a process already started spares the search a process start)."""
        with self._idle_lock:
            return self._duckdb_idle.pop() if self._duckdb_idle else DuckdbProcess()

    def return_duckdb_process(self, process: DuckdbProcess) -> None:
        """Give back a borrowed process; one that was killed or died is dropped."""
        if process.alive:
            with self._idle_lock:
                self._duckdb_idle.append(process)

    def explain(self, sql: str, timeout_ms: int | None = None, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) \
            -> Plan | None:
        """The engine's plan for ``sql``, estimated only (a query is never run for its plan: no ANALYZE), within
        ``timeout_ms`` (the adapter's timeout when None) and, on DuckDB, the memory bound of ``max_bytes``.

        SQLite: ``EXPLAIN QUERY PLAN`` operators, no cost. PostgreSQL: ``EXPLAIN (FORMAT JSON)``, its node types
        and the root's estimated total cost. DuckDB: ``EXPLAIN (FORMAT JSON)``, its operators and, as the cost,
        the estimated rows summed over the operators (DuckDB reports no cost of its own), planned in the
        adapter's bounded DuckDB process as its queries run: DuckDB's planner computes constant expressions
        (``length(repeat('x', 350000000))``), which in this process took 700 MB. Operator names are put in
        SQLite's words (``SCAN``, ``SEARCH`` for index access, ``HASH``, ``NESTED LOOP``, ``SORT``).
        """
        prefix = {"sqlite": "EXPLAIN QUERY PLAN ", "postgres": "EXPLAIN (FORMAT JSON) ",
                  "duckdb": PLAN_PREFIX}.get(self.dialect)
        if prefix is None:
            return None
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        if self._duckdb_database is not None:
            planned = self._execute_duckdb(Request(self._duckdb_database, prefix + _strip_terminator(sql), timeout,
                                                   16, max_bytes, max_bytes))
            if planned.relation is None or not planned.relation.height:
                return None
            return plan_of(self.dialect, planned.relation.frame.rows())
        statement = prefix + _strip_terminator(sql)
        try:
            if self.dialect == "postgres":
                assert self.engine is not None, "a PostgreSQL adapter has an engine"
                with postgres.session(self.engine, timeout) as (raw, _):
                    rows = postgres.explain(raw, statement)
            elif self._sqlite is not None:  # preparing it may take long: SqliteConnections.run
                rows = self._sqlite.run(statement, timeout, 0, lambda connection, _: _fetch_all(connection, statement))
            else:
                with self._session(timeout) as (connection, _):
                    rows = _fetch_all(connection, statement)
        except (*_sqlalchemy_errors("SQLAlchemyError"), *self._driver_errors, *_OUT_OF_MEMORY):
            return None
        return plan_of(self.dialect, rows)

    @property
    def database_file(self) -> str | None:
        """The file a SQLite or DuckDB adapter reads (None for a server, an in-memory database or a neighbor):
        what its results depend on, with the file's size and times, in the expected-result cache."""
        if self.neighbor_process is not None:
            return None
        if self._sqlite_path is not None:
            return str(self._sqlite_path)
        return self._duckdb_database if self._duckdb_database not in (None, ":memory:") else None

    def version(self) -> str:
        """What changes whenever the database's content may have changed, read without reading the content: a
        SQLite or DuckDB file's :func:`~sqlcmp_dagster.engine.atomic.file_state` (its version and its write-ahead
        log's); a server's or a neighbor's :meth:`fingerprint` (its address). The key of what one process keeps
        per database (the neighbor search's schema and sample rows), which :meth:`fingerprint` keyed by the file's
        bytes: reading a 1 GB file whole took 1.4-2.1 s of the first case that searched
        (``benchmarks/large_database.py``), to tell a copy from the original, which only what outlives the
        process needs."""
        file = self.database_file
        if file is None:
            return self.fingerprint()
        return repr(file_state(file))

    def fingerprint(self, store: DigestStore | None = None) -> str:
        """A content hash of the database: what a cached result depends on besides the case itself. A SQLite or
        DuckDB file's is its bytes' and its write-ahead log's when that holds anything (:func:`database_fingerprint`,
        which the cache's keys hold too), read from ``store`` (a cache folder) while the file's state on disk is
        the one it was stored for, so that a new process (a Dagster step) does not read a large file whole again;
        a server's, its address's. A DuckDB file's used to be its address's: a file edited in place kept its cached
        schema (the neighbor search then built neighbors without the new column) and its cases their Dagster data
        version; a SQLite file's used to leave its log out, so a write sitting there kept them too."""
        file = self.database_file
        if file is not None:
            digest = database_fingerprint(file, store)
            if digest is None:
                raise FileNotFoundError(errno.ENOENT, "the database file is gone or cannot be read", file)
            return digest
        return hashlib.sha256(self.identifier.encode()).hexdigest()[:16]

    def close(self) -> None:
        with self._idle_lock:
            processes, self._duckdb_idle = self._duckdb_idle, []
        for process in processes:
            process.stop()
        if self._sqlite is not None:
            self._sqlite.close()
        if self.engine is not None:
            self.engine.dispose()

    @contextmanager
    def _session(self, timeout_ms: int, max_cell_bytes: int = 0) -> Iterator[tuple[Any, Progress | None]]:
        """A DBAPI connection of its own (not PostgreSQL's: :func:`~.sandbox.postgres.session`) in a transaction
        that is always rolled back, with the engine's own interruption armed, and on SQLite the
        :class:`~.sandbox.sqlite.Progress` its statements make: a SQLite file or neighbor gets one of the
        adapter's kept sandboxed connections (:class:`~.sandbox.sqlite.SqliteConnections`), on which no value may
        grow past ``max_cell_bytes`` (when given); a DuckDB engine's connection gets the watchdog's interrupt."""
        if self._sqlite is not None:
            with self._sqlite.session(timeout_ms, max_cell_bytes) as session:
                yield session
            return
        assert self.engine is not None, "an adapter without SQLite connections has an engine"
        with self.engine.connect() as connection:
            driver = connection.connection.driver_connection
            assert driver is not None, "a connection checked out of the engine holds its driver's"
            with interrupt_after(driver.interrupt, timeout_ms) if self.dialect == "duckdb" else _noop():
                transaction = connection.begin()
                try:
                    yield connection.connection, None
                finally:
                    transaction.rollback()


#: Names that read the clock or chance in SQLite, DuckDB or PostgreSQL (functions, the ``CURRENT_*`` keywords,
#: ``'now'`` and its kin as a date's text, DuckDB's and PostgreSQL's sampling), matched as words of the query's
#: text (in a string or a comment too: a result not kept costs only time), as are the catalog functions
#: (:data:`_CATALOG_PREFIXES`: ``duckdb_settings()`` reads ``HOME`` and the machine's cores). SQLite's own calls
#: are also noted as its authorizer sees them (:data:`~.sandbox.sqlite.CLOCK_AND_CHANCE`); a DuckDB file's views,
#: macros and generated columns are asked of the file (``ExecutionAdapter._duckdb_catalog``).
_CLOCK_OR_CHANCE_WORDS = frozenset({
    "random", "randomblob", "rand", "setseed", "uuid", "uuidv4", "uuidv7", "gen_random_uuid", "now", "today",
    "tomorrow", "yesterday", "current_date", "current_time", "current_timestamp", "current_localtime",
    "current_localtimestamp", "localtime", "localtimestamp", "get_current_time", "get_current_timestamp",
    "transaction_timestamp", "statement_timestamp", "clock_timestamp", "timeofday", "changes", "total_changes",
    "last_insert_rowid", "current_setting", "txid_current", "current_transaction_id", "nextval", "currval",
    "sample", "tablesample", "vector_type", "current_query_id", "current_connection_id", "random_normal"})
#: A call of ``age`` (words alone would take every column named so): with one argument DuckDB and PostgreSQL count
#: from today's date (``age(TIMESTAMP '2000-01-01')``: a review's finding).
_CLOCK_CALLS = re.compile(r"\bage\s*\(")
#: The beginnings of the catalog functions' names, each of which reads the environment or the engine's state.
_CATALOG_PREFIXES = ("duckdb_", "pragma_")
#: A word of a query's text (a word as ``\b`` bounds it).
_WORD = re.compile(r"\w+")


#: What :meth:`ExecutionAdapter._duckdb_catalog` asks a DuckDB file: how many views, macros and tables whose
#: definition names the clock or chance (a generated column's ``age(x)`` too) it holds, and its engine's time zone.
_DUCKDB_CATALOG = ("SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'view') + (SELECT count(*) FROM "
                   "duckdb_functions() WHERE NOT internal AND function_type IN ('macro', 'table_macro')) + (SELECT "
                   "count(*) FROM duckdb_tables() WHERE regexp_matches(sql, '\\b(?:"
                   + "|".join(sorted(_CLOCK_OR_CHANCE_WORDS)) + "|" + "|".join(f"{p}\\w+" for p in _CATALOG_PREFIXES)
                   + f")\\b|{_CLOCK_CALLS.pattern}', 'i')), current_setting('TimeZone')")


def reads_clock_or_chance(sql: str, calls: Collection[str] = ()) -> bool:
    """Whether a query may give another result when it runs again on the same database: it names the clock or
    chance (:data:`_CLOCK_OR_CHANCE_WORDS`), or, on SQLite, called one of :data:`~.sandbox.sqlite.CLOCK_AND_CHANCE`
    (``calls``: what its authorizer saw, :func:`~.sandbox.sqlite.calls_noted`).

    >>> reads_clock_or_chance("SELECT name FROM t"), reads_clock_or_chance("SELECT date('NOW')")
    (False, True)
    >>> reads_clock_or_chance("SELECT * FROM v", calls={"strftime"})  # a view that reads the clock
    True
    >>> reads_clock_or_chance("SELECT age FROM t"), reads_clock_or_chance("SELECT age (TIMESTAMP '2000-01-01')")
    (False, True)
    """
    if not CLOCK_AND_CHANCE.isdisjoint(calls):
        return True
    # the words looked up in a set, not one pattern of alternatives: 8 us a Spider query against 22, asked at every
    # execution on a database file (``ExecutionAdapter._unstable``)
    lowered = sql.lower()
    words = set(_WORD.findall(lowered))
    return not words.isdisjoint(_CLOCK_OR_CHANCE_WORDS) or any(word.startswith(_CATALOG_PREFIXES) for word in words) \
        or ("age" in words and _CLOCK_CALLS.search(lowered) is not None)


def database_file_of(target: str) -> Path | None:
    """The file an adapter over ``target`` (what :func:`resolve_database` gives) reads, resolved as the adapter
    resolves it (a link followed): a SQLite or DuckDB path or ``sqlite:///``/``duckdb:///`` URL; None for a server
    or an in-memory database, and for text that is no URL at all (opening it fails, and its cases' reports say
    why). Read without opening anything (``--resume`` stamps a case's files by it).

    >>> database_file_of("postgresql://user@host/db") is None
    True
    >>> database_file_of("no url://at all") is None
    True
    >>> database_file_of("sqlite:///%00x") is None  # a NUL byte, once decoded
    True
    """
    if "://" not in target:
        try:
            return Path(target).resolve()
        except (OSError, RuntimeError, ValueError):  # untrusted text: a NUL, a link's loop
            return None
    import sqlalchemy as sa  # a URL's backend and file, as the adapter reads them (only where a URL is given)

    try:
        url = sa.make_url(target)
        if url.get_backend_name() in ("sqlite", "duckdb") and url.database and url.database != ":memory:":
            return Path(url.database).resolve()
    except (sa.exc.ArgumentError, OSError, RuntimeError, ValueError):
        return None
    return None


def resolve_database(db: str, db_dir: Path | None) -> str:
    """Turn a suite's ``db`` (a URL, a SQLite path, or a db id under ``db_dir``) into an adapter target.

    A db id looks for ``DIR/<id>/<id>.sqlite`` (the Spider and BIRD layout), then ``DIR/<id>.sqlite``,
    ``DIR/<id>.db`` and ``DIR/<id>.duckdb``. Under ``db_dir`` an id names a database in that folder: one that is
    a path of its own (absolute, with a separator, or ``..``) is refused with a ValueError, so that a suite's case
    cannot read a file elsewhere by naming it (``"db": "../other/secret"``).

    >>> resolve_database("../secret", Path("databases"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: database '../secret' is not a db id under databases: an id names a database in that folder ...
    """
    if "://" in db:
        return db
    if db_dir is not None:
        if not db or db in (".", "..") or "/" in db or "\\" in db:  # an absolute path holds a separator too
            raise ValueError(f"database {db!r} is not a db id under {db_dir}: an id names a database in that "
                             "folder (no path separator, no '..')")
        candidates = (db_dir / db / f"{db}.sqlite", db_dir / f"{db}.sqlite", db_dir / f"{db}.db",
                      db_dir / f"{db}.duckdb", db_dir / db)
        for candidate in candidates:
            if candidate.is_file():
                return str(candidate)
        raise FileNotFoundError(f"database {db!r} not found under {db_dir}")
    if Path(db).is_file():
        return db
    raise FileNotFoundError(f"database {db!r} is neither a URL nor an existing file (no --db-dir given)")


@contextmanager
def _noop() -> Iterator[None]:
    yield


class _NoRows(Exception):
    """The statement ran but produced no result set (it was not a query)."""


def _create_engine(url: str | sa.URL, **options: Any) -> sa.Engine:
    """A SQLAlchemy engine without a pool (each session its own connection)."""
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    return sa.create_engine(url, poolclass=NullPool, **options)


def _sqlalchemy_errors(name: str) -> tuple[type[BaseException], ...]:
    """SQLAlchemy's exception class ``name`` (``DBAPIError``, ``SQLAlchemyError``) for an ``except`` clause; none
    while it is not defined, when nothing can have raised one: SQLAlchemy not imported, or being imported by
    another thread (``sqlalchemy.exc`` is in ``sys.modules`` before its classes are). SQLAlchemy is imported only
    by an adapter that needs an engine (a server, DuckDB, a database given as a URL): about 0.17 s of every
    process start that reads SQLite files only."""
    error = getattr(sys.modules.get("sqlalchemy.exc"), name, None)
    return (error,) if error is not None else ()


def _db_message(failure: BaseException) -> str:
    """A SQLAlchemy ``DBAPIError``'s message: the driver's own error, else the first line of SQLAlchemy's."""
    original = getattr(failure, "orig", None)
    return str(original).strip() if original is not None else str(failure).splitlines()[0]


#: What a plan that ran out of memory raises (SQLite's heap limit): no plan, as for any other failure of it.
_OUT_OF_MEMORY: tuple[type[BaseException], ...] = (MemoryError,)


def _fetch_all(connection: Any, statement: str) -> list[Any]:
    """Every row of ``statement`` on a DBAPI ``connection``, its cursor closed after."""
    cursor = connection.cursor()
    try:
        cursor.execute(statement)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _strip_terminator(sql: str) -> str:
    return sql.strip().rstrip(";").strip()
