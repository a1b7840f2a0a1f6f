"""PostgreSQL's sandbox: every wall between an untrusted query and the server, in one module.

Guarantees, each of which holds without the statement gate (:mod:`.gate`) in front of it:

- **One statement.** Every statement made of the query's text (the column probe, the cursor's ``DECLARE``,
  ``EXPLAIN``) is sent in the extended query protocol (psycopg 3, ``prepare=True`` or a server-side cursor),
  in which the server refuses a second statement (``cannot insert multiple commands into a prepared
  statement``): ``) s; COMMIT; ALTER ROLE ...`` is an error, never a committed change.
- **Read only, always rolled back.** Each query runs in a transaction opened ``READ ONLY`` on a connection
  whose session default is read only too (``default_transaction_read_only``, set when it connects), with
  ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout`` at the query's timeout,
  and the transaction is rolled back.
- **A role that cannot reach past its tables.** A superuser, a replication role, a member of a predefined role
  that reads or writes server files, runs programs, signals other backends or reads or writes every table
  (``pg_read_all_data``), and any role that can read ``pg_authid`` is refused (:func:`role_check`) unless the
  operator opts in. Role-level defaults that should back the session's own (``ALTER ROLE ... SET``) are
  checked when the adapter connects and each missing one is named.
- **A cancel that cannot be ignored.** At the query's timeout the watchdog cancels the statement; a backend
  still busy :data:`TERMINATE_GRACE_MS` later (a function that catches ``query_canceled``) is terminated from
  a second connection of the same role (:func:`session`), and :data:`ABANDON_AFTER_MS` after the timeout the
  client shuts its socket down, so a case ends within its timeout and 1.5 s even while a backend deep in work
  between two interrupt checks has not yet honoured the terminate (it ends at its next check).
- **Bounded transfer.** Values longer than ``max_cell_bytes`` and rows larger than ``max_result_bytes`` are
  cut on the server (:class:`PostgresShape`), and no ``FETCH`` starts past the deadline.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlcmp_dagster.engine.sandbox.bounds import CROSSING_CELL_CHARS, CutBytes, CutText, Fetched, fetch_bounded, \
    interrupt_after

if TYPE_CHECKING:
    import sqlalchemy as sa

#: PostgreSQL predefined roles whose members reach past the evaluated tables: server files and programs, other
#: backends, every table of the database (``pg_read_all_data`` reads ``pg_authid``'s password hashes).
PRIVILEGED_PG_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                       "pg_signal_backend", "pg_read_all_data", "pg_write_all_data")
#: How long after the cancel a backend that is still busy is terminated.
TERMINATE_GRACE_MS = 1_000
#: How long after the cancel the client stops waiting for a backend (its socket shut down): the case then ends
#: as a timeout while the terminated backend finishes dying on the server.
ABANDON_AFTER_MS = 1_500
#: The role-level settings of docs/security.md's recipe (``ALTER ROLE ... SET``): the value each must not have
#: (the server's default) and the one the recipe gives it.
ROLE_DEFAULTS = {"default_transaction_read_only": ("off", "on"), "statement_timeout": ("0", "'60s'"),
                 "lock_timeout": ("0", "'10s'"), "idle_in_transaction_session_timeout": ("0", "'60s'"),
                 # the server's temporary files of one query (a hostile sort wrote 1.8 GB in 10 s); only a
                 # superuser may set it, so no session of the role can
                 "temp_file_limit": ("-1", "'1GB'"),
                 # the server log takes each failing query's error message, which may quote what the query
                 # computed (100 MB a query: CAST(repeat('x', 100000000) AS integer)) and outlives the case;
                 # only a superuser may set it
                 "log_min_messages": ("warning", "fatal")}
#: Who the adapter's sessions are in ``pg_stat_activity``: an administrator finds (or ends) them by this name.
APPLICATION_NAME = "sqlcmp"


class PrivilegedRoleError(ValueError):
    """The database role may reach past the evaluated tables (superuser, replication, server files, signalling,
    every table's data)."""


class RoleDefaultsWarning(UserWarning):
    """The role lacks one of the role-level defaults of :data:`ROLE_DEFAULTS` (said when the adapter connects)."""


class ConnectionLost(RuntimeError):
    """The query's connection was ended from outside twice (a sibling's ``pg_terminate_backend``, a server
    restart): an engine fault of the case, never the model's failure."""


def sandbox_url(url: sa.URL) -> sa.URL:
    """``url`` with psycopg 3 as its driver, whatever driver it named: the sandbox needs the extended query
    protocol, which psycopg2 never uses for a statement without parameters."""
    try:
        import psycopg  # noqa: F401 - only whether it is there
    except ImportError as error:
        raise ImportError("the PostgreSQL sandbox needs psycopg 3 (pip install 'sqlcmp-dagster[postgres]'), "
                          "whatever driver the URL names") from error
    return url.set(drivername="postgresql+psycopg")


def connect_args() -> dict[str, Any]:
    """What each connection of the adapter's engine is opened with: read-only transactions by default for the
    whole session (a transaction after an injected ``COMMIT`` would be read only too) and its name."""
    return {"application_name": APPLICATION_NAME, "options": "-c default_transaction_read_only=on"}


def role_check(engine: sa.Engine) -> tuple[list[str], list[str]]:
    """What makes the engine's role privileged (empty for a role fit for untrusted SQL) and the role-level
    defaults of :data:`ROLE_DEFAULTS` it lacks (each a sentence; set them with ``ALTER ROLE ... SET``).

    Privileged: superuser, replication, membership (direct or inherited) in one of :data:`PRIVILEGED_PG_ROLES`,
    or SELECT on ``pg_authid`` however it was granted."""
    with engine.connect() as connection:
        row = connection.exec_driver_sql(
            "SELECT rolsuper, rolreplication, has_table_privilege('pg_catalog.pg_authid', 'SELECT') "
            "FROM pg_roles WHERE rolname = current_user").one()
        members = connection.exec_driver_sql(
            "SELECT rolname FROM pg_roles WHERE rolname = ANY(%(names)s) "
            "AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY rolname",
            {"names": list(PRIVILEGED_PG_ROLES)}).scalars().all()
        settings = connection.exec_driver_sql(
            "SELECT unnest(setconfig) FROM pg_db_role_setting "
            "WHERE setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = current_user)) "
            "AND setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database())) "
            "ORDER BY setrole, setdatabase").scalars().all()
    if row[0]:
        return ["superuser"], []  # a member of every role: naming them adds nothing
    privileges = (["replication"] if row[1] else []) + [str(m) for m in members]
    if row[2] and not privileges:
        privileges.append("SELECT on pg_authid")
    configured = dict(str(item).split("=", 1) for item in settings if "=" in str(item))
    missing = [f"{name} is not set for the role (ALTER ROLE ... SET {name} = {recommended})"
               for name, (unset, recommended) in ROLE_DEFAULTS.items() if configured.get(name, unset) in (unset, "")]
    return privileges, missing


@dataclass
class Watch:
    """What the watchdog did to one session: ``terminated`` once it ended the backend (its error is then the
    query's timeout, not a lost connection)."""

    pid: int
    terminated: bool = False


@contextmanager
def session(engine: sa.Engine, timeout_ms: int) -> Iterator[tuple[Any, Watch]]:
    """A DBAPI connection of its own in a ``READ ONLY`` transaction that is always rolled back, under the
    query's timeouts, and the :class:`Watch` of its watchdog: the statement is cancelled at ``timeout_ms``
    and its backend terminated :data:`TERMINATE_GRACE_MS` later if it has not ended by then."""
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert driver is not None, "a connection checked out of the engine holds its driver's"
        watch = Watch(pid=int(driver.info.backend_pid))

        def terminate() -> None:
            watch.terminated = True
            threading.Thread(target=_terminate, args=(engine, watch.pid), name="sqlcmp-pg-terminate",
                             daemon=True).start()

        def abandon() -> None:
            # A backend deep in work that checks for interrupts rarely (json_agg over 300 MB) honours the
            # terminate only when it next checks: 45 s once. The client stops waiting for it.
            watch.terminated = True
            with contextlib.suppress(OSError):
                connection_socket = socket.socket(fileno=os.dup(driver.fileno()))
                connection_socket.shutdown(socket.SHUT_RDWR)
                connection_socket.close()

        # statement_timeout is per statement, and a query is several (the probe, DECLARE, a FETCH per batch):
        # the watchdog's cancel ends the whole within timeout_ms, the terminate ends what ignores it, and the
        # client stops waiting for a backend that has not ended by ABANDON_AFTER_MS.
        with interrupt_after(driver.cancel, timeout_ms), \
                interrupt_after(terminate, timeout_ms + TERMINATE_GRACE_MS), \
                interrupt_after(abandon, timeout_ms + ABANDON_AFTER_MS):
            transaction = connection.begin()
            try:
                timeout = int(timeout_ms)
                connection.exec_driver_sql("SET TRANSACTION READ ONLY")
                # the gate and its lexer read a backslash in a plain string as PostgreSQL's default does: literal
                # (a role or database default of off would make it an escape, and the text read differently)
                connection.exec_driver_sql("SET LOCAL standard_conforming_strings = on")
                connection.exec_driver_sql(f"SET LOCAL statement_timeout = {timeout}")
                connection.exec_driver_sql(f"SET LOCAL lock_timeout = {timeout}")
                connection.exec_driver_sql(
                    f"SET LOCAL idle_in_transaction_session_timeout = {timeout + TERMINATE_GRACE_MS}")
                yield connection.connection, watch
            finally:
                if not watch.terminated:
                    transaction.rollback()
                else:  # the backend is gone: nothing to roll back, and the rollback would fail
                    connection.invalidate()


def _terminate(engine: sa.Engine, pid: int) -> None:
    """End the backend ``pid`` (one of this role's sessions) from a connection of its own."""
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
    except Exception:  # noqa: BLE001 - the backend may be gone already; the client sees its own error either way
        pass


def fetch(raw: Any, sql: str, deadline: float, max_rows: int, max_bytes: int, max_cell_bytes: int) \
        -> tuple[list[str], Fetched]:
    """Run the query text ``sql`` (a :func:`~sqlcmp_dagster.engine.parsing.query_text`) on the DBAPI connection
    ``raw`` through a server-side cursor, cut on the server (:class:`PostgresShape`), and fetch its rows within
    the caps; no FETCH starts past ``deadline`` (a ``time.monotonic()`` instant)."""
    shape = postgres_shape(raw, sql)
    cursor = raw.cursor(name="sqlcmp_result")  # a server-side cursor: DECLARE in the extended protocol
    try:
        cursor.execute(shape.query(max_cell_bytes, max_bytes))
        merged = shape.rows(cursor, deadline)
        fetched = fetch_bounded(merged, max_rows, max_bytes, max_cell_bytes)
        if merged.crossed and not fetched.truncated:
            fetched = Fetched(fetched.rows, True, fetched.warnings + [
                f"result truncated at max_result_bytes={max_bytes:,}: the last row's values add up to more than "
                f"that, and the server sent them cut at {CROSSING_CELL_CHARS}"])
    finally:
        cursor.close()
    return shape.names, fetched


def explain(raw: Any, statement: str) -> list[tuple[Any, ...]]:
    """The rows of ``statement`` (an ``EXPLAIN`` of the query's text), sent in the extended protocol."""
    cursor = raw.cursor()
    try:
        cursor.execute(statement, prepare=True)
        return list(cursor.fetchall())
    finally:
        cursor.close()


#: PostgreSQL's message for a statement cancelled by the client (the watchdog's ``cancel``).
CANCELLED = "canceling statement due to user request"


def timeout_message(timeout_ms: int) -> str:
    """The error of a query the watchdog ended: cancelled, terminated, or past its deadline between FETCHes."""
    return f"interrupted at the query's timeout ({timeout_ms:,} ms for the query and all its fetches)"


def connection_lost(failure: BaseException) -> bool:
    """Whether ``failure`` (a driver's error, or SQLAlchemy's wrapping one) says the connection was ended or
    broken rather than the query failing: a sibling's ``pg_terminate_backend``, a server restart, a closed
    socket."""
    original = getattr(failure, "orig", None) or failure
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra installs it
        return False
    if isinstance(original, (psycopg.errors.AdminShutdown, psycopg.errors.CrashShutdown,
                             psycopg.errors.CannotConnectNow)):
        return True
    return isinstance(original, psycopg.OperationalError) and (
        getattr(original, "sqlstate", None) is None or str(getattr(original, "sqlstate", "")).startswith("08"))


#: PostgreSQL types whose values are at most a few dozen bytes: not cut. Not numeric (1700), which holds up to
#: 147,455 digits: a thousand columns of one, taken for a few KB, crossed as rows of 131 MB each and peaked at
#: 1.9 GB under the 64 MiB cap. It is measured and cut through its text like any other type.
_PG_FIXED_TYPES = frozenset({
    16, 18, 19, 20, 21, 23, 26, 700, 701, 790, 1082, 1083, 1114, 1184, 1186, 1266, 2950, 650, 869, 829,
})
#: PostgreSQL types measured and cut as they are; any other type is measured and cut through its text form.
_PG_TEXT_TYPES = frozenset({25, 1042, 1043})
_PG_BYTEA = 17


@dataclass(frozen=True)
class PostgresShape:
    """A PostgreSQL result's columns, and which of them may hold a value too long to transfer.

    :meth:`query` wraps the query ``sql`` (its :func:`~parsing.query_text`) so that the server sends, for a
    value of more than ``max_cell_bytes`` bytes, NULL in its column and the cut value in an extra column: the
    first ``max_cell_bytes`` characters (bytes of a bytea) and the marker :func:`~bounds.cut_cell` would write
    (full length, SHA-256 prefix), computed on the server, so the whole value never reaches this process.
    Other values, and their types, are as the query returned them. :meth:`rows` puts the cut values back.

    A row whose values (each counted up to ``max_cell_bytes``, as :func:`~bounds.fetch_bounded` counts them)
    add up to more than ``max_bytes`` is sent with each of them cut at :data:`~bounds.CROSSING_CELL_CHARS` and a
    last column saying so: :meth:`rows` ends the result with it, as :func:`~bounds.fetch_bounded` ends one with
    the row that crosses ``max_bytes``. Without it 600 values of a MiB each, every one under
    ``max_cell_bytes``, crossed the wire as one row of 628 MB.
    """

    sql: str
    names: list[str]
    cuttable: list[tuple[int, int]]  # (column index, type oid)

    def query(self, limit: int, max_bytes: int) -> str:
        if not self.cuttable:
            return self.sql
        columns = [f"c{i}" for i in range(len(self.names))]
        kept, cut, sizes = list(columns), [], []
        wide, small = f"sqlcmp_size > {max_bytes}", CROSSING_CELL_CHARS
        for index, oid in self.cuttable:
            value = columns[index] if oid in _PG_TEXT_TYPES or oid == _PG_BYTEA else f"{columns[index]}::text"
            too_long = f"octet_length({value}) > {limit}"  # read from the value's header: no scan
            # a value's size as fetch_bounded counts it: characters of text, bytes of binary
            size = f"octet_length({value})" if oid == _PG_BYTEA else f"char_length({value})"
            sizes.append(f"least(coalesce({size}, 0), {limit})::bigint")
            cut_small = f"{wide} AND {size} > {small}"
            kept[index] = f"CASE WHEN ({cut_small}) OR {too_long} THEN NULL ELSE {columns[index]} END"
            cut.append(f"CASE WHEN {cut_small} THEN {_pg_marker(value, oid, small)} "
                       f"WHEN {too_long} THEN {_pg_marker(value, oid, limit)} END")
        # OFFSET 0 keeps each subquery a query of its own, so each value is computed once, not once per use.
        return (f"SELECT {', '.join(kept + cut)}, {wide} FROM (SELECT *, {' + '.join(sizes)} AS sqlcmp_size "
                f"FROM (SELECT * FROM ({_wrapped(self.sql)}) AS sqlcmp_query OFFSET 0) "
                f"AS sqlcmp_cut({', '.join(columns)}) OFFSET 0) AS sqlcmp_sized")

    def rows(self, cursor: Any, deadline: float) -> _MergedCursor:
        """``cursor`` with each row's cut values put back in their columns (as :class:`~bounds.CutText` or
        :class:`~bounds.CutBytes`, which :func:`fetch_bounded` keeps as they are), ended with a row the server
        found too large, and no FETCH started past ``deadline`` (a ``time.monotonic()`` instant)."""
        return _MergedCursor(cursor, len(self.names), [index for index, _ in self.cuttable], deadline)


def _pg_marker(value: str, oid: int, limit: int) -> str:
    """The SQL of ``value`` cut on the server at ``limit`` characters (bytes of a bytea) with the marker
    :func:`~bounds.cut_cell` would write: the full length and a SHA-256 prefix of the whole value."""
    if oid == _PG_BYTEA:
        return (f"substring({value} from 1 for {limit}) || convert_to('…[cut at {limit} of ' || "
                f"octet_length({value}) || ' bytes, sha256 ' || left(encode(sha256({value}), 'hex'), 16) || ']', "
                "'UTF8')")
    return (f"left({value}, {limit}) || '…[cut at {limit} of ' || length({value}) || ' characters, sha256 ' || "
            f"left(encode(sha256(convert_to({value}, 'UTF8')), 'hex'), 16) || ']'")


class PastDeadline(Exception):
    """A PostgreSQL query's timeout passed between two of its FETCHes."""


@dataclass
class _MergedCursor:
    """A DBAPI cursor over a :class:`PostgresShape` query whose rows come back in the query's own columns.

    It ends with a row the server marked too large (``crossed`` then says so: the result is truncated there);
    only a wrapped query (one with ``cut_columns``) has that mark, as its last column. It starts no FETCH past
    ``deadline``: the watchdog's cancel ends a FETCH running at the query's timeout, but PostgreSQL drops a
    cancel that reaches the backend between two FETCHes (while this process works on a batch), and the next
    FETCH would then run as if none had come."""

    cursor: Any
    width: int
    cut_columns: list[int]
    deadline: float
    crossed: bool = False

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        if self.crossed:
            return []
        if time.monotonic() > self.deadline:
            raise PastDeadline()
        merged = []
        for row in self.cursor.fetchmany(size):
            values = list(row[:self.width])
            for index, cut in zip(self.cut_columns, row[self.width:]):
                if cut is not None:
                    values[index] = CutText(cut) if isinstance(cut, str) else CutBytes(bytes(cut))
            merged.append(tuple(values))
            if self.cut_columns and row[-1]:  # its values add up to more than max_bytes: sent cut small, the last
                self.crossed = True
                break
        return merged


def _wrapped(sql: str) -> str:
    """``sql`` (a :func:`~parsing.query_text`) as a subquery's text: on lines of its own, so that no comment in
    it reaches the parenthesis that closes it."""
    return f"\n{sql}\n"


def postgres_shape(raw: Any, sql: str) -> PostgresShape:
    """The columns of ``sql``, a :func:`~parsing.query_text` (planned, not run: ``LIMIT 0``). When that fails,
    the query does: the driver's error is raised as the query's own, and the query never runs unwrapped (it
    would send its values uncut)."""
    cursor = raw.cursor()
    try:
        # prepare=True: the extended query protocol, in which a second statement is the server's error
        cursor.execute(f"SELECT * FROM ({_wrapped(sql)}) AS sqlcmp_shape LIMIT 0", prepare=True)
        description = cursor.description or []
    finally:
        cursor.close()
    return PostgresShape(sql=sql, names=[str(column[0]) for column in description],
                          cuttable=[(i, int(column[1])) for i, column in enumerate(description)
                                    if int(column[1]) not in _PG_FIXED_TYPES])


