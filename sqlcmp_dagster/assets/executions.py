"""Layer 1b asset: expected and actual queries executed read-only, results materialized."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import RECORDS, SuiteDatabases, layer_asset, per_case, validation_of
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.layers import execute_layer
from sqlcmp_dagster.engine.records import validation_record
from sqlcmp_dagster.engine.report import blocked_by
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

SCHEMA = frame_schema("executions")


@layer_asset("executions", description="Results, timings, schemas and mapped errors of both queries.")
def executions(parsed_cases: pl.DataFrame, database: DatabaseResource, cases: CaseSuiteResource) -> pl.DataFrame:
    suite = SuiteDatabases(cases)

    def execute_case(row: dict[str, Any]) -> dict[str, Any]:
        validation = validation_of(row)
        adapter, error = suite.open(database, validation.request)
        execute_layer(validation, adapter, error, database.cache())
        text, frames = validation_record(validation)
        RECORDS.keep(text, frames, validation)  # the next layers in this process need not decode it
        actual = validation.actual.execution
        return {"validation": text, "relations": frames,
                "execution_success_actual": actual.success if actual else None,
                "execution_success_expected": any(s.executed_ok for s in validation.expected)
                if any(s.execution for s in validation.expected) else None,
                "execution_time_actual_ms": actual.elapsed_ms if actual else None,
                "execution_error_actual": actual.error.model_dump() if actual and actual.error else None,
                "blocked_reason": blocked_by(validation)}

    return per_case(parsed_cases, execute_case, SCHEMA)
