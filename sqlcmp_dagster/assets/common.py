"""What every layer asset shares: the case partitions, the asset decorator, and per-case fault isolation."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import dagster as dg
import pandera.polars as pa
import polars as pl
# Not exported at the top level in dagster 1.13; it is the type AssetCheckEvaluation's own field names.
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData

from sqlcmp_dagster.assets.chunked import complete, reusing
from sqlcmp_dagster.cases.chunks import chunked, partition_of
from sqlcmp_dagster.contracts import SCHEMAS, contract_check, contract_spec
from sqlcmp_dagster.engine.collector import batch_collector
from sqlcmp_dagster.engine.judge import JudgeOutcome, Judgment
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.layers import CASE_FAULTS, fault_text, finish_timings
from sqlcmp_dagster.engine.validation import Validation
from sqlcmp_dagster.engine.records import diagnostics_from_row, result_from_row, structure_from_row, \
    typed_frame, validation_from_record
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.redaction import hides_password, redacted_url
from sqlcmp_dagster.engine.version import ENGINE_VERSION
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource
from sqlcmp_dagster.engine.report import Analysis, blocked_report, build_report, fault_report

#: One partition per case id, or per chunk of cases (``SQLCMP_CASE_CHUNKS``: :mod:`sqlcmp_dagster.cases.chunks`),
#: added and removed by the case sensor as suite files change. The name of the case partitions.
CASES_PARTITIONS = "cases"
cases_partitions = dg.DynamicPartitionsDefinition(name=CASES_PARTITIONS)
#: IO manager key of the per-partition Parquet store.
CASE_STORE = "case_store"
case_reports_key = dg.AssetKey("case_reports")
#: Run tags of a run over a range of cases (consecutive partitions).
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def layer_backfill_policy() -> dg.BackfillPolicy:
    """The layer assets' backfill policy. Unset ``SQLCMP_CASES_PER_RUN``: a backfill is one run, the cheapest on
    one machine (Dagster's per-run cost is paid once). Set to N (a deployment with workers): runs of at most N
    cases (``BackfillPolicy.multi_run(N)``), so that a backfill's runs, and their steps, spread over the workers.
    The case sensor splits its runs the same way."""
    value = os.environ.get("SQLCMP_CASES_PER_RUN", "").strip()
    if not value:
        return dg.BackfillPolicy.single_run()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"SQLCMP_CASES_PER_RUN must be a whole number of cases >= 1, not {value!r}")
    return dg.BackfillPolicy.multi_run(int(value))


#: Read once at import: the daemon, the run processes and the workers must all be started with the same value.
LAYER_BACKFILL_POLICY = layer_backfill_policy()


def per_run(keys: Sequence[str]) -> list[Sequence[str]]:
    """``keys`` (consecutive partitions) in runs of the size ``LAYER_BACKFILL_POLICY`` gives a backfill's, in
    order: what the case sensor and the nightly schedule request, so that their runs spread over workers as a
    backfill's do (one run when the policy is a single run)."""
    size = LAYER_BACKFILL_POLICY.max_partitions_per_run or len(keys) or 1
    return [keys[start:start + size] for start in range(0, len(keys), size)]

LAYER_ASSETS = ("parsed_cases", "executions", "structural_diffs", "result_comparisons", "diagnostics",
                "judgments", "case_reports")


#: The materialization a per-case check result is about, by partition (see :func:`partition_targets`).
Targets = dict[str, AssetCheckEvaluationTargetMaterializationData]


class CaseCheck(NamedTuple):
    """A check with one result per case (partition), logged by the asset after its output: ``evaluate``
    turns the asset's frame into one ``AssetCheckEvaluation`` per row, each targeting its partition's
    materialization (``Targets``)."""

    spec: dg.AssetCheckSpec
    evaluate: Callable[[pl.DataFrame, Targets], Iterator[dg.AssetCheckEvaluation]]


def partition_targets(context: dg.AssetExecutionContext, asset_key: dg.AssetKey, partitions: list[str]) -> Targets:
    """The latest materialization of each of ``partitions``, as a check result's target.

    Dagster fills this in for an ``AssetCheckResult`` but not for an ``AssetCheckEvaluation`` logged per
    partition; without it the UI counts the result as stale (the partition shows "missing" under the check's
    Partitions tab). Called after the asset's output, whose materializations are stored by then."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=partitions), limit=len(partitions)).records
    targets: Targets = {}
    for record in records:  # newest first: keep each partition's latest
        partition = record.partition_key
        if partition is not None and partition not in targets:
            targets[partition] = AssetCheckEvaluationTargetMaterializationData(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
    return targets


def layer_asset(name: str, description: str, case_checks: tuple[CaseCheck, ...] = (),
                annotate: Callable[[dg.AssetExecutionContext, pl.DataFrame], None] | None = None) \
        -> Callable[[Callable[..., pl.DataFrame]], dg.AssetsDefinition]:
    """Declare a layer asset: case-partitioned, backfilled under ``LAYER_BACKFILL_POLICY``, stored per case,
    and blocked on its contract check (the frame the function returns is validated before downstream layers
    may run). ``annotate`` adds each partition's metadata from the whole frame before it is stored.

    ``case_checks`` are recorded per partition. Dagster gives a check one result per step, and a step covers
    many partitions, so their results are logged per partition instead; the asset is declared subsettable
    because that is what makes a check output optional (the one result per step is never yielded).

    With partitions of chunks (``SQLCMP_CASE_CHUNKS``), a layer below ``parsed_cases`` computes only the cases
    not marked complete and takes the others' stored rows, and ``case_reports`` marks its cases complete once
    its output is stored and its contract holds (:mod:`sqlcmp_dagster.assets.chunked`)."""

    def decorate(compute: Callable[..., pl.DataFrame]) -> dg.AssetsDefinition:
        signature = inspect.signature(compute)
        wants_context = "context" in signature.parameters

        @functools.wraps(compute)
        def run(context: dg.AssetExecutionContext, *args: Any, **inner: Any) \
                -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult | dg.AssetCheckEvaluation]:
            def call(*given: Any, **named: Any) -> pl.DataFrame:
                return compute(context, *given, **named) if wants_context else compute(*given, **named)

            # a run's first step collects first: what the process's last run let go of must not be frozen
            with batch_collector(collect_first=name == LAYER_ASSETS[0]):
                frame = reusing(context, name, call, args, inner) if chunked() and name != LAYER_ASSETS[0] \
                    else call(*args, **inner)
                faults = frame.filter(pl.col("fault").is_not_null()).height if "fault" in frame.columns else 0
                if annotate is not None:
                    annotate(context, frame)
                yield dg.Output(frame, output_name=name, metadata={"cases": frame.height, "faults": faults})
                contract = contract_check(name, frame)
                yield contract
                if case_checks:
                    partitions = sorted({partition_of(case) for case in frame["case_id"].to_list()})
                    targets = partition_targets(context, dg.AssetKey(name), partitions)
                    for check in case_checks:
                        yield from check.evaluate(frame, targets)
                if chunked() and name == LAYER_ASSETS[-1] and contract.passed:
                    complete(context, frame)

        parameters = list(signature.parameters.values())
        if not wants_context:
            parameters.insert(0, inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                   annotation=dg.AssetExecutionContext))
        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=parameters, return_annotation=inspect.Signature.empty)
        return dg.multi_asset(
            name=name,
            # The column schema is the asset's, not each materialization's: as output metadata it was copied into
            # every case's event, and serializing it was a tenth of the pipeline's own time.
            outs={name: dg.AssetOut(io_manager_key=CASE_STORE, code_version=ENGINE_VERSION, group_name="evaluation",
                                    kinds={"polars", "sql"}, description=description,
                                    metadata={"dagster/column_schema": table_schema(SCHEMAS[name].columns)})},
            partitions_def=cases_partitions,
            backfill_policy=LAYER_BACKFILL_POLICY,
            check_specs=[contract_spec(name), *(check.spec for check in case_checks)],
            can_subset=bool(case_checks),
        )(run)

    return decorate


def table_schema(columns: dict[str, pa.Column]) -> dg.TableSchema:
    """The column schema Dagster shows for an asset, from its contract's columns: each column with its polars
    type (nested types spelled out, e.g. ``List(Struct({'clause': String, ...}))``).

    >>> table_schema({"case_id": pa.Column(pl.Utf8), "evidence": pa.Column(pl.List(pl.Utf8))}).columns[1].type
    'List(String)'
    """
    return dg.TableSchema(columns=[dg.TableColumn(name, str(column.dtype.type)) for name, column in columns.items()])


def per_case(frame: pl.DataFrame, compute: Callable[[dict[str, Any]], dict[str, Any]],
             schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Apply ``compute`` to each case row; a case whose upstream row carries a fault, or whose own computation
    raises, keeps a row with the fault's message instead, so one broken case never sinks the others."""
    rows = []
    for row in frame.iter_rows(named=True):
        started = time.perf_counter()
        fault = row.get("fault")
        if fault is None:
            try:
                out = compute(row)
            except CASE_FAULTS as error:
                fault = fault_text(error)
                out = {}
        else:
            out = {}
        rows.append({**out, "case_id": row["case_id"], "fault": fault,
                     "layer_ms": (time.perf_counter() - started) * 1000})
    full: dict[str, pl.DataType] = {"case_id": pl.Utf8(), **schema, "fault": pl.Utf8(), "layer_ms": pl.Float64()}
    return typed_frame(rows, full)


def joined(*frames: pl.DataFrame) -> pl.DataFrame:
    """Upstream layer frames side by side by case; their faults merge into one ``fault`` column."""
    base = frames[0]
    for index, frame in enumerate(frames[1:], 1):
        base = base.join(frame, on="case_id", how="left", suffix=f"__{index}")
    fault_columns = [c for c in base.columns if c == "fault" or c.startswith("fault__")]
    return base.with_columns(pl.coalesce(fault_columns).alias("fault")).drop(
        [c for c in fault_columns if c != "fault"])


class SuiteDatabases:
    """The database URL each case's suite names, for the layers after ``parsed_cases``: a Layer 1 record keeps a
    URL's password as ``***`` (:func:`~sqlcmp_dagster.engine.records.validation_record`), so a step that decoded
    it opens the database as the suite names it. The suite is read once per step, and only when a record hid a
    password (a record this process wrote is at hand with its URL whole)."""

    def __init__(self, cases: CaseSuiteResource) -> None:
        self._cases = cases
        self._targets: dict[str, str] | None = None

    def open(self, database: DatabaseResource, request: CompareRequest) -> tuple[ExecutionAdapter | None, str | None]:
        """``database.open(request)`` with ``request``'s ``db`` as the suite names it when the record hid its
        password; when the suite's case no longer names that database (it changed since it was parsed, and runs
        again at its new version), None and why, where a login with ``***`` as the password was tried."""
        if not request.db or not hides_password(request.db):
            return database.open(request)
        if self._targets is None:
            self._targets = {case.case_id: case.db for case in self._cases.load().cases
                             if case.db and hides_password(redacted_url(case.db))}
        target = self._targets.get(request.case_id)
        if target is None or redacted_url(target) != request.db:
            return None, (f"cannot open database {request.db!r}: the stored record hides its password, and the "
                          f"suite no longer names that database for case {request.case_id!r} (the case changed "
                          "since it was parsed; it runs again at its new version)")
        return database.open(request.model_copy(update={"db": target}))


def validation_of(row: dict[str, Any]) -> Validation:
    """The stored Layer 1 validation of a case; in a row joined with result_comparisons, its execution time
    includes the LIMIT tie re-checks run there, as the library's does, so that the diagnostics step's share of
    case_timeout_ms and the report's timings count them.

    Each layer downstream of ``executions`` reads the same record; it is decoded at most once per process
    (:data:`RECORDS`) and each call gets its own shell: its own timings, warnings and sides (a layer may set
    a side's execution), sharing what the layers only read (ASTs, canonical trees, shapes, result sets), as
    the library's layers share one validation."""
    base = RECORDS.validation(row["validation"], tuple(row["relations"] or ()))
    validation = dataclasses.replace(base, actual=dataclasses.replace(base.actual),
                                     expected=[dataclasses.replace(side) for side in base.expected],
                                     warnings=list(base.warnings), timings=dict(base.timings))
    if row.get("tie_check_ms"):
        validation.timings["execution_ms"] = validation.timings.get("execution_ms", 0.0) + row["tie_check_ms"]
    return validation


class _Records:
    """The Layer 1 records this process wrote or read, by content (so a hit is always the same case in the same
    state), as validations with the canonical tree and shape of every side that layers 2-4 compare (executed,
    parsed) built: a restored side has no tree, and rebuilding it in each layer was a tenth of the pipeline's own
    time. Never mutated: :func:`validation_of` hands out shells.

    The layer that writes a record keeps the validation it wrote it from (:meth:`keep`), so the layers after it in
    the same process never decode it (decoding every case's record twice was a tenth of the pipeline's own time
    again); a step in another process decodes it once. At most ``size`` records (two per case in a run: parsed
    and executed) are kept; a larger run decodes again, which is only slower."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._kept: OrderedDict[tuple[str, tuple[bytes, ...]], Validation] = OrderedDict()

    def validation(self, text: str, relations: tuple[bytes, ...]) -> Validation:
        """The validation of a stored record, decoded unless this process holds it."""
        kept = self._kept.get((text, relations))
        if kept is not None:
            self._kept.move_to_end((text, relations))
            return kept
        return self.keep(text, relations, validation_from_record(text, list(relations)))

    def keep(self, text: str, relations: Sequence[bytes], validation: Validation) -> Validation:
        """Hold ``validation`` as the one ``text`` and ``relations`` (its record) stand for; the caller gives it
        away and must not change it after."""
        for side in (validation.actual, *validation.expected):
            if side.executed_ok and side.parsed.ast is not None:
                side.shape(validation.dialect)
        self._kept[(text, tuple(relations))] = validation
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)
        return validation

    def clear(self) -> None:
        self._kept.clear()


RECORDS = _Records(4096)


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def chosen(alternatives: list[dict[str, Any]], index: int) -> dict[str, Any]:
    """The stored comparison (a ``structures`` or ``results`` entry) against expected alternative ``index``."""
    return next(entry for entry in alternatives if entry["expected_index"] == index)


def report_from_layers(row: dict[str, Any]) -> Report:
    """The deterministic report from the stored layers (a row of executions, structural_diffs,
    result_comparisons and diagnostics joined by case); a case with a fault upstream gets a fault report."""
    if row["fault"] is not None or row["validation"] is None:
        request = CompareRequest(case_id=row["case_id"], expected_sql=["-"], actual_sql="")
        return fault_report(request, row["fault"] or "no stored execution for this case")
    validation = validation_of(row)
    report = blocked_report(validation)
    if report is None:
        index = row["chosen_index"]
        timings = {"comparison_ms": (row["layer_ms__1"] or 0.0) + (row["layer_ms__2"] or 0.0),
                   "diagnostics_ms": row["layer_ms__3"] or 0.0, "probe_execution_ms": row["probe_execution_ms"]}
        # layer_ms__1..3: the layer times of structural_diffs, result_comparisons and diagnostics, in the
        # order the frames are joined (see joined()).
        analysis = Analysis(
            index=index,
            structure=structure_from_row(chosen(row["structures"], index)),
            result=result_from_row(chosen(row["results"], index)),
            alternatives=len(validation.expected),
            diagnostics=diagnostics_from_row(row),
            performance=row["performance"],
            warnings=list(row["performance_warnings"] or []),
            timings=timings,
        )
        report = build_report(validation, analysis)
    timings = report.run_metadata["timings"]
    finish_timings(report, sum(timings.get(k, 0.0) for k in ("parse_ms", "execution_ms", "comparison_ms",
                                                              "diagnostics_ms")))
    return report


def outcome_of(row: dict[str, Any]) -> JudgeOutcome:
    """The stored judgment of a ``judgments`` row; a case without one (judge disabled) reads as skipped by
    policy."""
    if row["status"] in (None, "disabled"):
        return JudgeOutcome(None, {}, skipped="judge disabled for this deployment")
    judgment = Judgment.model_validate(row["judgment"]) if row["judgment"] else None
    return JudgeOutcome(judgment, json.loads(row["judge_metadata"] or "{}"), list(row["judge_warnings"] or []),
                        row["skipped"])
