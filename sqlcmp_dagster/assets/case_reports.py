"""Final synthesis asset: one report per case under the failure precedence (the output contract), one typed
column per top-level field."""

import polars as pl

from sqlcmp_dagster.assets.common import joined, layer_asset, outcome_of, report_from_layers
from sqlcmp_dagster.engine.judge import apply_judgment
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.records import report_from_row, report_row

SCHEMA = {"case_id": pl.Utf8, **frame_schema("case_reports"), "fault": pl.Utf8}


@layer_asset("case_reports", description="The report of each case: verdict, scores, severity, explanations.")
def case_reports(executions: pl.DataFrame, structural_diffs: pl.DataFrame, result_comparisons: pl.DataFrame,
                 diagnostics: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for row in joined(executions, structural_diffs, result_comparisons, diagnostics, judgments).iter_rows(named=True):
        # A judged case's report was built once already, for the judge's prompt.
        stored = row["deterministic_report"]
        report = report_from_row(stored) if stored is not None else report_from_layers(row)
        rows.append({**report_row(apply_judgment(report, outcome_of(row))), "fault": row["fault"]})
    return pl.DataFrame(rows, schema=SCHEMA)
