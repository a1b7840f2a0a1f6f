"""The numbers text-to-SQL papers publish, per case in each report and per level in the summary: Spider's exact
set match (:mod:`~sqlcmp_dagster.engine.spider_match`) and test-suite accuracy, and BIRD's EX, Soft-F1 and R-VES
(:mod:`~sqlcmp_dagster.engine.bird_metrics`), so that one ``sqlcmp evaluate`` fills a paper's table.

Per case, beside sqlcmp's own metrics of the same layer:

* ``metrics.structure.spider_exact_set_match``: Spider's verdict (SQLite databases only: the schema is read from
  the file; null when the gold query is outside Spider's grammar);
* ``metrics.validation.spider_test_suite_match``: Spider's test-suite verdict, for a SQLite database whose folder
  holds several ``.sqlite`` files (the official test suites' layout): both queries run on each by the official
  execution rules (:mod:`~sqlcmp_dagster.engine.spider_execution`), a Layer 1 outcome held whether or not the
  case was blocked;
* ``metrics.result.bird_execution_match`` and ``bird_soft_f1``: BIRD's rules over the rows both queries returned;
  R-VES's reward is derived from EX and the report's one timing of each query (:func:`ves_reward_of`), where
  BIRD's script times each 100 times (:data:`~sqlcmp_dagster.engine.bird_metrics.BIRD_TIMING_REPEATS`), so it
  is noisy for fast queries.

A valid case whose actual query was blocked (it does not parse or does not run) has no layer to hold them: it
counts as a miss (0) in the summary, as it does in both official scripts. Invalid cases are left out, as from
the pass rate.
"""

from __future__ import annotations

import sqlite3
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlcmp_dagster.engine import bird_metrics
from sqlcmp_dagster.engine.atomic import FileVersion, file_state
from sqlcmp_dagster.engine.bird_metrics import BIRD_DIFFICULTIES
from sqlcmp_dagster.engine.context import Guarded, current, keep_recent
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.hardness import HARDNESS_LEVELS
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.relation import PLAIN_CELLS
from sqlcmp_dagster.engine.sandbox.sqlite import sqlite_read_only
from sqlcmp_dagster.engine.spider_execution import (
    Rows,
    Undecided,
    passes_test_suite,
    suite_databases,
)
from sqlcmp_dagster.engine.spider_match import (
    SpiderSchema,
    exact_set_match,
    read_schema,
)
from sqlcmp_dagster.engine.tally import RunningSum
from sqlcmp_dagster.engine.taxonomy import decided_by_inputs

if TYPE_CHECKING:
    from sqlcmp_dagster.engine.validation import Side, Validation
    from sqlcmp_dagster.engine.relation import Relation

#: The summary's published metrics: name -> (the report's layer and metric it reads, the per-case value it averages,
#: the table's heading). R-VES averages a reward derived from BIRD EX and the report's timings (:func:`ves_reward_of`).
PUBLISHED = {
    "spider_exact_set_match_accuracy": ("structure", "spider_exact_set_match", "spider_exact_set_match", "Spider EM"),
    "spider_test_suite_accuracy": ("validation", "spider_test_suite_match", "spider_test_suite_match", "Spider TS"),
    "bird_execution_accuracy": ("result", "bird_execution_match", "bird_execution_match", "BIRD EX"),
    "bird_soft_f1": ("result", "bird_soft_f1", "bird_soft_f1", "Soft-F1"),
    "bird_r_ves": ("result", "bird_execution_match", "bird_ves_reward", "R-VES"),
}
#: The per-case columns of the CSV export.
CASE_COLUMNS = tuple(column for _, _, column, _ in PUBLISHED.values())


def add_case_metrics(metrics: dict[str, Any], validation: Validation, chosen_index: int | None) -> None:
    """Add the published per-case metrics to a report's ``metrics`` (whose structure and result layers are set
    when they ran), against the expected query the verdict used (else the first)."""
    expected = validation.expected[chosen_index if chosen_index is not None else 0]
    path = _sqlite_path(validation.database) if validation.dialect == "sqlite" else None
    suite = suite_databases(path) if path is not None else []
    if path is not None:
        validation.suite_listing = [str(file) for file in suite]
    if suite and metrics.get("validation") is not None:
        metrics["validation"]["spider_test_suite_match"] = _test_suite_match(validation, expected, suite)
    if metrics.get("structure") is not None:
        schema = _sqlite_schema(path) if path is not None else None
        metrics["structure"]["spider_exact_set_match"] = \
            exact_set_match(schema, expected.sql, validation.actual.sql) if schema is not None else None
    result, actual = metrics.get("result"), validation.actual
    if result is not None and expected.relation is not None and actual.relation is not None:
        result["bird_execution_match"], result["bird_soft_f1"] = bird_scores(expected.relation, actual.relation)


def bird_scores(gold: Relation, predicted: Relation) -> tuple[bool, float]:
    """BIRD's EX and Soft-F1 (rounded to 6 places) of a case's two results.

    The same values column by column are the same rows, so both metrics' answer for equal results is given
    without turning each result into tuples first (for a million rows, 1 s of a case's own time beyond its two
    queries, ``benchmarks/large_database.py``). Results of more than
    :data:`~sqlcmp_dagster.engine.relation.PLAIN_CELLS` cells are scored on their frames, which hold the values
    :func:`rows_of` reads (:meth:`~sqlcmp_dagster.engine.relation.Relation.columns`), where that gives the rules'
    values (:func:`~sqlcmp_dagster.engine.bird_metrics.frame_scores`): on world_1 copied to 1.15 GB, results of
    70,000-460,000 rows took 0.3-1.6 s as tuples and 0.03-0.4 s as frames. Below that size the rules on tuples
    cost less than polars' fixed cost per operation.
    """
    if max(gold.height * gold.width, predicted.height * predicted.width) > PLAIN_CELLS \
            and (scores := bird_metrics.frame_scores(gold.frame, predicted.frame)) is not None:
        return scores[0], round(scores[1], 6)
    if gold.columns()[1] == predicted.columns()[1]:
        return True, 1.0
    gold_rows, predicted_rows = rows_of(gold), rows_of(predicted)
    return (bird_metrics.execution_match(gold_rows, predicted_rows),
            round(bird_metrics.soft_f1(gold_rows, predicted_rows), 6))


def rows_of(relation: Relation) -> list[tuple[Any, ...]]:
    """A relation's rows as tuples of the values it holds."""
    return list(zip(*relation.columns()[1], strict=True)) if relation.names else []


def _test_suite_match(validation: Validation, expected: Side, suite: list[Path]) -> bool | None:
    """The case's test-suite verdict over ``suite``: a miss when its actual query did not run on the case's own
    database (which is one of them), none when no expected query did (an invalid case). Each query runs in the
    sandbox of a database file, under the case's query timeout and result caps; all of them within the case's
    budget (``case_budget_ms``) again, and a case cut by that budget or a cap has no verdict."""
    if not any(side.executed_ok for side in validation.expected):
        return None
    if not validation.actual.executed_ok:
        return False
    config = validation.request.config
    deadline = time.monotonic() + config.case_budget_ms() / 1000
    adapters: dict[Path, ExecutionAdapter] = {}

    def execute(file: Path, sql: str) -> Rows | None:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms < 1:
            raise Undecided()
        if file not in adapters:
            try:
                adapters[file] = ExecutionAdapter(str(file), timeout_ms=config.query_timeout_ms,
                                                  max_result_rows=config.max_result_rows)
            except (OSError, ValueError) as error:  # the file went away since the folder was listed
                validation.suite_undecided = True
                raise Undecided() from error
        timeout_ms = min(config.query_timeout_ms, left_ms)
        execution = adapters[file].execute(sql, timeout_ms=timeout_ms, max_bytes=config.max_result_bytes,
                                           max_cell_bytes=config.max_cell_bytes)
        if execution.unstable or (execution.error is not None and not decided_by_inputs(execution.error)):
            validation.suite_undecided = True  # a view there that reads random(), a lock: another run may differ
        cut_by_budget = execution.error is not None and execution.error.category == "timeout" \
            and timeout_ms < config.query_timeout_ms
        if cut_by_budget or (execution.relation is not None and execution.relation.truncated):
            raise Undecided()
        return rows_of(execution.relation) if execution.relation is not None else None

    try:
        return passes_test_suite(expected.sql, validation.actual.sql, suite, execute)
    finally:
        for adapter in adapters.values():
            adapter.close()


def _sqlite_path(database: str | None) -> Path | None:
    """The file of an adapter's ``sqlite:///`` identifier, None for anything else."""
    return Path(database.removeprefix("sqlite:///")) if database and database.startswith("sqlite:///") else None


def _sqlite_schema(path: Path) -> SpiderSchema | None:
    """The Spider schema of the SQLite file at ``path``, kept per file version; None for a file that cannot be
    read."""
    key, kept = file_state(str(path)), _spider_schemas()
    if key is None:
        return None
    with kept.lock:
        if key in kept.entries:
            kept.entries.move_to_end(key)
            return kept.entries[key]
    schema = _schema_of(path)
    keep_recent(kept, key, schema, _SCHEMAS_KEPT)
    return schema


#: Spider schemas kept in the engine context, the least recently used dropped first (:func:`_sqlite_schema`).
_SCHEMAS_KEPT = 64


def _spider_schemas() -> Guarded[OrderedDict[tuple[FileVersion, ...], SpiderSchema | None]]:
    """The engine context's Spider schemas, typed."""
    return current().spider_schemas


def _schema_of(path: Path) -> SpiderSchema | None:
    try:
        connection = sqlite_read_only(path)
    except sqlite3.Error:
        return None
    try:
        return read_schema(connection)
    except sqlite3.Error:
        return None
    finally:
        connection.close()


def case_values(report: Report) -> dict[str, Any]:
    """The published per-case metrics of ``report`` (:data:`CASE_COLUMNS`): its own, or a miss where its actual
    query was blocked, None where the metric does not apply."""
    values: dict[str, Any] = {}
    for layer, metric, column, _ in PUBLISHED.values():
        if column != metric:
            continue
        held = (report.metrics.get(layer) or {}).get(metric)
        if held is None and report.blocked_reason is not None and report.validity.get("case_valid", True):
            held = _blocked_value(report, metric)
        values[metric] = held
    values["bird_ves_reward"] = ves_reward_of(report, values["bird_execution_match"])
    return {column: values[column] for column in CASE_COLUMNS}


def ves_reward_of(report: Report, matched: bool | None) -> float | None:
    """BIRD's R-VES reward of a case by its rule, from the report's one timing of each query
    (``execution_time_*_ms``: execution only, where BIRD times connection and all 100 times): 0 for a wrong
    prediction, None where EX does not apply or a time is missing. Derived, never stored: a timing is not the
    same twice, and a report's metrics are."""
    if matched is None:
        return None
    if not matched:
        return 0.0
    validation = report.metrics.get("validation") or {}
    expected, actual = validation.get("execution_time_expected_ms"), validation.get("execution_time_actual_ms")
    return bird_metrics.ves_reward(expected / actual) if expected and actual else None


def _blocked_value(report: Report, metric: str) -> Any:
    """What a blocked valid case scores on ``metric``: a miss (Spider's only on a SQLite database)."""
    if metric == "spider_exact_set_match":
        return False if report.run_metadata.get("dialect") == "sqlite" else None
    if metric == "spider_test_suite_match":
        return None  # held by every case on a test suite (metrics.validation), blocked or not
    return False if metric == "bird_execution_match" else 0.0


def summarize_published(reports: Iterable[Report]) -> dict[str, Any]:
    """The published metrics of the valid cases of ``reports``: overall, per Spider hardness and per difficulty
    label. Each rate is a fraction (R-VES too: BIRD prints it times 100); a metric no case carries is left out.
    (:class:`PublishedTally` over the reports, in their order.)"""
    tally = PublishedTally()
    for report in reports:
        if report.validity.get("case_valid", True):
            tally.add(published_facts(report))
    return tally.figures()


class PublishedFacts(NamedTuple):
    """What the summary reads of one valid report's published metrics (:func:`published_facts`)."""

    #: :func:`case_values`, in the order of :data:`CASE_COLUMNS`.
    values: tuple[Any, ...]
    #: Per metric of :data:`PUBLISHED`, in its order: whether the report carries it (its layer holds a value).
    carried: tuple[bool, ...]
    #: The case's Spider hardness and difficulty label as the breakdowns name them; None when it has none.
    hardness: str | None
    difficulty: str | None


def published_facts(report: Report) -> PublishedFacts:
    values = case_values(report)
    carried = tuple((report.metrics.get(layer) or {}).get(metric) is not None
                    for layer, metric, _, _ in PUBLISHED.values())
    hardness, difficulty = (report.run_metadata.get(label) for label in ("hardness", "difficulty"))
    return PublishedFacts(tuple(values[column] for column in CASE_COLUMNS), carried,
                          str(hardness) if hardness else None, str(difficulty) if difficulty else None)


class PublishedTally:
    """:func:`summarize_published` added up one valid case at a time (:meth:`add`): per group of cases (all, each
    hardness level, each difficulty label) a count and, per metric, how many cases have a value and their running
    sum (:class:`~sqlcmp_dagster.engine.tally.RunningSum`, so each mean is the one a list gives)."""

    def __init__(self) -> None:
        self.carried = [False] * len(PUBLISHED)
        self.overall = _Group()
        self.levels: dict[str, dict[str, _Group]] = {"hardness": {}, "difficulty": {}}

    def add(self, facts: PublishedFacts) -> None:
        self.carried = [held or now for held, now in zip(self.carried, facts.carried, strict=True)]
        self.overall.add(facts.values)
        for label, name in (("hardness", facts.hardness), ("difficulty", facts.difficulty)):
            if name is not None:
                self.levels[label].setdefault(name, _Group()).add(facts.values)

    def figures(self) -> dict[str, Any]:
        """What :func:`summarize_published` returns for the cases added."""
        carried = [name for name, held in zip(PUBLISHED, self.carried, strict=True) if held]
        if not carried:
            return {}

        def by(label: str, order: Sequence[str]) -> dict[str, Any]:
            groups = self.levels[label]
            ordered = sorted(groups, key=lambda n: (order.index(n) if n in order else len(order), n))
            return {name: groups[name].row(carried) for name in ordered}

        return {"overall": self.overall.row(carried), "per_hardness": by("hardness", HARDNESS_LEVELS),
                "per_difficulty": by("difficulty", BIRD_DIFFICULTIES)}


class _Group:
    """One group's cases and, per metric of :data:`PUBLISHED`, the running sum of its per-case values (R-VES:
    of the rewards' square roots, :func:`~sqlcmp_dagster.engine.bird_metrics.r_ves_term`)."""

    def __init__(self) -> None:
        self.cases = 0
        self.sums = {name: RunningSum() for name in PUBLISHED}

    def add(self, values: tuple[Any, ...]) -> None:
        self.cases += 1
        for name, total in self.sums.items():
            value = values[_COLUMN_INDEX[name]]
            if value is not None:
                total.add(bird_metrics.r_ves_term(value) if name == "bird_r_ves" else float(value))

    def row(self, carried: list[str]) -> dict[str, Any]:
        row: dict[str, Any] = {"cases": self.cases}
        for name in carried:
            total = self.sums[name]
            row[name] = _rounded(total.value / total.count if total.count else None)
            if total.count != self.cases:
                row[f"{name}_cases"] = total.count
        return row


#: Where each published metric's per-case value is in :attr:`PublishedFacts.values`.
_COLUMN_INDEX = {name: CASE_COLUMNS.index(column) for name, (_, _, column, _) in PUBLISHED.items()}


def overall_figures(published: dict[str, Any]) -> dict[str, float | None]:
    """The overall value of each published metric the cases carry, by its summary name (a plot per metric).

    >>> overall_figures({"overall": {"cases": 2, "bird_soft_f1": 0.5, "bird_soft_f1_cases": 1}})
    {'bird_soft_f1': 0.5}
    """
    overall = published.get("overall") or {}
    return {name: overall[name] for name in PUBLISHED if name in overall}


def render_table(published: dict[str, Any]) -> str:
    """The published metrics as a paper's table (Markdown, percentages of the valid cases): one row per Spider
    hardness level, then per difficulty label when the cases have them, and the overall row ``all``."""
    if not published:
        return ""
    names = [name for name in PUBLISHED if name in published["overall"]]
    header = "| level | cases | " + " | ".join(PUBLISHED[name][3] for name in names) + " |"
    lines = [header, "|---|---:|" + "---:|" * len(names)]
    for key in ("per_hardness", "per_difficulty"):
        lines += [_table_row(level, row, names) for level, row in published[key].items()]
    lines.append(_table_row("all", published["overall"], names))
    return "\n".join(lines)


def _table_row(level: str, row: dict[str, Any], names: list[str]) -> str:
    """One level's row; a metric that only some of its cases carry shows how many (``79.1 (974)``)."""
    cells = ["n/a" if row.get(name) is None else f"{row[name] * 100:.1f}"
             + (f" ({row[name + '_cases']})" if name + "_cases" in row else "") for name in names]
    return f"| {level} | {row['cases']} | " + " | ".join(cells) + " |"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
