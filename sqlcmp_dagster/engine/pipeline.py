"""The metric processing pipeline: one request in, one report out (docs/design.md, the layers).

Validation -> structural comparison -> result comparison -> diagnostic attribution -> performance -> final
synthesis under the failure precedence. Every layer's work on one case is exposed as a function so that the
Dagster assets can run the layers as separate steps; :func:`compare` chains them for library and CLI use.
Nothing a case contains can make these functions raise: bad SQL, a missing database or an engine fault all
end in a report.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polars.exceptions import PanicException
from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlcmp_dagster.engine.collector import batch_collector, tune_worker
from sqlcmp_dagster.engine.diagnostics import Duplicates, diagnose, diagnose_pass
from sqlcmp_dagster.engine.judge import JudgeConfig, PendingJudgment, apply_judgment, judge_reports, prepare
from sqlcmp_dagster.engine.relation import Execution, Relation, relation_from_rows
from sqlcmp_dagster.engine.execution import ExecutionAdapter, resolve_database
from sqlcmp_dagster.engine.neighbors import neighbor_search
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, ExecutionError, Report, ResolvedMode, \
    ResultTable
from sqlcmp_dagster.engine.parsing import ParseOutcome, RewriteCut, canonical_text, canonical_tree, clocked_rewrites, \
    parse, unalias_tables
from sqlcmp_dagster.engine.performance import performance_metrics
from sqlcmp_dagster.engine.redaction import redact, redacted_url
from sqlcmp_dagster.engine.report import Analysis, blocked_report, build_report, fault_report
from sqlcmp_dagster.engine.repair import TIE_LUCK, Outcome
from sqlcmp_dagster.engine.rewrites import Catalog, equivalence_form, read_catalog
from sqlcmp_dagster.engine.comparison import ResultComparison, can_pass, compare_results, cut_inside_tie, \
    tied_at_cut
from sqlcmp_dagster.engine.structure import QueryShape, StructuralComparison, compare_structure, query_shape
from sqlcmp_dagster.engine.workers import start_server


@dataclass
class Side:
    """Layer 1 for one query: parse outcome, execution outcome and the materialized relation.

    The canonical tree and its shape are computed once per side and shared by layers 2-4, which only read them.
    """

    sql: str
    parsed: ParseOutcome
    execution: Execution | None = None
    pre_materialized: bool = False
    _canonical: exp.Expression | None = field(default=None, repr=False)
    _shape: QueryShape | None = field(default=None, repr=False)
    _structural: tuple[str, QueryShape] | None = field(default=None, repr=False)

    @property
    def relation(self) -> Relation | None:
        return self.execution.relation if self.execution is not None else None

    @property
    def executed_ok(self) -> bool:
        return self.execution is not None and self.execution.success

    def tree(self, dialect: str) -> exp.Expression:
        """The canonical AST: the parser's own, or rebuilt once for a side restored from a stored record."""
        if self._canonical is None:
            assert self.parsed.ast is not None, "only a parsed query has a tree"
            self._canonical = self.parsed.tree if self.parsed.tree is not None \
                else canonical_tree(self.parsed.ast, dialect)
        return self._canonical

    def shape(self, dialect: str) -> QueryShape:
        if self._shape is None:
            self._shape = query_shape(self.tree(dialect))
        return self._shape

    def structural(self, dialect: str, catalog: Catalog | None) -> tuple[str, QueryShape]:
        """Layer 2's view of the query: the text and shape of its equivalence form on the case's schema (raises
        what :func:`~sqlcmp_dagster.engine.rewrites.equivalence_form` raises)."""
        if self._structural is None:
            form = equivalence_form(self.tree(dialect), dialect, catalog)
            self._structural = canonical_text(form, dialect), query_shape(form)
        return self._structural


@dataclass
class Validation:
    """Layer 1 for a whole case: the actual side and every expected alternative."""

    request: CompareRequest
    dialect: str
    database: str | None
    actual: Side
    expected: list[Side]
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    #: Why the database a side needed could not be opened (None when it opened, or no side needed it): such a
    #: case is invalid whichever side needed it, since nothing it says is about the query under test.
    database_error: str | None = None
    #: The database's tables and columns (Layer 2 resolves names against them), None where it has none.
    catalog: Catalog | None = None

    def runnable(self) -> list[int]:
        """Indexes of the expected alternatives that parsed and executed: the ones results can compare with."""
        return [i for i, side in enumerate(self.expected) if side.executed_ok and side.parsed.ast is not None]

    def structure_against(self, index: int) -> StructuralComparison:
        """Layer 2: the actual query against expected alternative ``index`` (both must have parsed)."""
        sides = (self.expected[index], self.actual)
        try:  # within the case's budget: a pathological query is compared in its canonical form instead
            with clocked_rewrites(time.monotonic() + self.request.config.case_budget_ms() / 1000):
                (expected_text, expected_shape), (actual_text, actual_shape) = (
                    side.structural(self.dialect, self.catalog) for side in sides)
        except (RewriteCut, SqlglotError, RecursionError):
            (expected_text, expected_shape), (actual_text, actual_shape) = (
                (side.parsed.normalized_sql or "", side.shape(self.dialect)) for side in sides)
        return compare_structure(expected_text, actual_text, expected_shape, actual_shape)


def resolve_mode(config: EvalConfig, expected_shape: QueryShape | None) -> ResolvedMode:
    """``auto`` is order-sensitive when the expected query has a top-level ORDER BY, else order-insensitive."""
    if config.comparison_mode != "auto":
        return config.comparison_mode
    return "order-sensitive" if expected_shape is not None and expected_shape.has_top_level_order \
        else "order-insensitive"


def parse_layer(request: CompareRequest, dialect: str) -> Validation:
    """Layer 1, first half: parse and canonicalize every query of the case (nothing is executed)."""
    started = time.perf_counter()
    limit = request.config.max_sql_chars
    # Parsing counts against the case's budget and stops at its end; the expected queries (trusted) first, so
    # that a hostile actual query cannot spend their share.
    deadline = time.monotonic() + request.config.case_budget_ms() / 1000
    expected = [Side(sql, parse(sql, dialect, max_chars=limit, deadline=deadline)) for sql in request.expected_sql]
    actual = Side(request.actual_sql, parse(request.actual_sql, dialect, max_chars=limit, deadline=deadline))
    return Validation(request, dialect, _shown(request.db), actual, expected,
                      timings={"parse_ms": (time.perf_counter() - started) * 1000})


class ExpectedResults:
    """Executions of expected queries within one batch, so that N models answering the same questions execute
    each expected query once, not N times.

    Keyed by the database's fingerprint (resolved path, size, modification time and inode of the file), the
    dialect, the SQL text and every option of the case's config. Only file databases (SQLite, DuckDB) are
    cached: a server's content cannot be fingerprinted cheaply, so its queries always run. Only successful
    executions are kept (a failure may be transient), bounded by the cells they hold (``capacity_cells``; least
    recently used first out), so memory stays bounded whatever the suite; a result larger than a tenth of that
    is not kept at all.
    """

    def __init__(self, capacity_cells: int = 5_000_000) -> None:
        self.capacity_cells = capacity_cells
        self._entries: OrderedDict[tuple[object, ...], Execution] = OrderedDict()
        self._cells = 0

    @staticmethod
    def key(database: ExecutionAdapter, dialect: str, sql: str, config: EvalConfig) -> tuple[object, ...] | None:
        if database.dialect not in ("sqlite", "duckdb"):
            return None
        path = database.database_file
        try:
            stat = os.stat(path) if path else None
        except OSError:
            return None
        if stat is None:
            return None
        return (path, stat.st_size, stat.st_mtime_ns, stat.st_ino, dialect, sql, config.config_hash())

    def get(self, key: tuple[object, ...]) -> Execution | None:
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
        return hit

    def put(self, key: tuple[object, ...], execution: Execution) -> None:
        cells = _cells(execution)
        if not execution.success or key in self._entries or cells > self.capacity_cells // 10:
            return
        self._entries[key] = execution
        self._cells += cells
        while self._cells > self.capacity_cells:
            _, dropped = self._entries.popitem(last=False)
            self._cells -= _cells(dropped)


def _cells(execution: Execution) -> int:
    relation = execution.relation
    return 0 if relation is None else max(1, relation.height) * max(1, relation.width)


def execute_layer(validation: Validation, database: ExecutionAdapter | None,
                  database_error: str | None = None, cache: ExpectedResults | None = None) -> Validation:
    """Layer 1, second half: execute the expected alternatives first, then the actual query, each on its own
    connection. Expected queries run even when the actual query does not parse: whether the *case* is valid is
    reported apart from whether the model's query is right. With ``cache``, an expected query already executed
    in this batch is not executed again (its recorded execution is reused; no execution time is counted)."""
    config = validation.request.config
    execution_ms = 0.0
    for side in [*validation.expected, validation.actual]:
        if side.parsed.success:
            given = validation.request.actual_result if side is validation.actual \
                else validation.request.expected_result
            key = ExpectedResults.key(database, validation.dialect, side.sql, config) \
                if cache is not None and database is not None and given is None and side is not validation.actual \
                else None
            if key is not None and (hit := cache.get(key)) is not None:  # type: ignore[union-attr]
                side.execution = hit
                continue
            _execute(side, given, database, database_error, config, remaining_timeout(validation, execution_ms))
            execution_ms += side.execution.elapsed_ms if side.execution else 0.0
            if key is not None and side.execution is not None:
                cache.put(key, side.execution)  # type: ignore[union-attr]
    if database is None and any(side.execution is not None and not side.pre_materialized
                                for side in [*validation.expected, validation.actual]):
        validation.database_error = database_error or "no database to execute against"
    validation.database = database.identifier if database is not None else _shown(validation.request.db)
    validation.catalog = read_catalog(database, config.neighbor_sample_rows, config.query_timeout_ms) \
        if database is not None else None
    validation.warnings = [w for side in [*validation.expected, validation.actual] if side.execution
                           for w in side.execution.warnings]
    validation.timings["execution_ms"] = execution_ms
    return validation


def remaining_timeout(validation: Validation, more_ms: float = 0.0) -> int | None:
    """The timeout of the case's next query: ``query_timeout_ms``, or less when the case's budget has less left
    (:func:`case_time_left`); None when nothing is left."""
    left = case_time_left(validation, more_ms)
    return None if left is None else min(validation.request.config.query_timeout_ms, left)


def case_time_left(validation: Validation, more_ms: float = 0.0) -> int | None:
    """What is left of the case's budget (``case_timeout_ms``) after parsing and the queries run so far
    (``timings`` plus ``more_ms`` not yet recorded there); None when nothing is left. Counting recorded time
    rather than a clock deadline keeps the budget right when Dagster runs the layers of a case in different
    steps."""
    config, timings = validation.request.config, validation.timings
    spent = timings.get("parse_ms", 0.0) + timings.get("execution_ms", 0.0) + more_ms
    left = config.case_budget_ms() - spent
    return None if left < 1 else int(left)


def resolve_dialect(request: CompareRequest, database: ExecutionAdapter | None) -> str:
    """The case's configured dialect, else the database's, else SQLite (the embedded default)."""
    return request.config.dialect or (database.dialect if database is not None else "sqlite")


def _shown(db: str | None) -> str | None:
    """A case's ``db`` as reports may show it: a URL without its password."""
    return None if db is None else redacted_url(db)


def validate(request: CompareRequest, database: ExecutionAdapter | None, database_error: str | None = None,
             cache: ExpectedResults | None = None) -> Validation:
    """Layer 1: parse, then execute."""
    return execute_layer(parse_layer(request, resolve_dialect(request, database)), database, database_error, cache)


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
    uncut_tree = side.parsed.ast.copy()
    uncut_tree.set("limit", None)
    uncut_tree.set("offset", None)
    config = validation.request.config
    timeout_ms = remaining_timeout(validation)
    if timeout_ms is None:  # result_layer checked it: the budget is spent
        return False
    uncut = database.execute(uncut_tree.sql(dialect=validation.dialect), timeout_ms=timeout_ms,
                             max_rows=config.max_result_rows, max_bytes=config.max_result_bytes,
                             max_cell_bytes=config.max_cell_bytes)
    validation.timings["execution_ms"] = validation.timings.get("execution_ms", 0.0) + uncut.elapsed_ms
    if not uncut.success or uncut.relation is None or shape.order_keys is None:
        return False
    return cut_inside_tie(side.relation, validation.actual.relation, uncut.relation, offset=shape.offset or 0,
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
    case's ``query_timeout_ms`` as its budget, or what is left of ``case_timeout_ms`` when that is less (a
    warning names the cut). The neighbor search of a pass gets what is left of the case's budget after that,
    capped by ``neighbor_time_budget_ms`` (a warning names the limit when the search hits it). Returns the diagnostics, the
    milliseconds the candidates spent executing and the fix search's warnings (returned, not added to
    ``validation``: in Dagster this layer is its own step, and only what it returns reaches the report).
    """
    config, dialect = validation.request.config, validation.dialect
    expected_side = validation.expected[index]
    expected_shape = expected_side.shape(dialect)
    probe_ms = [0.0]
    budget_ms = remaining_timeout(validation)  # the search's whole budget: at most what the case has left
    # A pass is diagnosed from its comparison alone: the trees a fix is transplanted between (two copies) and the
    # duplicate counts (polars' n_unique) are made for a failure only, the only case run() is called for.
    expected_tree = None if result.mode_pass else _transplantable(expected_side)
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
    warnings = []
    if can_probe and (budget_ms is None or budget_ms < config.query_timeout_ms):
        warnings.append(f"fix search {'skipped' if budget_ms is None else f'limited to {budget_ms} ms'}"
                        f": what was left of case_timeout_ms={config.case_budget_ms()}")
    diagnostics["neighborhood"] = neighbor_search(validation, index, structure, result, database,
                                                  budget_ms=case_time_left(validation, probe_ms[0]))
    return diagnostics, probe_ms[0], warnings


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


def compare(request: CompareRequest, database: ExecutionAdapter | None = None, *,
            database_error: str | None = None, judge: JudgeConfig | None = None) -> Report:
    """Compare one case end to end and return its report; never raises for anything the case contains.

    With ``judge`` (and ``enable_ai_judge`` in the case's config) the advisory judgment is added last.
    """
    report, pending = _deterministic(request, database, database_error, judge)
    if pending is None or judge is None:
        return report
    return apply_judgment(report, judge_reports([pending], judge)[0])


#: What a case's own evaluation may raise that becomes its fault report: any exception, and a panic in polars'
#: Rust code (``PanicException``, a ``BaseException`` that ``except Exception`` lets through to end the batch).
CASE_FAULTS: tuple[type[BaseException], ...] = (Exception, PanicException)


def _deterministic(request: CompareRequest, database: ExecutionAdapter | None, database_error: str | None,
                   judge: JudgeConfig | None, cache: ExpectedResults | None = None) \
        -> tuple[Report, PendingJudgment | None]:
    """Layers 1-4 and the report; with a judge configured, also the judge's prompt (while results are here)."""
    started = time.perf_counter()
    validation = None
    try:
        validation = validate(request, database, database_error, cache)
        report = blocked_report(validation) or build_report(validation, analyze(validation, database))
    except CASE_FAULTS as error:  # an engine fault on one case must not sink a batch: it becomes that case's report
        report = _engine_fault_report(request, error)
    finish_timings(report, (time.perf_counter() - started) * 1000)
    if judge is None:
        return report, None
    return report, prepare(request, report, *_judge_samples(validation, report), judge)


def _judge_samples(validation: Validation | None, report: Report) -> tuple[Relation | None, Relation | None]:
    """The expected result the verdict used and the actual result, for the judge's bounded samples."""
    if validation is None:
        return None, None
    index = report.evidence.get("matched_expected_index")
    expected = validation.expected[index].relation if isinstance(index, int) else None
    return expected, validation.actual.relation


def finish_timings(report: Report, total_ms: float) -> None:
    """Record the total and the engine's own share of it (total minus query execution) in run_metadata."""
    timings = report.run_metadata.setdefault("timings", {})
    timings["total_ms"] = total_ms
    query_ms = timings.get("execution_ms", 0.0) + timings.get("probe_execution_ms", 0.0)
    timings["engine_overhead_ms"] = max(0.0, total_ms - query_ms)


class Evaluator:
    """Evaluates many cases, opening each database once and sharing it across the cases of a process.

    A case's ``db`` is a URL, a SQLite path, or a db id resolved under ``db_dir``; ``default_db`` serves cases
    that name none. ``allow_privileged_role`` is the operator's opt-in (never a case's) to run cases on
    PostgreSQL under a privileged role (see :class:`~sqlcmp_dagster.engine.execution.ExecutionAdapter`).
    """

    def __init__(self, *, db_dir: Path | str | None = None, default_db: str | None = None,
                 judge: JudgeConfig | None = None, allow_privileged_role: bool = False) -> None:
        self.db_dir = Path(db_dir) if db_dir is not None else None
        self.default_db = default_db
        self.judge = judge
        self.allow_privileged_role = allow_privileged_role
        self._adapters: dict[str, ExecutionAdapter] = {}
        self._lock = threading.Lock()
        self._cache: ExpectedResults | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process needs: the settings, not the open adapters, lock or batch cache."""
        state = dict(self.__dict__)
        state.update(_adapters={}, _lock=None, _cache=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def evaluate(self, request: CompareRequest) -> Report:
        database, error = self.open(request)
        return compare(request, database, database_error=error, judge=self.judge)

    def _deterministic(self, request: CompareRequest) -> tuple[Report, PendingJudgment | None]:
        database, error = self.open(request)
        return _deterministic(request, database, error, self.judge, self._cache)

    def open(self, request: CompareRequest) -> tuple[ExecutionAdapter | None, str | None]:
        """The case's database adapter, or None and the reason it cannot be opened (a report, not a raise)."""
        if request.actual_result is not None and request.expected_result is not None:
            return None, None
        target = request.db or self.default_db
        if target is None:
            return None, "no database given: the case names no db and no default database is configured"
        shown = f"cannot open database {redacted_url(target)!r}"  # never a password, in a report or a log
        try:
            return self.adapter(target), None
        except (FileNotFoundError, ValueError, ImportError) as failure:
            return None, f"{shown}: {redact(str(failure), target)}"
        except Exception as failure:  # a driver's own failure to connect
            return None, f"{shown}: {type(failure).__name__}: {redact(str(failure), target)}"

    def evaluate_all(self, cases: Sequence[CompareRequest], *, workers: int = 1,
                     progress: Callable[[Report], None] | None = None) -> list[Report]:
        """Reports of ``cases`` in their order, identical whatever ``workers`` is.

        ``workers`` > 1 runs the cases in that many processes (the engine's own work is Python that holds the
        GIL, so threads would not scale). Cases that share a database and expected SQL go to the same worker, so
        the batch's expected-result cache (:class:`ExpectedResults`) serves them there. The advisory judge, when
        configured, then runs over the batch in this process with its own bounded concurrency and budget. The
        deterministic part runs with Python's garbage collector set for a batch
        (:func:`~sqlcmp_dagster.engine.collector.batch_collector`; a tenth of a Spider dev run was collection).
        """
        self._cache = ExpectedResults()
        try:
            with batch_collector():
                if workers <= 1 or len(cases) <= 1:
                    done = []
                    for case in cases:
                        done.append(self._deterministic(case))
                        if progress is not None:
                            progress(done[-1][0])
                else:
                    done = _in_processes(self, cases, workers, progress)
        finally:
            self._cache = None
        reports = [report for report, _ in done]
        if self.judge is None:
            return reports
        pending = [item for _, item in done if item is not None]
        outcomes = iter(judge_reports(pending, self.judge))
        return [apply_judgment(report, next(outcomes)) if item is not None else report for report, item in done]

    def adapter(self, target: str) -> ExecutionAdapter:
        """The shared adapter of ``target`` (timeouts and row caps come from each case's config per call)."""
        resolved = resolve_database(target, self.db_dir)
        with self._lock:
            if resolved not in self._adapters:
                self._adapters[resolved] = ExecutionAdapter(
                    resolved, allow_privileged_role=self.allow_privileged_role)
            return self._adapters[resolved]

    def close(self) -> None:
        for adapter in self._adapters.values():
            adapter.close()
        self._adapters.clear()


#: Most cases handed to a worker process at a time: enough to amortize the hand-over (about a millisecond).
_CHUNK = 8
#: The evaluator of a worker process (set by the pool's initializer).
_WORKER: Evaluator | None = None
_Done = tuple[Report, PendingJudgment | None]


def _start_worker(evaluator: Evaluator) -> None:
    global _WORKER
    tune_worker()
    evaluator._cache = ExpectedResults()  # one cache per worker, for the whole batch
    _WORKER = evaluator


def _work(chunk: list[tuple[int, CompareRequest]]) -> list[tuple[int, _Done]]:
    assert _WORKER is not None, "a worker process starts with its evaluator"
    return [(index, _WORKER._deterministic(case)) for index, case in chunk]


def _chunks(cases: Sequence[CompareRequest], workers: int) -> list[list[tuple[int, CompareRequest]]]:
    """Cases grouped by database and expected SQL (stable), cut into chunks: a worker sees a question's
    answers together, so its expected-result cache serves them, and it keeps few databases open.

    The workers should run out of work at nearly the same time, so the batch ends with its cheapest cases in
    its smallest chunks: groups whose answers all look cheap (:func:`_looks_cheap`) come last, and chunks shrink
    towards the end (a quarter of what is left per worker, at most :data:`_CHUNK`, at least one case). On
    Spider dev one chunk of eight takes 0.08 s at the median and up to 0.5 s."""
    def group(i: int) -> tuple[str, tuple[str, ...]]:
        return cases[i].db or "", tuple(cases[i].expected_sql)

    costly = {group(i) for i in range(len(cases)) if not _looks_cheap(cases[i])}
    order = sorted(range(len(cases)), key=lambda i: (group(i) not in costly, group(i)))
    chunks, start = [], 0
    while start < len(order):
        size = max(1, min(_CHUNK, (len(order) - start) // (workers * 4)))
        chunks.append([(i, cases[i]) for i in order[start:start + size]])
        start += size
    return chunks


def _looks_cheap(case: CompareRequest) -> bool:
    """Whether the answer is one of its expected queries but for spacing and letter case: such a case usually
    passes with neither the fix search (it runs on failures) nor the neighbor search (identical canonical SQL is
    not searched). On Spider dev (SuperSQL) 361 of 1,034 cases, 5.9 ms each on average against 28.9 ms for the
    others. A guess for scheduling only: it changes no report."""
    def text(sql: str) -> str:
        return " ".join(sql.split()).casefold()

    return text(case.actual_sql) in {text(sql) for sql in case.expected_sql}


def _pool(evaluator: Evaluator, workers: int) -> ProcessPoolExecutor:
    """Worker processes forked from a server that has imported the engine once (no fork of this process's
    threads, and no re-import per worker; see :func:`~sqlcmp_dagster.engine.workers.start_server`)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=start_server(), initializer=_start_worker,
                               initargs=(evaluator,))


def _in_processes(evaluator: Evaluator, cases: Sequence[CompareRequest], workers: int,
                  progress: Callable[[Report], None] | None) -> list[_Done]:
    """Every case's outcome, computed in ``workers`` processes.

    A case that kills its worker (the operating system's out-of-memory killer, a crash in a driver) must not
    sink the batch: the chunks lost with that worker are retried one case at a time in a fresh pool, and a case
    that kills its worker again gets a fault report of its own. When no worker can start at all (a script that
    calls this without an ``if __name__ == "__main__":`` guard), the batch runs in this process instead.
    """
    done: dict[int, _Done] = {}

    def record(index: int, outcome: _Done) -> None:
        done[index] = outcome
        if progress is not None:
            progress(outcome[0])

    pending = _chunks(cases, workers)
    single = False
    while pending:
        lost: list[list[tuple[int, CompareRequest]]] = []
        with _pool(evaluator, workers) as pool:
            futures: dict[Future[list[tuple[int, _Done]]], list[tuple[int, CompareRequest]]] = {}
            for chunk in pending:
                try:
                    futures[pool.submit(_work, chunk)] = chunk
                except BrokenProcessPool:
                    lost.append(chunk)
            for future in as_completed(futures):
                try:
                    outcomes = future.result()
                except BrokenProcessPool:
                    lost.append(futures[future])
                    continue
                for index, outcome in outcomes:
                    record(index, outcome)
        lost_cases = [item for chunk in lost for item in chunk]
        if not done and len(lost_cases) == len(cases):  # no worker could run anything: not a case's fault
            for index, case in lost_cases:
                record(index, evaluator._deterministic(case))
            break
        if single:
            for index, case in lost_cases:
                report = fault_report(case, "internal engine error: the worker process evaluating this case "
                                            "died (out of memory or a crash in a database driver)")
                finish_timings(report, 0.0)
                record(index, (report, None))
            break
        pending, single = [[item] for item in lost_cases], True
    return [done[i] for i in range(len(cases))]


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


def _engine_fault_report(request: CompareRequest, error: BaseException) -> Report:
    return fault_report(request, f"internal engine error: {fault_text(error)}")


def fault_text(error: BaseException) -> str:
    """What a case's report says of the fault ``error`` (one of :data:`CASE_FAULTS`): its type and message."""
    return "".join(traceback.format_exception_only(type(error), error)).strip()
