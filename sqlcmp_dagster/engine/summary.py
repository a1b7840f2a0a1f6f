"""Batch summary over many reports: what a person reads first after an evaluation run.

Invalid cases (no expected query runs) are counted apart and left out of the pass rate: they say nothing about
the model under test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from sqlcmp_dagster.engine.models import Report

SEVERITIES = ("pass", "minor issue", "moderate issue", "major issue", "critical failure")


def summarize(reports: Iterable[Report], *, load_errors: int = 0) -> dict[str, Any]:
    """Pass rate, severity counts, attribution counts, error types and invalid cases of ``reports``."""
    reports = list(reports)
    valid = [r for r in reports if r.validity.get("case_valid", True)]
    passed = sum(r.deterministic_verdict == "pass" for r in valid)
    severity = Counter(r.severity for r in valid)
    attribution = Counter((r.diagnostic_scores or {}).get("likely_source_clause") or "none"
                          for r in valid if r.deterministic_verdict == "fail" and r.blocked_reason is None)
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
        "severity_counts": {label: severity.get(label, 0) for label in SEVERITIES},
        "attribution_counts": dict(attribution.most_common()),
        "blocked_counts": dict(blocked.most_common()),
        "error_type_counts": dict(errors.most_common()),
        "mean_overall_score": round(sum(r.overall_score for r in valid) / len(valid), 6) if valid else None,
    }


def render_summary(summary: dict[str, Any]) -> str:
    """The summary as a few lines of text."""
    rate = "n/a" if summary["pass_rate"] is None else f"{summary['pass_rate']:.1%}"
    lines = [f"{summary['cases']} cases: {summary['passed']} passed, {summary['failed']} failed "
             f"(pass rate {rate}), {summary['invalid_cases']} invalid, {summary['load_errors']} not loadable"]
    lines.append("severity: " + ", ".join(f"{k} {v}" for k, v in summary["severity_counts"].items()))
    if summary["attribution_counts"]:
        lines.append("likely source: " + ", ".join(f"{k} {v}" for k, v in summary["attribution_counts"].items()))
    if summary["error_type_counts"]:
        lines.append("errors: " + ", ".join(f"{k} {v}" for k, v in summary["error_type_counts"].items()))
    return "\n".join(lines)
