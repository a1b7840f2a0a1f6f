"""What one query may cost while its result is fetched: a bounded fetch, a cut for over-long cells, and an
interrupt at a deadline.

Shared by the adapter's sandboxes (:mod:`.sqlite`, :mod:`.postgres`) and DuckDB's query process
(:mod:`.duckdb_process`), so this module imports nothing but the standard library: the DuckDB process starts
fast and the rules are the same on every engine.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

if __package__:
    from sqlcmp_dagster.engine.sandbox.cell_text import value_text_pieces
else:  # DuckDB's query process, which runs this file beside cell_text.py without the package
    from cell_text import value_text_pieces  # type: ignore[import-not-found,no-redef]

#: The most characters of a database's error message a report keeps: its first :data:`MESSAGE_HEAD_CHARS` and its
#: last :data:`MESSAGE_TAIL_CHARS`, with the count of those left out between them. A message may quote text the
#: query computed (``CAST(repeat('x', 50000000) AS INTEGER)`` fails with 50 MB of it in DuckDB, 100 MB in
#: PostgreSQL), which no result bound counts: unbounded, one such case wrote 300 MB of report and held its
#: process for 25 s in the error taxonomy's patterns (a review's finding).
MESSAGE_HEAD_CHARS = 1_500
MESSAGE_TAIL_CHARS = 500


def bounded_message(message: str) -> str:
    """``message`` as a report keeps it: whole up to :data:`MESSAGE_HEAD_CHARS` + :data:`MESSAGE_TAIL_CHARS`
    characters, else its head and tail around the count of characters left out. The engine's own words come
    first in every engine's message and the quoted text after them, so the head keeps what the taxonomy reads.

    >>> bounded_message("no such column: x")
    'no such column: x'
    >>> text = bounded_message("Conversion Error: " + "x" * 10_000)
    >>> len(text), text[:22], text[1500:1540]
    (2037, 'Conversion Error: xxxx', ' ... [8,018 characters left out] ... xxx')
    """
    left_out = len(message) - MESSAGE_HEAD_CHARS - MESSAGE_TAIL_CHARS
    if left_out <= 0:
        return message
    return f"{message[:MESSAGE_HEAD_CHARS]} ... [{left_out:,} characters left out] ... {message[-MESSAGE_TAIL_CHARS:]}"


#: Rows fetched per round trip at most; fewer when rows are wide, so one round trip stays near a MiB.
_FETCH_ROWS = 1024
_FETCH_BYTES = 1 << 20


class CutText(str):
    """A text cell the engine already cut as :func:`cut_cell` would (PostgreSQL cuts on the server), so that
    :func:`fetch_bounded` keeps it as it is and counts it as cut."""


class CutBytes(bytes):
    """A binary cell the engine already cut, as :class:`CutText`."""


@dataclass(frozen=True)
class Fetched:
    """The rows :func:`fetch_bounded` kept, whether it stopped early, and why (one warning per cap hit)."""

    rows: list[tuple[Any, ...]]
    truncated: bool
    warnings: list[str]


def fetch_bounded(cursor: Any, max_rows: int, max_bytes: int, max_cell_bytes: int) -> Fetched:
    """Fetch at most ``max_rows`` rows and about ``max_bytes`` bytes from a DBAPI ``cursor``, cutting each cell
    at ``max_cell_bytes`` as it arrives (:func:`cut_cell`).

    The caps are enforced while fetching: rows come in round trips of about a MiB (one row at a time while rows
    are huge), so the process never holds more than the kept rows plus one round trip. The row that crosses
    ``max_bytes`` ends the result, kept with each of its text and binary cells cut at
    :data:`CROSSING_CELL_CHARS` (a prefix and a digest, so it is still compared: left out, two results whose
    first row crossed compared as two empty ones). Kept whole, a row of 200 cells of a MiB each, every one under
    ``max_cell_bytes``, went on from DuckDB's query process as 200 MB. Size is what the kept rows cost in this
    process (:func:`row_cost`), not what they would cost packed: a million rows of seven integers counted as
    56 MB held 340 MB of Python objects, and the comparing process peaked at 600 MB under a 64 MiB cap.
    """
    rows: list[tuple[Any, ...]] = []
    size, batch, cells_cut = 0, 1, 0
    while True:
        want = min(batch, max_rows + 1 - len(rows))
        chunk = cursor.fetchmany(want)
        plain_size = _plain_size(chunk, max_cell_bytes)
        if plain_size is not None and size + plain_size <= max_bytes:
            rows.extend(chunk)  # what the loop below would keep, at C speed: no cell to cut, no cap reached
            size += plain_size
        else:
            for raw in chunk:
                row = tuple(cut_cell(value, max_cell_bytes) for value in raw)
                row_size = row_cost(row)
                crossing = size + row_size > max_bytes
                if crossing:
                    row = tuple(cut_cell(value, CROSSING_CELL_CHARS) for value in raw)
                cells_cut += sum(map(_was_cut, raw, row))
                size += row_size
                rows.append(row)
                if crossing:
                    warnings = [f"result truncated at max_result_bytes={max_bytes:,} (about {size:,} bytes in "
                                f"{len(rows):,} rows; the last row's cells kept cut at {CROSSING_CELL_CHARS})"]
                    return Fetched(rows, True, cut_warning(cells_cut, max_cell_bytes) + warnings)
        if len(rows) > max_rows:
            warnings = [f"result truncated to max_result_rows={max_rows} rows"]
            return Fetched(rows[:max_rows], True, cut_warning(cells_cut, max_cell_bytes) + warnings)
        if len(chunk) < want:
            return Fetched(rows, False, cut_warning(cells_cut, max_cell_bytes))
        batch = max(1, min(_FETCH_ROWS, _FETCH_BYTES * len(rows) // max(size, 1)))


#: What a kept row costs in memory beyond its cells: a tuple's header with the garbage collector's (56 bytes).
ROW_BYTES = 56
#: What a kept cell costs beyond its text or binary payload: its pointer in the row and its object (an int or a
#: float is 24-32 bytes, a text's header 49, a bytes' 33).
CELL_BYTES = 40


def row_cost(row: tuple[Any, ...]) -> int:
    """The bytes ``row`` holds in this process, as :func:`fetch_bounded` counts them against ``max_bytes``.

    >>> row_cost((1, 2.5, None)), row_cost(("abc", b"xy"))
    (176, 141)

    A numeric counts the characters of its text (:func:`decimal_chars`): PostgreSQL's holds up to 147,455
    digits, and a million of them counted 40 bytes each once peaked at 1.9 GB under the 64 MiB cap. A list,
    struct or map counts each value inside it as a cell of its own (:func:`held_bytes`): counted 40 bytes, one
    list of 1,000 texts of 100,000 characters crossed from DuckDB's query process as one 100 MB cell.

    >>> row_cost((Decimal("-1.50"), [1, "ab"], {"k": None}))
    344
    """
    return ROW_BYTES + sum(map(cell_bytes, row))


def cell_bytes(value: Any) -> int:
    """What one cell holds in this process as :func:`row_cost` counts it."""
    if isinstance(value, str):
        return CELL_BYTES + text_bytes(value)
    if isinstance(value, bytes):
        return CELL_BYTES + len(value)
    if isinstance(value, Decimal):
        return CELL_BYTES + decimal_chars(value)
    if isinstance(value, _NESTED):
        return held_bytes(value)
    return CELL_BYTES


#: What Python's empty text holds: its header, which :data:`CELL_BYTES` counts.
_TEXT_HEADER = sys.getsizeof("")


def text_bytes(text: str) -> int:
    """What ``text`` holds in this process beyond a header: 1, 2 or 4 bytes a character, as its widest character
    needs (one character past U+FFFF makes every character 4 bytes: a result of such texts counted by their
    characters peaked at 8 times ``max_result_bytes``, a second review found).

    >>> text_bytes("abc"), text_bytes("a\U0001F600") >= 8
    (3, True)
    """
    return sys.getsizeof(text) - _TEXT_HEADER


#: Cells that hold other values: DuckDB's LIST, STRUCT and MAP, PostgreSQL's arrays and json.
_NESTED = (list, tuple, dict)


def held_bytes(value: Any) -> int:
    """What ``value`` and every value inside it hold in this process: :data:`CELL_BYTES` each, plus the lengths
    of texts and binaries and the characters of numerics. Linear in the values inside it, which the process
    holds already (and a kept list, one :func:`cut_cell` left whole, writes no more than ``max_cell_bytes``
    characters); iterative, so no nesting depth exhausts the stack.

    >>> held_bytes([1, ["abc", b"x"], {"k": Decimal("2.5")}])
    328
    """
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        total += CELL_BYTES
        if isinstance(item, str):
            total += text_bytes(item)
        elif isinstance(item, (bytes, bytearray, memoryview)):
            total += len(item)
        elif isinstance(item, Decimal):
            total += decimal_chars(item)
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
    return total


def decimal_chars(value: Decimal) -> int:
    """The characters of ``value`` written out without an exponent, as PostgreSQL writes a numeric (and counts
    it on the server, :class:`~.postgres.PostgresShape`).

    >>> decimal_chars(Decimal("-12.50")), decimal_chars(Decimal("1E-7")), decimal_chars(Decimal("NaN"))
    (6, 9, 3)
    """
    text = str(value)
    return len(text) if "E" not in text else len(format(value, "f"))


def _was_cut(raw: Any, kept: Any) -> bool:
    """Whether :func:`cut_cell` (or the engine, :class:`CutText`) cut the cell ``raw`` into ``kept``."""
    if isinstance(raw, (CutText, CutBytes)):
        return True
    return raw is not kept and isinstance(raw, (str, bytes, Decimal, *_NESTED))


#: Cell types a driver returns that :func:`cut_cell` keeps as they are when not longer than the limit (exact
#: types: :class:`CutText` and :class:`CutBytes` are counted as cut, ``memoryview`` becomes ``bytes``).
_PLAIN_CELLS = frozenset({int, float, type(None), str, bytes, Decimal})
_TEXT_CELLS = frozenset({str})
_BYTES_CELLS = frozenset({bytes})
_DECIMAL_CELLS = frozenset({Decimal})


def _plain_size(chunk: list[Any], max_cell_bytes: int) -> int | None:
    """The size :func:`fetch_bounded` counts for ``chunk`` when every row is a tuple of plain cells none of
    which :func:`cut_cell` would change (then the rows are kept as they came); None otherwise.

    Computed with C-level iteration (``map``, ``compress``): the per-cell Python loop cost a fifth of executing
    Spider's small queries.
    """
    if not chunk:
        return 0
    if set(map(type, chunk)) != {tuple}:
        return None
    cells = list(itertools.chain.from_iterable(chunk))
    kinds = set(map(type, cells))
    if not kinds <= _PLAIN_CELLS:
        return None
    # a text's bytes in this process (:func:`text_bytes`), at least its characters, which max_cell_bytes bounds
    lengths = list(map(len, itertools.compress(cells, map(_BYTES_CELLS.__contains__, map(type, cells))))) \
        if bytes in kinds else []
    if str in kinds:
        lengths += map(text_bytes, itertools.compress(cells, map(_TEXT_CELLS.__contains__, map(type, cells))))
    if Decimal in kinds:
        lengths += map(decimal_chars, itertools.compress(cells, map(_DECIMAL_CELLS.__contains__, map(type, cells))))
    if lengths and max(lengths) > max_cell_bytes:
        return None
    return sum(lengths) + CELL_BYTES * len(cells) + ROW_BYTES * len(chunk)


#: The characters (bytes of binary) a cell of the row that crosses ``max_result_bytes`` keeps: that row is kept
#: cut (:func:`fetch_bounded`), on PostgreSQL cut on the server.
CROSSING_CELL_CHARS = 64


def cut_cell(value: Any, limit: int) -> Any:
    """A driver's cell as the engine keeps it: binary as ``bytes`` (psycopg2 returns ``memoryview``), and text
    or binary longer than ``limit`` cut there with a marker naming the full length and a digest of the whole
    value, so that two cut cells are still equal exactly when the values were.

    A numeric whose text is longer (:func:`decimal_chars`) is cut as that text, as PostgreSQL cuts it on the
    server. A list, struct or map whose compared text (:func:`~.cell_text.value_text`, the one it is compared
    by when kept) is longer is cut as that text: two cut ones are equal exactly when the values would have
    compared equal. Its text is written only when :func:`nested_text_bound`, which stops past ``limit``, says
    it may be longer, and then hashed piece by piece (:func:`~.cell_text.value_text_pieces`), never held whole:
    made whole, one list of 1,000 texts of 100,000 characters needed more than DuckDB's query process may use.

    >>> cut_cell("abcdef", 3)
    'abc…[cut at 3 of 6 characters, sha256 bef57ec7f53a6d40]'
    >>> cut_cell(memoryview(b"\\x00\\xff"), 3)
    b'\\x00\\xff'
    >>> cut_cell(["ab", 1.0], 8), cut_cell(["ab", 1.0], 9)
    ('["ab", 1…[cut at 8 of 9 characters, sha256 75745bda8b342e7c]', ['ab', 1.0])
    >>> cut_cell(Decimal("123.40"), 3)
    '123…[cut at 3 of 6 characters, sha256 90c6f3c414aba8b3]'
    """
    if isinstance(value, (memoryview, bytearray)):
        value = bytes(value)
    if isinstance(value, (CutText, CutBytes)):
        return value
    if isinstance(value, Decimal):
        return value if decimal_chars(value) <= limit else cut_cell(format(value, "f"), limit)
    if isinstance(value, _NESTED):
        if nested_text_bound(value, limit) <= limit:
            return value
        return _cut_pieces(value_text_pieces(value), limit) or value
    if not isinstance(value, (str, bytes)) or len(value) <= limit:
        return value
    if isinstance(value, bytes):
        return value[:limit] + _cut_marker(hashlib.sha256(value), limit, len(value), "bytes").encode()
    whole = hashlib.sha256(value.encode("utf-8", errors="surrogatepass"))
    return value[:limit] + _cut_marker(whole, limit, len(value), "characters")


def nested_text_bound(value: Any, stop: int) -> int:
    """At least the length of :func:`~.cell_text.value_text` of ``value`` (a list, struct or map), counted
    until it passes ``stop``: at most ``stop`` values inside it are visited, and none is written out but
    those whose text has no cheap bound (dates, UUIDs, ...), which are short.

    >>> nested_text_bound([1, "ab", None, {"k": 2.5}], 1000) >= len('[1, "ab", NULL, {"k": 2.5}]')
    True
    """
    total, pending = 0, [value]
    while pending and total <= stop:
        item = pending.pop()
        if item is None or isinstance(item, bool):
            total += 5
        elif isinstance(item, str):
            total += 6 * len(item) + 2  # quoted as JSON: a control character becomes \u00XX
        elif isinstance(item, (bytes, bytearray, memoryview)):
            total += 2 * len(item) + 2
        elif isinstance(item, int):
            total += len(str(item)) if not -_SHORT_INT < item < _SHORT_INT else 20
        elif isinstance(item, (float, Decimal)):
            total += _NUMBER_CHARS  # written whole when integral: 1e300 is 301 digits
        elif isinstance(item, (list, tuple)):
            total += 2 + 2 * len(item)
            pending.extend(item)
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            pending.extend(item.keys())
            pending.extend(item.values())
        else:
            total += len(str(item))
    return total


#: Integers within this many (19 digits and a sign: 20 characters) have their text's length counted as 20.
_SHORT_INT = 10 ** 19
#: The most characters :func:`~.cell_text.value_text` writes for a float or decimal inside a list: an integral
#: one whole (a float up to 309 digits, a decimal up to 301 before it is written as the float nearest), a sign.
_NUMBER_CHARS = 311


def _cut_pieces(pieces: Iterator[str], limit: int) -> str | None:
    """The text the pieces make, cut as :func:`cut_cell` cuts a text longer than ``limit``; None when it is not
    longer. Only its first ``limit`` characters are kept, the rest hashed as it comes."""
    digest, length, prefix = hashlib.sha256(), 0, []
    for piece in pieces:
        digest.update(piece.encode("utf-8", errors="surrogatepass"))
        if length < limit:
            prefix.append(piece[:limit - length])
        length += len(piece)
    if length <= limit:
        return None
    return "".join(prefix) + _cut_marker(digest, limit, length, "characters")


def _cut_marker(digest: Any, limit: int, length: int, unit: str) -> str:
    """The marker after a cut value's first ``limit`` units: its full length and a prefix of its SHA-256."""
    return f"…[cut at {limit} of {length} {unit}, sha256 {digest.hexdigest()[:16]}]"


def cut_warning(count: int, limit: int) -> list[str]:
    """The warning that ``count`` cells were cut (none when no cell was): a cut value compares by its digest."""
    return [f"{count} cell(s) longer than max_cell_bytes={limit:,} were cut (compared by prefix and digest)"] \
        if count else []


class _Watchdog:
    """One thread per process that interrupts each armed query at its deadline.

    A query's deadline used to be a ``threading.Timer``: one thread started and stopped per query, the largest
    fixed cost of a run of small queries (a fifth of a Spider run's profile). Here arming is a heap push under a
    lock and the thread sleeps until the earliest deadline. A query is interrupted only while armed: the
    interrupt happens under the lock that :meth:`disarm` takes, so none arrives after a query's guard ended.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._deadlines: list[tuple[float, int]] = []  # heap of (monotonic deadline, key)
        self._armed: dict[int, Callable[[], object]] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, interrupt: Callable[[], object], seconds: float) -> int:
        """Call ``interrupt`` in ``seconds`` unless :meth:`disarm` is called first; the key to disarm."""
        deadline = time.monotonic() + seconds
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sqlcmp-query-watchdog", daemon=True)
                self._thread.start()
            key = next(self._keys)
            self._armed[key] = interrupt
            heapq.heappush(self._deadlines, (deadline, key))
            if self._deadlines[0][1] == key:  # earlier than what the thread sleeps towards
                self._lock.notify()
        return key

    def disarm(self, key: int) -> None:
        with self._lock:
            self._armed.pop(key, None)

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                while self._deadlines and (self._deadlines[0][0] <= now or self._deadlines[0][1] not in self._armed):
                    deadline, key = heapq.heappop(self._deadlines)
                    interrupt = self._armed.pop(key, None)
                    if interrupt is not None and deadline <= now:
                        try:
                            interrupt()
                        except Exception:  # noqa: BLE001 - a closed connection must not stop the watchdog
                            pass
                self._lock.wait(self._deadlines[0][0] - now if self._deadlines else None)


#: The process's watchdog, made at the first :func:`interrupt_after` (:func:`_the_watchdog`), never at import.
_watchdog: _Watchdog | None = None
#: Held while the first watchdog is made, so that two threads arming their first queries make one.
_making = threading.Lock()


def _the_watchdog() -> _Watchdog:
    """The process's watchdog, made at its first use, which also registers the fork handler that gives a forked
    child one of its own (:func:`_fresh_watchdog`). Importing this module changes nothing in the process, as
    importing the engine does not (``engine.context``); its state is kept here, not in the engine context,
    because DuckDB's query process runs this file as a script that imports nothing of the package."""
    global _watchdog
    watchdog = _watchdog
    if watchdog is not None:
        return watchdog
    with _making:
        if _watchdog is None:
            os.register_at_fork(after_in_child=_fresh_watchdog)  # once: a forked child inherits the handler
            _watchdog = _Watchdog()
        return _watchdog


def _fresh_watchdog() -> None:
    """A forked child has no watchdog thread, and a lock (the watchdog's, or :data:`_making`) may have been held
    at the fork: start over with new ones. The child's watchdog starts its thread at its first query."""
    global _watchdog, _making
    _making = threading.Lock()
    _watchdog = _Watchdog()


@contextmanager
def interrupt_after(interrupt: Callable[[], object], timeout_ms: int) -> Iterator[None]:
    """Call ``interrupt`` (a DuckDB or SQLite connection's ``interrupt``, a psycopg2 connection's ``cancel``)
    from the process's watchdog thread once ``timeout_ms`` has passed, unless the block has ended."""
    watchdog = _the_watchdog()
    key = watchdog.arm(interrupt, timeout_ms / 1000)
    try:
        yield
    finally:
        watchdog.disarm(key)
