"""Layer 3 asset: the result metric family per expected alternative, and the alternative the verdict uses."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import SuiteDatabases, layer_asset, per_case, validation_of
from sqlcmp_dagster.engine.layers import choose, result_layer
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.records import result_row
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

SCHEMA = frame_schema("result_comparisons")


@layer_asset("result_comparisons", description="Bag/ordered comparison, overlaps, tolerance and NULL checks.")
def result_comparisons(executions: pl.DataFrame, database: DatabaseResource,
                       cases: CaseSuiteResource) -> pl.DataFrame:
    suite = SuiteDatabases(cases)

    def compare_case(row: dict[str, Any]) -> dict[str, Any]:
        if row["blocked_reason"] is not None:
            return {}
        validation = validation_of(row)
        adapter, _ = suite.open(database, validation.request)
        executed_ms = validation.timings.get("execution_ms", 0.0)
        results = result_layer(validation, adapter)
        index = choose(results)
        # The LIMIT tie re-checks' execution time, charged to the case's budget downstream (validation_of).
        return {"results": [result_row(i, r) for i, r in results.items()], "chosen_index": index,
                "mode_pass": results[index].mode_pass, "row_overlap": results[index].row_overlap,
                "cell_overlap": results[index].cell_overlap,
                "tie_check_ms": validation.timings.get("execution_ms", 0.0) - executed_ms}

    return per_case(executions, compare_case, SCHEMA)
