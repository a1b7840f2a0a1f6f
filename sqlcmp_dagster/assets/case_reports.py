"""Final synthesis asset: one report per case under the failure precedence (the output contract), one typed
column per top-level field."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg
import polars as pl

from sqlcmp_dagster.assets.common import CaseCheck, Targets, case_reports_key, cases_partitions, joined, layer_asset, \
    outcome_of, report_from_layers
from sqlcmp_dagster.cases.chunks import chunked, partition_of
from sqlcmp_dagster.engine.judge import apply_judgment
from sqlcmp_dagster.escaping import markdown_cell
from sqlcmp_dagster.contracts.schemas import frame_schema
from sqlcmp_dagster.engine.records import report_from_row, report_row, typed_frame
from sqlcmp_dagster.reporting.cases import verdict_outcome

SCHEMA = {"case_id": pl.Utf8, **frame_schema("case_reports"), "fault": pl.Utf8}


def verdict_evaluations(frame: pl.DataFrame, targets: Targets) -> Iterator[dg.AssetCheckEvaluation]:
    """The ``case_verdict`` result of each case, on its partition: passed when the case passed; otherwise a
    warning naming the outcome (fail or invalid), with the case's severity, score and first explanation. With
    chunks, one result per chunk: passed when each of its cases passed, with its cases' counts and a table of
    those that did not pass (:func:`chunk_metadata`).

    Read from the frame's columns: rebuilding each report from its row (as ``reports_from_frame`` does) cost
    a third of a second per 1,000 cases for six fields."""
    if chunked():
        for chunk, rows in _by_chunk(frame).items():
            metadata = chunk_metadata(rows)
            yield dg.AssetCheckEvaluation(asset_key=case_reports_key, check_name="case_verdict",
                                          passed=metadata["passed"] == len(rows), severity=dg.AssetCheckSeverity.WARN,
                                          partition=chunk, metadata=metadata,
                                          target_materialization_data=targets.get(chunk),
                                          description=f"{metadata['passed']} of {len(rows)} case(s) passed")
        return
    for row in frame.select("case_id", *_METADATA_FIELDS).iter_rows(named=True):
        metadata = partition_metadata(row)
        yield dg.AssetCheckEvaluation(asset_key=case_reports_key, check_name="case_verdict",
                                      passed=metadata["outcome"] == "pass", severity=dg.AssetCheckSeverity.WARN,
                                      partition=row["case_id"], metadata=metadata,
                                      target_materialization_data=targets.get(row["case_id"]),
                                      description=f"{metadata['outcome']}: {metadata['headline']}")


def annotate_partitions(context: dg.AssetExecutionContext, frame: pl.DataFrame) -> None:
    """Each partition's own metadata, so the Partitions tab tells them apart: a case's verdict
    (:func:`partition_metadata`), or a chunk's counts and its cases that did not pass (:func:`chunk_metadata`)."""
    with _partitions_read_once(context.instance):
        if chunked():
            for chunk, rows in _by_chunk(frame).items():
                context.add_asset_metadata(chunk_metadata(rows), partition_key=chunk)
            return
        for row in frame.select("case_id", *_METADATA_FIELDS).iter_rows(named=True):
            context.add_asset_metadata(partition_metadata(row), partition_key=row["case_id"])


def _by_chunk(frame: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    chunks: dict[str, list[dict[str, Any]]] = {}
    for row in frame.select("case_id", *_METADATA_FIELDS).iter_rows(named=True):
        chunks.setdefault(partition_of(row["case_id"]), []).append(row)
    return dict(sorted(chunks.items()))


#: The most cases that did not pass that a chunk's metadata lists (the others are counted).
LISTED_PER_CHUNK = 100


def chunk_metadata(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What one chunk's materialization and ``case_verdict`` result show: its cases' outcome counts and a table
    of those that did not pass, each with outcome, severity, likely source and headline."""
    cases = [(row["case_id"], partition_metadata(row)) for row in rows]
    counts = {name: sum(meta["outcome"] == name for _, meta in cases) for name in ("pass", "fail", "invalid")}
    listed = sorted((case for case in cases if case[1]["outcome"] != "pass"), key=lambda case: case[0])
    table = ["| case | outcome | severity | likely source | headline |", "|---|---|---|---|---|"]
    table += [f"| {markdown_cell(case_id)} | {meta['outcome']} | {meta['severity']} | "
              f"{markdown_cell(meta['likely_source_clause'])} | {markdown_cell(meta['headline'][:200])} |"
              for case_id, meta in listed[:LISTED_PER_CHUNK]]
    if len(listed) > LISTED_PER_CHUNK:
        table.append(f"\n{len(listed) - LISTED_PER_CHUNK} more not listed.")
    return {"cases": len(rows), "passed": counts["pass"], "failed": counts["fail"], "invalid": counts["invalid"],
            "not_passed": dg.MetadataValue.md("\n".join(table) if listed else "Every case passed.")}


#: A warning neither fails the run nor blocks anything: the failing cases are found per partition in the UI.
CASE_VERDICT = CaseCheck(dg.AssetCheckSpec(
    name="case_verdict", asset=case_reports_key, blocking=False, partitions_def=cases_partitions,
    description="Per case: passes when the case passed; a warning names a failed or invalid case."),
    verdict_evaluations)


@layer_asset("case_reports", case_checks=(CASE_VERDICT,), annotate=annotate_partitions,
             description="The report of each case: verdict, scores, severity, explanations.")
def case_reports(executions: pl.DataFrame, structural_diffs: pl.DataFrame,
                 result_comparisons: pl.DataFrame, diagnostics: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for row in joined(executions, structural_diffs, result_comparisons, diagnostics,
                      judgments).iter_rows(named=True):
        # A judged case's report was built once already, for the judge's prompt.
        stored = row["deterministic_report"]
        report = apply_judgment(report_from_row(stored) if stored is not None else report_from_layers(row),
                                outcome_of(row))
        rows.append({**report_row(report), "fault": row["fault"]})
    return typed_frame(rows, SCHEMA)


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
