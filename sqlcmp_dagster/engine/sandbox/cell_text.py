"""The one text a value is compared by when polars cannot compare it as it is (lists, maps, structs, intervals,
UUIDs), and the text of a binary value.

Used by the comparing process (:mod:`~sqlcmp_dagster.engine.relation`) and by the cut of a nested value that is
longer than ``max_cell_bytes`` (:func:`~sqlcmp_dagster.engine.sandbox.bounds.cut_cell`, run also in DuckDB's
query process), so that a cut value's digest is taken over exactly the text it would have been compared by. The
module imports nothing but the standard library: that process runs :mod:`.bounds` without the package.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from decimal import Decimal
from typing import Any


def binary_text(value: bytes) -> str:
    r"""A binary value as reports show it: ``\x`` and lowercase hex, PostgreSQL's ``bytea`` output form.

    >>> print(binary_text(b"\x00\xff"))
    \x00ff
    """
    return "\\x" + value.hex()


def value_text(value: Any) -> str:
    """``value`` as the text it is compared by when its column is compared as text (lists, structs, maps,
    intervals, UUIDs; ``relation``'s ``_compared_as_text``) or mixes such values with others: a list as its
    items in brackets, a mapping as its entries in the order of their keys' text, inside either a text quoted
    (``['1']`` is not ``[1]``) and a number as numbers compare (:func:`_number_text`), NULL as ``NULL``;
    anything else as ``str`` gives it.

    >>> value_text([1, None, "a", [2.5]]), value_text({"b": 1.0, "a": [True]})
    ('[1, NULL, "a", [2.5]]', '{"a": [true], "b": 1}')
    >>> import datetime, uuid
    >>> value_text(datetime.timedelta(days=1, hours=2)), value_text(uuid.UUID(int=1))
    ('1 day, 2:00:00', '00000000-0000-0000-0000-000000000001')
    """
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(item_text(item) for item in value) + "]"
    if isinstance(value, dict):
        entries = sorted((item_text(key), item_text(item)) for key, item in value.items())
        return "{" + ", ".join(f"{key}: {item}" for key, item in entries) + "}"
    return str(value)


def value_text_pieces(value: Any) -> Iterator[str]:
    """:func:`value_text` of ``value`` in pieces, one per text, number or mapping inside its lists (a mapping's
    entries are sorted by their text, so it is made whole): the cut of a list longer than ``max_cell_bytes``
    hashes its text without holding it whole (:func:`~.bounds.cut_cell`).

    >>> value = [["a", 1.0], {"k": [None]}, b"\\x00"]
    >>> list(value_text_pieces(value))[:6], "".join(value_text_pieces(value)) == value_text(value)
    (['[', '[', '"a"', ', ', '1', ']'], True)
    """
    if not isinstance(value, (list, tuple)):
        yield value_text(value)
        return
    yield "["
    for index, item in enumerate(value):
        if index:
            yield ", "
        if isinstance(item, (list, tuple)):
            yield from value_text_pieces(item)
        else:
            yield item_text(item)
    yield "]"


def item_text(value: Any) -> str:
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
