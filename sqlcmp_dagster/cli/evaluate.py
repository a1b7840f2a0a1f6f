"""``sqlcmp evaluate``: a suite through the engine, its reports streamed to a journal, then every output
written (each checked before the run, each atomically)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from collections.abc import Iterable


    from sqlcmp_dagster.engine.models import CompareRequest, Report
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.journal import Journal
    from sqlcmp_dagster.stopping import StopSignals

# The engine is imported inside each command, never at the top (see sqlcmp_dagster.cli's main).
from sqlcmp_dagster.cli.common import EXIT_FAIL, EXIT_INVALID, EXIT_OUTPUT, EXIT_PASS, EXIT_USAGE, UsageError, \
    cache_dir_of, check_input, config_overrides, judge_of, open_database, report_line, say, sqlite_file_problem


def evaluate_command(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.cases.suite import load_suite
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.engine.summary import render_summary, summarize
    from sqlcmp_dagster.journal import Journal, JournalBusy, case_versions
    from sqlcmp_dagster.stopping import Stopped, stop_signals

    check_input(args.suite, "suite")
    if args.db_dir is not None and not args.db_dir.is_dir():
        raise UsageError(f"--db-dir is not a folder: {args.db_dir}")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    check_outputs(args, "out", "summary_out", "csv", "html")
    if args.db is not None:
        hint = " (a folder of databases named by the cases' db is --db-dir)"
        open_database(args.db, args.allow_privileged_role, hint).close()
    try:
        suite = load_suite(args.suite, config_overrides(args))
    except ValueError as error:
        raise UsageError(str(error)) from error
    for problem in suite.errors:
        say(f"sqlcmp: skipped {problem}", file=sys.stderr)
    if not suite.cases:  # nothing to evaluate is not a success, whether the file is empty or every line broke
        raise UsageError(f"no cases in {args.suite}")
    _warn_missing_databases(suite.cases, args.db_dir, args.db)
    if args.cache_max_mb < 1:
        raise UsageError("--cache-max-mb must be at least 1")
    evaluator = Evaluator(db_dir=args.db_dir, default_db=args.db, judge=judge_of(args),
                          allow_privileged_role=args.allow_privileged_role,
                          cache_dir=None if args.no_cache else cache_dir_of(args),
                          cache_max_bytes=args.cache_max_mb << 20)
    with stop_signals() as signals:
        try:
            journal = Journal(args.out, resume=args.resume)
        except JournalBusy as error:
            raise UsageError(str(error)) from error
        except OSError as error:
            raise UsageError(f"--out {args.out}: cannot write its journal: {error.strerror or error}") from error
        try:
            lines, reports = _run_batch(evaluator, suite.cases, journal,
                                        case_versions(suite.cases, args.db_dir, args.db), args.workers,
                                        signals, quiet=args.quiet)
            summary = summarize(reports, load_errors=len(suite.errors))
            failed = _write_file(args.out, lines, f"the reports are kept in {journal.path}")
            journal.close(done=not failed)
            written, failures = write_outputs(args, reports, summary)
        except Stopped as stop:
            journal.close(done=False)
            say(f"sqlcmp: stopped by {stop.name}; the finished reports are kept in {journal.path}; to go on: "
                 f"{_resume_command(args.argv)}", file=sys.stderr)
            return stop.status
    if journal.failure is not None:
        say(f"sqlcmp: {journal.path}: {journal.failure.strerror}: later reports did not reach the journal",
             file=sys.stderr)
    say(render_summary(summary))
    say(*([] if failed else [f"reports: {args.out}"]), *written, sep="\n")
    if failed or failures:
        return EXIT_OUTPUT
    if suite.errors:
        return EXIT_USAGE
    if summary["failed"]:
        return EXIT_FAIL
    return EXIT_INVALID if summary["invalid_cases"] else EXIT_PASS


def _resume_command(argv: list[str]) -> str:
    """The command line that resumes a run of ``argv``: the same, with ``--resume``."""
    import shlex

    return shlex.join(["sqlcmp", *argv, *([] if "--resume" in argv else ["--resume"])])


def check_outputs(args: argparse.Namespace, *names: str) -> None:
    """Every output path given, checked before any case runs (:func:`~sqlcmp_dagster.engine.atomic.output_problem`),
    and no two the same file: a bad path is a usage error naming the option and the path."""
    from sqlcmp_dagster.engine.atomic import output_problem

    seen: dict[Path, str] = {}
    for name in names:
        path = getattr(args, name)
        if path is None:
            continue
        flag = "--" + name.replace("_", "-")
        if path.resolve() in seen:
            raise UsageError(f"{flag} {path}: the same file as {seen[path.resolve()]}")
        seen[path.resolve()] = flag
        problem = output_problem(path)
        if problem is not None:
            raise UsageError(f"{flag} {problem}")


def _write_file(path: Path, parts: Iterable[str], kept: str = "") -> bool:
    """Write ``parts`` (UTF-8) as ``path`` atomically; a failure (a full disk) is one line on stderr naming the
    path and the error (and ``kept``: where the data still is). Returns whether it failed."""
    from sqlcmp_dagster.engine.atomic import atomic_path

    try:
        with atomic_path(path) as partial, partial.open("w", encoding="utf-8") as handle:
            handle.writelines(parts)
    except OSError as error:
        say(f"sqlcmp: cannot write {path}: {error.strerror or error}{'; ' + kept if kept else ''}", file=sys.stderr)
        return True
    return False


def _warn_missing_databases(cases: list[CompareRequest], db_dir: Path | None, default_db: str | None) -> None:
    """Name on stderr, once each, every database the suite refers to that cannot be found or whose SQLite file
    cannot be read (:func:`sqlite_file_problem`): its cases will be invalid."""
    from sqlcmp_dagster.engine.execution import DUCKDB_SUFFIXES, resolve_database

    missing: dict[str, int] = {}
    problems: dict[str, str | None] = {}
    for case in cases:
        target = case.db or default_db
        if target is None or (case.actual_result is not None and case.expected_result is not None):
            continue
        try:
            resolved = resolve_database(target, db_dir)
        except (FileNotFoundError, ValueError) as error:
            missing[str(error)] = missing.get(str(error), 0) + 1
            continue
        if resolved not in problems:
            problems[resolved] = None if "://" in resolved or Path(resolved).suffix.lower() in DUCKDB_SUFFIXES \
                else sqlite_file_problem(Path(resolved))
        if problems[resolved] is not None:
            message = f"database {target!r} ({resolved}): {problems[resolved]}"
            missing[message] = missing.get(message, 0) + 1
    for message, count in missing.items():
        say(f"sqlcmp: {message}: its {count} case{'s' if count > 1 else ''} will be invalid", file=sys.stderr)


def write_outputs(args: argparse.Namespace, reports: list[Report], summary: dict[str, Any]) -> tuple[list[str], int]:
    """--summary-out, --csv and --html, each atomically; the lines that announce the last two, and how many
    could not be written (each named on stderr: one failing never keeps the others from being written).
    --only-failed narrows the per-case outputs. They are written before anything is printed: a reader that
    leaves early (``| head``) ends the printing, never the files."""
    from sqlcmp_dagster.reporting.cases import is_failed, write_csv
    from sqlcmp_dagster.reporting.html import write_report_html

    failures = 0
    if args.summary_out is not None:
        failures += _write_file(args.summary_out, [json.dumps(summary, indent=2)])
    shown = [r for r in reports if is_failed(r)] if args.only_failed else reports
    written = []
    for path, write, name in ((args.csv, lambda: write_csv(shown, args.csv), "csv"),
                              (args.html, lambda: write_report_html(shown, summary, args.html, title=args.html.stem),
                               "html")):
        if path is None:
            continue
        try:
            write()
        except OSError as error:
            say(f"sqlcmp: cannot write {path}: {error.strerror or error}", file=sys.stderr)
            failures += 1
            continue
        written.append(f"{name}: {path} ({len(shown)} cases)")
    return written, failures


def _run_batch(evaluator: Evaluator, cases: list[CompareRequest], journal: Journal, versions: list[str],
               workers: int, signals: StopSignals, *, quiet: bool = False) -> tuple[list[str], list[Report]]:
    """Evaluate the ``cases`` whose report the journal does not hold for their ``versions`` (all of them unless
    resuming), each report's line reaching the journal as its case finishes (made while workers run the other
    cases); returns every case's line and report, in suite order.

    A stop signal that arrived while a case ran in this process may have been taken by the database driver for
    a cancel of its query (SQLite's progress handler swallows it): every case is checked for one
    (:meth:`~sqlcmp_dagster.stopping.StopSignals.check`) before its report is kept, so that report is dropped
    and the stop goes on."""
    from sqlcmp_dagster.engine.models import Report
    from sqlcmp_dagster.progress import Progress

    todo = [index for index, version in enumerate(versions) if version not in journal.kept]
    if len(todo) < len(cases):
        say(f"sqlcmp: resuming: {len(cases) - len(todo)} of {len(cases)} reports kept from {journal.path}",
             file=sys.stderr)
    progress = Progress(len(todo), sys.stderr, quiet=quiet)
    lines: dict[int, str] = {}
    reports: dict[int, Report] = {}

    def arrived(report: Report) -> None:
        signals.check()
        progress.advance(report.case_id)

    def finished(position: int, report: Report) -> None:
        index = todo[position]
        lines[index], reports[index] = report_line(report), report
        journal.record(versions[index], lines[index])

    try:
        evaluator.evaluate_all([cases[index] for index in todo], workers=workers,
                               progress=arrived, finished=finished)
    finally:
        evaluator.close()
        progress.close()
    for index, version in enumerate(versions):
        if index not in lines:
            lines[index] = journal.kept[version]
            reports[index] = Report.model_validate_json(lines[index])
    return [lines[i] for i in range(len(cases))], [reports[i] for i in range(len(cases))]
