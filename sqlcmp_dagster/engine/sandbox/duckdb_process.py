"""DuckDB queries run in a child process whose memory is bounded by the operating system.

DuckDB's ``memory_limit`` covers its buffer manager only (its documentation's "Limits" page): the vectors a
query computes, 2,048 rows at a time, are not counted, so ``SELECT repeat('x', 1000000) FROM range(2000)``
holds 2 GB in one vector before the first row can be fetched, whatever the fetch does. The only bound that
holds is the operating system's: the query runs in a child process under ``RLIMIT_DATA`` (the process's
private writable memory), set from ``max_result_bytes`` (:func:`memory_bound`). Past it DuckDB fails with its
own out-of-memory error, reported as ``result_too_large``; a process that hangs past its timeout, or dies, is
killed and replaced, and the parent stays untouched.

The child runs this file as a script: it imports DuckDB and the sibling :mod:`bounds` only (not the package,
whose import takes seconds), and answers requests one at a time, as tuples of built-in values pickled over its
stdin and stdout, until its stdin closes. The adapter keeps its processes and reuses them, so a query costs a
connection, as in-process, not a process start.

Neighbor databases (:mod:`~sqlcmp_dagster.engine.neighbors`) live in the child too: the search writes each
neighbor into the child's in-memory :data:`NEIGHBOR_DATABASE` (:meth:`DuckdbProcess.build`) and queries it
like a file, under the same bounds, so a query that behaves on the user's database and explodes on a small
neighbor fails there with the same named reason instead of in the comparing process.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

if __package__:
    from sqlcmp_dagster.engine.sandbox.bounds import Fetched, bounded_message, fetch_bounded, interrupt_after
else:  # the child, run as a script beside bounds.py
    from bounds import (  # type: ignore[import-not-found,no-redef]
        Fetched, bounded_message, fetch_bounded, interrupt_after)

#: DuckDB settings of every connection, applied when the read-only file is opened and then locked: no file,
#: URL or extension access (``read_text``, ``glob``, ``COPY``, ``ATTACH``, httpfs, ``FROM 'file.csv'``), no
#: extension installed or loaded behind the query's back, no ``SET`` or ``enable_logging`` that changes them. The
#: home folder DuckDB would name (``current_setting('secret_directory')``, the extension folder in an error) is one
#: that names nothing of the machine: a query can read no file there anyway, and need not learn the user's.
DUCKDB_SANDBOX = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "home_directory": "/nonexistent",
    "lock_configuration": True,
}
#: Memory a DuckDB query may use beyond its process's footprint when it starts, besides what its result needs.
ENGINE_MEMORY_BYTES = 256 << 20
#: How many times ``max_result_bytes`` a query's process may hold for its result: a kept cell costs a Python
#: object (a small integer about 30 bytes where ``max_result_bytes`` counts 8), plus its pickled copy.
RESULT_MEMORY_FACTOR = 8
#: Seconds the parent waits past a query's timeout for the child's own interrupt before killing the child.
KILL_MARGIN_S = 5.0
#: The ``database`` of a :class:`Request` for the child's in-memory neighbor database.
NEIGHBOR_DATABASE = ":sqlcmp-neighbor:"
#: Seconds the parent waits for one write to a neighbor (rows the search built itself, never a query's text).
BUILD_TIMEOUT_S = 60.0


def memory_bound(max_result_bytes: int) -> int:
    """Bytes a DuckDB query's process may allocate beyond its footprint when the query starts.

    >>> memory_bound(64 << 20) >> 20
    768
    """
    return ENGINE_MEMORY_BYTES + RESULT_MEMORY_FACTOR * max_result_bytes


@dataclass(frozen=True)
class Request:
    """One query for the child: where, what, and its bounds."""

    database: str
    sql: str
    timeout_ms: int
    max_rows: int
    max_bytes: int
    max_cell_bytes: int


@dataclass(frozen=True)
class Answer:
    """The child's answer. ``outcome`` is ``ok`` (``names`` and ``fetched`` set), ``no_rows`` (the statement
    returned no result set), ``refused`` (not one query as DuckDB reads it), ``error`` (DuckDB's or the driver's
    message), ``memory`` (past :func:`memory_bound`), ``timeout`` (killed past its timeout) or ``died`` (the child
    ended without an answer; ``message`` has its exit status)."""

    outcome: str
    message: str = ""
    names: list[str] | None = None
    fetched: Fetched | None = None


class DuckdbProcess:
    """A child process answering DuckDB queries one at a time; started on first use, killed when it hangs past
    a query's timeout, dies, or ran out of memory (a process that did is not trusted again)."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None
        self._requests: Connection | None = None
        self._answers: Connection | None = None

    def run(self, request: Request) -> Answer:
        """Send ``request`` and wait for its answer, at most its timeout plus :data:`KILL_MARGIN_S`."""
        if self._child is None or self._child.poll() is not None:
            self._start()
        assert self._requests is not None and self._answers is not None and self._child is not None
        try:
            self._requests.send(("query", asdict(request)))
            if not self._answers.poll(request.timeout_ms / 1000 + KILL_MARGIN_S):
                self.stop()
                return Answer("timeout", f"the query did not stop within its timeout of {request.timeout_ms} ms; "
                                         "its DuckDB process was killed")
            outcome, message, names, rows, truncated, warnings = self._answers.recv()
        except (EOFError, OSError):
            status = self.stop()
            return Answer("died", f"the DuckDB process running the query ended without an answer "
                                  f"(exit status {status})")
        if outcome == "memory":
            self.stop()
        fetched = Fetched(rows, truncated, warnings) if rows is not None else None
        return Answer(outcome, message, names, fetched)

    def build(self, sql: str, params: Any = (), *, max_bytes: int) -> str | None:
        """Run one statement that builds the child's neighbor database (DDL or ``INSERT`` with ``params``; an
        empty ``sql`` empties it); DuckDB's message when it refuses the statement, else None. ``max_bytes`` is
        the ``max_result_bytes`` of the queries to come, which sets the neighbor database's ``memory_limit``
        as a file's (:func:`answer`) when this opens it."""
        if self._child is None or self._child.poll() is not None:
            self._start()
        assert self._requests is not None and self._answers is not None
        try:
            self._requests.send(("build", sql, params, max_bytes))
            if self._answers.poll(BUILD_TIMEOUT_S):
                failure: str | None = self._answers.recv()
                return failure
        except (EOFError, OSError):
            pass
        return f"the DuckDB process building the neighbor database ended (exit status {self.stop()})"

    @property
    def alive(self) -> bool:
        """Whether the child can take another query (a killed or exited one is not kept by the adapter)."""
        return self._child is not None and self._child.poll() is None

    def stop(self) -> int | None:
        """Kill the child (if running) and reap it; its exit status."""
        for connection in (self._requests, self._answers):
            if connection is not None:
                connection.close()
        self._requests = self._answers = None
        child, self._child = self._child, None
        if child is None:
            return None
        if child.poll() is None:
            child.kill()
        status = child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
        return status

    def _start(self) -> None:
        self.stop()
        child = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
        assert child.stdin is not None and child.stdout is not None
        self._child = child
        self._requests = Connection(os.dup(child.stdin.fileno()), readable=False)
        self._answers = Connection(os.dup(child.stdout.fileno()), writable=False)


class Neighbor:
    """The child's in-memory neighbor database (:data:`NEIGHBOR_DATABASE`), opened at the first write with the
    settings of a file's connection and kept from one neighbor to the next (opening a DuckDB takes tens of
    milliseconds): the search empties it between neighbors."""

    def __init__(self, duckdb: Any) -> None:
        self.duckdb = duckdb
        self.connection: Any = None

    def build(self, sql: str, params: Any, max_bytes: int) -> str | None:
        """Run one building statement (an empty ``sql`` drops every table, children first); DuckDB's message
        when it refuses it."""
        try:
            if self.connection is None:
                self.connection = self.duckdb.connect(":memory:", config=settings(max_bytes))
            if sql:
                self.connection.execute(sql, params)
                return None
            tables = self.connection.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_oid DESC")
            for (table,) in tables.fetchall():
                self.connection.execute(f'DROP TABLE "{table.replace(chr(34), chr(34) * 2)}"')
            return None
        except (self.duckdb.Error, OverflowError, ValueError, TypeError) as failure:
            return str(failure).strip() or type(failure).__name__

    def cursor(self) -> Any:
        """A connection to the neighbor database in a transaction that closing it rolls back."""
        if self.connection is None:
            raise self.duckdb.CatalogException("no neighbor database has been built in this process")
        cursor = self.connection.cursor()
        cursor.execute("BEGIN TRANSACTION")
        return cursor


def settings(max_bytes: int) -> dict[str, Any]:
    """A DuckDB connection's settings for queries bounded by ``max_bytes``: the sandbox, DuckDB's own
    ``memory_limit`` at half of :func:`memory_bound`, and no temporary directory."""
    return dict(DUCKDB_SANDBOX, memory_limit=f"{memory_bound(max_bytes) >> 21}MiB", temp_directory="")


def answer(duckdb: Any, request: Request, neighbor: Neighbor | None = None) -> Answer:
    """Run ``request`` in this process (the child) under :func:`memory_bound` of its ``max_bytes``, on
    ``neighbor`` when the request names :data:`NEIGHBOR_DATABASE`.

    The limit is set after the connection opens (DuckDB's threads and their stacks are then in place), at the
    process's private memory plus the bound, and lifted once the result is fetched; DuckDB's own
    ``memory_limit`` is half the bound, so its buffer-managed operators (sorts, hash tables) fail by themselves
    before the process limit is reached. They never spill: no temporary directory (by default DuckDB would
    create one beside the database file).
    """
    refusal = _not_one_query(duckdb, request.sql)
    if refusal is not None:
        return Answer("refused", refusal)
    bound = memory_bound(request.max_bytes)
    in_memory = request.database in ("", ":memory:")
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    try:
        if request.database == NEIGHBOR_DATABASE and neighbor is not None:
            connection = neighbor.cursor()
        else:
            connection = duckdb.connect(request.database or ":memory:", read_only=not in_memory,
                                        config=settings(request.max_bytes))
    except duckdb.Error as failure:
        return Answer("error", str(failure).strip())
    try:
        limit = _private_bytes() + bound
        resource.setrlimit(resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard),
                                                  hard))
        with interrupt_after(connection.interrupt, request.timeout_ms):
            connection.execute(request.sql)
            fetched = fetch_bounded(connection, request.max_rows, request.max_bytes, request.max_cell_bytes)
        if connection.description is None:
            return Answer("no_rows")
        return Answer("ok", names=[str(column[0]) for column in connection.description], fetched=fetched)
    except (duckdb.OutOfMemoryException, MemoryError) as failure:
        return Answer("memory", str(failure).strip().splitlines()[0] if str(failure).strip() else "MemoryError")
    except duckdb.Error as failure:
        return Answer("error", str(failure).strip())
    except (ValueError, OverflowError, UnicodeError, TypeError) as failure:  # conversions to Python values
        return Answer("error", f"{type(failure).__name__}: {failure}")
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
        connection.close()


#: How ``ExecutionAdapter.explain`` asks DuckDB for a query's plan: the one EXPLAIN the query process runs.
PLAN_PREFIX = "EXPLAIN (FORMAT JSON) "


def _not_one_query(duckdb: Any, sql: str) -> str | None:
    """Why DuckDB must not run ``sql``, as DuckDB's own parser reads it (the engine-side twin of the gate's single
    query rule), or None: it must be one SELECT statement, or :data:`PLAN_PREFIX` before one. DuckDB runs some
    queries as several statements (``MULTI``): a ``PIVOT`` without an ``IN`` list first creates a type of the
    values it finds (a review's finding: ``SELECT * FROM (PIVOT t ON b)`` passed the gate and ran that DDL); and
    ``EXPLAIN ANALYZE`` runs whatever statement it explains (a second review's). Text DuckDB cannot parse is left
    to the query's own run, which names the error."""
    try:
        kinds = _kinds(duckdb, sql)
        if kinds == ["EXPLAIN"] and sql.startswith(PLAN_PREFIX):
            kinds = _kinds(duckdb, sql[len(PLAN_PREFIX):])
    except duckdb.Error:
        return None
    if kinds == ["SELECT"]:
        return None
    hint = " (a PIVOT without an IN list creates a type first: name its values with ON column IN (...))" \
        if "MULTI" in kinds else ""
    return f"not run: DuckDB reads the query as {', '.join(kinds) or 'no statement'}, not as one SELECT{hint}"


def _kinds(duckdb: Any, sql: str) -> list[str]:
    """The kinds of the statements DuckDB's parser reads in ``sql`` (``SELECT``, ``EXPLAIN``, ``MULTI``, ...)."""
    return [str(statement.type).rsplit(".", 1)[-1] for statement in duckdb.extract_statements(sql)]


def _private_bytes() -> int:
    """This process's data size as ``RLIMIT_DATA`` counts it (``VmData``: private writable mappings)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    """The child's loop: requests from stdin, answers to stdout (which nothing else may write to: the real
    stdout is handed over and file descriptor 1 pointed at stderr)."""
    import duckdb

    requests = Connection(0, writable=False)
    answers = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    neighbor = Neighbor(duckdb)
    while True:
        try:
            kind, *body = requests.recv()
        except EOFError:
            return
        if kind == "build":
            answers.send(neighbor.build(*body))
            continue
        reply = answer(duckdb, Request(**body[0]), neighbor)
        fetched = reply.fetched
        # bounded here too, so that a 50 MB message is not copied through the pipe first
        answers.send((reply.outcome, bounded_message(reply.message), reply.names, fetched and fetched.rows,
                      fetched is not None and fetched.truncated, fetched.warnings if fetched else []))
        if reply.outcome == "memory":
            return


if __name__ == "__main__":
    main()
