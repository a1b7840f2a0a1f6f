"""Layer 1a asset: each case parsed and canonicalized in its database's dialect."""

from typing import Any

import dagster as dg
import polars as pl

from sqlcmp_dagster.assets.chunked import begin, merged
from sqlcmp_dagster.assets.common import RECORDS, cases_partitions, layer_asset, per_case
from sqlcmp_dagster.cases.chunks import chunked, in_partitions, partition_key_problem, partition_of
from sqlcmp_dagster.cases.suite import case_version
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.layers import parse_layer, resolve_dialect
from sqlcmp_dagster.engine.records import validation_record
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

SCHEMA = frame_schema("parsed_cases")


@layer_asset("parsed_cases", description="Both queries of each case parsed into ASTs and canonical SQL.")
def parsed_cases(context: dg.AssetExecutionContext, cases: CaseSuiteResource,
                 database: DatabaseResource) -> pl.DataFrame:
    chunks = set(context.partition_keys)
    suite = cases.load(wanted=(lambda case_id: partition_of(case_id) in chunks) if chunked() else None)
    by_id = {case.case_id: case for case in suite.cases}
    stored = None
    versions: dict[str, str] = {}

    def version(case_id: str) -> str:
        """The case's data version, computed once per step (its database's digest and test suite are read)."""
        if case_id not in versions:
            request = database.with_defaults(by_id[case_id])
            versions[case_id] = case_version(request, database.fingerprint(request))
        return versions[case_id]

    if chunked():  # the chunks' cases; those unchanged since their chunk's last run are reused
        ids = in_partitions((c for c in by_id if partition_key_problem(c) is None), context.partition_keys)
        stored = begin(context, "parsed_cases", {case_id: version(case_id) for case_id in ids})
        reused = set(stored["case_id"].to_list())
        keys = pl.DataFrame({"case_id": [c for c in ids if c not in reused], "fault": None},
                            schema={"case_id": pl.Utf8, "fault": pl.Utf8})
    else:
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
        return {"case_hash": version(row["case_id"]),
                "dialect": validation.dialect, "validation": text, "relations": frames,
                "parse_success_actual": validation.actual.parsed.success,
                "parse_success_expected": any(s.parsed.success for s in validation.expected),
                "normalized_sql_actual": validation.actual.parsed.normalized_sql}

    fresh = per_case(keys, parse_case, SCHEMA)
    return fresh if stored is None else merged(fresh, stored, ids)


__all__ = ["cases_partitions", "parsed_cases"]
