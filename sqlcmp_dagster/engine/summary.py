"""Batch summary over many reports: what a person reads first after an evaluation run.

Invalid cases (no expected query runs) are counted apart and left out of the pass rate: they say nothing about
the model under test. Passes on two empty results are counted too (``vacuous_passes``): they are passes by the
rules, but say little about the query, and a benchmark with many of them (Spider has dozens, more where a
database ships without rows) reads better when a person can see how many there are.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any

from sqlcmp_dagster.engine.bird_metrics import BIRD_DIFFICULTIES
from sqlcmp_dagster.engine.hardness import HARDNESS_LEVELS
from sqlcmp_dagster.engine.models import Report, Severity
from sqlcmp_dagster.engine.neighbor_report import NEIGHBOR_COUNTEREXAMPLE, failed_by_counterexample, robustness
from sqlcmp_dagster.engine.published_metrics import render_table, summarize_published

SEVERITIES: tuple[Severity, ...] = ("pass", "minor issue", "moderate issue", "major issue", "critical failure")


def summarize(reports: Iterable[Report], *, load_errors: int = 0) -> dict[str, Any]:
    """Pass rate, severity counts, attribution counts, error types, invalid cases, breakdowns of ``reports``
    per database, per Spider hardness of the expected query and per the benchmark's own difficulty label, and the
    benchmarks' published metrics (``published_metrics``: Spider EM, BIRD EX, Soft-F1, R-VES)."""
    reports = list(reports)
    valid = [r for r in reports if r.validity.get("case_valid", True)]
    passed = sum(r.deterministic_verdict == "pass" for r in valid)
    vacuous = sum(is_vacuous_pass(r) for r in valid)
    severity = Counter(r.severity for r in valid)
    attribution = Counter(likely_source_label(r) for r in valid
                          if r.deterministic_verdict == "fail" and r.blocked_reason is None)
    blocked = Counter(r.blocked_reason for r in valid if r.blocked_reason)
    errors = Counter(e for r in valid for e in r.error_types)
    return {
        "cases": len(reports),
        "valid_cases": len(valid),
        "invalid_cases": len(reports) - len(valid),
        "invalid_case_ids": [r.case_id for r in reports if not r.validity.get("case_valid", True)],
        "load_errors": load_errors,
        "passed": passed,
        "failed": len(valid) - passed,
        "pass_rate": round(passed / len(valid), 6) if valid else None,
        "vacuous_passes": vacuous,
        **robustness(valid, is_vacuous_pass),
        "severity_counts": {label: severity.get(label, 0) for label in SEVERITIES},
        "attribution_counts": dict(attribution.most_common()),
        "blocked_counts": dict(blocked.most_common()),
        "error_type_counts": dict(errors.most_common()),
        "mean_overall_score": round(sum(r.overall_score for r in valid) / len(valid), 6) if valid else None,
        "per_database": _breakdown(reports, lambda r: database_label(r.run_metadata.get("database"))),
        "per_hardness": _breakdown(reports, lambda r: r.run_metadata.get("hardness") or "unknown",
                                   order=HARDNESS_LEVELS),
        "per_difficulty": _breakdown([r for r in reports if r.run_metadata.get("difficulty")],
                                     lambda r: str(r.run_metadata["difficulty"]), order=BIRD_DIFFICULTIES),
        "published_metrics": summarize_published(valid),
    }


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


def _breakdown(reports: list[Report], label: Callable[[Report], str], order: Sequence[str] = ()) \
        -> dict[str, dict[str, Any]]:
    """Cases, passes (and how many of them vacuous), failures, invalid cases and pass rate per group of
    ``reports`` (grouped by ``label``): the groups named in ``order`` first, in that order, then the rest by name."""
    groups: dict[str, list[Report]] = defaultdict(list)
    for report in reports:
        groups[label(report)].append(report)
    breakdown = {}
    for name in sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g)):
        valid = [r for r in groups[name] if r.validity.get("case_valid", True)]
        passed = sum(r.deterministic_verdict == "pass" for r in valid)
        breakdown[name] = {"cases": len(groups[name]), "passed": passed, "failed": len(valid) - passed,
                           "vacuous_passes": sum(is_vacuous_pass(r) for r in valid),
                           "invalid": len(groups[name]) - len(valid),
                           "pass_rate": round(passed / len(valid), 6) if valid else None}
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
