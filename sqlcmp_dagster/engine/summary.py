"""Batch summary over many reports: what a person reads first after an evaluation run.

Invalid cases (no expected query runs) are counted apart and left out of the pass rate: they say nothing about
the model under test. Passes on two empty results are counted too (``vacuous_passes``): they are passes by the
rules, but say little about the query, and a benchmark with many of them (Spider has dozens, more where a
database ships without rows) reads better when a person can see how many there are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from sqlcmp_dagster.engine.bird_metrics import BIRD_DIFFICULTIES
from sqlcmp_dagster.engine.hardness import HARDNESS_LEVELS
from sqlcmp_dagster.engine.models import Report, Severity
from sqlcmp_dagster.engine.neighbor_report import NEIGHBOR_COUNTEREXAMPLE, NeighborFacts, Robustness, \
    failed_by_counterexample, neighbor_facts
from sqlcmp_dagster.engine.published_metrics import PublishedFacts, PublishedTally, published_facts, render_table
from sqlcmp_dagster.engine.tally import RunningSum

SEVERITIES: tuple[Severity, ...] = ("pass", "minor issue", "moderate issue", "major issue", "critical failure")


def summarize(reports: Iterable[Report], *, load_errors: int = 0) -> dict[str, Any]:
    """Pass rate, severity counts, attribution counts, error types, invalid cases, breakdowns of ``reports``
    per database, per Spider hardness of the expected query and per the benchmark's own difficulty label, and the
    benchmarks' published metrics (``published_metrics``: Spider EM, BIRD EX, Soft-F1, R-VES). A
    :class:`Summary` fed the reports in their order."""
    summary = Summary()
    for report in reports:
        summary.add(case_facts(report))
    return summary.figures(load_errors=load_errors)


@dataclass(frozen=True, slots=True)
class CaseFacts:
    """What the summary reads of one report (:func:`case_facts`): a few hundred bytes where the report is tens
    of kilobytes, so that a run can hold the facts of the reports that arrived ahead of their turn."""

    case_id: str
    valid: bool
    passed: bool
    vacuous: bool
    severity: str
    #: The fail's likely source clause as counted (:func:`likely_source_label`), for a valid unblocked fail.
    source: str | None
    blocked: str | None
    error_types: tuple[str, ...]
    overall_score: float
    database: str
    #: ``run_metadata.hardness`` and ``difficulty`` as they are (None when absent).
    hardness: Any
    difficulty: Any
    #: For a valid pass: its neighbor search (:func:`~sqlcmp_dagster.engine.neighbor_report.neighbor_facts`).
    neighborhood: NeighborFacts | None
    #: For a valid case: its published metrics (:func:`~sqlcmp_dagster.engine.published_metrics.published_facts`).
    published: PublishedFacts | None


def case_facts(report: Report) -> CaseFacts:
    valid = report.validity.get("case_valid", True)
    passed = report.deterministic_verdict == "pass"
    source = likely_source_label(report) if valid and report.deterministic_verdict == "fail" \
        and report.blocked_reason is None else None
    return CaseFacts(report.case_id, valid, passed, is_vacuous_pass(report), report.severity, source,
                     report.blocked_reason, tuple(report.error_types), report.overall_score,
                     database_label(report.run_metadata.get("database")), report.run_metadata.get("hardness"),
                     report.run_metadata.get("difficulty"), neighbor_facts(report) if valid and passed else None,
                     published_facts(report) if valid else None)


class Summary:
    """The summary of a run added up one case at a time (:meth:`add`, in the suite's order: ties among the
    counts are listed in the order their labels first came), holding counts, running sums and the invalid
    cases' ids, never the reports; :meth:`figures` is what :func:`summarize` gives for the same reports."""

    def __init__(self) -> None:
        self.cases = self.valid = self.passed = self.vacuous = 0
        self.invalid_case_ids: list[str] = []
        self.severity: Counter[str] = Counter()
        self.attribution: Counter[str] = Counter()
        self.blocked: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.overall_score = RunningSum()
        self.robustness = Robustness()
        self.published = PublishedTally()
        #: Per breakdown, per group: cases, valid cases, passes, vacuous passes.
        self.breakdowns: dict[str, dict[Any, list[int]]] = {key: {} for key in _BREAKDOWNS}

    def add(self, facts: CaseFacts) -> None:
        self.cases += 1
        groups = {"per_database": facts.database, "per_hardness": facts.hardness or "unknown",
                  "per_difficulty": str(facts.difficulty) if facts.difficulty else None}
        for key, name in groups.items():
            if name is not None:
                counts = self.breakdowns[key].setdefault(name, [0, 0, 0, 0])
                counts[0] += 1
                if facts.valid:
                    counts[1] += 1
                    counts[2] += facts.passed
                    counts[3] += facts.vacuous
        if not facts.valid:
            self.invalid_case_ids.append(facts.case_id)
            return
        self.valid += 1
        self.passed += facts.passed
        self.vacuous += facts.vacuous
        self.severity[facts.severity] += 1
        if facts.source is not None:
            self.attribution[facts.source] += 1
        if facts.blocked:
            self.blocked[facts.blocked] += 1
        for error in facts.error_types:
            self.errors[error] += 1
        self.overall_score.add(facts.overall_score)
        self.robustness.add(facts.passed, facts.neighborhood, facts.vacuous)
        if facts.published is not None:
            self.published.add(facts.published)

    def figures(self, *, load_errors: int = 0) -> dict[str, Any]:
        valid = self.valid
        return {
            "cases": self.cases,
            "valid_cases": valid,
            "invalid_cases": self.cases - valid,
            "invalid_case_ids": list(self.invalid_case_ids),
            "load_errors": load_errors,
            "passed": self.passed,
            "failed": valid - self.passed,
            "pass_rate": round(self.passed / valid, 6) if valid else None,
            "vacuous_passes": self.vacuous,
            **self.robustness.figures(valid),
            "severity_counts": {label: self.severity.get(label, 0) for label in SEVERITIES},
            "attribution_counts": dict(self.attribution.most_common()),
            "blocked_counts": dict(self.blocked.most_common()),
            "error_type_counts": dict(self.errors.most_common()),
            "mean_overall_score": round(self.overall_score.value / valid, 6) if valid else None,
            **{key: _breakdown(self.breakdowns[key], order) for key, order in _BREAKDOWNS.items()},
            "published_metrics": self.published.figures(),
        }


#: The breakdowns of a summary, each with the groups it lists first, in that order.
_BREAKDOWNS: dict[str, Sequence[str]] = {"per_database": (), "per_hardness": HARDNESS_LEVELS,
                                         "per_difficulty": BIRD_DIFFICULTIES}


def likely_source_label(report: Report) -> str:
    """A fail's likely source clause as summaries count it: ``neighbor_counterexample`` for a fail that only a
    neighbor counterexample makes (no clause is attributed there), ``none`` when the attribution found none."""
    source = (report.diagnostic_scores or {}).get("likely_source_clause")
    return source or (NEIGHBOR_COUNTEREXAMPLE if failed_by_counterexample(report) else "none")


def is_vacuous_pass(report: Report) -> bool:
    """Whether ``report`` passed on two empty results (``result_equality_family.mode_details.vacuous_match``)."""
    family = (report.metrics.get("result") or {}).get("result_equality_family") or {}
    return report.deterministic_verdict == "pass" and bool((family.get("mode_details") or {}).get("vacuous_match"))


def database_label(identifier: str | None) -> str:
    """A short name for the database a report ran on: a file's stem, or a URL's database name.

    >>> database_label("/data/spider/concert_singer/concert_singer.sqlite"), database_label("sqlite:///x/shop.db")
    ('concert_singer', 'shop')
    >>> database_label("postgresql+psycopg2://u:***@127.0.0.1:5432/sales"), database_label(None)
    ('sales', 'unknown')
    """
    if not identifier:
        return "unknown"
    path = identifier.split("://", 1)[-1].split("?", 1)[0]
    return PurePosixPath(path).stem or identifier


def _breakdown(groups: dict[Any, list[int]], order: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Cases, passes (and how many of them vacuous), failures, invalid cases and pass rate per group (counted by
    :meth:`Summary.add`): the groups named in ``order`` first, in that order, then the rest by name."""
    breakdown = {}
    for name in sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g)):
        cases, valid, passed, vacuous = groups[name]
        breakdown[name] = {"cases": cases, "passed": passed, "failed": valid - passed, "vacuous_passes": vacuous,
                           "invalid": cases - valid, "pass_rate": round(passed / valid, 6) if valid else None}
    return breakdown


def render_summary(summary: dict[str, Any]) -> str:
    """The summary as a few lines of text."""
    rate = "n/a" if summary["pass_rate"] is None else f"{summary['pass_rate']:.1%}"
    lines = [f"{summary['cases']} cases: {summary['passed']} passed, {summary['failed']} failed "
             f"(pass rate {rate}), {summary['invalid_cases']} invalid, {summary['load_errors']} not loadable"]
    if summary["vacuous_passes"]:
        lines.append(f"vacuous passes (both results empty): {summary['vacuous_passes']} of {summary['passed']}")
    robust = robust_line(summary)
    if robust is not None:
        lines.append(robust)
    lines.append("severity: " + ", ".join(f"{k} {v}" for k, v in summary["severity_counts"].items()))
    if summary["attribution_counts"]:
        lines.append("likely source: " + ", ".join(f"{k} {v}" for k, v in summary["attribution_counts"].items()))
    if summary["error_type_counts"]:
        lines.append("errors: " + ", ".join(f"{k} {v}" for k, v in summary["error_type_counts"].items()))
    for key, title, minimum in (("per_hardness", "per Spider hardness", 1), ("per_difficulty", "per difficulty", 1),
                                ("per_database", "per database", 2)):
        groups = summary.get(key) or {}
        if len(groups) >= minimum:
            lines.append(f"{title} (passed/valid):")
            lines.extend(f"  {name:32} {row['passed']:5}/{row['passed'] + row['failed']:<5} "
                         + ("n/a" if row["pass_rate"] is None else f"{row['pass_rate']:6.1%}")
                         + (f"  ({row['vacuous_passes']} vacuous)" if row["vacuous_passes"] else "")
                         + (f"  ({row['invalid']} invalid)" if row["invalid"] else "")
                         for name, row in groups.items())
    if summary.get("published_metrics"):
        lines.append("published metrics (percent of valid cases):")
        lines.extend(f"  {line}" for line in render_table(summary["published_metrics"]).splitlines())
    return "\n".join(lines)


def robust_line(summary: dict[str, Any]) -> str | None:
    """The robust pass rate beside the pass rate in words, with the passes not searched and why (they count as
    not robust); ``n/a: did not run (<reasons>)`` when no pass was searched; None when no case passed."""
    if not summary["passed"]:
        return None
    reasons = summary.get("passes_not_searched_reasons") or {}
    why = "; ".join(f"{reason}: {_passes(count)}" for reason, count in reasons.items())
    if summary.get("robust_pass_rate") is None:
        return f"robust pass rate n/a: did not run ({why or 'no neighbor search in the reports'})"
    rate = "n/a" if summary["pass_rate"] is None else f"{summary['pass_rate']:.1%}"
    cut = summary.get("neighbor_searches_cut") or 0
    cut_words = f", {cut} of them cut by the time budget" if cut else ""
    found = summary["passes_with_counterexample"]
    line = (f"robust pass rate {summary['robust_pass_rate']:.1%} beside pass rate {rate}: "
            f"{_passes(found)} ha{'s' if found == 1 else 've'} a counterexample on a neighbor database "
            f"({_passes(summary['neighbor_searches'])} searched{cut_words}, "
            f"{_passes(summary['vacuous_passes_resolved'])} on two empty results compared on non-empty neighbor "
            "results)")
    unsearched = summary.get("passes_not_searched") or 0
    if unsearched:
        line += f"; {_passes(unsearched)} not searched count{'s' if unsearched == 1 else ''} as not robust ({why})"
    return line


def _passes(count: int) -> str:
    return f"{count} pass{'' if count == 1 else 'es'}"
