"""The files of a run's reports (``--out``, ``--summary-out``, ``--csv``, ``--html``), fed one report at a time in
suite order, so that no output needs a run's reports in memory at once (``evaluate`` over 100,000 cases held
gigabytes when the summary and the exports were made from a list of every report).

``--out`` and ``--csv`` are written as the reports come, each to its private file, renamed into place at the end
(:class:`~sqlcmp_dagster.engine.atomic.StreamedFile`): an interrupted run leaves the earlier files as they were.
The summary is added up as the reports come (:class:`~sqlcmp_dagster.engine.summary.Summary`, which keeps counts
and the invalid cases' ids). The HTML page opens with the summary, known only at the end, so its case views wait
on disk (:class:`~sqlcmp_dagster.reporting.html.ViewSpool`, about the page's size) until it is written then.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlcmp_dagster.cli.common import say

if TYPE_CHECKING:
    from sqlcmp_dagster.engine.models import Report
    from sqlcmp_dagster.engine.summary import CaseFacts
    from sqlcmp_dagster.reporting.html import ViewSpool


class Entry(NamedTuple):
    """What the outputs take of one report: made while the report is at hand (:meth:`Outputs.entry`), added
    when its turn in the suite comes (:meth:`Outputs.add`), so that a report that finished ahead of its turn
    waits as these few fields, not as itself."""

    #: Its line of the reports file (None where the outputs write no reports file).
    line: str | None
    facts: CaseFacts
    #: Whether the per-case exports show it (``--only-failed`` shows failed cases only).
    shown: bool
    #: Its CSV row and packed page view, when shown and asked for.
    row: dict[str, Any] | None
    view: bytes | None


class Outputs:
    """The outputs of one run, given its options; :meth:`discard` when the run does not end (a stop, an error)."""

    def __init__(self, *, out: Path | None, summary_out: Path | None, table: Path | None, page: Path | None,
                 only_failed: bool) -> None:
        from sqlcmp_dagster.engine.atomic import StreamedFile
        from sqlcmp_dagster.engine.summary import Summary
        from sqlcmp_dagster.reporting.cases import CASE_COLUMNS
        from sqlcmp_dagster.reporting.html import ViewSpool

        self.summary_out, self.page, self.only_failed = summary_out, page, only_failed
        self.summary = Summary()
        self.shown = 0
        self.reports = StreamedFile(out) if out is not None else None
        self.table = StreamedFile(table, newline="") if table is not None else None
        self._rows = csv.DictWriter(self.table, fieldnames=CASE_COLUMNS) if self.table is not None else None
        if self._rows is not None:
            self._rows.writeheader()
        self.views: ViewSpool | None = None
        self.views_failure: OSError | None = None
        if page is not None:
            try:
                self.views = ViewSpool(page.parent)
            except OSError as failure:
                self.views_failure = failure

    def entry(self, report: Report, line: str | None) -> Entry:
        from sqlcmp_dagster.engine.summary import case_facts
        from sqlcmp_dagster.reporting.cases import csv_row, is_failed
        from sqlcmp_dagster.reporting.html import ViewSpool, case_view

        shown = not self.only_failed or is_failed(report)
        return Entry(line, case_facts(report), shown, csv_row(report) if shown and self._rows is not None else None,
                     ViewSpool.pack(case_view(report)) if shown and self.views is not None else None)

    def add(self, entry: Entry) -> None:
        """The next report's entry, in suite order."""
        if self.reports is not None and entry.line is not None:
            self.reports.write(entry.line)
        self.summary.add(entry.facts)
        if not entry.shown:
            return
        self.shown += 1
        if self._rows is not None and entry.row is not None:
            self._rows.writerow(entry.row)
        if self.views is not None and entry.view is not None:
            try:
                self.views.add(entry.view)
            except OSError as failure:  # the page is given up; the run goes on
                self.views_failure = failure
                self.views.close()
                self.views = None

    def commit_reports(self) -> OSError | None:
        """Put the reports file in place; the failure that kept it from being written, if any."""
        return self.reports.commit() if self.reports is not None else None

    def write_rest(self, summary: dict[str, Any]) -> tuple[list[str], int]:
        """--summary-out, --csv and --html, each atomically, in this order; the lines that announce the last two,
        and how many could not be written (each named on stderr: one failing never keeps the others from being
        written). They are written before anything is printed: a reader that leaves early (``| head``) ends the
        printing, never the files."""
        failures = 0
        if self.summary_out is not None:
            failures += write_file(self.summary_out, [json.dumps(summary, indent=2)])
        written = []
        for name, path, finish in (("csv", self.table.target if self.table is not None else None, self._finish_table),
                                   ("html", self.page, lambda: self._finish_page(summary))):
            if path is None:
                continue
            failure = finish()
            if failure is not None:
                say(f"sqlcmp: cannot write {path}: {failure.strerror or failure}", file=sys.stderr)
                failures += 1
                continue
            written.append(f"{name}: {path} ({self.shown} cases)")
        return written, failures

    def discard(self) -> None:
        """Remove every private file: the outputs of a run that did not end stay as they were."""
        for streamed in (self.reports, self.table):
            if streamed is not None:
                streamed.discard()
        if self.views is not None:
            self.views.close()

    def _finish_table(self) -> OSError | None:
        assert self.table is not None
        return self.table.commit()

    def _finish_page(self, summary: dict[str, Any]) -> OSError | None:
        from sqlcmp_dagster.engine.atomic import StreamedFile
        from sqlcmp_dagster.reporting.html import report_page

        assert self.page is not None
        if self.views is None:
            return self.views_failure
        page = StreamedFile(self.page)
        try:
            for piece in report_page(self.views, summary, title=self.page.stem):
                page.write(piece)
                if page.failure is not None:
                    break
        except OSError as failure:  # the views could not be read back
            page.discard()
            return failure
        except BaseException:
            page.discard()
            raise
        finally:
            self.views.close()
        return page.commit()


def write_file(path: Path, parts: Iterable[str]) -> bool:
    """Write ``parts`` (UTF-8) as ``path`` atomically; a failure (a full disk) is one line on stderr naming the
    path and the error. Returns whether it failed."""
    from sqlcmp_dagster.engine.atomic import atomic_path

    try:
        with atomic_path(path) as partial, partial.open("w", encoding="utf-8") as handle:
            handle.writelines(parts)
    except OSError as error:
        say(f"sqlcmp: cannot write {path}: {error.strerror or error}", file=sys.stderr)
        return True
    return False
