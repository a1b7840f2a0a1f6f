"""What one query may cost while its result is fetched: a bounded fetch, a cut for over-long cells, and an
interrupt timer.

Shared by the adapter (:mod:`sqlcmp_dagster.engine.execution`) and DuckDB's query process
(:mod:`sqlcmp_dagster.engine.duckdb_process`), so this module imports nothing but the standard library: the
DuckDB process starts fast and the rules are the same on every engine.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

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
            cells_cut += sum(a is not b or isinstance(a, (CutText, CutBytes))
                             for a, b in zip(raw, row) if isinstance(a, (str, bytes)))
            size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
            rows.append(row)
            if size > max_bytes:
                warnings = [f"result truncated at max_result_bytes={max_bytes:,} (about {size:,} bytes in "
                            f"{len(rows):,} rows)"]
                return Fetched(rows, True, cut_warning(cells_cut, max_cell_bytes) + warnings)
        if len(rows) > max_rows:
            warnings = [f"result truncated to max_result_rows={max_rows} rows"]
            return Fetched(rows[:max_rows], True, cut_warning(cells_cut, max_cell_bytes) + warnings)
        if len(chunk) < want:
            return Fetched(rows, False, cut_warning(cells_cut, max_cell_bytes))
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
    if isinstance(value, (str, bytes)) and len(value) > limit and not isinstance(value, (CutText, CutBytes)):
        whole = value if isinstance(value, bytes) else value.encode("utf-8", errors="surrogatepass")
        unit = "bytes" if isinstance(value, bytes) else "characters"
        marker = f"…[cut at {limit} of {len(value)} {unit}, sha256 {hashlib.sha256(whole).hexdigest()[:16]}]"
        return value[:limit] + (marker.encode() if isinstance(value, bytes) else marker)
    return value


def cut_warning(count: int, limit: int) -> list[str]:
    """The warning that ``count`` cells were cut (none when no cell was): a cut value compares by its digest."""
    return [f"{count} cell(s) longer than max_cell_bytes={limit:,} were cut (compared by prefix and digest)"] \
        if count else []


@contextmanager
def interrupt_after(connection: Any, timeout_ms: int) -> Iterator[None]:
    """Interrupt a DuckDB or SQLite connection from a timer thread once ``timeout_ms`` has passed."""
    timer = threading.Timer(timeout_ms / 1000, connection.interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
