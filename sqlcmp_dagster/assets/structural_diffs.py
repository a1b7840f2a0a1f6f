"""Layer 2 asset: normalized_sql_match, clause_match and clause_weighted_distance per expected alternative."""

from typing import Any

import polars as pl

from sqlcmp_dagster.assets.common import layer_asset, per_case, validation_of
from sqlcmp_dagster.engine.layers import structural_layer
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.records import structure_row

SCHEMA = frame_schema("structural_diffs")


@layer_asset("structural_diffs", description="Clause-by-clause AST comparison of actual and expected.")
def structural_diffs(executions: pl.DataFrame) -> pl.DataFrame:
    def diff_case(row: dict[str, Any]) -> dict[str, Any]:
        if row["blocked_reason"] is not None:
            return {}
        structures = structural_layer(validation_of(row))
        first = structures[min(structures)]
        return {"structures": [structure_row(i, s) for i, s in structures.items()],
                "normalized_sql_match": first.normalized_sql_match,
                "clause_weighted_distance": first.clause_weighted_distance}

    return per_case(executions, diff_case, SCHEMA)
