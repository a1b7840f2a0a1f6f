"""Layer 1a asset: each case parsed and canonicalized in its database's dialect."""

from typing import Any

import dagster as dg
import polars as pl

from sqlcmp_dagster.assets.common import RECORDS, cases_partitions, layer_asset, per_case
from sqlcmp_dagster.cases.suite import case_version
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.layers import parse_layer, resolve_dialect
from sqlcmp_dagster.engine.records import validation_record
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

SCHEMA = frame_schema("parsed_cases")


@layer_asset("parsed_cases", description="Both queries of each case parsed into ASTs and canonical SQL.")
def parsed_cases(context: dg.AssetExecutionContext, cases: CaseSuiteResource,
                 database: DatabaseResource) -> pl.DataFrame:
    suite = cases.load()
    by_id = {case.case_id: case for case in suite.cases}
    keys = pl.DataFrame({"case_id": context.partition_keys}).with_columns(
        pl.when(pl.col("case_id").is_in(list(by_id))).then(None)
        .otherwise(pl.lit("case not found in the suite folder (deleted, or its line no longer loads)"))
        .alias("fault"))

    def parse_case(row: dict[str, Any]) -> dict[str, Any]:
        request = database.with_defaults(by_id[row["case_id"]])
        adapter, _ = database.open(request)
        validation = parse_layer(request, resolve_dialect(request, adapter), database.cache())
        text, frames = validation_record(validation)
        RECORDS.keep(text, frames, validation)  # the next layers in this process need not decode it
        return {"case_hash": case_version(by_id[row["case_id"]], database.fingerprint(request)),
                "dialect": validation.dialect, "validation": text, "relations": frames,
                "parse_success_actual": validation.actual.parsed.success,
                "parse_success_expected": any(s.parsed.success for s in validation.expected),
                "normalized_sql_actual": validation.actual.parsed.normalized_sql}

    return per_case(keys, parse_case, SCHEMA)


__all__ = ["cases_partitions", "parsed_cases"]
