"""The unpartitioned summary over every case report: pass rate, severities, attributions, invalid cases and a
per-database breakdown."""

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import dagster as dg
import polars as pl

from sqlcmp_dagster.assets.common import CASE_STORE, case_reports_key
from sqlcmp_dagster.cases.chunks import partition_of
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.published_metrics import overall_figures, render_table
from sqlcmp_dagster.engine.records import iter_reports
from sqlcmp_dagster.engine.summary import SEVERITIES, Summary, case_facts, likely_source_label, robust_line
from sqlcmp_dagster.escaping import markdown_cell
from sqlcmp_dagster.reporting.cases import outcome
from sqlcmp_dagster.resources.storage import IN_ORDER

#: The robust figures of a summary (``engine.neighbor_report.robustness``), shown as numeric metadata.
ROBUST_FIGURES = ("robust_pass_rate", "robust_passes", "passes_with_counterexample", "neighbor_searches",
                  "neighbor_searches_cut", "passes_not_searched", "vacuous_passes_resolved")


@dg.asset(io_manager_key=CASE_STORE, group_name="evaluation", kinds={"polars"},
          ins={"case_reports": dg.AssetIn(key=case_reports_key, metadata={IN_ORDER: False})},
          automation_condition=dg.AutomationCondition.eager(),
          description="Pass rate, severity, attribution and invalid-case counts over all case reports.")
def evaluation_summary(context: dg.AssetExecutionContext, case_reports: pl.DataFrame) -> dict[str, Any]:
    # one pass over the reports, a slice of them made at a time: at 100,000 cases every report made at once held
    # 2 GB beside the frame. They come in the store's order and are added up in their ids' order, whether a
    # partition is a case or a chunk of cases (the ties among counts are listed in the order labels first came)
    tally, failures = Summary(), FailureTable()
    for report in iter_reports(case_reports, by="case_id"):
        tally.add(case_facts(report))
        failures.add(report)
    summary = tally.figures()
    context.add_output_metadata({
        # rates as percentages (a key ending in _%), each a number for the Plots tab
        f"pass_rate{PERCENT}": percent(summary["pass_rate"]),
        # the failing and invalid cases, each a link to its partition, before the counts
        "failing_cases": dg.MetadataValue.md(failures.table()),
        # the neighbor search's figures beside the pass rate
        **dict(figure(name, summary[name]) for name in ROBUST_FIGURES),
        # the same in words: the passes not searched and why, "n/a: did not run (...)" for a NaN rate
        **({"robustness": dg.MetadataValue.text(line)} if (line := robust_line(summary)) else {}),
        "cases": summary["cases"],
        "vacuous_passes": summary["vacuous_passes"],
        "invalid_cases": summary["invalid_cases"],
        "severity": dg.MetadataValue.md(bar_chart("Severity", summary["severity_counts"])),
        "attribution": dg.MetadataValue.md(bar_chart("Likely source clause", summary["attribution_counts"])),
        "errors": dg.MetadataValue.md(bar_chart("Execution error types", summary["error_type_counts"])),
        "validity": dg.MetadataValue.md(bar_chart("Cases", {
            "passed": summary["passed"], "failed": summary["failed"], "invalid": summary["invalid_cases"]})),
        "passed": summary["passed"],
        "failed": summary["failed"],
        "mean_overall_score": dg.MetadataValue.float(summary["mean_overall_score"] if summary["mean_overall_score"]
                                                     is not None else float("nan")),
        # one number per hardness level and difficulty label, so the Plots tab shows each one's trend across runs
        **{f"{name}{PERCENT}": percent(rate) for name, rate in level_rates(summary).items()},
        "per_hardness": dg.MetadataValue.md(database_table(summary["per_hardness"], "hardness")),
        **({"per_difficulty": dg.MetadataValue.md(database_table(summary["per_difficulty"], "difficulty"))}
           if summary["per_difficulty"] else {}),
        "per_database": dg.MetadataValue.md(database_table(summary["per_database"])),
        # Spider EM and BIRD's EX, Soft-F1 and R-VES: a percentage each, and the paper's table per level
        **{f"{name}{PERCENT}": percent(value) for name, value in overall_figures(summary["published_metrics"]).items()},
        **({"published_metrics": dg.MetadataValue.md(render_table(summary["published_metrics"]))}
           if summary["published_metrics"] else {}),
        "summary": dg.MetadataValue.json(json.loads(json.dumps(summary))),
    })
    return summary


#: The suffix of a rate's metadata key: its value is a percentage.
PERCENT = "_%"
#: The most failing and invalid cases :func:`failures_table` lists; it counts the others below them.
LISTED_FAILURES = 200
#: Where the Dagster UI shows one partition of case_reports: its verdict, severity and headline (the
#: materialization's metadata) and its case_verdict check. Relative to the UI's root.
PARTITION_PAGE = "/assets/case_reports?view=partitions&partition={}"


def percent(rate: float | None) -> dg.MetadataValue:
    """A rate (0 to 1) as a percentage with two decimals; no rate (no case to count) plots as NaN: a gap.

    >>> percent(11 / 33).value, percent(None).value != percent(None).value
    (33.33, True)
    """
    return dg.MetadataValue.float(float("nan") if rate is None else round(rate * 100, 2))


def figure(name: str, value: float | int | None) -> tuple[str, dg.MetadataValue]:
    """A summary figure's metadata key and value: a rate (``*_rate``) as a percentage under ``<name>_%``.

    >>> figure("robust_pass_rate", 0.5), figure("robust_passes", 3)[1].value
    (('robust_pass_rate_%', FloatMetadataValue(value=50.0)), 3)
    """
    return (f"{name}{PERCENT}", percent(value)) if name.endswith("_rate") else (name, number(value))


def failures_table(reports: Iterable[Report], limit: int = LISTED_FAILURES) -> str:
    """The failing and invalid cases as a Markdown table, the most severe failures first and the invalid cases
    last: id (a link to its partition's page: the case's, or its chunk's), outcome, severity, likely source and
    headline (the first explanation). Case text is escaped as a table cell, and the id in the link's address is
    percent-encoded, so no case can break the table or the link. At most ``limit`` rows; a line counts the
    others (:class:`FailureTable`).

    >>> import types
    >>> bad = types.SimpleNamespace(case_id="c|1", deterministic_verdict="fail", validity={}, severity="major issue",
    ...                             explanations=["wrong rows"], diagnostic_scores={"likely_source_clause": "join"},
    ...                             blocked_reason=None, evidence={}, metrics={})
    >>> print(failures_table([bad]))  # doctest: +NORMALIZE_WHITESPACE
    | case | outcome | severity | likely source | headline |
    |---|---|---|---|---|
    | [c\\|1](/assets/case_reports?view=partitions&partition=c%7C1) | fail | major issue | join | wrong rows |
    """
    table = FailureTable(limit)
    for report in reports:
        table.add(report)
    return table.table()


class FailureTable:
    """:func:`failures_table` fed one report at a time, keeping the rows of at most about twice ``limit`` cases
    (the first in the table's order) and a count of the others, whatever the number of reports."""

    def __init__(self, limit: int = LISTED_FAILURES) -> None:
        self.limit = limit
        self.count = 0
        self._rows: list[tuple[tuple[bool, int, str], int, str]] = []  # (order, arrival, line)

    def add(self, report: Report) -> None:
        kind = outcome(report)
        if kind == "pass":
            return
        self.count += 1
        source = likely_source_label(report) if kind == "fail" else ""
        headline = report.explanations[0] if report.explanations else ""
        page = PARTITION_PAGE.format(quote(partition_of(report.case_id), safe=''))
        line = (f"| [{markdown_cell(report.case_id)}]({page}) | {kind} | {report.severity} | "
                f"{markdown_cell(source)} | {markdown_cell(headline[:200])} |")
        self._rows.append(((kind == "invalid", _RANK.get(report.severity, len(_RANK)), report.case_id), self.count,
                           line))
        if len(self._rows) >= 2 * self.limit:
            self._rows = sorted(self._rows)[:self.limit]

    def table(self) -> str:
        if not self.count:
            return "No failing or invalid case."
        lines = ["| case | outcome | severity | likely source | headline |", "|---|---|---|---|---|"]
        lines += [line for _, _, line in sorted(self._rows)[:self.limit]]
        if self.count > self.limit:
            lines.append(f"\n{self.count - self.limit} more: case_reports, Checks, case_verdict, Partitions lists "
                         "them all.")
        return "\n".join(lines)


#: Severities, the most severe first: the order of :class:`FailureTable`'s failures.
_RANK = {severity: index for index, severity in enumerate(reversed(SEVERITIES))}


def number(value: float | int | None) -> dg.MetadataValue:
    """A summary figure as numeric metadata (a rate without cases to count, None, plots as NaN: a gap).

    >>> number(None).value != number(None).value, number(3).value, number(0.5).value
    (True, 3, 0.5)
    """
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    return dg.MetadataValue.float(float("nan") if value is None else value)


def level_rates(summary: dict[str, Any]) -> dict[str, float | None]:
    """The pass rate of each hardness level as ``pass_rate_<level>`` and of each difficulty label as
    ``pass_rate_<label>``; a label that names a hardness level too (a suite's own ``"easy"``) is
    ``pass_rate_difficulty_<label>``, so that neither figure replaces the other.

    >>> level_rates({"per_hardness": {"easy": {"pass_rate": 0.5}},
    ...              "per_difficulty": {"easy": {"pass_rate": 1.0}, "simple": {"pass_rate": None}}})
    {'pass_rate_easy': 0.5, 'pass_rate_difficulty_easy': 1.0, 'pass_rate_simple': None}
    """
    rates = {f"pass_rate_{level}": row["pass_rate"] for level, row in summary["per_hardness"].items()}
    for label, row in summary["per_difficulty"].items():
        rates[f"pass_rate_difficulty_{label}" if label in summary["per_hardness"] else f"pass_rate_{label}"] = \
            row["pass_rate"]
    return rates


def database_table(per_database: dict[str, dict[str, Any]], group: str = "database") -> str:
    """A breakdown (per database, or per ``group``) as a Markdown table; a name (a suite's database or label) is
    one cell whatever it holds (:func:`~sqlcmp_dagster.escaping.markdown_cell`).

    >>> print(database_table({"shop": {"cases": 3, "passed": 1, "failed": 1, "vacuous_passes": 1, "invalid": 1,
    ...                                 "pass_rate": 0.5}}))
    | database | cases | passed | of them vacuous | failed | invalid | pass rate |
    |---|---:|---:|---:|---:|---:|---:|
    | shop | 3 | 1 | 1 | 1 | 1 | 50.0% |
    """
    lines = [f"| {group} | cases | passed | of them vacuous | failed | invalid | pass rate |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, row in per_database.items():
        rate = "n/a" if row["pass_rate"] is None else f"{row['pass_rate']:.1%}"
        lines.append(f"| {markdown_cell(name)} | {row['cases']} | {row['passed']} | {row['vacuous_passes']} | "
                     f"{row['failed']} | {row['invalid']} | {rate} |")
    return "\n".join(lines)


def bar_chart(title: str, counts: dict[str, int], width: int = 30) -> str:
    """A Markdown table with a text bar per row: readable in the Dagster UI and in a terminal.

    >>> print(bar_chart("T", {"a": 2, "b": 1}, width=4))
    **T**
    <BLANKLINE>
    | label | count | |
    |---|---:|---|
    | a | 2 | `████` |
    | b | 1 | `██` |
    """
    top = max(counts.values(), default=0)
    lines = [f"**{title}**", "", "| label | count | |", "|---|---:|---|"]
    for label, count in counts.items():
        bar = "█" * (round(width * count / top) if top else 0)
        lines.append(f"| {markdown_cell(label)} | {count} | `{bar}` |")
    return "\n".join(lines)
