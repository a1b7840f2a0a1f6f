"""A case's two queries as people compare them: pretty-printed one clause a line, each line marked where it
differs from the other side. The HTML report shows them side by side, ``sqlcmp show`` one above the other."""

from __future__ import annotations

import difflib

import sqlglot

from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.reporting.cases import case_row


def side_by_side(expected: str, actual: str, dialect: str) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Both queries pretty-printed one clause a line, each line paired with whether it differs from the other side.

    >>> side_by_side("SELECT a FROM t WHERE x > 1", "SELECT a FROM t WHERE x >= 1", "sqlite")[1]
    [('SELECT', False), ('  a', False), ('FROM t', False), ('WHERE', False), ('  x >= 1', True)]
    """
    left, right = _pretty(expected, dialect), _pretty(actual, dialect)
    left_changed, right_changed = [True] * len(left), [True] * len(right)
    for block in difflib.SequenceMatcher(a=left, b=right, autojunk=False).get_matching_blocks():
        for offset in range(block.size):
            left_changed[block.a + offset] = right_changed[block.b + offset] = False
    return list(zip(left, left_changed)), list(zip(right, right_changed))


def report_sides(report: Report) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """:func:`side_by_side` of a report's two queries (their canonical text, as the comparison read them)."""
    row = case_row(report)
    return side_by_side(row["expected_sql"], row["actual_sql"], report.run_metadata.get("dialect") or "sqlite")


def query_lines(report: Report) -> list[str]:
    """The question and both queries as text, one above the other, each line that differs from the other query
    marked ``<- differs`` (when both queries are there to compare)."""
    validation = (report.metrics or {}).get("validation") or {}
    question = report.run_metadata.get("user_query")
    lines = [f"question: {question}"] if question else []
    sides = report_sides(report)
    width = min(60, max((len(text) for side in sides for text, _ in side), default=0))  # a long line: ragged
    for name, side in zip(("expected", "actual"), sides):
        if not side:
            parsed = validation.get(f"parse_success_{name}")
            lines.append(f"{name} query: {'does not parse' if parsed is False else 'not recorded'}")
            continue
        lines.append(f"{name} query:")
        lines += [f"    {text.ljust(width)}  <- differs" if changed and all(sides) else f"    {text}"
                  for text, changed in side]
    return lines


def _pretty(sql: str, dialect: str) -> list[str]:
    if not sql:
        return []
    try:
        return sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0].splitlines()
    except (sqlglot.errors.SqlglotError, ValueError, RecursionError):  # shown as given when it does not re-print
        return sql.splitlines()
