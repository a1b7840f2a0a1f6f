"""The layer tables: each partitioned asset's columns with their polars types (nested ones as ``Struct`` and
``List``), allowed values and ranges, as pandera (polars) schemas. The assets build their frames from these
types (:func:`frame_schema`), so a column's type has one home. ``case_reports`` also carries the output
contract's failure precedence as dataframe-level rules, each named, so that a violation says which rule broke
and for which case."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import pandera.polars as pa
import polars as pl

from sqlcmp_dagster.engine.diagnostics import SCORES
from sqlcmp_dagster.engine.models import ErrorCategory, EvidenceStrength, SourceClause
from sqlcmp_dagster.engine.records import DIAGNOSTICS, EXECUTION_ERROR, JUDGMENT, PERFORMANCE, REPORT, RESULT, \
    STRUCTURE
from sqlcmp_dagster.engine.summary import SEVERITIES

_BLOCKED = ["parse_failure", "execution_failure"]
_VERDICTS = ["pass", "fail"]
#: The unit interval, as pandera's in_range takes it.
_UNIT_MIN, _UNIT_MAX = 0, 1


def _column(dtype: pl.DataType | type[pl.DataType], *checks: pa.Check, nullable: bool = True) -> pa.Column:
    return pa.Column(dtype, checks=list(checks), nullable=nullable)


def _every(expression: Callable[[pl.Expr], pl.Expr], name: str) -> pa.Check:
    """A column check from a polars expression over the column (nulls pass: nullability is checked apart)."""
    return pa.Check(lambda data: data.lazyframe.select(
        pl.col(data.key).is_null() | expression(pl.col(data.key)).fill_null(True)), name=name, error=name)


def _field_in_unit(name: str) -> Callable[[pl.Expr], pl.Expr]:
    """A struct column's field ``name`` in [0, 1]."""
    return lambda column: column.struct.field(name).is_between(_UNIT_MIN, _UNIT_MAX)


def _rule(name: str, description: str, holds: pl.Expr) -> pa.Check:
    """A dataframe-level rule: ``holds`` is true (or null: not applicable) on every row."""
    return pa.Check(lambda data: data.lazyframe.select(holds.fill_null(True)), name=name,
                    error=f"{name}: {description}")


def _in_unit() -> pa.Column:
    return _column(pl.Float64, pa.Check.in_range(_UNIT_MIN, _UNIT_MAX))


#: Columns every layer table has: the case (one row each) and, for a case the layer could not process, the
#: reason (the layer's own columns are then null, which is why they are nullable).
_CASE_ROWS = {"case_id": pa.Column(pl.Utf8, pa.Check.str_length(min_value=1), unique=True),
              "fault": _column(pl.Utf8)}
_TIMED = {"layer_ms": _column(pl.Float64, pa.Check.ge(0))}

_LAYERS: dict[str, dict[str, pa.Column]] = {
    "parsed_cases": {
        "case_hash": _column(pl.Utf8, pa.Check.str_length(min_value=16)),
        "dialect": _column(pl.Utf8),
        "validation": _column(pl.Utf8),  # Layer 1's state for the next layer: queries, ASTs, options (JSON)
        "relations": _column(pl.List(pl.Binary)),  # result sets as Arrow IPC, one per side
        "parse_success_actual": _column(pl.Boolean),
        "parse_success_expected": _column(pl.Boolean),
        "normalized_sql_actual": _column(pl.Utf8),
    },
    "executions": {
        "validation": _column(pl.Utf8),
        "relations": _column(pl.List(pl.Binary)),
        "execution_success_actual": _column(pl.Boolean),
        "execution_success_expected": _column(pl.Boolean),
        "execution_time_actual_ms": _column(pl.Float64, pa.Check.ge(0)),
        "execution_error_actual": _column(EXECUTION_ERROR, _every(
            lambda c: c.struct.field("category").is_in(get_args(ErrorCategory)), "error_taxonomy")),
        "blocked_reason": _column(pl.Utf8, pa.Check.isin(_BLOCKED)),
    },
    "structural_diffs": {
        "structures": _column(pl.List(STRUCTURE)),
        "normalized_sql_match": _column(pl.Boolean),
        "clause_weighted_distance": _in_unit(),
    },
    "result_comparisons": {
        "results": _column(pl.List(RESULT)),
        "chosen_index": _column(pl.Int64, pa.Check.ge(0)),
        "mode_pass": _column(pl.Boolean),
        "row_overlap": _in_unit(),
        "cell_overlap": _in_unit(),
        "tie_check_ms": _column(pl.Float64, pa.Check.ge(0)),
    },
    "diagnostics": {
        **{name: _column(dtype) for name, dtype in DIAGNOSTICS.items()},
        **{name: _in_unit() for name in (*SCORES, "confidence")},
        "likely_source_clause": _column(pl.Utf8, pa.Check.isin(get_args(SourceClause))),
        "evidence_strength": _column(pl.Utf8, pa.Check.isin(get_args(EvidenceStrength))),
        "performance": _column(PERFORMANCE),
        "performance_warnings": _column(pl.List(pl.Utf8)),
        "probe_execution_ms": _column(pl.Float64, pa.Check.ge(0)),
    },
    "judgments": {
        "status": _column(pl.Utf8, pa.Check.isin(["disabled", "skipped", "judged", "failed"])),
        "judgment": _column(JUDGMENT, _every(
            lambda c: c.struct.field("advisory_verdict").is_in(_VERDICTS), "advisory_verdict_values")),
        "judge_metadata": _column(pl.Utf8),
        "judge_warnings": _column(pl.List(pl.Utf8)),
        "skipped": _column(pl.Utf8),
        "deterministic_report": _column(pl.Struct(REPORT)),
    },
}

_execution_failed = (pl.col("blocked_reason") == "execution_failure") | \
    (pl.col("validity").struct.field("execution_success_actual") == False)  # noqa: E712 (polars expression)
_mode_pass = pl.col("metrics").str.json_path_match("$.result.result_equality_family.mode_pass")

#: The failure precedence of the output contract (engine/scoring.py), one rule each.
PRECEDENCE_RULES = [
    _rule("parse_failure_precedence",
          "a parse failure means verdict fail, severity critical failure, overall_score 0.0, blocked_reason "
          "parse_failure",
          ~((pl.col("blocked_reason") == "parse_failure")
            | (pl.col("validity").struct.field("parse_success_actual") == False))  # noqa: E712
          | ((pl.col("deterministic_verdict") == "fail") & (pl.col("severity") == "critical failure")
             & (pl.col("overall_score") == 0.0) & (pl.col("blocked_reason") == "parse_failure"))),
    _rule("execution_failure_precedence",
          "an execution failure (of a query that parsed) means verdict fail, severity critical failure, "
          "overall_score 0.0, blocked_reason execution_failure",
          ~_execution_failed
          | ((pl.col("deterministic_verdict") == "fail") & (pl.col("severity") == "critical failure")
             & (pl.col("overall_score") == 0.0) & (pl.col("blocked_reason") == "execution_failure"))),
    _rule("result_gate", "a failed result gate (mode_pass false) means verdict fail and overall_score <= 0.5",
          (_mode_pass != "false") | ((pl.col("deterministic_verdict") == "fail") & (pl.col("overall_score") <= 0.5))),
    _rule("performance_null_on_execution_failure", "performance metrics are null when an execution failed",
          ~_execution_failed | (pl.col("performance_scores").is_null()
                                & (pl.col("metrics").str.json_path_match("$.performance").is_null()))),
    _rule("verdict_consistency",
          "verdict_consistency_flag equals (advisory verdict == deterministic verdict) when an advisory "
          "verdict exists",
          pl.col("ai_advisory_verdict").is_null()
          | (pl.col("verdict_consistency_flag")
             == (pl.col("ai_advisory_verdict") == pl.col("deterministic_verdict"))).fill_null(False)),
]

_JSON_OBJECT = _every(lambda c: c.str.starts_with("{") & c.str.json_path_match("$").is_not_null(), "json_object")
_REPORT_COLUMNS: dict[str, pa.Column] = {
    **{name: _column(dtype) for name, dtype in REPORT.items()},
    "deterministic_verdict": _column(pl.Utf8, pa.Check.isin(_VERDICTS), nullable=False),
    "ai_advisory_verdict": _column(pl.Utf8, pa.Check.isin(_VERDICTS)),
    "overall_score": _column(pl.Float64, pa.Check.in_range(_UNIT_MIN, _UNIT_MAX), nullable=False),
    "structure_score": _in_unit(),
    "result_score": _in_unit(),
    "diagnostic_scores": _column(REPORT["diagnostic_scores"], *[
        _every(_field_in_unit(name), f"{name}_in_unit_range") for name in (*SCORES, "confidence")],
        _every(lambda c: c.struct.field("likely_source_clause").is_in(get_args(SourceClause)), "source_clause"),
        _every(lambda c: c.struct.field("evidence_strength").is_in(get_args(EvidenceStrength)), "evidence_strength")),
    "severity": _column(pl.Utf8, pa.Check.isin(list(SEVERITIES)), nullable=False),
    "explanations": _column(pl.List(pl.Utf8), nullable=False),
    "mismatch_map": _column(pl.Utf8, _JSON_OBJECT),
    "error_types": _column(pl.List(pl.Utf8), _every(
        lambda c: c.list.eval(pl.element().is_in(get_args(ErrorCategory))).list.all(), "error_taxonomy"),
        nullable=False),
    "blocked_reason": _column(pl.Utf8, pa.Check.isin(_BLOCKED)),
    "warnings": _column(pl.List(pl.Utf8), nullable=False),
    "validity": _column(REPORT["validity"], _every(lambda c: c.struct.field("case_valid").is_not_null(),
                                                    "case_valid_present"), nullable=False),
    "evidence": _column(pl.Utf8, _JSON_OBJECT, nullable=False),
    "run_metadata": _column(REPORT["run_metadata"], nullable=False),
    "metrics": _column(pl.Utf8, _JSON_OBJECT, nullable=False),
}

#: Asset name -> its contract.
SCHEMAS: dict[str, pa.DataFrameSchema] = {
    **{name: pa.DataFrameSchema({**_CASE_ROWS, **columns, **({} if name == "judgments" else _TIMED)}, name=name,
                                strict=True)
       for name, columns in _LAYERS.items()},
    "case_reports": pa.DataFrameSchema({**_REPORT_COLUMNS, **_CASE_ROWS}, checks=PRECEDENCE_RULES,
                                       name="case_reports", strict=True),
}


def frame_schema(asset: str) -> dict[str, Any]:
    """The polars types of ``asset``'s own columns (without ``case_id``, ``fault`` and ``layer_ms``, which
    :func:`sqlcmp_dagster.assets.common.per_case` adds), in the contract's order."""
    return {name: column.dtype.type for name, column in SCHEMAS[asset].columns.items()
            if name not in ("case_id", "fault", "layer_ms")}
