"""Layer outputs as plain records, so that each layer can be stored (one Parquet row per case) and resumed.

The Dagster assets persist what one layer computed and the next layer reads it back instead of recomputing
it: ASTs travel as sqlglot's JSON dump, result sets as Arrow IPC stream bytes (types intact), comparisons as
dicts.
Every ``*_record`` function has its ``*_from_record`` inverse; the round trip is exact (tested), a database URL's
password aside (:func:`validation_record`).
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any, cast

import polars as pl
import pyarrow as pa
from sqlglot import exp

from sqlcmp_dagster.engine.diagnostics import SCORES
from sqlcmp_dagster.engine.relation import Execution, Relation
from sqlcmp_dagster.engine.models import CompareRequest, ExecutionError, Report
from sqlcmp_dagster.engine.parsing import ParseOutcome
from sqlcmp_dagster.engine.redaction import redacted_url
from sqlcmp_dagster.engine.validation import Side, Validation
from sqlcmp_dagster.engine.comparison import ColumnStats, ResultComparison
from sqlcmp_dagster.engine.structure import CLAUSE_WEIGHTS, StructuralComparison


def validation_record(validation: Validation) -> tuple[str, list[bytes]]:
    """A validation as JSON text plus one IPC blob per side (actual first; empty bytes where no relation).

    The request's ``db``, a URL with a password, is kept with the password shown as ``***``
    (:func:`~sqlcmp_dagster.engine.redaction.redacted_url`): a record is stored where the case's suite may not be
    (an S3 bucket). The round trip is exact but for that password: the layer that reads the record back opens
    the database the case's suite names (``assets.common.SuiteDatabases``)."""
    sides = [validation.actual, *validation.expected]
    request = validation.request.model_dump(mode="json", exclude_unset=True)  # keeps which options were set
    if request.get("db"):
        request["db"] = redacted_url(request["db"])
    payload = {
        "request": request,
        "dialect": validation.dialect,
        "database": validation.database,
        "warnings": validation.warnings,
        "timings": validation.timings,
        "database_error": validation.database_error,
        "catalog": validation.catalog,
        "sides": [_side_payload(side) for side in sides],
    }
    return json.dumps(payload, ensure_ascii=False), [_frame_bytes(side.relation) for side in sides]


def validation_from_record(text: str, frames: list[bytes]) -> Validation:
    payload = json.loads(text)
    sides = [_side_from_payload(p, blob) for p, blob in zip(payload["sides"], frames, strict=True)]
    return Validation(
        request=CompareRequest.model_validate(payload["request"]),
        dialect=payload["dialect"],
        database=payload["database"],
        actual=sides[0],
        expected=sides[1:],
        warnings=list(payload["warnings"]),
        timings=dict(payload["timings"]),
        database_error=payload.get("database_error"),
        catalog=payload.get("catalog"),  # a record written before Layer 2 read the schema has none
    )


def _side_payload(side: Side) -> dict[str, Any]:
    parsed, execution = side.parsed, side.execution
    return {
        "sql": side.sql,
        "parse": {"success": parsed.success, "normalized_sql": parsed.normalized_sql, "error": parsed.error,
                  "statement_count": parsed.statement_count,
                  "ast": parsed.ast.dump() if parsed.ast is not None else None},
        "execution": None if execution is None else {
            "success": execution.success,
            "error": execution.error.model_dump() if execution.error else None,
            "elapsed_ms": execution.elapsed_ms,
            "warnings": execution.warnings,
            "steps": execution.steps,
            "names": execution.relation.names if execution.relation is not None else None,
            "truncated": execution.relation.truncated if execution.relation is not None else False,
        },
        "pre_materialized": side.pre_materialized,
    }


def _side_from_payload(payload: dict[str, Any], blob: bytes) -> Side:
    parse = payload["parse"]
    ast = cast(exp.Expression, exp.Expression.load(parse["ast"])) if parse["ast"] is not None else None
    parsed = ParseOutcome(parse["success"], ast, parse["normalized_sql"], parse["error"], parse["statement_count"])
    execution = None
    if payload["execution"] is not None:
        record = payload["execution"]
        relation = None
        if record["names"] is not None:
            relation = Relation(_frame_of(blob), list(record["names"]), record["truncated"])
        error = ExecutionError.model_validate(record["error"]) if record["error"] else None
        execution = Execution(record["success"], relation, error, record["elapsed_ms"], list(record["warnings"]),
                              record.get("steps"))  # a record written before steps were counted has none
    return Side(payload["sql"], parsed, execution, payload["pre_materialized"])


#: How an Arrow IPC *file* begins: records written before 2026-12-07 hold files, later ones streams.
_IPC_FILE_MAGIC = b"ARROW1"


def _frame_bytes(relation: Relation | None) -> bytes:
    """A result set as an Arrow IPC stream. Not the IPC file format: polars writes and reads a file through its
    streaming engine, 260 and 420 us for a Spider-sized result against 9 and 21 us for a stream, and a step of
    Spider dev writes 1,034 cases' two results (half a second of the executions step)."""
    if relation is None:
        return b""
    buffer = io.BytesIO()
    relation.frame.write_ipc_stream(buffer)
    return buffer.getvalue()


def _frame_of(blob: bytes) -> pl.DataFrame:
    """The result set of :func:`_frame_bytes`'s blob, or of a stored record's IPC file."""
    if blob.startswith(_IPC_FILE_MAGIC):
        return pl.read_ipc(io.BytesIO(blob))
    return pl.read_ipc_stream(io.BytesIO(blob))


# --- Typed layer tables -------------------------------------------------------------------------------------
# The polars types under which the Dagster layer assets store each layer's metrics, named as in the reports' metrics:
# a user can query the store directly (e.g. ``structures[1].clause_match.ordering.match``). Maps keyed by
# names the data chooses (columns of a result) become lists of structs with the key as a field; sampled result
# rows, whose values have any type, are JSON arrays (one string per row).

_TEXTS = pl.List(pl.Utf8)
CLAUSE_DETAIL = pl.Struct({"match": pl.Boolean, "similarity": pl.Float64, "expected": _TEXTS, "actual": _TEXTS})
#: One structural comparison (``metrics.structure``) against expected alternative ``expected_index``.
STRUCTURE = pl.Struct({"expected_index": pl.Int64, "normalized_sql_match": pl.Boolean,
                       "clause_match": pl.Struct({name: CLAUSE_DETAIL for name in CLAUSE_WEIGHTS}),
                       "clause_weighted_distance": pl.Float64})
COLUMN_PAIR = pl.Struct({"expected": pl.Utf8, "actual": pl.Utf8})
SCHEMA_MATCH = pl.Struct({"match": pl.Boolean, "attribute_count_match": pl.Boolean, "expected_attributes": _TEXTS,
                          "actual_attributes": _TEXTS, "names_match": pl.Boolean, "types_match": pl.Boolean,
                          "order_match": pl.Boolean, "column_mapping": pl.List(COLUMN_PAIR),
                          "missing_attributes": _TEXTS, "extra_attributes": _TEXTS})
CARDINALITY_MATCH = pl.Struct({"expected_rows": pl.Int64, "actual_rows": pl.Int64, "delta": pl.Int64,
                               "ratio": pl.Float64, "match": pl.Boolean})
NUMERIC_TOLERANCE_MATCH = pl.Struct({"atol": pl.Float64, "rtol": pl.Float64, "numeric_columns": _TEXTS,
                                     "compared_cells": pl.Int64, "within_tolerance_cells": pl.Int64,
                                     "outside_tolerance_cells": pl.Int64, "max_abs_diff": pl.Float64,
                                     "match": pl.Boolean})
COLUMN_STATS = pl.Struct({"name": pl.Utf8, "actual_index": pl.Int64, "actual_name": pl.Utf8, "numeric": pl.Boolean,
                          "compared": pl.Int64, "mismatched": pl.Int64, "null_mismatched": pl.Int64,
                          "within_tolerance": pl.Int64, "max_abs_diff": pl.Float64, "max_rel_diff": pl.Float64})
#: One result comparison (the ``metrics.result`` family and what Layer 4 reads) against ``expected_index``.
RESULT = pl.Struct({"expected_index": pl.Int64, "comparison_mode": pl.Utf8, "mode_pass": pl.Boolean,
                    "bag_pass": pl.Boolean, "ordered_pass": pl.Boolean, "schema_match": SCHEMA_MATCH,
                    "row_overlap": pl.Float64, "cell_overlap": pl.Float64, "cardinality_match": CARDINALITY_MATCH,
                    "numeric_tolerance_match": NUMERIC_TOLERANCE_MATCH, "null_handling_match": pl.Boolean,
                    "columns": pl.List(COLUMN_STATS), "matched_rows": pl.Int64, "bag_matched_rows": pl.Int64,
                    "missing_rows": _TEXTS, "extra_rows": _TEXTS, "extra_columns": _TEXTS, "vacuous": pl.Boolean,
                    "ties_checked": pl.Boolean, "tie_ambiguous": pl.Boolean, "warnings": _TEXTS})
COLUMN_MISMATCH = pl.Struct({"attribute": pl.Utf8, "actual_attribute": pl.Utf8, "status": pl.Utf8,
                             "compared_cells": pl.Int64, "mismatched_cells": pl.Int64, "null_mismatches": pl.Int64,
                             "mismatch_rate": pl.Float64, "severity": pl.Utf8, "within_tolerance_cells": pl.Int64,
                             "max_abs_diff": pl.Float64})
PER_COLUMN_MISMATCH_MAP = pl.Struct({"attributes": pl.List(COLUMN_MISMATCH), "extra_attributes": _TEXTS,
                                     "pairing": pl.Utf8})
#: One transplant of the verified-minimal-fix search (``evidence.probes``).
PROBE = pl.Struct({"clauses": _TEXTS, "branches": pl.List(pl.Int64), "passed": pl.Boolean, "sql": pl.Utf8,
                   "note": pl.Utf8})
#: ``diagnostic_scores.suggested_fix``.
SUGGESTED_FIX = pl.Struct({"found": pl.Boolean, "sql": pl.Utf8, "clauses": _TEXTS, "branches": pl.List(pl.Int64),
                           "size": pl.Int64,
                           "verified_by": pl.Utf8, "candidates_tried": pl.Int64, "alternatives": pl.List(_TEXTS),
                           "explanation": pl.Utf8})
#: Layer 4 (``metrics.diagnostics`` with the attribution, probes and evidence), one column per metric.
DIAGNOSTICS: dict[str, pl.DataType] = {
    **{name: pl.Float64() for name in SCORES}, "ordering_error_flag": pl.Boolean(),
    "cardinality_explosion_flag": pl.Boolean(), "per_column_mismatch_map": PER_COLUMN_MISMATCH_MAP,
    "likely_source_clause": pl.Utf8(), "confidence": pl.Float64(), "evidence_strength": pl.Utf8(),
    "ambiguous_case": pl.Boolean(), "suggested_fix": SUGGESTED_FIX, "probes": pl.List(PROBE), "evidence": _TEXTS,
    "neighborhood": pl.Utf8()}  # the neighbor search as JSON: a counterexample's rows have any column types
PERFORMANCE = pl.Struct({"execution_time_ratio": pl.Float64, "resource_cost_score": pl.Float64,
                         "plan_complexity_score": pl.Float64, "plan_complexity_expected": pl.Float64})
EXECUTION_ERROR = pl.Struct({"category": pl.Utf8, "message": pl.Utf8})


def typed_frame(rows: list[dict[str, Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """``rows`` (a dict per case, missing keys null) as a frame of ``schema``, converted by Arrow.

    polars converts nested Python values one at a time: a step's structural comparisons (a struct of seven
    clause structs per case) took 150 ms for 517 Spider cases, a third of the step beside the comparisons
    themselves, against 9 ms through ``pyarrow.Table.from_pylist``. Arrow is stricter (no bool for an integer, no
    number for a text, no Decimal for a float): rows it refuses are converted by polars, as before.

    >>> rows = [{"case_id": "a", "n": 1}, {"case_id": "b"}]
    >>> typed_frame(rows, {"case_id": pl.Utf8(), "n": pl.Int64()})["n"].to_list()
    [1, None]
    """
    arrow_schema = pl.DataFrame(schema=schema).to_arrow().schema
    try:
        table = pa.Table.from_pylist(rows, schema=arrow_schema)
    except (pa.ArrowException, OverflowError):
        return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)  # a Table converts to a frame (a chunked array to a series)
    return frame


def structure_row(index: int, structure: StructuralComparison) -> dict[str, Any]:
    """A structural comparison as a value of :data:`STRUCTURE`."""
    return {"expected_index": index, **structure.metrics()}


def structure_from_row(row: dict[str, Any]) -> StructuralComparison:
    return StructuralComparison(normalized_sql_match=row["normalized_sql_match"],
                                clause_match={name: dict(detail) for name, detail in row["clause_match"].items()},
                                clause_weighted_distance=row["clause_weighted_distance"])


def result_row(index: int, result: ResultComparison) -> dict[str, Any]:
    """A result comparison as a value of :data:`RESULT`."""
    fields = dataclasses.asdict(result)
    schema = dict(fields["schema_match"])
    schema["column_mapping"] = [{"expected": k, "actual": v} for k, v in schema["column_mapping"].items()]
    return {"expected_index": index, **fields, "schema_match": schema,
            "missing_rows": [_json_row(r) for r in result.missing_rows],
            "extra_rows": [_json_row(r) for r in result.extra_rows]}


def result_from_row(row: dict[str, Any]) -> ResultComparison:
    fields = {k: v for k, v in row.items() if k != "expected_index"}
    schema = dict(fields["schema_match"])
    schema["column_mapping"] = {pair["expected"]: pair["actual"] for pair in schema["column_mapping"]}
    return ResultComparison(**{**fields, "schema_match": schema,
                               "cardinality_match": dict(fields["cardinality_match"]),
                               "numeric_tolerance_match": dict(fields["numeric_tolerance_match"]),
                               "columns": [ColumnStats(**c) for c in fields["columns"]],
                               "missing_rows": [json.loads(r) for r in fields["missing_rows"]],
                               "extra_rows": [json.loads(r) for r in fields["extra_rows"]]})


def diagnostics_row(found: dict[str, Any]) -> dict[str, Any]:
    """Layer 4's output as the columns of :data:`DIAGNOSTICS` (the per-column map as a list by attribute)."""
    column_map = found["per_column_mismatch_map"]
    return {**found, "neighborhood": json.dumps(found.get("neighborhood"), default=str), "per_column_mismatch_map": {
        "attributes": [{"attribute": name, **detail} for name, detail in column_map["attributes"].items()],
        "extra_attributes": column_map["extra_attributes"], "pairing": column_map["pairing"]}}


def diagnostics_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`diagnostics_row`; a map entry keeps only the keys the engine gave it (the numeric
    ones only on numeric columns, the counts only on columns the actual result has)."""
    column_map = row["per_column_mismatch_map"]
    attributes = {}
    for entry in column_map["attributes"]:
        detail = {k: v for k, v in entry.items() if k != "attribute"}
        if detail["status"] == "missing":
            detail = {k: detail[k] for k in ("actual_attribute", "status", "mismatch_rate", "severity")}
        elif detail["within_tolerance_cells"] is None:
            del detail["within_tolerance_cells"], detail["max_abs_diff"]
        attributes[entry["attribute"]] = detail
    return {**{name: row[name] for name in DIAGNOSTICS},
            "per_column_mismatch_map": {"attributes": attributes,
                                        "extra_attributes": list(column_map["extra_attributes"]),
                                        "pairing": column_map["pairing"]},
            "suggested_fix": _suggested_fix(row["suggested_fix"]),
            "probes": [{**p, "clauses": list(p["clauses"]), "branches": list(p["branches"])} for p in row["probes"]],
            "evidence": list(row["evidence"]),
            "neighborhood": json.loads(row["neighborhood"]) if row["neighborhood"] else None}


def _suggested_fix(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    if stored is None:
        return None
    return {**stored, "clauses": list(stored["clauses"]), "branches": list(stored["branches"]),
            "alternatives": [list(a) for a in stored["alternatives"]]}


def _json_row(row: list[Any]) -> str:
    """A sampled result row as a JSON array; values JSON lacks (dates, decimals, bytes) become their text."""
    return json.dumps(row, ensure_ascii=False, default=str)


DIAGNOSTIC_SCORES = pl.Struct({**{name: pl.Float64 for name in SCORES}, "confidence": pl.Float64,
                               "ordering_error_flag": pl.Boolean, "cardinality_explosion_flag": pl.Boolean,
                               "likely_source_clause": pl.Utf8, "evidence_strength": pl.Utf8,
                               "ambiguous_case": pl.Boolean, "suggested_fix": SUGGESTED_FIX, "evidence": _TEXTS})
VALIDITY = pl.Struct({"parse_success_actual": pl.Boolean, "parse_success_expected": pl.List(pl.Boolean),
                      "execution_success_actual": pl.Boolean, "execution_success_expected": pl.List(pl.Boolean),
                      "case_valid": pl.Boolean, "invalid_reason": pl.Utf8})
TIMINGS = pl.Struct({name: pl.Float64 for name in ("parse_ms", "execution_ms", "cached_execution_ms", "comparison_ms",
                                                   "diagnostics_ms", "probe_execution_ms", "neighbor_search_ms",
                                                   "total_ms", "engine_overhead_ms")})
RUN_METADATA = pl.Struct({"user_query": pl.Utf8, "hardness": pl.Utf8, "difficulty": pl.Utf8,
                          "engine_version": pl.Utf8, "dialect": pl.Utf8, "database": pl.Utf8,
                          "config_hash": pl.Utf8, "comparison_mode": pl.Utf8, "timings": TIMINGS, "judge": pl.Utf8})
#: The output contract as one typed row per case (``case_reports``). Objects whose keys the data chooses
#: (``mismatch_map``, ``evidence``, ``metrics`` and the judge's run metadata) are JSON text; their typed form is
#: in the layer tables (``diagnostics.per_column_mismatch_map``, ``structural_diffs.structures``, ...).
REPORT: dict[str, pl.DataType] = {
    "case_id": pl.Utf8(), "deterministic_verdict": pl.Utf8(), "ai_advisory_verdict": pl.Utf8(),
    "verdict_consistency_flag": pl.Boolean(), "overall_score": pl.Float64(), "structure_score": pl.Float64(),
    "result_score": pl.Float64(), "diagnostic_scores": DIAGNOSTIC_SCORES, "performance_scores": PERFORMANCE,
    "severity": pl.Utf8(), "explanations": _TEXTS, "mismatch_map": pl.Utf8(), "error_types": _TEXTS,
    "blocked_reason": pl.Utf8(), "warnings": _TEXTS, "validity": VALIDITY, "evidence": pl.Utf8(),
    "run_metadata": RUN_METADATA, "metrics": pl.Utf8()}
_JSON_FIELDS = ("mismatch_map", "evidence", "metrics")


def report_row(report: Report) -> dict[str, Any]:
    """A report as a row of :data:`REPORT`."""
    data = report.model_dump(mode="json")
    metadata = data["run_metadata"]
    return {**data, **{name: _json(data[name]) for name in _JSON_FIELDS},
            "run_metadata": {**metadata, "judge": _json(metadata["judge"])}}


def report_from_row(row: dict[str, Any]) -> Report:
    """The inverse of :func:`report_row` (timings a report did not record stay absent)."""
    data = {name: row[name] for name in REPORT}
    metadata = dict(data["run_metadata"])
    metadata["timings"] = {k: v for k, v in metadata["timings"].items() if v is not None}
    metadata["judge"] = _unjson(metadata["judge"])
    return Report.model_validate({**data, **{name: _unjson(data[name]) for name in _JSON_FIELDS},
                                  "run_metadata": metadata})


def reports_from_frame(frame: pl.DataFrame) -> list[Report]:
    """Every report of a ``case_reports`` frame (as stored, or as read from the store's Parquet files)."""
    return [report_from_row(row) for row in frame.iter_rows(named=True)]


#: Rows of a ``case_reports`` frame made into reports at a time by :func:`iter_reports`.
REPORTS_AT_ONCE = 2048


def iter_reports(frame: pl.DataFrame, *, by: str | None = None) -> Iterator[Report]:
    """The reports of a ``case_reports`` frame one after another (with ``by``, in the order of that column, e.g.
    ``"case_id"``), :data:`REPORTS_AT_ONCE` rows made into reports at a time: a report object costs about 20 KB,
    ten times its row, so the 100,000 reports of a large suite made at once held 2 GB beside their frame; and a
    slice is taken in order from the frame as it is, which sorted whole would be held twice."""
    if by is None:
        slices: Iterable[pl.DataFrame] = frame.iter_slices(REPORTS_AT_ONCE)
    else:
        order = frame[by].arg_sort()
        slices = (frame[order.slice(start, REPORTS_AT_ONCE)] for start in range(0, frame.height, REPORTS_AT_ONCE))
    for rows in slices:
        yield from reports_from_frame(rows)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)


def _unjson(text: str | None) -> Any:
    return None if text is None else json.loads(text)


#: The advisory judgment (the ten AI-judge metrics and the advisory verdict), as the ``judgments`` asset stores it.
JUDGMENT = pl.Struct({
    "intent_adequacy_judgment": pl.Utf8, "database_scoped_equivalence_judgment": pl.Utf8,
    "acceptable_deviation_judgment": pl.Utf8, "short_rationale": pl.Utf8, "evidence_bullets": _TEXTS,
    "decision_summary": pl.Utf8, "severity_classification": pl.Utf8, "confidence": pl.Float64,
    "evidence_strength": pl.Utf8, "ambiguous_case": pl.Boolean, "advisory_verdict": pl.Utf8})
