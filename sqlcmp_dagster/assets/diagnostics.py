"""Layer 4 asset: clause attribution (with re-execution probes), flags, per-column map, performance."""

import json
from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import joined, layer_asset, per_case, to_json, validation_of
from sqlcmp_dagster.engine.pipeline import diagnostic_layer, performance_layer
from sqlcmp_dagster.engine.records import result_from_record, structure_from_record
from sqlcmp_dagster.resources import DatabaseResource

SCHEMA = {"diagnostics": pl.Utf8, "performance": pl.Utf8, "performance_warnings": pl.Utf8,
          "probe_execution_ms": pl.Float64, "likely_source_clause": pl.Utf8, "confidence": pl.Float64}


@layer_asset("diagnostics", description="Likely source clause, confidence, evidence and per-column mismatch map.")
def diagnostics(executions: pl.DataFrame, structural_diffs: pl.DataFrame, result_comparisons: pl.DataFrame,
                database: DatabaseResource) -> pl.DataFrame:
    def diagnose_case(row: dict[str, Any]) -> dict[str, Any]:
        if row["blocked_reason"] is not None:
            return {}
        validation = validation_of(row)
        index = row["chosen_index"]
        structure = structure_from_record(json.loads(row["structures"])[str(index)])
        result = result_from_record(json.loads(row["results"])[str(index)])
        adapter, _ = database.open(validation.request)
        found, probe_ms = diagnostic_layer(validation, index, structure, result, adapter)
        performance, warnings = performance_layer(validation, index, adapter)
        return {"diagnostics": to_json(found), "performance": to_json(performance) if performance else None,
                "performance_warnings": to_json(warnings), "probe_execution_ms": probe_ms,
                "likely_source_clause": found["likely_source_clause"], "confidence": found["confidence"]}

    return per_case(joined(executions, structural_diffs, result_comparisons), diagnose_case, SCHEMA)
