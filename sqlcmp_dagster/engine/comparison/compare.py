"""Layer 3's one entry point: :func:`compare_results` compares two materialized results under a mode and
returns every metric as a :class:`ResultComparison`, whichever path (:mod:`frames` or :mod:`rows`) paired them.

NULL equals NULL and nothing else (``null_equality_mode="strict"``, the default); with ``"sql_semantic"`` a
NULL equals nothing, not even NULL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from sqlcmp_dagster.engine.comparison import frames, rows
from sqlcmp_dagster.engine.comparison.shared import ColumnStats, ComparisonPath, Rules, type_class
from sqlcmp_dagster.engine.models import EvalConfig, ResolvedMode
from sqlcmp_dagster.engine.relation import Relation


@dataclass
class ResultComparison:
    """Every Layer 3 metric of one expected/actual pair, plus what Layer 4 needs to explain a mismatch."""

    comparison_mode: ResolvedMode
    mode_pass: bool
    bag_pass: bool
    ordered_pass: bool | None
    schema_match: dict[str, Any]
    row_overlap: float
    cell_overlap: float
    cardinality_match: dict[str, Any]
    numeric_tolerance_match: dict[str, Any]
    null_handling_match: bool
    columns: list[ColumnStats]
    matched_rows: int  # rows paired under the mode's own pairing (positional/tie-aware when ordered)
    bag_matched_rows: int  # rows paired as a multiset, whatever the mode
    missing_rows: list[list[Any]]
    extra_rows: list[list[Any]]
    extra_columns: list[str]
    vacuous: bool
    ties_checked: bool
    tie_ambiguous: bool = False  # LIMIT cut inside an ORDER BY tie; the actual rows are an equally valid choice
    warnings: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        """``metrics.result.*`` with the report's names."""
        return {
            "result_equality_family": {
                "comparison_mode": self.comparison_mode,
                "mode_pass": self.mode_pass,
                "mode_details": {
                    "order-insensitive": self.bag_pass,
                    "order-sensitive": self.ordered_pass,
                    "vacuous_match": self.vacuous,
                    "ties_checked": self.ties_checked,
                    "tie_ambiguous": self.tie_ambiguous,
                    "matched_rows": self.matched_rows,
                },
            },
            "schema_match": self.schema_match,
            "row_overlap": self.row_overlap,
            "cell_overlap": self.cell_overlap,
            "cardinality_match": self.cardinality_match,
            "numeric_tolerance_match": self.numeric_tolerance_match,
            "null_handling_match": self.null_handling_match,
        }


def compare_results(
    expected: Relation,
    actual: Relation,
    *,
    mode: ResolvedMode,
    config: EvalConfig,
    order_keys: list[int] | None = None,
    path: ComparisonPath | None = None,
) -> ResultComparison:
    """Compare two materialized results under ``mode``.

    ``order_keys`` are the expected projection's column indexes that carry the top-level ORDER BY keys; when
    given, order-sensitive mode accepts rows permuted among ties of those keys. Without them ties cannot be
    seen in the result and the order is checked strictly (with a warning).

    ``path`` forces an implementation; by default small results (:func:`rows.suits`) are compared in plain
    Python, where polars' fixed cost per frame operation would be most of the time, and the rest with polars, as
    is a small result whose tolerance passes would check more pairs of cells one by one than
    ``budgets.SMALL_RESULT_PAIRS`` (:class:`rows.TooManyPairs`). The two paths answer identically
    (tests/test_properties.py checks it on the same inputs).
    """
    rules = Rules.of(mode, config)
    rows_path = rows.suits(expected, actual) if path is None else path == "rows"
    try:
        paired = rows.pair(expected, actual, mode, order_keys, rules, bounded=path is None) if rows_path \
            else frames.pair(expected, actual, mode, order_keys, rules)
    except rows.TooManyPairs:  # chosen for its size, the plain path met a large tolerance pass
        paired = frames.pair(expected, actual, mode, order_keys, rules)
    mapping, stats = paired.mapping, paired.columns
    warnings: list[str] = []
    if paired.cut:
        warnings.append(f"column-permutation search cut at its work budget ({paired.cut}): columns whose values "
                        "cannot tell them apart were aligned greedily, so a permutation that matches may exist "
                        "untried")
    if mode == "order-sensitive" and order_keys and not paired.ties_checked:
        warnings.append("ORDER BY keys are not all in the projection: ties could not be recognized, order "
                        "checked strictly")
    schema = _schema_match(expected, actual, mapping)
    schema_ok = schema["attribute_count_match"] and all(j is not None for j in mapping)
    if rules.by_name:
        schema_ok = schema_ok and schema["names_match"]
    if rules.positional:
        schema_ok = schema_ok and schema["order_match"]
    bag_equal = paired.bag_matched == expected.height == actual.height
    row_equal = bag_equal if mode == "order-insensitive" else paired.ordered_pass
    vacuous = expected.height == 0 and actual.height == 0
    if vacuous:
        warnings.append("both results are empty: the match is vacuous")
    if expected.truncated or actual.truncated:
        warnings.append("a result was truncated at max_result_rows: the comparison covers the kept rows only")

    total_rows = expected.height + actual.height
    row_overlap = 1.0 if total_rows == 0 else 2 * paired.bag_matched / total_rows
    width = max(expected.width, actual.width)
    cells = max(expected.height, actual.height) * width
    equal_cells = sum(s.compared - s.mismatched for s in stats)
    cell_overlap = 1.0 if cells == 0 else equal_cells / cells
    numeric_stats = [s for s in stats if s.numeric]
    outside = sum(s.mismatched for s in numeric_stats)
    diffs = [s.max_abs_diff for s in numeric_stats if s.max_abs_diff is not None]
    null_ok = all(s.null_mismatched == 0 for s in stats) and paired.null_counts_agree

    return ResultComparison(
        comparison_mode=mode,
        mode_pass=bool(schema_ok and row_equal),
        bag_pass=bag_equal and schema_ok,
        ordered_pass=bool(paired.ordered_pass and schema_ok),
        schema_match=schema,
        row_overlap=row_overlap,
        cell_overlap=cell_overlap,
        cardinality_match={
            "expected_rows": expected.height,
            "actual_rows": actual.height,
            "delta": actual.height - expected.height,
            "ratio": None if expected.height == 0 else actual.height / expected.height,
            "match": expected.height == actual.height,
        },
        numeric_tolerance_match={
            "atol": rules.tolerance.atol,
            "rtol": rules.tolerance.rtol,
            "numeric_columns": [s.name for s in numeric_stats],
            "compared_cells": sum(s.compared for s in numeric_stats),
            "within_tolerance_cells": sum(s.within_tolerance for s in numeric_stats),
            "outside_tolerance_cells": outside,
            "max_abs_diff": max(diffs) if diffs else None,
            "match": outside == 0,
        },
        null_handling_match=null_ok,
        columns=stats,
        matched_rows=paired.matched,
        bag_matched_rows=paired.bag_matched,
        missing_rows=paired.missing_rows,
        extra_rows=paired.extra_rows,
        extra_columns=[actual.names[j] for j in range(actual.width) if j not in set(mapping)],
        vacuous=vacuous,
        ties_checked=paired.ties_checked,
        warnings=warnings,
    )


def can_pass(expected: Relation, actual: Relation) -> bool:
    """Whether :func:`compare_results` can find ``actual`` a match for ``expected`` in any mode: only with as many
    rows and as many columns on both sides (``attribute_count_match`` and a row for every row are part of every
    mode's pass). Searches that need only the verdict of many comparisons ask this first.

    >>> from sqlcmp_dagster.engine.relation import relation_from_rows
    >>> can_pass(relation_from_rows(["a"], [(1,), (2,)]), relation_from_rows(["b"], [(2,), (1,)]))
    True
    >>> can_pass(relation_from_rows(["a"], [(1,)]), relation_from_rows(["a", "b"], [(1, 2)]))
    False
    """
    return expected.width == actual.width and expected.height == actual.height


def cut_inside_tie(expected: Relation, actual: Relation, uncut: Callable[[], Relation | None], *, offset: int,
                   order_keys: list[int], config: EvalConfig) -> bool:
    """Whether the expected query's LIMIT cuts inside a tie of its ORDER BY keys and ``actual`` is an equally
    valid answer: the same rows before the tied group, and rows at the cut drawn from that group.

    ``uncut()`` runs the expected query without LIMIT and OFFSET (None when it fails); ``order_keys`` index its
    projection. It is called only when the rows at hand leave the answer open: ``actual`` has as many rows and
    columns as ``expected`` and the same rows before the group that ends it (the group is read from ``expected``'s
    last row, whose keys are the cut's). Otherwise no tie can make ``actual`` valid, and the query, which on a
    large database sorts and fetches far more than the case's own queries, is not run.
    """
    n = expected.height
    if n == 0 or actual.height != n or actual.width != expected.width or not order_keys:
        return False
    start = _group_start(expected, order_keys, n - 1)
    head = compare_results(_slice(expected, 0, start), _slice(actual, 0, start), mode="order-sensitive",
                           config=config, order_keys=order_keys)
    if not head.mode_pass:
        return False
    result = uncut()
    if result is None or result.height <= offset + n:
        return False
    keys = result.frame.select([pl.col(f"c{k}") for k in order_keys])
    boundary = keys.row(offset + n - 1)
    if keys.row(offset + n) != boundary:
        return False  # the cut falls between two different keys: no tie, nothing ambiguous
    group = Relation(result.frame.filter(_tied_with(order_keys, boundary)), result.names)
    tail = compare_results(group, _slice(actual, start, n - start), mode="order-insensitive", config=config)
    return tail.bag_matched_rows == n - start


def _tied_with(order_keys: list[int], boundary: tuple[Any, ...]) -> pl.Expr:
    """The rows whose ORDER BY keys (``order_keys``, indexes of the projection) are ``boundary``'s, NULL equal."""
    return pl.all_horizontal([pl.col(f"c{k}").eq_missing(v) for k, v in zip(order_keys, boundary)])


def _group_start(relation: Relation, order_keys: list[int], row: int) -> int:
    """The first row of ``relation`` (ordered by ``order_keys``) whose keys are those of row ``row``."""
    boundary = relation.frame.select([pl.col(f"c{k}") for k in order_keys]).row(row)
    tied = relation.frame.with_row_index("__i").filter(_tied_with(order_keys, boundary))
    return int(tied["__i"].min())  # type: ignore[arg-type]


def tied_at_cut(uncut: Relation, *, offset: int, kept: int, order_keys: list[int], width: int) -> Relation | None:
    """The rows a LIMIT chooses among at its cut when the cut falls inside a tie of ``order_keys`` (no keys: a
    LIMIT without ORDER BY, where every row ties), projected to the query's first ``width`` columns; None when
    the rows kept are the only valid answer (no cut, no tie at it, or every tied row is the same row).

    ``uncut`` is the query's result without LIMIT and OFFSET, with its ORDER BY keys among its columns; a result
    that matched only because the engine happened to return these tied rows in one order matched by luck.
    """
    end = offset + kept
    if kept == 0 or uncut.height <= end:
        return None
    frame = uncut.frame
    if order_keys:
        keys = frame.select([pl.col(f"c{k}") for k in order_keys])
        boundary = keys.row(end - 1)
        if keys.row(end) != boundary:
            return None
        frame = frame.filter(_tied_with(order_keys, boundary))
    group = frame.select([pl.col(f"c{i}") for i in range(width)])
    return None if group.n_unique() == 1 else Relation(group, uncut.names[:width])


def _slice(relation: Relation, start: int, length: int) -> Relation:
    return Relation(relation.frame.slice(start, length), relation.names)


def _schema_match(expected: Relation, actual: Relation, mapping: list[int | None]) -> dict[str, Any]:
    e_names = [n.lower() for n in expected.names]
    a_names = [n.lower() for n in actual.names]
    mapped = [(i, j) for i, j in enumerate(mapping) if j is not None]
    e_types, a_types = expected.dtypes, actual.dtypes
    types_match = all(
        type_class(e_types[i]) in (type_class(a_types[j]), "null") or type_class(a_types[j]) == "null"
        for i, j in mapped
    )
    used = {j for _, j in mapped}
    return {
        "match": len(e_names) == len(a_names) and len(mapped) == len(e_names) and types_match,
        "attribute_count_match": len(e_names) == len(a_names),
        "expected_attributes": list(expected.names),
        "actual_attributes": list(actual.names),
        "names_match": len(mapped) == len(e_names) == len(a_names)
        and all(e_names[i] == a_names[j] for i, j in mapped),
        "types_match": types_match,
        "order_match": len(e_names) == len(a_names) and all(i == j for i, j in mapped),
        "column_mapping": {expected.names[i]: actual.names[j] for i, j in mapped},
        "missing_attributes": [expected.names[i] for i, j in enumerate(mapping) if j is None],
        "extra_attributes": [actual.names[j] for j in range(len(a_names)) if j not in used],
    }
