"""Reading a reports file and flattening each report into one row of the per-case table (CSV and HTML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sqlcmp_dagster.engine.atomic import read_lines
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.published_metrics import CASE_COLUMNS as PUBLISHED_COLUMNS
from sqlcmp_dagster.engine.published_metrics import case_values
from sqlcmp_dagster.engine.summary import database_label, likely_source_label
from sqlcmp_dagster.escaping import spreadsheet_text

#: The per-case table's columns, in order (the CSV header).
CASE_COLUMNS = ("case_id", "outcome", "severity", "overall_score", "structure_score", "result_score",
                "likely_source_clause", "confidence", "database", "hardness", "difficulty", "blocked_reason",
                "error_types", "user_query", "expected_sql", "actual_sql", "explanation", *PUBLISHED_COLUMNS)


class ReportsFileError(ValueError):
    """A reports file that cannot be read; the message names the file and line."""


def read_reports(path: Path) -> list[Report]:
    """Every report of a JSONL reports file (``sqlcmp evaluate --out``), in file order."""
    reports = []
    for number, line in enumerate(read_lines(path, ReportsFileError), start=1):
        if not line.strip():
            continue
        try:
            reports.append(Report.model_validate_json(line))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            raise ReportsFileError(f"{path}:{number}: not a report ({where}: {first['msg']})") from error
    return reports


def outcome(report: Report) -> str:
    """``pass``, ``fail`` or ``invalid`` (no expected query runs: not the query under test's error)."""
    return verdict_outcome(report.deterministic_verdict, report.validity)


def verdict_outcome(verdict: str, validity: dict[str, Any]) -> str:
    """:func:`outcome` from a report's two fields, e.g. a stored report row's.

    >>> verdict_outcome("fail", {"case_valid": False}), verdict_outcome("fail", {})
    ('invalid', 'fail')
    """
    return verdict if validity.get("case_valid", True) else "invalid"


def is_failed(report: Report) -> bool:
    """What ``--only-failed`` keeps: valid cases that failed (invalid cases are not the model's failures)."""
    return outcome(report) == "fail"


def case_row(report: Report) -> dict[str, Any]:
    """One report as a flat row of :data:`CASE_COLUMNS`."""
    validation = report.metrics.get("validation") or {}
    diagnostics = report.diagnostic_scores or {}
    return {
        "case_id": report.case_id,
        "outcome": outcome(report),
        "severity": report.severity,
        "overall_score": round(report.overall_score, 6),
        "structure_score": None if report.structure_score is None else round(report.structure_score, 6),
        "result_score": None if report.result_score is None else round(report.result_score, 6),
        "likely_source_clause": likely_source_label(report) if outcome(report) == "fail" and not report.blocked_reason
        else diagnostics.get("likely_source_clause"),
        "confidence": diagnostics.get("confidence"),
        "database": database_label(report.run_metadata.get("database")),
        "hardness": report.run_metadata.get("hardness"),
        "difficulty": report.run_metadata.get("difficulty"),
        "blocked_reason": report.blocked_reason,
        "error_types": " ".join(report.error_types),
        "user_query": report.run_metadata.get("user_query") or "",
        "expected_sql": validation.get("normalized_sql_expected") or "",
        "actual_sql": validation.get("normalized_sql_actual") or "",
        "explanation": report.explanations[0] if report.explanations else "",
        **case_values(report),
    }


def csv_row(report: Report) -> dict[str, Any]:
    """One report as a row of the per-case CSV (:data:`CASE_COLUMNS`).

    A text cell is the case's text (its id, question, SQL, a database's error): one that starts as a formula does
    is written after a ``'`` (:func:`~sqlcmp_dagster.escaping.spreadsheet_text`), so that opening the file never
    runs what a case wrote (``=HYPERLINK(...)``, ``=cmd|...``)."""
    return {name: spreadsheet_text(value) for name, value in case_row(report).items()}


def find_report(reports: list[Report], case_id: str) -> Report | None:
    return next((r for r in reports if r.case_id == case_id), None)
