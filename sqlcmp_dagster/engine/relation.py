"""Materialized results: the relation a query returned, its execution record, and the text of its values.

A relation keeps a database's rows until a frame is asked for; values that polars cannot hold as they are
(nested lists, maps, UUIDs, intervals, decimals past 38 digits) are compared through one canonical text
(:func:`value_text`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from operator import itemgetter
from typing import Any

import polars as pl

from sqlcmp_dagster.engine.models import ExecutionError, binary_text
from sqlcmp_dagster.engine.sandbox.cell_text import value_text


#: Characters of text (bytes of binary) of one cell that a report's samples and result tables show.
SAMPLE_CELL_CHARS = 200


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
        the plain comparison of small results (:mod:`comparison.rows`) needs no more, and a frame costs about 0.1 ms.
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
    def rows(self) -> Sequence[Sequence[Any]] | None:
        """The database's rows while the relation holds them (None once its frame is made): what a cache keeps
        of a result, so that the relation it restores compares as cheaply as this one."""
        return self._rows

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
    #: SQLite's count of the query's virtual-machine steps (:class:`~.sandbox.sqlite.Progress`), its cost the same
    #: on every machine; None on other engines and for a result given rather than executed.
    steps: int | None = None
    #: Whether the query read the clock or chance (``ExecutionAdapter.execute``): run again on the same database
    #: it may give another result, so nothing keeps it beyond its run. Told of a database file's results only.
    unstable: bool = False


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


