"""SQLite's sandbox: every wall between an untrusted query and a SQLite file, in one module.

Guarantees, each of which holds without the statement gate (:mod:`.gate`) in front of it:

- **Read only.** The file is opened ``mode=ro`` with ``query_only`` set, and :func:`sqlite_authorizer`
  denies, as each statement is prepared, everything but reads, function calls off the deny list, read-only
  pragmas and the session's own transaction statements: ``ATTACH`` (which opens, even creates, any file),
  a pragma that sets something, temporary objects and every write fail with ``not authorized``.
- **Bounded.** No value may grow past ``max_cell_bytes`` (``SQLITE_LIMIT_LENGTH``), no row past
  ``max_result_bytes`` (the limit narrowed for a wide result: :func:`narrow_for_width`), and the query is
  interrupted at its timeout from inside the VM loop (the progress handler) and from the watchdog thread
  (:func:`sqlite_deadline`). An interrupt waits for the VM step it finds to end, a function call is one step and
  preparing the statement is none: ``printf``, which ran on past the length limit, is bounded here
  (:func:`_bounded_printf`), and a statement runs in a thread its case stops waiting for half a second after the
  timeout (:meth:`SqliteConnections.run`), but one the database ran quickly before calling only
  :data:`LINEAR_FUNCTIONS`; the step itself runs on there until it ends. SQLite's memory in the process is bounded
  at :data:`HEAP_LIMIT_BYTES`.
- **Measured the same everywhere.** The progress handler also counts the virtual-machine steps a session's
  statements take (:class:`Progress`): their cost as SQLite does it, the same on every machine and under any load.
- **Nothing outlives a query on a kept connection** (:class:`SqliteConnections`): the sandbox is set when a
  connection opens and no query can change it; the length limit is set for each query, the progress handler
  and watchdog are undone after it, and the rollback ends any transaction or savepoint it opened.
"""

from __future__ import annotations

import functools
import os
import queue
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast
from urllib.parse import quote

from sqlcmp_dagster.engine.sandbox.bounds import interrupt_after
from sqlcmp_dagster.engine.sandbox.gate import denied

T = TypeVar("T")

#: How many SQLite virtual-machine steps pass between two deadline checks: small enough to stop within a few ms.
PROGRESS_STEPS = 10_000
#: How long a connection waits for a lock another connection holds (a writer of the file, a neighbor's builder)
#: before its statement fails with "database is locked": the ``sqlite3`` module's default, named because it is a
#: time limit that a case's report can depend on (``pipeline`` keeps no report of a case that took this long).
BUSY_TIMEOUT_S = 5.0


def sqlite_read_only(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file at ``path`` that cannot write: opened ``mode=ro`` and ``query_only``,
    under :func:`sqlite_authorizer`. It keeps no prepared statement (``cached_statements=0``), so that every
    statement is prepared, and so authorized and its calls noted (:func:`calls_noted`), each time it runs: on a
    database file a text runs once or twice in a batch, so the cache saved nothing there."""
    return _sqlite_sandboxed(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, check_same_thread=False,
                                             timeout=BUSY_TIMEOUT_S, cached_statements=0))


def sqlite_memory_read_only(name: str) -> sqlite3.Connection:
    """A connection to the shared in-memory SQLite database ``name`` (``file:NAME?mode=memory&cache=shared``,
    alive while its builder holds a connection) that cannot write: the rules of :func:`sqlite_read_only`. It
    reads what its builder has not committed yet (``read_uncommitted``): a neighbor database is built in a
    transaction that is rolled back once its queries have run (:mod:`~sqlcmp_dagster.engine.neighbors.scratch`)."""
    connection = sqlite3.connect(f"file:{quote(name)}?mode=memory&cache=shared", uri=True, check_same_thread=False,
                                 timeout=BUSY_TIMEOUT_S)
    connection.execute("PRAGMA read_uncommitted = ON")
    return _sqlite_sandboxed(connection)


#: The most memory SQLite may hold in this process, all its connections together (``sqlite3_hard_heap_limit64``):
#: preparing a statement of nested common table expressions took 4.5 GB, and doubles with each level (a review's
#: finding); honest queries hold a few pages of cache per connection, their sorts and temporary tables spilling
#: to files past that. A statement that needs more fails with SQLite's "out of memory".
HEAP_LIMIT_BYTES = 1 << 30
_heap_bounded_in = 0  # the process that set the limit (a forked child inherits it)


def _bound_heap() -> None:
    """Set :data:`HEAP_LIMIT_BYTES` once per process, on a connection of its own (the sandbox's authorizer denies
    setting pragmas); a lower limit set before stays (the pragma only lowers it)."""
    global _heap_bounded_in
    if _heap_bounded_in == os.getpid():
        return
    setter = sqlite3.connect(":memory:")
    try:
        setter.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT_BYTES}")
    finally:
        setter.close()
    _heap_bounded_in = os.getpid()


def _sqlite_sandboxed(connection: sqlite3.Connection) -> sqlite3.Connection:
    _bound_heap()
    connection.execute("PRAGMA query_only = ON")
    connection.set_authorizer(sqlite_authorizer)
    # Text that is not valid UTF-8 comes back as replacement characters instead of failing the whole query.
    connection.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    for name in PRINTF_NAMES:
        connection.create_function(name, -1, _bounded_printf(connection), deterministic=True)
    return connection


def _star_of_columns(sql: str) -> bool:
    """Whether ``sql`` holds a ``*`` that may stand for columns (``SELECT *``, ``t.*``): any but one right after
    ``(`` and white space (``count(*)``). Each ``*`` looks back over the white space before it only.

    >>> _star_of_columns("SELECT count( *), a FROM t"), _star_of_columns("SELECT a * 2 FROM t")
    (False, True)
    """
    at = sql.find("*")
    while at >= 0:
        before = at - 1
        while before >= 0 and sql[before].isspace():
            before -= 1
        if before < 0 or sql[before] != "(":
            return True
        at = sql.find("*", at + 1)
    return False


#: What a value's byte under SQLite's length limit may hold in this process: a text of N bytes of UTF-8 whose
#: widest character is past U+FFFF holds 4 bytes for each of its (up to N) characters.
TEXT_BYTES_PER_BYTE = 4


def narrow_for_width(connection: sqlite3.Connection, sql: str, max_bytes: int) -> int | None:
    """Lower ``connection``'s length limit, before ``sql`` runs, so that one row of its result holds at most
    ``max_bytes`` (``max_result_bytes``), or what one value may where that is more, where its limit
    (``max_cell_bytes``, :data:`TEXT_BYTES_PER_BYTE` each) allows more: the new limit, or None when none was
    needed. SQLite computes a row whole, and the driver converts it whole, before the fetch can count it: 2,000
    columns of values just under a 1 MiB limit made one row of 2 GB in SQLite and 2 GB more in the comparing
    process (a review's finding).

    The result's width is read from the text when the text tells it (no ``*`` that may stand for columns, no
    ``--`` comment, fewer commas than the columns a row may have at the limit: a result has at most one column
    more than commas), else from SQLite's own plan (``EXPLAIN``: its ``ResultRow`` operations, about as costly
    as preparing the statement), so that ``count(*)`` queries of a few columns cost nothing more.

    >>> narrowed = sqlite3.connect(":memory:")
    >>> narrowed.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1 << 20) and None
    >>> narrow_for_width(narrowed, "SELECT count(*), 1, 2 FROM pragma_function_list", 64 << 20) is None
    True
    >>> narrow_for_width(narrowed, "SELECT " + ", ".join(["1"] * 100), 64 << 20)
    167772
    """
    limit = connection.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    cell = limit * TEXT_BYTES_PER_BYTE
    row_bound = max(max_bytes, cell)  # a row may always hold what one value may
    if sql.count(",") < row_bound // max(cell, 1) and "--" not in sql and not _star_of_columns(sql):
        return None
    try:
        width = max((row[3] for row in connection.execute("EXPLAIN " + sql) if row[1] == "ResultRow"), default=0)
    except (sqlite3.Error, sqlite3.Warning):  # the statement itself will fail, and say why
        return None
    if width * cell <= row_bound:
        return None
    narrow = max(1, row_bound // (width * TEXT_BYTES_PER_BYTE))
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, narrow)
    return narrow


#: SQLite's names of its ``printf`` (``format`` is the same function from SQLite 3.38 on).
PRINTF_NAMES = ("printf", "format") if sqlite3.sqlite_version_info >= (3, 38) else ("printf",)
#: The most characters a ``printf`` call may make through ``%c`` repeats (their precisions summed) when the
#: session's length limit allows more: about 0.2 s of SQLite's loop for them.
PRINTF_MAX_REPEATS = 16 << 20


def _bounded_printf(connection: sqlite3.Connection) -> Callable[..., str | None]:
    """SQLite's ``printf`` for ``connection``, which can be stopped at its deadline.

    A ``printf`` call is one step of SQLite's virtual machine, which neither the progress handler nor an
    interrupt can stop, and SQLite 3.40 repeats ``%c`` as often as its precision asks, one append at a time, past
    the length limit: ``printf('%.*c', 2000000000, 'x')`` took 20 s whatever the timeout, and 1,200 of them fit in
    a query (a review's finding). So the query's ``printf`` is this function: it reads the call's ``%c`` repeats as
    SQLite reads the format and its arguments (:func:`printf_repeats`), and where they make more characters than
    the session's length limit (``max_cell_bytes``) it gives SQLite's own answer to a result over the limit (NULL
    in SQLite 3.40) at once; otherwise SQLite's own ``printf`` formats the call, on a connection of its own (an
    in-memory database per thread that runs nothing else), under the same length limit, at most
    :data:`PRINTF_MAX_REPEATS`. Its result is the built-in's but where the length limit is above that bound and
    a call's repeats between the two (then it is the answer over the limit), and where an argument is text that
    is not UTF-8 (which Python cannot hand to a function: the query fails)."""
    def bounded(*args: object) -> str | None:
        limit = min(connection.getlimit(sqlite3.SQLITE_LIMIT_LENGTH), PRINTF_MAX_REPEATS)
        if printf_repeats(args) > limit:  # more characters than the limit: the answer of a result too long
            args = ("%*c", limit + 1, "x")
        formatter = _formatter()
        formatter.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
        text: str | None = formatter.execute(f"SELECT printf({', '.join('?' * len(args))})", args).fetchone()[0]
        return text

    return bounded


#: Per thread, the in-memory connection that runs SQLite's own ``printf`` for :func:`_bounded_printf`.
_FORMATTERS = threading.local()


def _formatter() -> sqlite3.Connection:
    formatter: sqlite3.Connection | None = getattr(_FORMATTERS, "connection", None)
    if formatter is None:
        formatter = _FORMATTERS.connection = sqlite3.connect(":memory:", check_same_thread=False)
        # a precision can cut a character in two, as the built-in does: the text comes back as the sandbox's
        # own connections read text that is not UTF-8 (replacement characters), never as an error
        formatter.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    return formatter


#: The conversions of SQLite's ``printf`` (with its arguments given by SQL), each with whether it takes an
#: argument; at any other character (and at ``%T`` and ``%S``, internal ones) SQLite stops formatting.
_CONVERSIONS = {**dict.fromkeys("dsgzqQwcouxXfeEGipr", True), "%": False, "n": False}
#: Leading white space, sign and digits of text, as SQLite reads an integer from it (``sqlite3Atoi64``).
_LEADING_INTEGER = re.compile(rb"[ \t\n\f\r\v]*([+-]?)0*([0-9]*)")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def printf_repeats(args: Sequence[object]) -> int:
    """How many characters the ``%c`` conversions of the ``printf`` call ``printf(*args)`` repeat (the sum of
    their precisions): SQLite 3.40 makes each of them one append at a time, and nothing else in ``printf`` costs
    more than the characters it writes. The format is read as SQLite reads it: flags, a width and a precision in
    digits or ``*`` (which takes the next argument as a 32-bit integer, negative for its absolute value), ``l``
    modifiers, and the end of formatting at an unknown conversion or at a NUL character (a C string's end).

    >>> printf_repeats(("%.*c|%5.3c|%.2s", 2000000000, "x", "y", "abc")), printf_repeats(("%.9c%y%.9c", "a"))
    (2000000003, 9)
    >>> printf_repeats(("%.*c", "70 rows", "x")), printf_repeats((None,)), printf_repeats(("%.*c", -5, "x"))
    (70, 0, 5)
    """
    if not args or args[0] is None:
        return 0
    form = args[0] if isinstance(args[0], str) else str(args[0]) if not isinstance(args[0], bytes) \
        else args[0].decode("latin-1")
    form = form.split("\0", 1)[0]
    taken = 1
    total = 0

    def next_integer() -> int:
        nonlocal taken
        value = _as_int32(args[taken]) if taken < len(args) else 0
        taken += taken < len(args)
        return value

    at = 0
    while (at := form.find("%", at)) >= 0:
        at += 1
        precision = -1
        while at < len(form) and form[at] in "-+ #!0,":
            at += 1
        if at < len(form) and form[at] == "*":
            next_integer()
            at += 1
        else:
            while at < len(form) and form[at].isdigit() and form[at].isascii():
                at += 1
        if at < len(form) and form[at] == ".":
            at += 1
            if at < len(form) and form[at] == "*":
                value = next_integer()
                precision = -value if -2147483647 <= value < 0 else -1 if value < 0 else value
                at += 1
            else:
                start = at
                while at < len(form) and form[at].isdigit() and form[at].isascii():
                    at += 1
                precision = int(form[start:at] or "0") & 0xFFFFFFFF & 0x7FFFFFFF
        for _ in range(2):
            if at < len(form) and form[at] == "l":
                at += 1
        conversion = form[at] if at < len(form) else ""
        if conversion not in _CONVERSIONS:
            return total
        at += 1
        if conversion == "c" and precision > 1:
            total += precision
        if _CONVERSIONS[conversion]:
            taken += taken < len(args)
    return total


def _as_int32(value: object) -> int:
    """``value`` as SQLite's ``printf`` reads a width or precision argument: a 64-bit integer as
    ``sqlite3_value_int64`` makes it (text by its leading digits, a real truncated, both clamped), then cut to a
    C ``int``."""
    if isinstance(value, float):
        number = _INT64[0] if value <= _INT64[0] else _INT64[1] if value >= _INT64[1] else int(value)
    elif isinstance(value, int):
        number = value
    elif isinstance(value, (str, bytes)):
        match = _LEADING_INTEGER.match(value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value)
        digits = match.group(2) if match else b""
        number = min(max(int((match.group(1) if match else b"") + digits) if digits else 0, _INT64[0]), _INT64[1])
    else:
        number = 0
    number &= 0xFFFFFFFF
    return number - (1 << 32) if number >= 1 << 31 else number


#: How Python's sqlite3 starts the error of a text value that is not UTF-8 under its own decoding.
_NOT_UTF8 = "Could not decode to UTF-8"


def utf8_first(connection: sqlite3.Connection, run: Callable[[], T]) -> T:
    """``run()`` on ``connection`` with its text decoded by SQLite's driver itself, and only when some text is
    not UTF-8 again with the connection's own decoder, which gives such text replacement characters
    (:func:`sqlite_read_only`): that decoder is a Python call per text cell, which made fetching a million rows of
    three short texts take 0.9 s instead of 0.5 s (``benchmarks/large_database.py`` times the engine's fetch
    against a bare connection's). The rows are the same either way; the second run is in the same session, so
    the query's timeout holds for both runs together."""
    replacing = connection.text_factory
    connection.text_factory = str
    try:
        return run()
    except sqlite3.OperationalError as error:
        if not str(error).startswith(_NOT_UTF8):
            raise
    finally:
        connection.text_factory = replacing
    return run()


#: SQLite's functions whose value its arguments and the database do not decide: chance, the connection's own
#: history, and the clock, which every date and time function reads for ``'now'`` or for no time value at all,
#: however the argument is spelled (``date()``, ``julianday('n' || 'ow')``). A result that called one may differ
#: the next time the same query runs on the same file.
CLOCK_AND_CHANCE = frozenset({"random", "randomblob", "date", "time", "datetime", "julianday", "unixepoch",
                              "strftime", "timediff", "current_date", "current_time", "current_timestamp",
                              "changes", "total_changes", "last_insert_rowid"})
#: Per thread, the set :func:`calls_noted` is filling, if any.
_NOTED = threading.local()

#: SQLite's functions of which one call costs at most about the size of its arguments and its result (or, an
#: aggregate or window function, of each row's): a query that calls only these (the operators, casts and
#: comparisons cost that too) is stopped between two steps of SQLite's virtual machine, which its interrupt can do,
#: so, once its preparing is known to be quick, it may run in the calling thread. Any other call (``instr``,
#: ``replace``, ``trim``, ``LIKE``/``GLOB``, ``printf``, the JSON functions, one not known here) may take minutes in
#: one step, which no interrupt stops: such a query always runs in a thread its case can stop waiting for
#: (:meth:`SqliteConnections.run`). A list of what is known safe, not of what is known slow: a function left off it
#: costs a thread, never a wall.
LINEAR_FUNCTIONS = frozenset({
    "count", "sum", "total", "avg", "min", "max", "group_concat", "string_agg",
    "abs", "coalesce", "ifnull", "nullif", "iif", "likelihood", "likely", "unlikely", "typeof", "length",
    "octet_length", "lower", "upper", "substr", "substring", "hex", "quote", "char", "unicode", "zeroblob",
    "random", "randomblob", "round", "sign", "trunc", "ceil", "ceiling", "floor", "ln", "log", "log10", "log2",
    "exp", "pow", "power", "sqrt", "mod", "pi", "degrees", "radians", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "date", "time", "datetime", "julianday", "unixepoch", "strftime", "current_date", "current_time",
    "current_timestamp",
    "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead", "first_value",
    "last_value", "nth_value",
    "changes", "total_changes", "last_insert_rowid", "sqlite_version", "sqlite_source_id"})
#: Per thread, whether the authorizer refuses a call off :data:`LINEAR_FUNCTIONS` (``checking``), the name of the
#: call it refused (``refused``), and whether it was asked at all (``prepared``: a statement was prepared).
_IN_LINE = threading.local()
#: How long past its timeout a query may still be in one step of SQLite's before its case stops waiting for it: an
#: interrupt ends any other step within milliseconds.
ABANDON_GRACE_S = 0.5
#: A statement that prepared and ran within this many seconds, calling linear functions only, runs in the calling
#: thread the next times on the same database (:meth:`SqliteConnections.run`).
QUICK_S = 0.05
#: Texts a database keeps as quick, at most (then it starts over).
QUICK_KEPT = 4096


class Saturated(RuntimeError):
    """:data:`MAX_STUCK` steps of SQLite's are left running in the process, or they hold more than
    :data:`MAX_STUCK_DISK_BYTES` of temporary files: a query that needs a thread is not run. Not the query's
    failure but the evaluator's (a fault of the case), for it says nothing of the query."""


class Stuck(sqlite3.OperationalError):
    """A query still inside one step of SQLite's (a function's call, or preparing its statement)
    :data:`ABANDON_GRACE_S` after its timeout: its case stopped waiting for it, and its thread and connection are
    left to end when the step does."""



@contextmanager
def calls_noted() -> Iterator[set[str]]:
    """The names (lower case) of the functions that the statements prepared in this thread while the block runs
    call, as SQLite's authorizer is told them at each prepare: the views' and the common table expressions'
    calls included, which no reading of the query's text sees."""
    noted: set[str] = set()
    outer = getattr(_NOTED, "calls", None)
    _NOTED.calls = noted
    try:
        yield noted
    finally:
        _NOTED.calls = outer


#: What a query may do on SQLite (authorizer actions): read, select, call a function, recurse, and the
#: session's own transaction statements.
_SQLITE_ALLOWED = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                             sqlite3.SQLITE_RECURSIVE, sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT})
#: Pragmas without side effects, readable as table-valued functions (``pragma_table_info('t')``).
_SQLITE_READ_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                                  "foreign_key_list", "collation_list", "function_list", "pragma_list",
                                  "table_list"})


def sqlite_authorizer(action: int, first: str | None, second: str | None, database: str | None,
                      trigger: str | None) -> int:
    """SQLite's own wall, consulted as each statement is prepared (the engine-side twin of DuckDB's
    ``enable_external_access=false``): it allows reads, function calls but those on the deny list
    (:data:`~sqlcmp_dagster.engine.parsing.DENIED_FUNCTIONS`) and the read-only pragmas, and denies everything
    else, so ``ATTACH`` (which opens, even creates, any file), a pragma that sets something and every write
    fail with ``not authorized`` even past the gate. It notes each function called (:func:`calls_noted`).

    >>> sqlite_authorizer(sqlite3.SQLITE_ATTACH, "/tmp/x.db", None, None, None) == sqlite3.SQLITE_DENY
    True
    """
    checking = getattr(_IN_LINE, "checking", False)
    if checking:
        _IN_LINE.prepared = True  # a statement is being prepared, not served from a connection's cache
    if action == sqlite3.SQLITE_FUNCTION:
        name = (second or "").lower()
        noted = getattr(_NOTED, "calls", None)
        if noted is not None:
            noted.add(name)
        if denied(second or "", "sqlite"):
            return sqlite3.SQLITE_DENY
        if checking and name not in LINEAR_FUNCTIONS:
            _IN_LINE.refused = name  # not an error: :meth:`SqliteConnections.run` runs it where it can be left
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (first or "").lower()
        # SQLAlchemy reads the isolation level when it connects; setting it stays denied.
        allowed = name in _SQLITE_READ_PRAGMAS or (name == "read_uncommitted" and second is None)
        return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
    if action in _SQLITE_ALLOWED:
        return sqlite3.SQLITE_OK
    # Preparing a table-valued pragma asks for sqlite_master's columns as an UPDATE; that table cannot be
    # written here anyway (a read-only file, query_only, and writable_schema is a pragma denied above).
    if action == sqlite3.SQLITE_UPDATE and first in ("sqlite_master", "sqlite_schema"):
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


@dataclass
class Progress:
    """The work a session's statements did, as SQLite's progress handler saw it.

    SQLite counts each statement's virtual-machine steps and calls the handler each time the count passes a
    multiple of :data:`PROGRESS_STEPS`, so :attr:`steps` is that work rounded down to a multiple of it (per
    statement). It is the same on every run for the same SQLite library, file content and statement, whatever the
    machine's speed or load: a cost that decides something in a report can be read from it, never from a clock.
    """

    calls: int = 0

    @property
    def steps(self) -> int:
        return self.calls * PROGRESS_STEPS


@contextmanager
def sqlite_deadline(connection: sqlite3.Connection, timeout_ms: int) -> Iterator[Progress]:
    """Interrupt SQLite once ``timeout_ms`` has passed: from inside its VM loop (the progress handler), and
    from the process's watchdog thread (:func:`interrupt_after`), because one VM step can take minutes
    (``replace`` over a 20 MB string in a recursive CTE) and the progress handler only runs between steps,
    while an interrupt stops at the next opcode. Yields the :class:`Progress` the handler counts meanwhile."""
    deadline = time.monotonic() + timeout_ms / 1000
    progress = Progress()

    def handler() -> int:
        progress.calls += 1
        return 1 if time.monotonic() > deadline else 0

    connection.set_progress_handler(handler, PROGRESS_STEPS)
    try:
        with interrupt_after(connection.interrupt, timeout_ms):
            yield progress
    finally:
        connection.set_progress_handler(None, 0)


def file_identity(path: Path) -> tuple[int, int] | None:
    """The device and inode at ``path``, or None when nothing is there (opening it then fails as it would)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


#: Threads of :meth:`SqliteConnections.run` left inside a step of SQLite's, in this process.
_STUCK: set[threading.Thread] = set()
#: At most this many are left at once (each holds a connection, so a file descriptor, and its values): past it, a
#: query that needs a thread is not run (:class:`Saturated`) until one has ended.
MAX_STUCK = 64
#: At most this many bytes of disk held by the process's deleted files (SQLite's temporary files: it deletes each
#: as it opens it) while steps are left running: a step left inside a call keeps its query's sorter files until
#: it ends (a sort of 1.5 GB, then one slow call at its last row, held them for hours: a review's finding), and
#: past this bound a query that needs a thread is not run (:class:`Saturated`) until one has ended. A query that
#: ends frees its files at once, so honest work holds none of these bytes.
MAX_STUCK_DISK_BYTES = 4 << 30
os.register_at_fork(after_in_child=_STUCK.clear)  # a forked child has none of them


def held_disk_bytes() -> int:
    """The disk this process holds in files it has open that are deleted (Linux's ``/proc/self/fd``; 0 where the
    system has none): SQLite's temporary files, which its connections delete as they open them. A file in memory
    (``memfd_create``'s) is none."""
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    held: dict[tuple[int, int], int] = {}  # by file: a descriptor duplicated holds the same blocks
    for descriptor in descriptors:
        try:
            status = os.stat(f"/proc/self/fd/{descriptor}")
        except OSError:  # closed since the listing
            continue
        if status.st_nlink == 0 and stat.S_ISREG(status.st_mode) \
                and not _link_of(f"/proc/self/fd/{descriptor}").startswith("/memfd:"):
            held[(status.st_dev, status.st_ino)] = status.st_blocks * 512
    return sum(held.values())


def _saturation() -> str | None:
    """Why the steps left running allow no other (:class:`Saturated`): their number, or the disk they hold."""
    if len(_STUCK) >= MAX_STUCK:
        return "the most it leaves running (MAX_STUCK)"
    if _STUCK and (held := held_disk_bytes()) > MAX_STUCK_DISK_BYTES:
        return (f"and it holds {held / 2**30:.1f} GiB of deleted temporary files (their sorts), more than "
                f"MAX_STUCK_DISK_BYTES={MAX_STUCK_DISK_BYTES / 2**30:g} GiB")
    return None


def _link_of(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


class _Runner:
    """A daemon thread that runs the jobs of :meth:`SqliteConnections.run` one at a time, kept for the next one: a
    hand-over to a waiting thread costs about 0.08 ms, starting a thread 0.17 ms (3,000 a Spider dev run). One left
    inside a step is retired: it ends after that job."""

    #: Idle runners of this process, at most :data:`_IDLE_KEPT`.
    idle: list[_Runner] = []
    lock = threading.Lock()

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.retired = False
        self.thread = threading.Thread(target=self._loop, name="sqlcmp-sqlite-call", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.retired:
            self.jobs.get()()

    @classmethod
    def take(cls) -> _Runner:
        with cls.lock:
            if cls.idle:
                return cls.idle.pop()
        return cls()

    def give_back(self, done: threading.Event) -> None:
        """Keep this runner for the next job, once its job is ``done`` (its last line has run)."""
        done.wait()
        with self.lock:
            if len(self.idle) < _IDLE_KEPT:
                self.idle.append(self)
                return
        self.retired = True
        self.jobs.put(lambda: None)  # wakes it to end


#: Idle :class:`_Runner` threads kept per process (one per thread that runs queries at once is enough).
_IDLE_KEPT = 8
os.register_at_fork(after_in_child=_Runner.idle.clear)  # a forked child has none of their threads


def stuck_steps() -> int:
    """How many steps of SQLite's this process has left running (:meth:`SqliteConnections.run`)."""
    return len(_STUCK)


def heap_held_elsewhere() -> bool:
    """Whether a query that ran out of SQLite's memory (:data:`HEAP_LIMIT_BYTES`) may have been short of it for
    another query's sake: steps are left running in this process (:meth:`SqliteConnections.run`), and SQLite's own
    count of the memory it holds (``sqlite3_memory_used``), read now that the failed statement has let go of its
    own, is more than half the limit (or cannot be read). A step left running that holds little (one slow call)
    leaves the failure the query's: else a model could have its own failures counted as the evaluator's (a
    review's finding)."""
    if not stuck_steps():
        return False
    used = heap_used()
    return used is None or used > HEAP_LIMIT_BYTES // 2


@functools.cache
def _heap_counter() -> Callable[[], int] | None:
    """``sqlite3_memory_used`` of the SQLite library the ``sqlite3`` module runs on (through ``ctypes``, from the
    module's own file, whose symbols resolve to that library), or None where it cannot be read or is not shown
    to be that library's: a copy of its own would not hold the limit :func:`_bound_heap` set."""
    import _sqlite3
    import ctypes

    _bound_heap()
    try:
        library = ctypes.CDLL(_sqlite3.__file__)
        used, limit = library.sqlite3_memory_used, library.sqlite3_hard_heap_limit64
    except (OSError, AttributeError):
        return None
    used.restype, used.argtypes = ctypes.c_int64, []
    limit.restype, limit.argtypes = ctypes.c_int64, [ctypes.c_int64]
    if not 0 < limit(-1) <= HEAP_LIMIT_BYTES:  # a negative argument reads the limit without setting it
        return None
    return cast(Callable[[], int], used)


def heap_used() -> int | None:
    """SQLite's own count of the memory it holds in this process (``sqlite3_memory_used``), or None where it cannot
    be read (:func:`_heap_counter`)."""
    counter = _heap_counter()
    return None if counter is None else counter()


def _leave(thread: threading.Thread) -> None:
    """Count ``thread`` among the ones left (:data:`_STUCK`) and give it the lowest scheduling priority: Linux's
    idle class, else the greatest niceness, else none where the system has neither."""
    _STUCK.add(thread)
    native = thread.native_id
    if native is None:
        return
    try:
        os.sched_setscheduler(native, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, native, 19)
        except (AttributeError, OSError):
            pass


class SqliteConnections:
    """The sandboxed connections of one SQLite file or shared in-memory neighbor, kept for the next query.

    Opening a connection and SQLAlchemy's checkout per query were a third of the adapter's cost on Spider's small
    queries. Connections are kept for one process and one file: a forked child opens its own (a SQLite
    connection must not cross a fork), and a file replaced at its path (a new inode, which a kept connection would
    go on reading) closes the kept ones. A connection whose rollback fails is closed, not kept."""

    def __init__(self, open_connection: Callable[[], sqlite3.Connection], path: Path | None) -> None:
        self._open, self._path = open_connection, path
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._kept_for: tuple[int, tuple[int, int] | None] = (os.getpid(), None)
        self._length = 0  # SQLITE_LIMIT_LENGTH of a fresh connection, for a query given no max_cell_bytes
        self._stuck: set[threading.Thread] = set()  # threads of :meth:`run` left inside a step of SQLite's
        self._after_stuck: list[Callable[[], object]] = []  # what :meth:`when_free` put off until they end
        self._quick: set[str] = set()  # texts that prepared and ran quickly here, calling linear functions only

    def run(self, sql: str, timeout_ms: int, max_cell_bytes: int,
            work: Callable[[sqlite3.Connection, Progress], T]) -> T:
        """``work`` (which runs ``sql``) on a :meth:`session`, which no step of SQLite's can hold past the query's
        timeout.

        An interrupt stops SQLite between two steps of its virtual machine; a function call is one step, and
        preparing the statement is none. Some built-ins cost the product of two arguments' lengths in one call
        (``ltrim`` of 40,000 characters by a set of 40,000 took 25 s at a timeout of 1 s, ``LIKE`` of a megabyte
        by a pattern of 49,000 characters 114 s), and preparing a statement copies common table expressions and
        flattened subqueries at each reference and plans up to 64 joined tables (16 levels of a CTE named twice
        took 14.5 s, nested subqueries 212 s, a 64-table join 5 s: three reviews' findings). So a statement runs
        in a thread of its own, which this one waits for until :data:`ABANDON_GRACE_S` after the timeout; a thread
        still in SQLite then is left, with its connection, to end when its step does (at the lowest scheduling
        priority), and :class:`Stuck` is raised here. At most :data:`MAX_STUCK` are left at once in a process
        (:func:`_leave`).

        A thread costs about 0.08 ms a query, so a statement this database has prepared and run before within
        :data:`QUICK_S` (kept per text: its preparing costs the same again on the same schema), all of whose calls
        are on :data:`LINEAR_FUNCTIONS` (so that no call is one long step), runs in this thread, with the
        authorizer refusing any other call (a statement that changed is refused before any step, and runs in a
        thread again). Spider dev's neighbor databases run each text a dozen times."""
        if sql in self._quick:
            ran, value = self._linear_only(timeout_ms, max_cell_bytes, work)
            if ran:
                return cast(T, value)
        return self._in_thread(sql, timeout_ms, max_cell_bytes, work)

    def _linear_only(self, timeout_ms: int, max_cell_bytes: int,
                     work: Callable[[sqlite3.Connection, Progress], T]) -> tuple[bool, T | None]:
        """``work`` on a kept connection with the authorizer refusing any call off :data:`LINEAR_FUNCTIONS`:
        ``(True, what it gave)``, or ``(False, None)`` when its statement was refused so (before any step ran).
        Afterwards ``_IN_LINE.prepared`` says whether a statement was prepared rather than served from the
        connection's cache."""
        _IN_LINE.refused, _IN_LINE.prepared, _IN_LINE.checking = None, False, True
        try:
            with self.session(timeout_ms, max_cell_bytes) as (connection, progress):
                return True, work(connection, progress)
        except sqlite3.DatabaseError:
            if _IN_LINE.refused is None:
                raise
            return False, None
        finally:
            _IN_LINE.checking = False

    def _in_thread(self, sql: str, timeout_ms: int, max_cell_bytes: int,
                   work: Callable[[sqlite3.Connection, Progress], T]) -> T:
        full = _saturation()
        if full is not None:
            raise Saturated(f"not run: {len(_STUCK)} queries of this process are still inside steps of SQLite's "
                            f"that no interrupt stops, {full}: the evaluator runs no other query that may make such "
                            "a step until one of them has ended")
        outcome: list[tuple[bool, object]] = []  # (True, what work gave) or (False, what it raised)
        noted = getattr(_NOTED, "calls", None)
        calls: set[str] = set()
        runner = _Runner.take()
        finished = threading.Event()

        def call() -> None:
            _NOTED.calls = calls if noted is not None else None
            try:
                outcome.append((True, self._learning(sql, timeout_ms, max_cell_bytes, work)))
            except BaseException as error:  # given to the waiting thread, which raises it
                outcome.append((False, error))
            finally:
                self._ended(runner.thread)
                finished.set()

        runner.jobs.put(call)
        finished.wait(timeout_ms / 1000 + ABANDON_GRACE_S)
        with self._lock:  # read once, as the thread's end reads it: stuck, or its outcome given
            stuck = not outcome
            if stuck:
                runner.retired = True  # never given another job: it runs at the idle class from here
                self._stuck.add(runner.thread)
                _leave(runner.thread)
        if noted is not None:
            noted.update(calls)  # one C call: no step of the other thread between
        if stuck:
            raise Stuck(f"interrupted: the query was still inside one step of SQLite's (a function's call, or "
                        f"preparing the statement) {ABANDON_GRACE_S} s after its timeout of {timeout_ms} ms, which "
                        "no interrupt stops; the case stopped waiting for it")
        runner.give_back(finished)
        done, value = outcome[0]
        if not done:
            raise cast(BaseException, value)
        return cast(T, value)

    def _learning(self, sql: str, timeout_ms: int, max_cell_bytes: int,
                  work: Callable[[sqlite3.Connection, Progress], T]) -> T:
        """``work`` with the authorizer refusing calls off :data:`LINEAR_FUNCTIONS`, on a kept connection, noting
        ``sql`` as quick (:meth:`run`) when it was prepared and ran within :data:`QUICK_S`; a statement refused so
        runs again unchecked on a connection closed after it, whose prepared statements no later query may then
        reuse unchecked."""
        started = time.perf_counter()
        ran, value = self._linear_only(timeout_ms, max_cell_bytes, work)
        if not ran:
            with self.session(timeout_ms, max_cell_bytes, keep=False) as (connection, progress):
                return work(connection, progress)
        # a statement served from the connection's cache says nothing of its preparing's cost, which the next run
        # pays again once the cache has let it go (a review's finding)
        if _IN_LINE.prepared and time.perf_counter() - started < QUICK_S:
            with self._lock:
                if len(self._quick) >= QUICK_KEPT:
                    self._quick.clear()
                self._quick.add(sql)
        return cast(T, value)

    def _ended(self, thread: threading.Thread) -> None:
        with self._lock:
            self._stuck.discard(thread)
            _STUCK.discard(thread)
            after, self._after_stuck = (self._after_stuck, []) if not self._stuck else ([], self._after_stuck)
        for callback in after:
            callback()

    @property
    def stuck(self) -> bool:
        """Whether a query of :meth:`run` is still inside a step of SQLite's that its case stopped waiting for."""
        return bool(self._stuck)

    def when_free(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` now, or, while a query is :attr:`stuck`, in its thread once its step ends: what would
        wait for the connection it holds (a neighbor's writer shares its database's cache, whose lock the stuck
        step holds: its rollback waited for the call to end) must not hold this thread."""
        with self._lock:
            if self._stuck:
                self._after_stuck.append(callback)
                return
        callback()

    @contextmanager
    def session(self, timeout_ms: int, max_cell_bytes: int, *, keep: bool = True) \
            -> Iterator[tuple[sqlite3.Connection, Progress]]:
        """A kept or new sandboxed connection under the query's length limit and deadline, rolled back after
        and kept for the next query (closed without ``keep``), and the :class:`Progress` its statements make."""
        connection = self._borrow()
        kept = False
        try:
            connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_cell_bytes or self._length)
            with sqlite_deadline(connection, timeout_ms) as progress:
                try:
                    yield connection, progress
                finally:
                    connection.rollback()
                    kept = True
        finally:
            if kept and keep:
                with self._lock:
                    self._idle.append(connection)
            else:
                connection.close()

    def _borrow(self) -> sqlite3.Connection:
        now = (os.getpid(), file_identity(self._path) if self._path is not None else None)
        with self._lock:
            stale: list[sqlite3.Connection] = []
            if now != self._kept_for:
                stale = self._idle if now[0] == self._kept_for[0] else []
                self._idle, self._kept_for = [], now
                self._quick.clear()  # another file, maybe another schema
            connection = self._idle.pop() if self._idle else None
        for old in stale:
            old.close()
        if connection is None:
            connection = self._open()
            self._length = connection.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        return connection

    def close(self) -> None:
        """Close the kept connections (only in the process that opened them)."""
        with self._lock:
            connections, self._idle = self._idle, []
        if self._kept_for[0] == os.getpid():
            for connection in connections:
                connection.close()
