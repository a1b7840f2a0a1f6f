"""The layers of the metric processing pipeline, one function per layer's work on one case.

Validation -> structural comparison -> result comparison -> diagnostic attribution -> performance; the Dagster
assets run each as its own step, and :mod:`sqlcmp_dagster.engine.pipeline` chains them. Also here: what a
case's own fault is (:data:`CASE_FAULTS`) and the timings every report ends with.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from typing import Any

from polars.exceptions import PanicException
from sqlglot import exp

from sqlcmp_dagster.engine.cache import ExpectedResults
from sqlcmp_dagster.engine.diagnostics import Duplicates, diagnose, diagnose_pass
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, ExecutionError, Report, ResultTable
from sqlcmp_dagster.engine.neighbors.search import neighbor_search
from sqlcmp_dagster.engine.parsing import canonical_tree, parse, unalias_tables
from sqlcmp_dagster.engine.performance import performance_metrics
from sqlcmp_dagster.engine.redaction import redacted_url
from sqlcmp_dagster.engine.relation import Execution, Relation, relation_from_rows
from sqlcmp_dagster.engine.report import Analysis, fault_report
from sqlcmp_dagster.engine.repair import TIE_LUCK, Outcome
from sqlcmp_dagster.engine.rewrites import read_catalog
from sqlcmp_dagster.engine.sandbox.bounds import bounded_message
from sqlcmp_dagster.engine.comparison import ResultComparison, can_pass, compare_results, cut_inside_tie, \
    tied_at_cut
from sqlcmp_dagster.engine.structure import QueryShape, StructuralComparison, query_shape
from sqlcmp_dagster.engine.validation import Side, Validation, case_time_left, remaining_timeout, resolve_mode


def parse_layer(request: CompareRequest, dialect: str, cache: ExpectedResults | None = None) -> Validation:
    """Layer 1, first half: parse and canonicalize every query of the case (nothing is executed); with
    ``cache``, an expected query's parse may come from it."""
    started = time.perf_counter()
    limit = request.config.max_sql_chars
    # Parsing counts against the case's budget and stops at its end; the expected queries (trusted) first, so
    # that a hostile actual query cannot spend their share.
    deadline = time.monotonic() + request.config.case_budget_ms() / 1000
    expected = [Side(sql, cache.parse(sql, dialect, limit, deadline) if cache is not None
                     else parse(sql, dialect, max_chars=limit, deadline=deadline)) for sql in request.expected_sql]
    actual = Side(request.actual_sql, parse(request.actual_sql, dialect, max_chars=limit, deadline=deadline))
    return Validation(request, dialect, _shown(request.db), actual, expected,
                      timings={"parse_ms": (time.perf_counter() - started) * 1000})


def execute_layer(validation: Validation, database: ExecutionAdapter | None,
                  database_error: str | None = None, cache: ExpectedResults | None = None) -> Validation:
    """Layer 1, second half: execute the expected alternatives first, then the actual query, each on its own
    connection. Expected queries run even when the actual query does not parse: whether the *case* is valid is
    reported apart from whether the model's query is right.

    With ``cache``, an expected query executed before (in this batch, or in an earlier run from the cache folder)
    is not executed again: its recorded execution is reused, and its recorded time counts in the case's budget
    (``timings["cached_execution_ms"]``, apart from ``execution_ms``, the time spent here), so that a warm cache
    leaves the actual query the time it would have without one. An execution is kept only when the database's
    state on disk is the same after it as before its key was taken: a write during the query (another process's)
    would otherwise leave a result of the new content under the old content's key."""
    config = validation.request.config
    execution_ms = cached_ms = 0.0
    for side in [*validation.expected, validation.actual]:
        if side.parsed.success:
            given = validation.request.actual_result if side is validation.actual \
                else validation.request.expected_result
            key, state = None, None
            if cache is not None and database is not None and given is None and side is not validation.actual:
                state = database.version()  # before the key, so that a write after it is seen below
                key = cache.key(database, validation.dialect, side.sql, config)
            if cache is not None and key is not None and (hit := cache.get(key)) is not None:
                side.execution = hit
                cached_ms += hit.elapsed_ms
                continue
            _execute(side, given, database, database_error, config,
                     remaining_timeout(validation, execution_ms + cached_ms))
            execution_ms += side.execution.elapsed_ms if side.execution else 0.0
            if cache is not None and key is not None and database is not None and side.execution is not None \
                    and database.version() == state:
                cache.put(key, side.execution)
    if database is None and any(side.execution is not None and not side.pre_materialized
                                for side in [*validation.expected, validation.actual]):
        validation.database_error = database_error or "no database to execute against"
    validation.database = database.identifier if database is not None else _shown(validation.request.db)
    validation.catalog = read_catalog(database, config.neighbor_sample_rows, config.query_timeout_ms) \
        if database is not None else None
    validation.warnings = [w for side in [*validation.expected, validation.actual] if side.execution
                           for w in side.execution.warnings]
    validation.timings["execution_ms"] = execution_ms
    if cached_ms:
        validation.timings["cached_execution_ms"] = cached_ms
    return validation


def resolve_dialect(request: CompareRequest, database: ExecutionAdapter | None) -> str:
    """The case's configured dialect, else the database's, else SQLite (the embedded default)."""
    return request.config.dialect or (database.dialect if database is not None else "sqlite")


def _shown(db: str | None) -> str | None:
    """A case's ``db`` as reports may show it: a URL without its password."""
    return None if db is None else redacted_url(db)


def validate(request: CompareRequest, database: ExecutionAdapter | None, database_error: str | None = None,
             cache: ExpectedResults | None = None) -> Validation:
    """Layer 1: parse, then execute."""
    return execute_layer(parse_layer(request, resolve_dialect(request, database), cache), database, database_error,
                         cache)


def structural_layer(validation: Validation) -> dict[int, StructuralComparison]:
    """Layer 2 against every runnable expected alternative, by alternative index."""
    return {index: validation.structure_against(index) for index in validation.runnable()}


def result_layer(validation: Validation, database: ExecutionAdapter | None = None) -> dict[int, ResultComparison]:
    """Layer 3 against every runnable expected alternative, each under its own resolved mode.

    An order-sensitive mismatch of a query with ORDER BY ... LIMIT is re-checked against the expected query
    without its LIMIT (when a database is at hand): a cut inside a tie is tie-ambiguous, not a mismatch.
    """
    config, actual = validation.request.config, validation.actual
    assert actual.relation is not None
    results: dict[int, ResultComparison] = {}
    for index in validation.runnable():
        side = validation.expected[index]
        shape = side.shape(validation.dialect)
        assert side.relation is not None
        result = compare_results(side.relation, actual.relation, mode=resolve_mode(config, shape), config=config,
                                 order_keys=shape.order_keys)
        tie_check = (not result.mode_pass and result.comparison_mode == "order-sensitive" and shape.limit is not None
                     and shape.order_keys and database is not None and not side.pre_materialized)
        if tie_check and remaining_timeout(validation) is None:
            result = dataclasses.replace(result, warnings=[
                *result.warnings, f"LIMIT tie re-check skipped: case_timeout_ms={config.case_budget_ms()} spent"])
        elif tie_check and database is not None and _cut_inside_tie(validation, side, shape, database):
            result = dataclasses.replace(result, mode_pass=True, tie_ambiguous=True, warnings=[
                *result.warnings, "LIMIT cuts inside a tie of the ORDER BY keys: the actual rows at the cut are an "
                "equally valid choice (tie-ambiguous)"])
        results[index] = result
    return results


def _cut_inside_tie(validation: Validation, side: Side, shape: QueryShape, database: ExecutionAdapter) -> bool:
    assert side.parsed.ast is not None and side.relation is not None and validation.actual.relation is not None
    config = validation.request.config
    if shape.order_keys is None:
        return False

    def uncut() -> Relation | None:
        assert side.parsed.ast is not None
        timeout_ms = remaining_timeout(validation)
        if timeout_ms is None:  # result_layer checked it: the budget is spent
            return None
        uncut_tree = side.parsed.ast.copy()
        uncut_tree.set("limit", None)
        uncut_tree.set("offset", None)
        execution = database.execute(uncut_tree.sql(dialect=validation.dialect), timeout_ms=timeout_ms,
                                     max_rows=config.max_result_rows, max_bytes=config.max_result_bytes,
                                     max_cell_bytes=config.max_cell_bytes)
        validation.timings["execution_ms"] = validation.timings.get("execution_ms", 0.0) + execution.elapsed_ms
        return execution.relation if execution.success else None

    return cut_inside_tie(side.relation, validation.actual.relation, uncut, offset=shape.offset or 0,
                          order_keys=shape.order_keys, config=config)


def choose(results: dict[int, ResultComparison]) -> int:
    """The verdict is the best match: the first passing alternative, else the closest one."""
    return max(results, key=lambda i: (results[i].mode_pass, results[i].row_overlap + results[i].cell_overlap, -i))


def diagnostic_layer(validation: Validation, index: int, structure: StructuralComparison,
                     result: ResultComparison, database: ExecutionAdapter | None
                     ) -> tuple[dict[str, Any], float, list[str]]:
    """Layer 4 for the chosen alternative, with the verified-minimal-fix search when a database is at hand, and
    for a pass the neighbor-database search (``diagnostics["neighborhood"]``).

    Every candidate of the search is derived from the actual query and runs exactly as the actual query did:
    through the adapter's read-only gate and connection, within the case's timeout. The whole search gets the
    budget :func:`fix_search_budget` gives (a warning names a skip or a cut). The neighbor search of a pass gets what is left of the case's budget after that,
    capped by ``neighbor_time_budget_ms`` (a warning names the limit when the search hits it). Returns the diagnostics, the
    milliseconds the candidates spent executing and the fix search's warnings (returned, not added to
    ``validation``: in Dagster this layer is its own step, and only what it returns reaches the report).
    """
    config, dialect = validation.request.config, validation.dialect
    expected_side = validation.expected[index]
    expected_shape = expected_side.shape(dialect)
    probe_ms = [0.0]
    # A pass is diagnosed from its comparison alone: the trees a fix is transplanted between (two copies) and the
    # duplicate counts (polars' n_unique) are made for a failure only, the only case run() is called for.
    expected_tree = None if result.mode_pass else _transplantable(expected_side)
    budget_ms, budget_warning = fix_search_budget(validation, expected_side, searched=expected_tree is not None)
    expected_ties: list[Relation | None] = []  # the expected query's own tie at its cut, computed once

    def execute(tree: exp.Expression, timeout_ms: int, sql: str | None = None) -> Execution:
        execution = database.execute(sql if sql is not None else tree.sql(dialect=dialect),  # type: ignore[union-attr]
                                     timeout_ms=max(1, min(timeout_ms, config.query_timeout_ms)),
                                     max_rows=config.max_result_rows, max_bytes=config.max_result_bytes,
                                     max_cell_bytes=config.max_cell_bytes)
        probe_ms[0] += execution.elapsed_ms
        return execution

    def run(tree: exp.Expression, sql: str, timeout_ms: int) -> Outcome:
        assert database is not None and expected_side.relation is not None and expected_tree is not None
        started = time.perf_counter()
        execution = execute(tree, timeout_ms, sql)
        if not execution.success or execution.relation is None:
            return Outcome(None)
        if not can_pass(expected_side.relation, execution.relation) or not compare_results(
                expected_side.relation, execution.relation, mode=result.comparison_mode, config=config,
                order_keys=expected_shape.order_keys).mode_pass:
            return Outcome(False)

        def left() -> int:
            return int(timeout_ms - (time.perf_counter() - started) * 1000)

        tied = _tied_rows(tree, execution.relation, dialect, lambda t: execute(t, left()))
        if tied is None:
            return Outcome(True)
        if not expected_ties:
            expected_ties.append(_tied_rows(expected_tree, expected_side.relation, dialect,
                                            lambda t: execute(t, left())))
        if expected_ties[0] is not None and compare_results(expected_ties[0], tied, mode="order-insensitive",
                                                            config=config).mode_pass:
            return Outcome(True)  # both queries cut the same tie: every choice the engine may make matches
        return Outcome(False, TIE_LUCK)

    can_probe = (config.enable_counterfactual_probes and database is not None
                 and not validation.actual.pre_materialized and not expected_side.pre_materialized)
    diagnostics = diagnose_pass(result) if expected_tree is None else \
        diagnose(structure, expected_shape, validation.actual.shape(dialect), result,
                 expected_tree=expected_tree, actual_tree=_transplantable(validation.actual),
                 run=run if can_probe and budget_ms is not None else None, dialect=dialect,
                 budget_ms=budget_ms or 0,
                 duplicates=Duplicates(_duplicate_rows(expected_side.relation),
                                       _duplicate_rows(validation.actual.relation)))
    warnings = [budget_warning] if can_probe and budget_warning is not None else []
    diagnostics["neighborhood"] = neighbor_search(validation, index, structure, result, database,
                                                  budget_ms=case_time_left(validation, probe_ms[0]))
    return diagnostics, probe_ms[0], warnings


def fix_search_budget(validation: Validation, expected: Side, *, searched: bool) -> tuple[int | None, str | None]:
    """The verified-fix search's whole budget in milliseconds (None: it is not run) and the warning that names
    why it is less than ``fix_search_budget_ms``, for a case whose chosen expected side is ``expected``.

    The search gets ``fix_search_budget_ms``, or ``query_timeout_ms`` or what is left of ``case_timeout_ms`` when
    that is less. When ``searched`` (a failure: a pass is not searched) it is skipped if the two queries did more
    work together than ``fix_search_max_steps`` (on SQLite: their virtual-machine steps, counted the same on every
    machine) or took longer than ``fix_search_budget_ms``: each candidate is a query like them, so on a large
    database a search costs many times the case's own queries, and past the time bound not even one would fit.
    Both are decided from the two queries' recorded executions, never from a clock running out mid-search; the
    steps decide the same way on every run, the time wherever the queries are far from its bound (every Spider
    case).
    """
    config = validation.request.config
    left = case_time_left(validation)
    if left is None:
        return None, f"fix search skipped: what was left of case_timeout_ms={config.case_budget_ms()}"
    executions = [side.execution for side in (validation.actual, expected) if side.execution is not None]
    steps = [execution.steps for execution in executions if execution.steps is not None]
    if searched and len(steps) == 2 and sum(steps) > config.fix_search_max_steps:
        return None, (f"fix search skipped: the two queries took {sum(steps):,} SQLite virtual-machine steps on this "
                      f"database, above fix_search_max_steps={config.fix_search_max_steps:,} (each candidate is a "
                      "query like them); raise it to search")
    queries_ms = sum(execution.elapsed_ms for execution in executions)
    if searched and queries_ms > config.fix_search_budget_ms:
        return None, (f"fix search skipped: the two queries took {queries_ms:.0f} ms on this database, above "
                      f"fix_search_budget_ms={config.fix_search_budget_ms} (each candidate is a query like them); "
                      "raise it to search")
    budget_ms = min(config.query_timeout_ms, config.fix_search_budget_ms)
    if left < budget_ms:
        return left, f"fix search limited to {left} ms: what was left of case_timeout_ms={config.case_budget_ms()}"
    return budget_ms, None


def _tied_rows(tree: exp.Expression, kept: Relation, dialect: str,
               execute: Callable[[exp.Expression], Execution]) -> Relation | None:
    """The tied rows a query's LIMIT chooses among (``comparison.tied_at_cut``), found by running it without its
    LIMIT/OFFSET and with its ORDER BY keys added to its columns when they are not among them; None when its
    rows are the only valid answer, or when that cannot be told (the uncut query fails, or a set operation or
    DISTINCT query orders by a column it does not return)."""
    shape = query_shape(canonical_tree(tree, dialect))
    if shape.limit is None:
        return None
    uncut = tree.copy()
    uncut.set("limit", None)
    uncut.set("offset", None)
    keys = shape.order_keys
    if keys is None and shape.has_top_level_order:
        if not isinstance(uncut, exp.Select) or uncut.args.get("distinct"):
            return None
        order = uncut.args["order"].expressions
        uncut.select(*[o.this.copy() for o in order], copy=False)
        keys = list(range(kept.width, kept.width + len(order)))
    execution = execute(uncut)
    if not execution.success or execution.relation is None:
        return None
    return tied_at_cut(execution.relation, offset=shape.offset or 0, kept=kept.height, order_keys=keys or [],
                       width=kept.width)


def _transplantable(side: Side) -> exp.Expression:
    """The tree clauses are transplanted between: the parsed query with table aliases resolved (so that a clause
    reads the same in either query) and nothing else rewritten (the canonical tree also folds identifier
    case, which changes what a double-quoted SQLite string means)."""
    assert side.parsed.ast is not None
    return unalias_tables(side.parsed.ast.copy())


def _duplicate_rows(relation: Relation | None) -> int:
    """Rows that repeat an earlier row (fan-out evidence for Layer 4). A single row repeats nothing, and most
    results are one row."""
    return 0 if relation is None or relation.height < 2 else relation.height - relation.distinct_rows()


def performance_layer(validation: Validation, index: int, database: ExecutionAdapter | None) \
        -> tuple[dict[str, Any] | None, list[str]]:
    """Optional performance metrics of the chosen alternative (null unless enabled)."""
    actual, expected = validation.actual, validation.expected[index]
    if not validation.request.config.enable_performance_metrics or not (actual.execution and expected.execution):
        return None, []
    can_explain = database is not None and not actual.pre_materialized and not expected.pre_materialized
    config = validation.request.config
    plans = [database.explain(side.sql, config.query_timeout_ms, config.max_result_bytes)
             if can_explain and database else None for side in (actual, expected)]
    return performance_metrics(actual.execution.elapsed_ms, expected.execution.elapsed_ms, *plans)


def analyze(validation: Validation, database: ExecutionAdapter | None) -> Analysis:
    """Layers 2-4 and performance for a case whose chosen sides parsed and executed."""
    started = time.perf_counter()
    structures = structural_layer(validation)
    results = result_layer(validation, database)
    index = choose(results)
    compared = time.perf_counter()
    diagnostics, probe_ms, search_warnings = diagnostic_layer(validation, index, structures[index], results[index],
                                                              database)
    diagnosed = time.perf_counter()
    performance, performance_warnings = performance_layer(validation, index, database)
    warnings = search_warnings + performance_warnings
    timings = {"comparison_ms": (compared - started) * 1000, "diagnostics_ms": (diagnosed - compared) * 1000,
               "probe_execution_ms": probe_ms}
    return Analysis(index=index, structure=structures[index], result=results[index],
                    alternatives=len(validation.expected), diagnostics=diagnostics, performance=performance,
                    warnings=warnings, timings=timings)


def _execute(side: Side, given: ResultTable | None, database: ExecutionAdapter | None,
             database_error: str | None, config: EvalConfig, timeout_ms: int | None) -> None:
    """Materialize one side: from the case's given result, else by executing it within ``timeout_ms`` (None:
    the case's budget is spent, so the query is not run and fails as a timeout that says so)."""
    if given is not None:
        side.pre_materialized = True
        side.execution = Execution(True, relation_from_rows(given.columns, [tuple(r) for r in given.rows]),
                                   None, 0.0)
        return
    if database is None:
        message = database_error or "no database to execute against"  # and execute_layer makes the case invalid
        side.execution = Execution(False, None, ExecutionError(category="unknown_error", message=message), 0.0)
        return
    if timeout_ms is None:
        message = f"not run: the case's time budget case_timeout_ms={config.case_budget_ms()} was spent before it"
        side.execution = Execution(False, None, ExecutionError(category="timeout", message=message), 0.0)
        return
    side.execution = database.execute(side.sql, parsed=side.parsed, timeout_ms=timeout_ms,
                                      max_rows=config.max_result_rows, max_bytes=config.max_result_bytes,
                                      max_cell_bytes=config.max_cell_bytes)


#: What a case's own evaluation may raise that becomes its fault report: any exception, and a panic in polars'
#: Rust code (``PanicException``, a ``BaseException`` that ``except Exception`` lets through to end the batch).
CASE_FAULTS: tuple[type[BaseException], ...] = (Exception, PanicException)


def finish_timings(report: Report, total_ms: float) -> None:
    """Record the total and the engine's own share of it (total minus query execution) in run_metadata."""
    timings = report.run_metadata.setdefault("timings", {})
    timings["total_ms"] = total_ms
    query_ms = timings.get("execution_ms", 0.0) + timings.get("probe_execution_ms", 0.0)
    timings["engine_overhead_ms"] = max(0.0, total_ms - query_ms)


def engine_fault_report(request: CompareRequest, error: BaseException) -> Report:
    """The report of a case whose own evaluation raised ``error``: an engine fault, never the model's failure."""
    return fault_report(request, f"internal engine error: {fault_text(error)}")


def fault_text(error: BaseException) -> str:
    """What a case's report says of the fault ``error`` (one of :data:`CASE_FAULTS`): its type and message, bounded
    as a database's message is (it may quote one)."""
    return bounded_message("".join(traceback.format_exception_only(type(error), error)).strip())
