"""Layer outputs as plain records, so that each layer can be stored (one Parquet row per case) and resumed.

The Dagster assets persist what one layer computed and the next layer reads it back instead of recomputing
it: ASTs travel as sqlglot's JSON dump, result sets as Arrow IPC bytes (types intact), comparisons as dicts.
Every ``*_record`` function has its ``*_from_record`` inverse; the round trip is exact (tested).
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import polars as pl
from sqlglot import exp

from sqlcmp_dagster.engine.execution import Execution, Relation
from sqlcmp_dagster.engine.models import CompareRequest, ExecutionError
from sqlcmp_dagster.engine.parsing import ParseOutcome
from sqlcmp_dagster.engine.pipeline import Side, Validation
from sqlcmp_dagster.engine.results import ColumnStats, ResultComparison
from sqlcmp_dagster.engine.structure import StructuralComparison


def validation_record(validation: Validation) -> tuple[str, list[bytes]]:
    """A validation as JSON text plus one IPC blob per side (actual first; empty bytes where no relation)."""
    sides = [validation.actual, *validation.expected]
    payload = {
        "request": validation.request.model_dump(mode="json", exclude_unset=True),  # keeps which options were set
        "dialect": validation.dialect,
        "database": validation.database,
        "warnings": validation.warnings,
        "timings": validation.timings,
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
    )


def structure_record(structure: StructuralComparison) -> dict[str, Any]:
    return structure.metrics()


def structure_from_record(record: dict[str, Any]) -> StructuralComparison:
    return StructuralComparison(**record)


def result_record(result: ResultComparison) -> dict[str, Any]:
    return dataclasses.asdict(result)


def result_from_record(record: dict[str, Any]) -> ResultComparison:
    fields = dict(record)
    fields["columns"] = [ColumnStats(**c) for c in fields["columns"]]
    return ResultComparison(**fields)


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
            "names": execution.relation.names if execution.relation is not None else None,
            "truncated": execution.relation.truncated if execution.relation is not None else False,
        },
        "pre_materialized": side.pre_materialized,
    }


def _side_from_payload(payload: dict[str, Any], blob: bytes) -> Side:
    parse = payload["parse"]
    ast = exp.Expression.load(parse["ast"]) if parse["ast"] is not None else None
    parsed = ParseOutcome(parse["success"], ast, parse["normalized_sql"], parse["error"], parse["statement_count"])
    execution = None
    if payload["execution"] is not None:
        record = payload["execution"]
        relation = None
        if record["names"] is not None:
            relation = Relation(pl.read_ipc(io.BytesIO(blob)), list(record["names"]), record["truncated"])
        error = ExecutionError.model_validate(record["error"]) if record["error"] else None
        execution = Execution(record["success"], relation, error, record["elapsed_ms"], list(record["warnings"]))
    return Side(payload["sql"], parsed, execution, payload["pre_materialized"])


def _frame_bytes(relation: Relation | None) -> bytes:
    if relation is None:
        return b""
    buffer = io.BytesIO()
    relation.frame.write_ipc(buffer)
    return buffer.getvalue()
