"""Final synthesis asset: one report per case under the failure precedence (the output contract), one typed
column per top-level field."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg
import polars as pl

from sqlcmp_dagster.assets.common import CaseCheck, Targets, case_reports_key, cases_partitions, joined, layer_asset, \
    outcome_of, report_from_layers
from sqlcmp_dagster.engine.judge import apply_judgment
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.records import report_from_row, report_row
from sqlcmp_dagster.reporting.cases import verdict_outcome

SCHEMA = {"case_id": pl.Utf8, **frame_schema("case_reports"), "fault": pl.Utf8}


def verdict_evaluations(frame: pl.DataFrame, targets: Targets) -> Iterator[dg.AssetCheckEvaluation]:
    """The ``case_verdict`` result of each case, on its partition: passed when the case passed; otherwise a
    warning naming the outcome (fail or invalid), with the case's severity, score and first explanation.

    Read from the frame's columns: rebuilding each report from its row (as ``reports_from_frame`` does) cost
    a third of a second per 1,000 cases for six fields."""
    for row in frame.select("case_id", *_METADATA_FIELDS).iter_rows(named=True):
        metadata = partition_metadata(row)
        yield dg.AssetCheckEvaluation(asset_key=case_reports_key, check_name="case_verdict",
                                      passed=metadata["outcome"] == "pass", severity=dg.AssetCheckSeverity.WARN,
                                      partition=row["case_id"], metadata=metadata,
                                      target_materialization_data=targets.get(row["case_id"]),
                                      description=f"{metadata['outcome']}: {metadata['headline']}")


#: A warning neither fails the run nor blocks anything: the failing cases are found per partition in the UI.
CASE_VERDICT = CaseCheck(dg.AssetCheckSpec(
    name="case_verdict", asset=case_reports_key, blocking=False, partitions_def=cases_partitions,
    description="Per case: passes when the case passed; a warning names a failed or invalid case."),
    verdict_evaluations)


@layer_asset("case_reports", case_checks=(CASE_VERDICT,),
             description="The report of each case: verdict, scores, severity, explanations.")
def case_reports(context: dg.AssetExecutionContext, executions: pl.DataFrame, structural_diffs: pl.DataFrame,
                 result_comparisons: pl.DataFrame, diagnostics: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    rows = []
    with _partitions_read_once(context.instance):
        for row in joined(executions, structural_diffs, result_comparisons, diagnostics,
                          judgments).iter_rows(named=True):
            # A judged case's report was built once already, for the judge's prompt.
            stored = row["deterministic_report"]
            report = apply_judgment(report_from_row(stored) if stored is not None else report_from_layers(row),
                                    outcome_of(row))
            stored_row = report_row(report)
            # each partition's own verdict, so the Partitions tab tells the cases apart
            context.add_asset_metadata(partition_metadata(stored_row), partition_key=report.case_id)
            rows.append({**stored_row, "fault": row["fault"]})
    return pl.DataFrame(rows, schema=SCHEMA)


@contextmanager
def _partitions_read_once(instance: dg.DagsterInstance) -> Iterator[None]:
    """Within the block, ``instance`` reads each dynamic partitions definition's keys from its storage once.

    ``add_asset_metadata`` with a partition key checks the key against the step's partition range, and
    Dagster reads every partition of the definition from the event log again for each call (three queries a
    case: a tenth of the pipeline's own time on 1,034 cases). The step's range cannot change while it runs,
    and only these checks run inside the block."""
    read, present = instance.get_dynamic_partitions, instance.has_dynamic_partition
    keys: dict[str, Sequence[str]] = {}
    known: dict[str, frozenset[str]] = {}

    def get_dynamic_partitions(partitions_def_name: str) -> Sequence[str]:
        if partitions_def_name not in keys:
            keys[partitions_def_name] = read(partitions_def_name)
        return keys[partitions_def_name]

    def has_dynamic_partition(partitions_def_name: str, partition_key: str) -> bool:
        if partitions_def_name not in known:
            known[partitions_def_name] = frozenset(get_dynamic_partitions(partitions_def_name))
        return partition_key in known[partitions_def_name] or present(partitions_def_name, partition_key)

    instance.get_dynamic_partitions = get_dynamic_partitions  # type: ignore[method-assign]
    instance.has_dynamic_partition = has_dynamic_partition  # type: ignore[method-assign]
    try:
        yield
    finally:
        del instance.get_dynamic_partitions, instance.has_dynamic_partition


#: The report fields :func:`partition_metadata` reads.
_METADATA_FIELDS = ("deterministic_verdict", "validity", "severity", "overall_score", "diagnostic_scores",
                    "run_metadata", "explanations")


def partition_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """What one case's materialization shows in the UI: outcome, severity, score, likely source and hardness,
    from the case's report row (``engine.records.report_row``; the stored frame's row)."""
    return {"outcome": verdict_outcome(row["deterministic_verdict"], row["validity"]), "severity": row["severity"],
            "overall_score": dg.MetadataValue.float(row["overall_score"]),
            "likely_source_clause": (row["diagnostic_scores"] or {}).get("likely_source_clause") or "",
            "hardness": row["run_metadata"].get("hardness") or "",
            "headline": row["explanations"][0] if row["explanations"] else ""}
