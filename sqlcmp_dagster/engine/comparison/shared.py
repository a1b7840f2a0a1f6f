"""What both comparison paths share: the rules a case is compared under (:class:`Tolerance`, :class:`Rules`),
the dtype families that decide how two columns compare, and what a path hands back (:class:`Paired`,
:class:`ColumnStats`), from which :func:`compare.compare_results` derives every metric."""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from sqlcmp_dagster.engine.models import EvalConfig, ResolvedMode
from sqlcmp_dagster.engine.relation import Relation


@dataclass(frozen=True)
class Tolerance:
    """Numeric tolerance in force: ``|a - b| <= atol + rtol * |b|`` with ``b`` the expected value."""

    atol: float
    rtol: float

    def within(self, expected: pl.Expr, actual: pl.Expr) -> pl.Expr:
        both_nan = expected.is_nan() & actual.is_nan()
        difference = (actual - expected).abs()
        # Only two finite values can be close: an infinite or NaN difference (an infinity or a NaN on one side)
        # is never within a bound, also not an infinite bound; polars would even find NaN <= NaN (it orders NaN
        # above every number). Equal infinities are equal (:func:`frames._cell_equal`).
        close = difference.is_finite() & (difference <= self.atol + self.rtol * expected.abs())
        return both_nan | close

    def close(self, expected: float, actual: float) -> bool:
        """The same rule on two plain numbers (for comparators outside polars)."""
        if math.isnan(expected) and math.isnan(actual):
            return True
        difference = abs(actual - expected)
        return math.isfinite(difference) and difference <= self.atol + self.rtol * abs(expected)


@dataclass
class ColumnStats:
    """Per expected column: how the paired cells compared (the raw material of per_column_mismatch_map)."""

    name: str
    actual_index: int | None
    actual_name: str | None
    numeric: bool
    compared: int = 0
    mismatched: int = 0
    null_mismatched: int = 0
    within_tolerance: int = 0
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None  # relative to the expected value


#: Which implementation compares: ``frames`` (polars, vectorized) or ``rows`` (plain Python, see
#: :mod:`rows`). Both give the same :class:`compare.ResultComparison`; the choice is speed only.
ComparisonPath = Literal["frames", "rows"]


@dataclass(frozen=True)
class Rules:
    """The comparison rules one case runs under (from its mode and :class:`EvalConfig`)."""

    tolerance: Tolerance
    nulls_equal: bool  # ``null_equality_mode="strict"``
    positional: bool  # columns are matched by position
    by_name: bool  # columns are matched by name
    max_rows: int  # ``max_rows_for_cell_alignment``

    @classmethod
    def of(cls, mode: ResolvedMode, config: EvalConfig) -> Rules:
        """The rules of a comparison in ``mode`` under ``config``."""
        atol, rtol = config.tolerances(mode)
        return cls(Tolerance(atol, rtol), nulls_equal=config.null_equality_mode == "strict",
                   positional=mode == "exact" or config.require_column_order_match,
                   by_name=mode == "exact" or config.require_column_name_match,
                   max_rows=config.max_rows_for_cell_alignment)

    @property
    def by_value(self) -> bool:
        """Whether columns are paired by the values they hold alone (neither by position nor by name): then no
        order of the result columns can be told from another (what the neighbor search's proof relies on)."""
        return not (self.positional or self.by_name)


@dataclass
class Paired:
    """What a path computes for one comparison; :func:`compare.compare_results` derives every metric from it."""

    mapping: list[int | None]
    cut: str | None  # why the column-permutation search stopped early, or None
    bag_matched: int  # rows paired as a multiset
    matched: int  # rows paired under the mode's own pairing
    ordered_pass: bool  # every row paired in order (ties of the ORDER BY keys permuted when checked)
    ties_checked: bool
    columns: list[ColumnStats]
    null_counts_agree: bool  # each paired column holds as many NULLs on both sides
    missing_rows: list[list[Any]]
    extra_rows: list[list[Any]]


def ties_checkable(mode: ResolvedMode, order_keys: list[int] | None, expected: Relation, actual: Relation,
                   mapping: list[int | None]) -> bool:
    """Whether ties of the ORDER BY keys can be recognized: every key column is in the projection and paired,
    and both sides have as many rows (else no order can match)."""
    return (mode == "order-sensitive" and bool(order_keys) and expected.height == actual.height
            and all(k < expected.width and mapping[k] is not None for k in order_keys or []))


def dtype_family(dtype: pl.DataType) -> str:
    """``null``, ``integer``, ``float`` (floating-point and decimal), ``boolean``, or the dtype's own name."""
    if dtype == pl.Null:
        return "null"
    if dtype == pl.Boolean:
        return "boolean"
    if dtype.is_integer():
        return "integer"
    if dtype.is_numeric():
        return "float"
    return str(dtype)


def type_class(dtype: pl.DataType) -> str:
    """The family, with integers and floats both ``numeric`` (what ``types_match`` and similarity compare)."""
    family = dtype_family(dtype)
    return "numeric" if family in ("integer", "float") else family
