"""Layer 4 asset: clause attribution (with re-execution probes), flags, per-column map, performance."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import SuiteDatabases, chosen, joined, layer_asset, per_case, validation_of
from sqlcmp_dagster.engine.layers import diagnostic_layer, performance_layer
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.records import diagnostics_row, result_from_row, structure_from_row
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

SCHEMA = frame_schema("diagnostics")


@layer_asset("diagnostics", description="Likely source clause, confidence, evidence and per-column mismatch map.")
def diagnostics(executions: pl.DataFrame, structural_diffs: pl.DataFrame, result_comparisons: pl.DataFrame,
                database: DatabaseResource, cases: CaseSuiteResource) -> pl.DataFrame:
    suite = SuiteDatabases(cases)

    def diagnose_case(row: dict[str, Any]) -> dict[str, Any]:
        if row["blocked_reason"] is not None:
            return {}
        validation = validation_of(row)
        index = row["chosen_index"]
        structure = structure_from_row(chosen(row["structures"], index))
        result = result_from_row(chosen(row["results"], index))
        adapter, _ = suite.open(database, validation.request)
        found, probe_ms, search_warnings = diagnostic_layer(validation, index, structure, result, adapter)
        performance, warnings = performance_layer(validation, index, adapter)
        # The analysis' warnings, as the library's report has them: the fix search's, then performance's.
        return {**diagnostics_row(found), "performance": performance,
                "performance_warnings": search_warnings + warnings,
                "probe_execution_ms": probe_ms}

    return per_case(joined(executions, structural_diffs, result_comparisons), diagnose_case, SCHEMA)
