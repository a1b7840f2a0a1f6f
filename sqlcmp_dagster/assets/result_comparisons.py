"""Layer 3 asset: the result metric family per expected alternative, and the alternative the verdict uses."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import layer_asset, per_case, to_json, validation_of
from sqlcmp_dagster.engine.pipeline import choose, result_layer
from sqlcmp_dagster.engine.records import result_record
from sqlcmp_dagster.resources import DatabaseResource

SCHEMA = {"results": pl.Utf8, "chosen_index": pl.Int64, "mode_pass": pl.Boolean, "row_overlap": pl.Float64,
          "cell_overlap": pl.Float64}


@layer_asset("result_comparisons", description="Bag/ordered comparison, overlaps, tolerance and NULL checks.")
def result_comparisons(executions: pl.DataFrame, database: DatabaseResource) -> pl.DataFrame:
    def compare_case(row: dict[str, Any]) -> dict[str, Any]:
        if row["blocked_reason"] is not None:
            return {}
        validation = validation_of(row)
        adapter, _ = database.open(validation.request)
        results = result_layer(validation, adapter)
        index = choose(results)
        return {"results": to_json({str(i): result_record(r) for i, r in results.items()}), "chosen_index": index,
                "mode_pass": results[index].mode_pass, "row_overlap": results[index].row_overlap,
                "cell_overlap": results[index].cell_overlap}

    return per_case(executions, compare_case, SCHEMA)
