"""Spider's official execution accuracy (EX), side by side with sqlcmp's verdict, and why the two differ.

The official semantics are those of the Spider test-suite evaluation (``exec_eval.py``, Zhong et al. 2020, with
its defaults: no value plugging, DISTINCT removed), re-implemented here so the two numbers can be computed on
the same cases. Checked against that file's ``result_eq``: on SuperSQL's 1,034 Spider dev predictions both give
the same verdict on every case. Left out on purpose: its quick rejection (each row's values sorted by their
text and type name; only in rare rows that mix ``1`` and ``1.0`` does it reject what the full check accepts)
and its sampled pruning of column permutations (the full check follows either way); text that is not UTF-8
decodes with replacement characters where it drops the bad bytes.

* ``> =``, ``< =`` and ``! =`` are closed up, ``YEAR(CURDATE())`` becomes 2020, and every ``DISTINCT`` keyword
  is dropped from both queries (``count(DISTINCT x)`` becomes ``count(x)``) before they run;
* rows are compared in order when the gold query contains ``order by`` *anywhere* (a subquery's too),
  else as multisets;
* two results are equal when some permutation of the predicted columns makes them so; cell values compare
  with Python equality, exactly (``1 == 1.0``, ``'1' != 1``, no tolerance); two empty results are equal
  whatever their columns;
* a prediction that fails to run is wrong.

sqlcmp differs on purpose in several places (numeric tolerance, DISTINCT kept, ties under ORDER BY, the order
rule read from the top-level ORDER BY only, ...). :func:`explain_difference` names, for a case where the two
verdicts differ, the semantic difference behind it, found by changing the official rule one knob at a time
until it agrees with sqlcmp.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import sqlglot

from sqlcmp_dagster.engine.comparison import Tolerance
from sqlcmp_dagster.engine.models import CompareRequest, Report, ResolvedMode
from sqlcmp_dagster.engine.sandbox.sqlite import SqliteConnections, sqlite_read_only
from sqlcmp_dagster.engine.spider_execution import (
    Rows,
    denotations_equal,
    order_matters,
    postprocess,
    remove_distinct,
)
from sqlcmp_dagster.escaping import markdown_cell

#: The semantic differences a disagreement is classified by, in the order they are tried.
REASONS: dict[str, str] = {
    "empty_results": "two empty results are equal in the official evaluation whatever their columns; sqlcmp "
                     "still compares the columns",
    "distinct_handling": "the official evaluation drops every DISTINCT before running; sqlcmp keeps it",
    "order_rule": "the official evaluation compares in order when 'order by' appears anywhere in the gold query; "
                  "sqlcmp only for a top-level ORDER BY",
    "ties": "rows tied on the ORDER BY key may come in any order in sqlcmp; the official evaluation wants the "
            "gold query's exact order",
    "column_order": "sqlcmp was asked to keep the column order (mode exact or require_column_order_match); the "
                    "official evaluation accepts any column permutation",
    "column_names": "sqlcmp was asked to match column names (mode exact or require_column_name_match); the "
                    "official evaluation ignores names",
    "null_handling": "sqlcmp was asked for SQL NULL semantics (null_equality_mode sql_semantic: NULL matches "
                     "nothing); the official evaluation counts NULL equal to NULL",
    "numeric_tolerance": "numbers within sqlcmp's tolerance count as equal; the official evaluation wants exact "
                         "equality",
    "execution": "sqlcmp stopped the query (its timeout or row cap) where the official evaluation, with a 60 s "
                 "timeout and no cap, ran it",
    "other": "none of the single differences above explains it",
}


@dataclass(frozen=True)
class Disagreement:
    """One case where the official verdict and sqlcmp's differ, with the reason found."""

    case_id: str
    database: str
    official: bool
    sqlcmp: bool
    reason: str
    expected_sql: str
    actual_sql: str


def run(database: SqliteConnections, sql: str, timeout_ms: int) -> Rows | Exception:
    """All rows of ``sql``, or the exception it raised: run as the official evaluation runs it (every row, no
    length limit but SQLite's own), behind the sandbox's wall against a step no interrupt stops
    (:meth:`~sqlcmp_dagster.engine.sandbox.sqlite.SqliteConnections.run`): the predictions are a model's text."""
    try:
        return database.run(sql, timeout_ms, 0, lambda connection, _: [
            tuple(row) for row in connection.execute(sql).fetchall()])
    except Exception as error:  # the official evaluation counts any failure of the prediction as wrong
        return error


def official_match(database: SqliteConnections, gold_sql: str, predicted_sql: str, *, keep_distinct: bool = False,
                   ordered: bool | None = None, permute_columns: bool = True, timeout_ms: int = 60_000) -> bool:
    """The official EX verdict of ``predicted_sql`` against ``gold_sql`` on ``database``; ``keep_distinct``,
    ``ordered`` and ``permute_columns`` change one rule each (to test which rule explains a disagreement)."""
    gold, predicted = postprocess(gold_sql), postprocess(predicted_sql)
    if not keep_distinct:
        gold, predicted = remove_distinct(gold), remove_distinct(predicted)
    gold_rows, predicted_rows = run(database, gold, timeout_ms), run(database, predicted, timeout_ms)
    if isinstance(gold_rows, Exception) or isinstance(predicted_rows, Exception):
        return False
    return denotations_equal(gold_rows, predicted_rows, order_matters(gold) if ordered is None else ordered,
                             permute_columns=permute_columns)


def explain_difference(database: SqliteConnections, request: CompareRequest, report: Report,
                       official: bool) -> str:
    """The first rule of :data:`REASONS` whose change alone makes the official verdict agree with ``report``."""
    ours = report.deterministic_verdict == "pass"
    gold, predicted = request.expected_sql[0], request.actual_sql
    if report.blocked_reason == "execution_failure" or any("max_result_rows" in w for w in report.warnings):
        return "execution"
    gold_rows, predicted_rows = (run(database, remove_distinct(postprocess(sql)), 60_000) for sql in (gold, predicted))
    if official and gold_rows == [] and predicted_rows == []:
        return "empty_results"
    if official_match(database, gold, predicted, keep_distinct=True) == ours:
        return "distinct_handling"
    top_level = _top_level_order(gold)
    if top_level != order_matters(gold) and official_match(database, gold, predicted, ordered=top_level) == ours:
        return "order_rule"
    if ours and top_level and official_match(database, gold, predicted, keep_distinct=True, ordered=False):
        return "ties"
    mode: ResolvedMode = report.run_metadata.get("comparison_mode") or "order-insensitive"
    config = request.config
    if (official and not ours and (mode == "exact" or config.require_column_order_match)
            and not official_match(database, gold, predicted, permute_columns=False)):
        return "column_order"
    schema = (report.metrics.get("result") or {}).get("schema_match") or {}
    if official and not ours and (mode == "exact" or config.require_column_name_match) and not schema.get(
            "names_match", True):
        return "column_names"
    if (official and not ours and config.null_equality_mode == "sql_semantic" and isinstance(gold_rows, list)
            and any(value is None for row in gold_rows for value in row)):
        return "null_handling"
    if not isinstance(gold_rows, Exception) and not isinstance(predicted_rows, Exception):
        tolerance = Tolerance(*request.config.tolerances(mode))
        if denotations_equal(gold_rows, predicted_rows, order_matters(gold),
                             close=lambda a, b: _within(a, b, tolerance)) == ours:
            return "numeric_tolerance"
    return "other"


def compare_with_official(requests: Iterable[CompareRequest], reports: Iterable[Report], db_dir: Path,
                          timeout_ms: int = 60_000) -> tuple[dict[str, Any], list[Disagreement]]:
    """Official EX and sqlcmp's pass rate over the same Spider cases, and every case where they disagree.

    ``requests`` and ``reports`` pair by ``case_id``; cases sqlcmp found invalid (the gold query fails) are left
    out of both rates, as the official evaluation asserts the gold query runs.
    """
    by_id = {report.case_id: report for report in reports}
    databases: dict[str, SqliteConnections] = {}
    disagreements: list[Disagreement] = []
    official_passes = ours_passes = counted = 0
    try:
        for request in requests:
            report = by_id.get(request.case_id)
            if report is None or not report.validity.get("case_valid", True) or request.db is None:
                continue
            if request.db not in databases:
                path = db_dir / request.db / f"{request.db}.sqlite"
                databases[request.db] = SqliteConnections(partial(sqlite_read_only, path), path)
            database = databases[request.db]
            official = official_match(database, request.expected_sql[0], request.actual_sql, timeout_ms=timeout_ms)
            ours = report.deterministic_verdict == "pass"
            counted += 1
            official_passes += official
            ours_passes += ours
            if official != ours:
                disagreements.append(Disagreement(request.case_id, request.db, official, ours,
                                                  explain_difference(database, request, report, official),
                                                  request.expected_sql[0], request.actual_sql))
    finally:
        for database in databases.values():
            database.close()
    reasons = Counter(d.reason for d in disagreements)
    totals = {"cases": counted, "official_ex": round(official_passes / counted, 6) if counted else None,
              "sqlcmp_pass_rate": round(ours_passes / counted, 6) if counted else None,
              "disagreements": len(disagreements),
              "sqlcmp_pass_official_fail": sum(d.sqlcmp and not d.official for d in disagreements),
              "sqlcmp_fail_official_pass": sum(d.official and not d.sqlcmp for d in disagreements),
              "reasons": {reason: reasons[reason] for reason in REASONS if reasons[reason]}}
    return totals, disagreements


def render_markdown(totals: dict[str, Any], disagreements: list[Disagreement]) -> str:
    """The comparison as Markdown: the two rates, counts per reason, then one row per disagreeing case."""
    lines = [f"Cases: {totals['cases']}; official EX {_percent(totals['official_ex'])}, sqlcmp pass rate "
             f"{_percent(totals['sqlcmp_pass_rate'])}; verdicts differ on {totals['disagreements']} "
             f"({totals['sqlcmp_pass_official_fail']} pass only in sqlcmp, {totals['sqlcmp_fail_official_pass']} "
             "pass only officially).", "", "| reason | cases | what differs |", "|---|---:|---|"]
    lines += [f"| {reason} | {count} | {REASONS[reason]} |" for reason, count in totals["reasons"].items()]
    lines += ["", "| case | database | official | sqlcmp | reason | expected SQL | actual SQL |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {markdown_cell(d.case_id)} | {markdown_cell(d.database)} | {_word(d.official)} | "
              f"{_word(d.sqlcmp)} | {d.reason} | "
              f"`{_cell(d.expected_sql)}` | `{_cell(d.actual_sql)}` |" for d in disagreements]
    return "\n".join(lines)


def _top_level_order(sql: str) -> bool:
    """Whether the outermost query has an ORDER BY (sqlcmp's order rule); the official rule when unparsable."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError:
        return order_matters(sql)
    return tree.args.get("order") is not None


def _within(expected: Any, actual: Any, tolerance: Tolerance) -> bool:
    if _is_number(expected) and _is_number(actual):
        return tolerance.close(float(expected), float(actual))
    return bool(expected == actual)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _word(passed: bool) -> str:
    return "pass" if passed else "fail"


def _cell(sql: str, limit: int = 160) -> str:
    text = " ".join(sql.split()).replace("|", "\\|").replace("`", "'")
    return text if len(text) <= limit else text[:limit - 1] + "…"
