"""The HTML report: one self-contained file (styles, script and SVG charts inline, nothing fetched) that opens
offline in any browser and can be attached to a ticket or a CI artifact.

It holds the summary with charts, a sortable and filterable table of cases, and per case the question, both
queries side by side with the differing lines marked, samples of the missing and extra rows with the differing
cells marked, the explanations and the re-execution probes. The table can be pre-filtered from the address
(``report.html#outcome=fail&q=orders``), which also lets a headless browser test the filtering.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from jinja2 import Environment, PackageLoader, select_autoescape

from sqlcmp_dagster.engine.atomic import atomic_path
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.neighbor_report import neighborhood_of
from sqlcmp_dagster.engine.version import ENGINE_VERSION
from sqlcmp_dagster.engine.report import explanation_lines, neighbor_lines, per_column_map
from sqlcmp_dagster.engine.summary import SEVERITIES, robust_line
from sqlcmp_dagster.reporting.cases import case_row
from sqlcmp_dagster.reporting.queries import report_sides

_ENVIRONMENT = Environment(loader=PackageLoader("sqlcmp_dagster.reporting", "templates"),
                           autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)


class CaseViews(Protocol):
    """Case views (:func:`case_view`) as :func:`report_page` reads them: counted, and iterated more than once."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[dict[str, Any]]: ...


def report_page(cases: CaseViews, summary: dict[str, Any], *, title: str) -> Iterator[str]:
    """The HTML report, piece by piece as it is written: the summary (over the whole run) and ``cases`` (case
    views, :func:`case_view`, in the table's order), which the page counts and reads twice (the table, then the
    details): a :class:`ViewSpool` serves a run of any length from disk."""
    charts = [("Outcome", {"passed": summary["passed"], "failed": summary["failed"],
                           "invalid": summary["invalid_cases"]}),
              ("Severity", {k: summary["severity_counts"].get(k, 0) for k in SEVERITIES}),
              ("Likely source clause", summary["attribution_counts"])]
    breakdowns = [(title_, rows) for key, title_ in (("per_hardness", "Per Spider hardness"),
                                                     ("per_difficulty", "Per difficulty"),
                                                     ("per_database", "Per database"))
                  if (rows := summary.get(key))]
    return _ENVIRONMENT.get_template("report.html").generate(
        engine_version=ENGINE_VERSION, title=title, summary=summary, charts=charts, breakdowns=breakdowns,
        robustness=robust_line(summary), severity_note=severity_note(summary), cases=cases)


class ViewSpool:
    """Case views (:func:`case_view`) kept on disk in the order they are added, for :func:`report_page`: the page
    needs the summary, known only when the run ends, before any case, and a run's views do not fit in memory.
    Each view is pickled into a temporary file that has no name (it goes with its handle, even when the process
    is killed), in ``folder``; iterating reads them back in order, as often as asked. A write that fails (a full
    disk) is raised to the caller, which gives up the page."""

    def __init__(self, folder: Path) -> None:
        self._file = tempfile.TemporaryFile(dir=folder)
        self._count = 0

    @staticmethod
    def pack(view: dict[str, Any]) -> bytes:
        """``view`` as :meth:`add` takes it (made while its report is at hand, added when its turn comes)."""
        body = pickle.dumps(view, protocol=pickle.HIGHEST_PROTOCOL)
        return len(body).to_bytes(8, "little") + body

    def add(self, packed: bytes) -> None:
        self._file.write(packed)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._file.flush()
        descriptor, position = self._file.fileno(), 0
        for _ in range(self._count):
            size = int.from_bytes(os.pread(descriptor, 8, position), "little")
            yield pickle.loads(os.pread(descriptor, size, position + 8))
            position += 8 + size

    def close(self) -> None:
        self._file.close()


def severity_note(summary: dict[str, Any]) -> str | None:
    """Why the severity chart's ``pass`` is fewer than the outcome chart's ``passed``, when it is: a pass with a
    counterexample on a neighbor database is a minor issue (it still passes on the evaluated database).

    >>> severity_note({"passed": 891, "severity_counts": {"pass": 827}})[:62]
    '64 of the 891 passes count as a minor issue in the severity ch'
    >>> severity_note({"passed": 3, "severity_counts": {"pass": 3}}) is None
    True
    """
    minor = summary["passed"] - summary["severity_counts"].get("pass", 0)
    if minor <= 0:
        return None
    one = minor == 1
    return (f"{minor} of the {summary['passed']} passes count{'s' if one else ''} as a minor issue in the severity "
            f"chart, not as pass: {'its' if one else 'their'} results match on the evaluated database, so "
            f"{'it passes' if one else 'they pass'}, but a neighbor database gives a counterexample (the robust pass "
            "rate counts such passes apart).")


def write_diff_html(diff: dict[str, Any], old: list[Report], new: list[Report], out: Path, *, title: str) -> None:
    """Write the HTML page of a run-to-run diff; changed cases get the new run's details beside the old outcome."""
    new_by_id = {r.case_id: r for r in new}
    changed = [change for change in diff["changes"] if change["case_id"] in new_by_id]
    breakdowns = [(t, diff[k]) for k, t in (("per_hardness", "Per Spider hardness"), ("per_database", "Per database"))
                  if diff[k]]
    _write(out, "diff.html", title=title, diff=diff, changes=changed, breakdowns=breakdowns,
           cases=[case_view(new_by_id[c["case_id"]]) for c in changed], old_count=len(old), new_count=len(new))


def _write(out: Path, template: str, **context: Any) -> None:
    page = _ENVIRONMENT.get_template(template).render(engine_version=ENGINE_VERSION, **context)
    with atomic_path(out) as partial:
        partial.write_text(page, encoding="utf-8")


def case_view(report: Report) -> dict[str, Any]:
    """Everything the page shows about one case."""
    row = case_row(report)
    expected, actual = report_sides(report)
    evidence = report.evidence or {}
    return {
        "row": row,
        "anchor": case_anchor(report.case_id),
        "expected_lines": expected,
        "actual_lines": actual,
        "differing_clauses": sorted(evidence.get("clauses") or []),
        "explanations": explanation_lines(report),
        "warnings": report.warnings,
        "probes": evidence.get("probes") or [],
        "samples": result_samples(report),
        "counterexample": neighborhood_of(report).get("counterexample"),
        # a search without a counterexample in one line (searched, cut, or not run and why)
        "neighbor_search": neighbor_lines(report),
    }


def case_anchor(case_id: str) -> str:
    """The HTML id of a case's details: ``case-`` and the id, each character but letters, digits, ``-`` and
    ``_`` written as ``_``. An id that had such a character, or that ends as such an anchor does (``--`` and 16
    hex digits), gets 16 hex digits of its SHA-256 too: ``orders total`` and ``orders_total`` do not share one
    (a link to either opened the first of them), nor does an id written to take another's.

    >>> case_anchor("spider-0052"), case_anchor("orders total")
    ('case-spider-0052', 'case-orders_total--677abb5c4fca6423')
    >>> case_anchor("orders_total--677abb5c4fca6423") != case_anchor("orders total")
    True
    """
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in case_id)
    if slug == case_id and not _HASHED.search(case_id):
        return f"case-{slug}"
    return f"case-{slug}--{hashlib.sha256(case_id.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


#: How an anchor that carries its id's digest ends (:func:`case_anchor`).
_HASHED = re.compile(r"--[0-9a-f]{16}$")


def result_samples(report: Report) -> dict[str, Any] | None:
    """The missing (expected, not returned) and extra (returned, not expected) sample rows, each under its own
    result's column names (an extra row is the actual query's, in its columns' order), each cell paired with
    whether it differs from the same column of the most similar row of the other sample: where a row is nearly
    right, the wrong cells stand out. Columns are paired as the comparison paired them (``schema_match``'s
    ``column_mapping``); a cell of a column the other result lacks differs."""
    mismatch = report.mismatch_map or {}
    missing = mismatch.get("missing_rows_sample") or []
    extra = mismatch.get("extra_rows_sample") or []
    if not missing and not extra:
        return None
    schema = (report.metrics.get("result") or {}).get("schema_match") or {}
    expected_columns = schema.get("expected_attributes") or list((per_column_map(report).get("attributes") or {}))
    actual_columns = schema.get("actual_attributes") or expected_columns
    pairs = _paired_positions(expected_columns, actual_columns, schema.get("column_mapping") or {})
    return {"missing_columns": expected_columns, "extra_columns": actual_columns,
            "missing": _marked(missing, extra, pairs),
            "extra": _marked(extra, missing, {at: position for position, at in pairs.items()})}


def _paired_positions(expected: list[str], actual: list[str], mapping: dict[str, str]) -> dict[int, int]:
    """Position in the expected result -> position in the actual one of each column pair: by the comparison's
    ``mapping`` (expected name -> actual name) where every name on both sides is unique, else position by
    position.

    >>> _paired_positions(["name", "city"], ["city", "name"], {"name": "name", "city": "city"})
    {0: 1, 1: 0}
    """
    if len(set(expected)) == len(expected) and len(set(actual)) == len(actual) and mapping:
        return {expected.index(e): actual.index(a) for e, a in mapping.items() if e in expected and a in actual}
    return {i: i for i in range(min(len(expected), len(actual)))}


def _marked(rows: list[list[Any]], others: list[list[Any]], pairs: dict[int, int]) -> list[list[tuple[Any, bool]]]:
    """Each cell of ``rows`` and whether it differs from its paired cell (``pairs``: position in a row -> position
    in an other row) in the most similar of ``others``."""
    def same(row: list[Any], other: list[Any], index: int) -> bool:
        at = pairs.get(index)
        return at is not None and at < len(other) and other[at] == row[index]

    marked = []
    for row in rows:
        closest = max(others, key=lambda other: sum(same(row, other, i) for i in range(len(row))), default=None)
        marked.append([(value, closest is None or not same(row, closest, index)) for index, value in enumerate(row)])
    return marked
