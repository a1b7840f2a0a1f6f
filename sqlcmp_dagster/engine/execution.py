"""Layer 1 execution: a read-only, time-limited SQLAlchemy adapter that materializes results as polars frames.

The adapter is the only place that talks to a database (architecture.txt component B). Every query is hostile
input, so there are two walls. The gate (:func:`~sqlcmp_dagster.engine.parsing.unsafe_reason`) refuses anything
but a single read-only query calling nothing on the engine's deny list before the engine sees it. The engine is
then opened so that it cannot do harm anyway: SQLite read-only (``mode=ro``, ``query_only``) with a length limit
per value; DuckDB read-only without external access (no files, URLs or extensions) with its configuration
locked; PostgreSQL in a READ ONLY transaction, and only under a role that is neither superuser nor able to read
server files or signal other backends (unless the operator opts in). Each call runs on a connection of its own
while it runs (on SQLite one the adapter keeps for the next call: its sandbox is set when it opens and no query
can change it) in a transaction that is rolled back, is interrupted by a watchdog at its timeout, and stops
fetching at ``max_result_rows`` rows or ``max_result_bytes`` bytes; a cell longer than ``max_cell_bytes`` is
cut.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import polars as pl

from sqlcmp_dagster.engine.bounds import CROSSING_CELL_CHARS, CutBytes, CutText, Fetched, fetch_bounded, \
    interrupt_after
from sqlcmp_dagster.engine.duckdb_process import DUCKDB_SANDBOX, NEIGHBOR_DATABASE, DuckdbProcess, Request, \
    memory_bound
from sqlcmp_dagster.engine.models import DEFAULT_MAX_CELL_BYTES, DEFAULT_MAX_RESULT_BYTES, ExecutionError, \
    binary_text
from sqlcmp_dagster.engine.parsing import ParseOutcome, denied, parse, query_text, unsafe_reason
from sqlcmp_dagster.engine.taxonomy import execution_error

if TYPE_CHECKING:
    import sqlalchemy as sa

#: SQLAlchemy backend name -> sqlglot dialect name.
_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "duckdb": "duckdb"}
#: File suffixes opened with DuckDB when a path (not a URL) is given.
DUCKDB_SUFFIXES = (".duckdb", ".ddb")
#: How many SQLite virtual-machine steps pass between two deadline checks: small enough to stop within a few ms.
_SQLITE_PROGRESS_STEPS = 10_000
#: The statement gate's answers kept, per parsed query (see :func:`_gate`).
_GATE_ANSWERS_KEPT = 256
_gate_answers: OrderedDict[tuple[int, str, str], tuple[ParseOutcome, str | None]] = OrderedDict()
_gate_lock = threading.Lock()
#: PostgreSQL predefined roles whose members reach past the database (server files, programs, other backends).
PRIVILEGED_PG_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                       "pg_signal_backend")
#: Characters of text (bytes of binary) of one cell that a report's samples and result tables show.
SAMPLE_CELL_CHARS = 200


class PrivilegedRoleError(ValueError):
    """The database role may reach past the database (superuser, replication, server files, signalling)."""


class Relation:
    """A materialized result set.

    ``frame`` has positional column names ``c0, c1, ...`` because result columns may share a name
    (``SELECT a.id, b.id``); the names the database gave are in ``names``.

    A relation of a database's rows (:func:`relation_from_rows`) keeps them until its frame is first asked for,
    then makes the frame and lets the rows go: the neighbor search tells most of its results equal from their
    rows alone (:meth:`same_rows`) and never needs their frames.
    """

    __slots__ = ("_columns", "_frame", "_rows", "names", "truncated")

    def __init__(self, frame: pl.DataFrame | None, names: list[str], truncated: bool = False, *,
                 rows: Sequence[Sequence[Any]] | None = None) -> None:
        if frame is None and rows is None:
            raise ValueError("a relation needs a frame or rows")
        self._frame, self._rows = frame, None if frame is not None else rows
        self._columns: tuple[list[pl.DataType], list[list[Any]]] | None = None
        self.names, self.truncated = names, truncated

    def columns(self) -> tuple[list[pl.DataType], list[list[Any]]]:
        """Each column's type and values as its frame holds them (``frame.dtypes``, ``to_list()`` of each
        column), kept once asked for. Told from the rows, without making the frame, where the relation has at
        most :data:`PLAIN_CELLS` cells and each column holds one plain Python type (:func:`_plain_columns`):
        the plain comparison of small results (:mod:`result_rows`) needs no more, and a frame costs about 0.1 ms.
        """
        if self._columns is None:
            rows = self._small_rows()
            plain = _plain_columns(rows, len(self.names)) if rows is not None else None
            self._columns = plain if plain is not None else \
                (list(self.frame.dtypes), [column.to_list() for column in self.frame.get_columns()])
        return self._columns

    @property
    def dtypes(self) -> list[pl.DataType]:
        """``frame.dtypes``, without making the frame where :meth:`columns` need not."""
        return self.columns()[0] if self._columns is not None or self._small_rows() is not None \
            else list(self.frame.dtypes)

    def distinct_rows(self) -> int:
        """How many distinct rows the relation holds: its frame's ``n_unique()``, told from the values of
        :meth:`columns` without making the frame where the relation has at most :data:`PLAIN_CELLS` cells and
        each column holds one plain type (polars' ``n_unique`` has a fixed cost of about half a millisecond).
        Counted as polars counts: NULL equals NULL, NaN equals NaN, and ``-0.0`` equals ``0.0``.

        >>> relation_from_rows(["x", "y"], [(1, None), (1, None), (2.0, "a")]).distinct_rows()
        2
        >>> relation_from_rows(["x"], [(float("nan"),), (float("nan"),), (-0.0,), (0.0,)]).distinct_rows()
        2
        """
        if self.height * len(self.names) > PLAIN_CELLS or (self._columns is None and self._small_rows() is None):
            return self.frame.n_unique()
        dtypes, columns = self.columns()
        if not all(type(dtype) in _PLAIN_DTYPE_CLASSES for dtype in dtypes):
            return self.frame.n_unique()
        keyed = [[_NAN if value != value else value for value in column] if dtype == pl.Float64 else column
                 for dtype, column in zip(dtypes, columns)]  # NaN != NaN in Python; the same key in polars
        return len(set(zip(*keyed))) if keyed else min(self.height, 1)

    def _small_rows(self) -> Sequence[Sequence[Any]] | None:
        """The relation's rows where it holds them and at most :data:`PLAIN_CELLS` cells (:meth:`columns`)."""
        return self._rows if self._rows is not None and len(self._rows) * len(self.names) <= PLAIN_CELLS else None

    @property
    def frame(self) -> pl.DataFrame:
        if self._frame is None:
            assert self._rows is not None
            self._frame = _frame_of(self._rows, len(self.names))
            self._rows = None
        return self._frame

    @property
    def height(self) -> int:
        return len(self._rows) if self._rows is not None and self.names else self.frame.height

    @property
    def width(self) -> int:
        return self.frame.width if self._rows is None else len(self.names)

    def same_rows(self, other: Relation, *, null_equals_null: bool) -> bool:
        """Whether both relations still hold their rows (no frame made yet) and the frames they would make are
        equal (``frame.equals``), told from the rows alone: as many rows and columns, and in each position cells
        of one type (int, float, text, bytes, boolean or NULL) and value (a float zero of the same sign too).
        With a NULL in them, only where ``null_equals_null``. False says nothing: the frames decide then.

        >>> one = relation_from_rows(["x", "y"], [(1, "a")])
        >>> one.same_rows(relation_from_rows(["z", "y"], [(1, "a")]), null_equals_null=False)
        True
        >>> one.same_rows(relation_from_rows(["x", "y"], [(1.0, "a")]), null_equals_null=True)
        False
        """
        mine, theirs = self._rows, other._rows
        if mine is None or theirs is None or len(self.names) != len(other.names) or len(mine) != len(theirs) \
                or mine != theirs:
            return False
        for row, twin in zip(mine, theirs):
            for cell, twin_cell in zip(row, twin):
                kind = type(cell)
                if kind is not type(twin_cell) or kind not in _ROW_CELL_TYPES \
                        or (cell is None and not null_equals_null) \
                        or (kind is float and cell == 0.0
                            and math.copysign(1.0, cell) != math.copysign(1.0, twin_cell)):
                    return False
        return True

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


def _plan_of(dialect: str, rows: Sequence[Sequence[Any]]) -> Plan | None:
    """The :class:`Plan` in the rows of ``dialect``'s EXPLAIN (see :meth:`ExecutionAdapter.explain`); None when
    they hold none."""
    if dialect == "sqlite":
        return Plan(operators=[str(row[-1]) for row in rows], cost=None)
    try:
        document = rows[0][-1]
        nodes = json.loads(document) if isinstance(document, str) else document
        return _postgres_plan(nodes[0]["Plan"]) if dialect == "postgres" else _duckdb_plan(nodes)
    except (ValueError, KeyError, IndexError, TypeError):
        return None


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
    """A :class:`Relation` of database rows (each a sequence of one value per name), its frame made when first
    asked for (:func:`_frame_of`)."""
    return Relation(None, list(names), truncated, rows=rows)


#: The types of cell :meth:`Relation.same_rows` compares by value: what SQLite's driver returns.
_ROW_CELL_TYPES = frozenset({int, float, str, bytes, bool, type(None)})


#: The most cells of a relation whose :meth:`Relation.columns` are told from its rows (beyond, from its frame).
PLAIN_CELLS = 4_096
#: The polars type of a column whose values (NULLs aside) are all of one of these Python types.
_PLAIN_DTYPES: dict[type, pl.DataType] = {bool: pl.Boolean(), int: pl.Int64(), float: pl.Float64(),
                                         str: pl.String(), bytes: pl.Binary()}


#: The polars types of :data:`_PLAIN_DTYPES` and of a column of NULLs.
_PLAIN_DTYPE_CLASSES = frozenset({*(type(dtype) for dtype in _PLAIN_DTYPES.values()), pl.Null})
#: The key of a NaN among a column's values when rows are counted as polars counts them.
_NAN = object()


def _plain_columns(rows: Sequence[Sequence[Any]], width: int) -> tuple[list[pl.DataType], list[list[Any]]] | None:
    """The types and values of the columns :func:`_frame_of` would make of ``rows``, where each column holds
    only NULLs and values of one type of :data:`_PLAIN_DTYPES` (integers within 64 bits, text UTF-8 can
    encode): polars takes such a column as it is. None where a column holds anything else.

    >>> _plain_columns([(1, "a", None), (None, "b", None)], 3)
    ([Int64, String, Null], [[1, None], ['a', 'b'], [None, None]])
    """
    dtypes: list[pl.DataType] = []
    columns: list[list[Any]] = []
    for index in range(width):
        values = list(map(itemgetter(index), rows))
        kinds = set(map(type, values))
        kinds.discard(type(None))
        if not kinds:
            dtypes.append(pl.Null())
        else:
            kind = kinds.pop()
            if kinds or kind not in _PLAIN_DTYPES:
                return None
            if kind is int and not all(-(1 << 63) <= value < 1 << 63 for value in values if value is not None):
                return None
            if kind is str:
                try:  # text polars cannot hold (lone surrogates, in a given result) makes the frame refuse it
                    "".join(value for value in values if value is not None).encode()
                except UnicodeEncodeError:
                    return None
            dtypes.append(_PLAIN_DTYPES[kind])
        columns.append(values)
    return dtypes, columns


def _frame_of(rows: Sequence[Sequence[Any]], width: int) -> pl.DataFrame:
    """The frame of database rows, tolerating SQLite's per-value typing.

    A column whose values share a type becomes a typed polars column; one mixing numbers and text (possible in
    SQLite) becomes text with type tags (see :func:`tagged_text`), so ``1`` and ``'1'`` stay different.
    """
    # Column-wise construction with strict typing: polars' row-wise constructor would silently coerce a
    # column holding 1 and 'a' to text, making the number 1 equal to the string '1'.
    # Each column taken with itemgetter, not zip(*rows): that makes an iterator per row, objects the garbage
    # collector tracks, and a collection among a run's parse trees cost ten times the transposition itself.
    return pl.DataFrame([_column_series(f"c{i}", list(map(itemgetter(i), rows))) for i in range(width)])


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
    values = _finite_decimals(values)
    try:
        series = pl.Series(name, values, strict=True)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        pass
    else:
        if not _compared_as_text(series.dtype):
            return series
        return pl.Series(name, [None if value is None else value_text(value) for value in values], dtype=pl.Utf8)
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
            subset = [value_text(v) for v in subset]
        for i, rendered in zip(indexes, tagged_text(pl.Series(subset)).to_list()):
            text[i] = rendered
    return pl.Series(name, text, dtype=pl.Utf8)


def _compared_as_text(dtype: pl.DataType) -> bool:
    """Whether a column of ``dtype`` is compared through its values' text (:func:`value_text`): lists, arrays,
    structs (DuckDB's LIST, STRUCT and MAP, PostgreSQL's arrays and json), durations (intervals) and Python
    objects (UUIDs, PostgreSQL's ranges). Result comparison joins, sorts and casts columns, which polars cannot
    do on these (a cast of a list to text raises; a join on an object column panics), so a case returning one
    ended as an engine error instead of being compared."""
    return dtype.is_nested() or dtype == pl.Object or isinstance(dtype, pl.Duration)


def value_text(value: Any) -> str:
    """``value`` as the text it is compared by when its column is :func:`_compared_as_text` (or mixes such values
    with others): a list as its items in brackets, a mapping as its entries in the order of their keys' text,
    inside either a text quoted (``['1']`` is not ``[1]``) and a number as numbers compare (:func:`_number_text`),
    NULL as ``NULL``; anything else as ``str`` gives it.

    >>> value_text([1, None, "a", [2.5]]), value_text({"b": 1.0, "a": [True]})
    ('[1, NULL, "a", [2.5]]', '{"a": [true], "b": 1}')
    >>> import datetime, uuid
    >>> value_text(datetime.timedelta(days=1, hours=2)), value_text(uuid.UUID(int=1))
    ('1 day, 2:00:00', '00000000-0000-0000-0000-000000000001')
    """
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_item_text(item) for item in value) + "]"
    if isinstance(value, dict):
        entries = sorted((_item_text(key), _item_text(item)) for key, item in value.items())
        return "{" + ", ".join(f"{key}: {item}" for key, item in entries) + "}"
    return str(value)


def _item_text(value: Any) -> str:
    """An item of a list or mapping as :func:`value_text` writes it: NULL, a text quoted, a boolean as ``true``
    or ``false``, a number as :func:`_number_text`."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return _number_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):  # psycopg2 gives a bytea array's items as memoryview
        return binary_text(bytes(value))
    return value_text(value)


def _number_text(value: int | float | Decimal) -> str:
    """A number as one text whatever type held it, as numbers outside lists compare: ``1``, ``1.0`` and
    ``Decimal('1.00')`` are ``1``, ``Decimal('1.50')`` is ``1.5``, ``-0.0`` is ``0``; an integer exactly, any
    other number as the float nearest to it.

    >>> [_number_text(v) for v in (1, 1.0, Decimal("1.00"), Decimal("1.50"), -0.0, 2**60 + 1, float("nan"))]
    ['1', '1', '1', '1.5', '0', '1152921504606846977', 'NaN']
    """
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal) and value.is_nan():  # quiet or signaling (which float() refuses)
        return "NaN"
    if isinstance(value, Decimal) and (value.is_infinite() or abs(value.adjusted()) > _EXACT_DECIMAL_DIGITS):
        value = float(value)  # an infinity, or too large or small to write out whole: the float nearest
    if not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if value == int(value):
        return str(int(value))
    return repr(float(value))


#: The largest power of ten of a decimal :func:`_number_text` writes out whole (past it, as the nearest float).
_EXACT_DECIMAL_DIGITS = 300


def _finite_decimals(values: list[Any]) -> list[Any]:
    """``values`` with every ``Decimal`` in them or in their lists (PostgreSQL arrays) made a float, where one of
    them is beyond polars' decimals: NaN or infinite (PostgreSQL's ``numeric`` has both), on which polars panics
    (``PanicException``, which ``except Exception`` does not catch), or of more than 38 digits or beyond 10^38
    (``1e100::numeric``), which it refuses. As floats they compare as the float values do. Values without one are
    handed back as they are.

    >>> _finite_decimals([Decimal("1.5"), [Decimal("2"), None]])
    [Decimal('1.5'), [Decimal('2'), None]]
    >>> _finite_decimals([Decimal("1.5"), [Decimal("NaN"), Decimal("-Infinity")]])
    [1.5, [nan, -inf]]
    >>> _finite_decimals([Decimal("1E+100")])
    [1e+100]
    """
    kinds = set(map(type, values))
    if (Decimal in kinds or list in kinds) and any(map(_beyond_polars, values)):
        return [_as_float(value) for value in values]
    return values


#: The most digits (and the largest power of ten) of a decimal polars holds (its Decimal128).
_POLARS_DECIMAL_DIGITS = 38


def _beyond_polars(value: Any) -> bool:
    if isinstance(value, Decimal):
        return not value.is_finite() or len(value.as_tuple().digits) > _POLARS_DECIMAL_DIGITS \
            or abs(value.adjusted()) >= _POLARS_DECIMAL_DIGITS
    return isinstance(value, list) and any(map(_beyond_polars, value))


def _as_float(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    return [_as_float(item) for item in value] if isinstance(value, list) else value


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
        # SQLite: how a sandboxed connection opens, and those opened by this process that no query holds.
        self._sqlite_open: Callable[[], sqlite3.Connection] | None = None
        self._sqlite_idle: list[sqlite3.Connection] = []
        self._sqlite_kept_for: tuple[int, tuple[int, int] | None] = (os.getpid(), None)  # see _borrow_sqlite
        self._sqlite_length = 0  # SQLITE_LIMIT_LENGTH of a fresh connection, for a query given no max_cell_bytes
        self.neighbor_process = neighbor_process
        self.engine: sa.Engine | None = None  # SQLAlchemy's, for a server, DuckDB or a URL; none for SQLite files
        if neighbor_process is not None:
            self.identifier = target
            self._duckdb_database = NEIGHBOR_DATABASE
            # Never connected by a query (they run in the neighbor's process); it names the dialect.
            self.engine = _create_engine("duckdb:///:memory:", connect_args={"config": dict(DUCKDB_SANDBOX)})
        elif scratch is not None:
            # One connection for every query of the search, as for a SQLite file (:meth:`_sqlite_session`); its
            # statement is closed before the next neighbor is built.
            self.identifier = target
            self._sqlite_open = lambda: sqlite_memory_read_only(scratch)
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
        if self.dialect == "postgres" and not allow_privileged_role and self.engine is not None:
            privileges = postgres_privileges(self.engine)
            if privileges:
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
            self.identifier = url.render_as_string(hide_password=True)
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
            self._sqlite_open = lambda: sqlite_read_only(path)
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
        reason = _gate(outcome, self.dialect, sql) if outcome.success else \
            f"not run: the safety gate could not read the query ({outcome.error})"
        if reason is not None:
            return Execution(False, None, ExecutionError(category="unsafe_statement", message=reason), 0.0)
        if self._duckdb_database is not None:
            return self._execute_duckdb(Request(self._duckdb_database, _strip_terminator(sql), timeout, limit,
                                                max_bytes, max_cell_bytes))
        started = time.perf_counter()
        try:
            with self._session(timeout, max_cell_bytes) as connection:
                # PostgreSQL: no FETCH starts past this, the watchdog's deadline, armed once connected (_session)
                deadline = time.monotonic() + timeout / 1000
                # The DBAPI cursor, given no parameters: drivers then leave '%' and ':' in the SQL alone. On
                # PostgreSQL a server-side cursor, so that only the rows kept ever reach this process.
                raw = connection
                shape = _postgres_shape(raw, query_text(sql, self.dialect)) if self.dialect == "postgres" else None
                query = shape.query(max_cell_bytes, max_bytes) if shape is not None else _strip_terminator(sql)
                cursor = raw.cursor(name="sqlcmp_result") if self.dialect == "postgres" else raw.cursor()
                try:
                    cursor.execute(query)
                    merged = shape.rows(cursor, deadline) if shape is not None else None
                    fetched = fetch_bounded(cursor if merged is None else merged, limit, max_bytes, max_cell_bytes)
                    if merged is not None and merged.crossed and not fetched.truncated:
                        fetched = Fetched(fetched.rows, True, fetched.warnings + [
                            f"result truncated at max_result_bytes={max_bytes:,}: the last row's values add up "
                            f"to more than that, and the server sent them cut at {CROSSING_CELL_CHARS}"])
                    if cursor.description is None:
                        raise _NoRows()
                    names = shape.names if shape is not None else [str(c[0]) for c in cursor.description]
                    elapsed = (time.perf_counter() - started) * 1000
                finally:
                    if self.dialect == "sqlite":  # a statement cut short keeps reading until it is closed
                        cursor.close()
        except _NoRows:
            error = ExecutionError(category="unsafe_statement", message="statement returned no result set")
            return Execution(False, None, error, (time.perf_counter() - started) * 1000)
        except _sqlalchemy_errors("DBAPIError") as failure:
            return Execution(False, None, execution_error(_db_message(failure)), (time.perf_counter() - started) * 1000)
        except self._driver_errors as failure:
            message = str(failure).strip()
            if isinstance(failure, sqlite3.DataError) and "too big" in message:  # the length limit of _session
                message += f" (a value longer than max_cell_bytes={max_cell_bytes:,})"
            elif self.dialect == "postgres" and _PG_CANCELLED in message:  # the watchdog's cancel (_engine_session)
                message = f"{_pg_timeout(timeout)}: {message}"
            return Execution(False, None, execution_error(message), (time.perf_counter() - started) * 1000)
        except _PastDeadline:
            return Execution(False, None, execution_error(f"{_pg_timeout(timeout)}: no FETCH starts past it"),
                             (time.perf_counter() - started) * 1000)
        except _sqlalchemy_errors("SQLAlchemyError") as failure:
            return Execution(False, None, execution_error(str(failure)), (time.perf_counter() - started) * 1000)
        except (ValueError, OverflowError, UnicodeError, sqlite3.Error) as failure:  # driver-side conversions
            message = f"{type(failure).__name__}: {failure}"
            return Execution(False, None, execution_error(message), (time.perf_counter() - started) * 1000)
        relation = relation_from_rows(names, fetched.rows, fetched.truncated)
        return Execution(True, relation, None, elapsed, fetched.warnings)

    def gate_parse(self, sql: str, timeout_ms: int) -> ParseOutcome:
        """The parse of ``sql`` that the statement gate reads (no canonical form), cut at ``timeout_ms``: what
        :meth:`execute` makes of a query given as text, for a caller that runs one text many times and hands
        it this parse instead (the neighbor search's tie check runs one on every neighbor)."""
        return parse(sql, self.dialect, deadline=time.monotonic() + timeout_ms / 1000,
                     budget=f"the query's timeout ({timeout_ms} ms)", canonical=False)

    def _execute_duckdb(self, request: Request) -> Execution:
        """Run ``request`` in a DuckDB process of this adapter (:mod:`~sqlcmp_dagster.engine.duckdb_process`),
        whose memory is bounded by :func:`~sqlcmp_dagster.engine.duckdb_process.memory_bound` of ``max_bytes``."""
        process = self.neighbor_process or self.borrow_duckdb_process()
        started = time.perf_counter()
        answer = process.run(request)
        elapsed = (time.perf_counter() - started) * 1000
        if process is not self.neighbor_process:
            self.return_duckdb_process(process)
        if answer.outcome == "ok":
            assert answer.names is not None and answer.fetched is not None
            relation = relation_from_rows(answer.names, answer.fetched.rows, answer.fetched.truncated)
            return Execution(True, relation, None, elapsed, answer.fetched.warnings)
        if answer.outcome == "no_rows":
            error = ExecutionError(category="unsafe_statement", message="statement returned no result set")
        elif answer.outcome == "memory":
            error = ExecutionError(category="unknown_error", message=(
                f"result_too_large: the query needed more than {memory_bound(request.max_bytes) >> 20} MiB of "
                f"memory in DuckDB (the bound set by max_result_bytes={request.max_bytes:,}): {answer.message}"))
        elif answer.outcome == "timeout":
            error = ExecutionError(category="timeout", message=f"interrupted: {answer.message}")
        else:
            error = execution_error(answer.message)
        return Execution(False, None, error, elapsed)

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
                  "duckdb": "EXPLAIN (FORMAT JSON) "}.get(self.dialect)
        if prefix is None:
            return None
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        if self._duckdb_database is not None:
            planned = self._execute_duckdb(Request(self._duckdb_database, prefix + _strip_terminator(sql), timeout,
                                                   16, max_bytes, max_bytes))
            if planned.relation is None or not planned.relation.height:
                return None
            return _plan_of(self.dialect, planned.relation.frame.rows())
        try:
            with self._session(timeout) as connection:
                cursor = connection.cursor()
                try:
                    cursor.execute(prefix + _strip_terminator(sql))
                    rows = cursor.fetchall()
                finally:
                    cursor.close()
        except (*_sqlalchemy_errors("SQLAlchemyError"), *self._driver_errors):
            return None
        return _plan_of(self.dialect, rows)

    @property
    def database_file(self) -> str | None:
        """The file a SQLite or DuckDB adapter reads (None for a server, an in-memory database or a neighbor):
        what its results depend on, with the file's size and times, in the expected-result cache."""
        if self.neighbor_process is not None:
            return None
        if self._sqlite_path is not None:
            return str(self._sqlite_path)
        return self._duckdb_database if self._duckdb_database not in (None, ":memory:") else None

    def fingerprint(self) -> str:
        """A content hash of the database: what a cached result depends on besides the case itself. A SQLite or
        DuckDB file's is its bytes' (a DuckDB file's write-ahead log's too); a server's, its address's. A DuckDB
        file's used to be its address's: a file edited in place kept its cached schema (the neighbor search then
        built neighbors without the new column) and its cases their Dagster data version."""
        if self._sqlite_path is not None:
            return _file_digest(self._sqlite_path)
        if self.neighbor_process is None and self._duckdb_database not in (None, ":memory:"):
            path = Path(str(self._duckdb_database))
            wal = path.with_name(path.name + ".wal")
            return _file_digest(path) + (_file_digest(wal) if wal.is_file() else "")
        return hashlib.sha256(self.identifier.encode()).hexdigest()[:16]

    def close(self) -> None:
        with self._idle_lock:
            processes, self._duckdb_idle = self._duckdb_idle, []
            connections, self._sqlite_idle = self._sqlite_idle, []
        for process in processes:
            process.stop()
        if self._sqlite_kept_for[0] == os.getpid():
            for connection in connections:
                connection.close()
        if self.engine is not None:
            self.engine.dispose()

    def _session(self, timeout_ms: int, max_cell_bytes: int = 0) -> AbstractContextManager[Any]:
        """A DBAPI connection of its own in a read-only transaction that is always rolled back, with the engine's
        own interruption armed: SQLite's progress handler and watchdog, PostgreSQL's statement_timeout and the
        watchdog's cancel, DuckDB's watchdog. On SQLite, no value may grow past ``max_cell_bytes`` (when given).
        A SQLite file or neighbor gets one of the adapter's kept connections (:meth:`_sqlite_session`), anything
        else one of SQLAlchemy's (:meth:`_engine_session`)."""
        if self._sqlite_open is not None:
            return self._sqlite_session(timeout_ms, max_cell_bytes)
        return self._engine_session(timeout_ms, max_cell_bytes)

    @contextmanager
    def _engine_session(self, timeout_ms: int, max_cell_bytes: int) -> Iterator[Any]:
        assert self.engine is not None, "an adapter without an engine reads a SQLite file or neighbor"
        with self.engine.connect() as connection:
            driver = connection.connection.driver_connection
            assert driver is not None, "a connection checked out of the engine holds its driver's"
            if isinstance(driver, sqlite3.Connection):
                if max_cell_bytes:
                    driver.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_cell_bytes)
                guard = sqlite_deadline(driver, timeout_ms)
            elif self.dialect == "duckdb":
                guard = interrupt_after(driver.interrupt, timeout_ms)
            elif self.dialect == "postgres":
                # statement_timeout (below) is per statement, and a query is several: the probe, the cursor's
                # DECLARE and a FETCH per batch. The watchdog's cancel ends the whole within timeout_ms.
                guard = interrupt_after(driver.cancel, timeout_ms)
            else:
                guard = _noop()
            with guard:
                transaction = connection.begin()
                try:
                    if self.dialect == "postgres":
                        connection.exec_driver_sql("SET TRANSACTION READ ONLY")
                        connection.exec_driver_sql(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
                    yield connection.connection
                finally:
                    transaction.rollback()

    @contextmanager
    def _sqlite_session(self, timeout_ms: int, max_cell_bytes: int) -> Iterator[sqlite3.Connection]:
        """:meth:`_session` on a SQLite file or neighbor: one of this adapter's sandboxed connections, kept for
        the next query once rolled back. Opening one and SQLAlchemy's checkout per query were a third of the
        adapter's cost on Spider's small queries. Nothing a query may do outlives it on the connection: the
        sandbox (``mode=ro``, ``query_only``, the authorizer) is set when it opens and the authorizer denies
        every pragma that sets something, ``ATTACH`` and temporary objects; the length limit is set for each
        query, the progress handler and watchdog are undone after it; the rollback ends any transaction or
        savepoint it opened, and a connection whose rollback fails is closed, not kept."""
        connection = self._borrow_sqlite()
        kept = False
        try:
            connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_cell_bytes or self._sqlite_length)
            with sqlite_deadline(connection, timeout_ms):
                try:
                    yield connection
                finally:
                    connection.rollback()
                    kept = True
        finally:
            if kept:
                with self._idle_lock:
                    self._sqlite_idle.append(connection)
            else:
                connection.close()

    def _borrow_sqlite(self) -> sqlite3.Connection:
        """An idle sandboxed connection, or a new one. Connections are kept for one process and one file: a
        forked child opens its own (a SQLite connection must not cross a fork), and a file replaced at its path
        (a new inode, which a kept connection would go on reading) closes the kept ones."""
        assert self._sqlite_open is not None
        now = (os.getpid(), _file_identity(self._sqlite_path) if self._sqlite_path is not None else None)
        with self._idle_lock:
            stale: list[sqlite3.Connection] = []
            if now != self._sqlite_kept_for:
                stale = self._sqlite_idle if now[0] == self._sqlite_kept_for[0] else []
                self._sqlite_idle, self._sqlite_kept_for = [], now
            connection = self._sqlite_idle.pop() if self._sqlite_idle else None
        for old in stale:
            old.close()
        if connection is None:
            connection = self._sqlite_open()
            self._sqlite_length = connection.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        return connection


def _file_identity(path: Path) -> tuple[int, int] | None:
    """The device and inode at ``path``, or None when nothing is there (opening it then fails as it would)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


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


#: PostgreSQL types whose values are at most a few dozen bytes (or a bounded few KB, as numeric): not cut.
_PG_FIXED_TYPES = frozenset({
    16, 18, 19, 20, 21, 23, 26, 700, 701, 790, 1700, 1082, 1083, 1114, 1184, 1186, 1266, 2950, 650, 869, 829,
})
#: PostgreSQL types measured and cut as they are; any other type is measured and cut through its text form.
_PG_TEXT_TYPES = frozenset({25, 1042, 1043})
_PG_BYTEA = 17
#: PostgreSQL's message for a statement cancelled by the client (the watchdog's ``cancel``).
_PG_CANCELLED = "canceling statement due to user request"


@dataclass(frozen=True)
class _PostgresShape:
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


class _PastDeadline(Exception):
    """A PostgreSQL query's timeout passed between two of its FETCHes."""


def _pg_timeout(timeout_ms: int) -> str:
    return f"interrupted at the query's timeout ({timeout_ms:,} ms for the query and all its fetches)"


@dataclass
class _MergedCursor:
    """A DBAPI cursor over a :class:`_PostgresShape` query whose rows come back in the query's own columns.

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
            raise _PastDeadline()
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


def _postgres_shape(raw: Any, sql: str) -> _PostgresShape:
    """The columns of ``sql``, a :func:`~parsing.query_text` (planned, not run: ``LIMIT 0``). When that fails,
    the query does: the driver's error is raised as the query's own, and the query never runs unwrapped (it
    would send its values uncut)."""
    cursor = raw.cursor()
    try:
        cursor.execute(f"SELECT * FROM ({_wrapped(sql)}) AS sqlcmp_shape LIMIT 0")
        description = cursor.description or []
    finally:
        cursor.close()
    return _PostgresShape(sql=sql, names=[str(column[0]) for column in description],
                          cuttable=[(i, int(column[1])) for i, column in enumerate(description)
                                    if int(column[1]) not in _PG_FIXED_TYPES])


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


def sqlite_read_only(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file at ``path`` that cannot write: opened ``mode=ro`` and ``query_only``,
    under :func:`sqlite_authorizer`."""
    return _sqlite_sandboxed(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, check_same_thread=False))


def sqlite_memory_read_only(name: str) -> sqlite3.Connection:
    """A connection to the shared in-memory SQLite database ``name`` (``file:NAME?mode=memory&cache=shared``,
    alive while its builder holds a connection) that cannot write: the rules of :func:`sqlite_read_only`. It
    reads what its builder has not committed yet (``read_uncommitted``): a neighbor database is built in a
    transaction that is rolled back once its queries have run (:mod:`~sqlcmp_dagster.engine.neighbor_scratch`)."""
    connection = sqlite3.connect(f"file:{quote(name)}?mode=memory&cache=shared", uri=True, check_same_thread=False)
    connection.execute("PRAGMA read_uncommitted = ON")
    return _sqlite_sandboxed(connection)


def _sqlite_sandboxed(connection: sqlite3.Connection) -> sqlite3.Connection:
    connection.execute("PRAGMA query_only = ON")
    connection.set_authorizer(sqlite_authorizer)
    # Text that is not valid UTF-8 comes back as replacement characters instead of failing the whole query.
    connection.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    return connection


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
    fail with ``not authorized`` even past the gate.

    >>> sqlite_authorizer(sqlite3.SQLITE_ATTACH, "/tmp/x.db", None, None, None) == sqlite3.SQLITE_DENY
    True
    """
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if denied(second or "", "sqlite") else sqlite3.SQLITE_OK
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


@contextmanager
def sqlite_deadline(connection: sqlite3.Connection, timeout_ms: int) -> Iterator[None]:
    """Interrupt SQLite once ``timeout_ms`` has passed: from inside its VM loop (the progress handler), and
    from the process's watchdog thread (:func:`interrupt_after`), because one VM step can take minutes
    (``replace`` over a 20 MB string in a recursive CTE) and the progress handler only runs between steps,
    while an interrupt stops at the next opcode."""
    deadline = time.monotonic() + timeout_ms / 1000
    handler: Callable[[], int] = lambda: 1 if time.monotonic() > deadline else 0  # noqa: E731
    connection.set_progress_handler(handler, _SQLITE_PROGRESS_STEPS)
    try:
        with interrupt_after(connection.interrupt, timeout_ms):
            yield
    finally:
        connection.set_progress_handler(None, 0)


def _gate(outcome: ParseOutcome, dialect: str, sql: str) -> str | None:
    """:func:`unsafe_reason` of ``outcome`` parsed from ``sql``, walked once per parsed query: the neighbor
    search runs one parsed query on each neighbor database, and the walk cost a tenth of a Spider run. Answers
    are kept by the parsed query's identity and text for the last :data:`_GATE_ANSWERS_KEPT` queries; each entry
    holds its ``ParseOutcome`` (a frozen record), so the identity cannot be reused by another query while the
    answer is kept."""
    key = (id(outcome), dialect, sql)
    with _gate_lock:
        kept = _gate_answers.get(key)
        if kept is not None and kept[0] is outcome:
            _gate_answers.move_to_end(key)
            return kept[1]
    reason = unsafe_reason(outcome, dialect, sql)
    with _gate_lock:
        _gate_answers[key] = (outcome, reason)
        _gate_answers.move_to_end(key)
        while len(_gate_answers) > _GATE_ANSWERS_KEPT:
            _gate_answers.popitem(last=False)
    return reason


@contextmanager
def _noop() -> Iterator[None]:
    yield


class _NoRows(Exception):
    """The statement ran but produced no result set (it was not a query)."""


def _create_engine(url: str, **options: Any) -> sa.Engine:
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
