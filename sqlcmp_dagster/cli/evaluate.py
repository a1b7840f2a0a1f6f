"""``sqlcmp evaluate``: a suite through the engine, its reports streamed to a journal and to every output as
they finish (each output checked before the run, each put in place whole at its end).

Nothing is held per case for the whole run, so a suite of any length runs in the memory of a few thousand
cases: the suite is read once, checked and kept on disk in an unnamed temporary file beside ``--out``
(:class:`_Spool`); the cases are read back as the workers take them (:meth:`~sqlcmp_dagster.engine.pipeline.
Evaluator.evaluate_stream`); a report that finishes ahead of its turn waits as a few fields until the cases
before it are done (:class:`_InOrder`), and then goes to the outputs (:mod:`~sqlcmp_dagster.cli.outputs`). What
still grows with the suite is small: while the suite is read, its case ids (to refuse a duplicate) and case
versions; on ``--resume``, where each kept report starts in the journal (16 bytes a report); in the summary, the
ids of the invalid cases. A YAML suite is parsed whole while it is read (JSONL and Parquet are read lazily).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
from array import array
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from sqlcmp_dagster.cli.outputs import Entry, Outputs
    from sqlcmp_dagster.engine.judge import JudgeConfig
    from sqlcmp_dagster.engine.models import CompareRequest, Report
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.journal import Journal
    from sqlcmp_dagster.stopping import StopSignals

# The engine is imported inside each command, never at the top (see sqlcmp_dagster.cli's main).
from sqlcmp_dagster.cli.common import EXIT_FAIL, EXIT_INVALID, EXIT_OUTPUT, EXIT_PASS, EXIT_USAGE, UsageError, \
    cache_dir_of, check_input, config_overrides, judge_of, open_database, report_line, say, sqlite_file_problem


def evaluate_command(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.cli.outputs import Outputs
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.engine.summary import render_summary
    from sqlcmp_dagster.journal import Journal, JournalBusy
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
    judge = judge_of(args)
    spool, versions = _read_suite(args, judge)
    if args.cache_max_mb < 1:
        raise UsageError("--cache-max-mb must be at least 1")
    evaluator = Evaluator(db_dir=args.db_dir, default_db=args.db, judge=judge,
                          allow_privileged_role=args.allow_privileged_role,
                          cache_dir=None if args.no_cache else cache_dir_of(args),
                          cache_max_bytes=args.cache_max_mb << 20)
    store = evaluator.batch_cache().store
    if store is not None and (warning := store.warning()) is not None:
        say(f"sqlcmp: {warning}", file=sys.stderr)
    with stop_signals() as signals:
        try:
            journal = Journal(args.out, resume=args.resume)
        except JournalBusy as error:
            raise UsageError(str(error)) from error
        except OSError as error:
            raise UsageError(f"--out {args.out}: cannot write its journal: {error.strerror or error}") from error
        kept = _kept(journal, versions)
        versions.clear()  # needed only to find the kept reports
        outputs = Outputs(out=args.out, summary_out=args.summary_out, table=args.csv, page=args.html,
                          only_failed=args.only_failed)
        try:
            _run_batch(evaluator, spool, kept, journal, outputs, args.workers, signals, quiet=args.quiet)
            failure = outputs.commit_reports()
            if failure is not None:
                say(f"sqlcmp: cannot write {args.out}: {failure.strerror or failure}; the reports are kept in "
                    f"{journal.path}", file=sys.stderr)
            journal.close(done=failure is None)
            summary = outputs.summary.figures(load_errors=spool.load_errors)
            written, failures = outputs.write_rest(summary)
        except Stopped as stop:
            outputs.discard()
            journal.close(done=False)
            say(f"sqlcmp: stopped by {stop.name}; the finished reports are kept in {journal.path}; to go on: "
                 f"{_resume_command(args.argv)}", file=sys.stderr)
            return stop.status
        except BaseException:
            outputs.discard()
            raise
        finally:
            spool.close()
    if journal.failure is not None:
        say(f"sqlcmp: {journal.path}: {journal.failure.strerror}: later reports did not reach the journal",
             file=sys.stderr)
    say(render_summary(summary))
    say(*([] if failure is not None else [f"reports: {args.out}"]), *written, sep="\n")
    if failure is not None or failures:
        return EXIT_OUTPUT
    if spool.load_errors:
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


class _Spool:
    """The suite's cases as they were loaded, numbered, each with its case version, pickled one after another in
    a temporary file that has no name (it goes with its handle, a killed run leaves nothing): the run reads them
    back as its workers take them, and the suite is read once (a pipe can be read only once)."""

    def __init__(self, folder: Path) -> None:
        self._file = tempfile.TemporaryFile(dir=folder)
        self.count = 0
        #: Lines of the suite that could not be loaded (each said on stderr when read).
        self.load_errors = 0

    def add(self, version: str, case: CompareRequest) -> None:
        pickle.dump((version, case), self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.count += 1

    def cases(self) -> Iterator[tuple[int, str, CompareRequest]]:
        """Each case's place in the suite, version and case, in suite order."""
        self._file.seek(0)
        for position in range(self.count):
            version, case = pickle.load(self._file)
            yield position, version, case

    def close(self) -> None:
        self._file.close()


def _read_suite(args: argparse.Namespace, judge: JudgeConfig | None) -> tuple[_Spool, list[str]]:
    """Read the suite once, a case at a time: each line that cannot be loaded said on stderr, each case kept in
    the spool, the databases that cannot be found named (:class:`_MissingDatabases`); the case versions too,
    in suite order, to find the reports a resumed run keeps. No case at all is a usage error."""
    from sqlcmp_dagster.cases.suite import SuiteError, read_suite
    from sqlcmp_dagster.journal import CaseVersions

    overrides = config_overrides(args)
    try:
        items = read_suite(args.suite, overrides)
    except ValueError as error:
        raise UsageError(str(error)) from error
    version_of = CaseVersions(args.db_dir, args.db, judge=judge, allow_privileged_role=args.allow_privileged_role)
    missing = _MissingDatabases(args.db_dir, args.db)
    versions: list[str] = []
    try:
        spool = _Spool(args.out.parent)
        for item in items:
            if isinstance(item, SuiteError):
                say(f"sqlcmp: skipped {item}", file=sys.stderr)
                spool.load_errors += 1
                continue
            versions.append(version_of(item))
            spool.add(versions[-1], item)
            missing.add(item)
    except OSError as error:
        raise UsageError(f"--out {args.out}: cannot keep the suite's cases in its folder while they run: "
                         f"{error.strerror or error}") from error
    if not spool.count:  # nothing to evaluate is not a success, whether the file is empty or every line broke
        spool.close()
        raise UsageError(f"no cases in {args.suite}")
    missing.warn()
    return spool, versions


class _MissingDatabases:
    """Every database the suite refers to that cannot be found or whose SQLite file cannot be read
    (:func:`sqlite_file_problem`), counted case by case (:meth:`add`) and named on stderr once each
    (:meth:`warn`): its cases will be invalid."""

    def __init__(self, db_dir: Path | None, default_db: str | None) -> None:
        self.db_dir, self.default_db = db_dir, default_db
        self.missing: dict[str, int] = {}
        #: Per database as the cases name it, what is wrong with it (None: nothing), found once: resolving a
        #: name looks at up to five files, a fifth of a millisecond a case.
        self.problems: dict[str, str | None] = {}

    def add(self, case: CompareRequest) -> None:
        target = case.db or self.default_db
        if target is None or (case.actual_result is not None and case.expected_result is not None):
            return
        if target not in self.problems:
            self.problems[target] = self._problem(target)
        message = self.problems[target]
        if message is not None:
            self.missing[message] = self.missing.get(message, 0) + 1

    def _problem(self, target: str) -> str | None:
        from sqlcmp_dagster.engine.execution import DUCKDB_SUFFIXES, resolve_database

        try:
            resolved = resolve_database(target, self.db_dir)
        except (FileNotFoundError, ValueError) as error:
            return str(error)
        if "://" in resolved or Path(resolved).suffix.lower() in DUCKDB_SUFFIXES:
            return None
        problem = sqlite_file_problem(Path(resolved))
        return None if problem is None else f"database {target!r} ({resolved}): {problem}"

    def warn(self) -> None:
        for message, count in self.missing.items():
            say(f"sqlcmp: {message}: its {count} case{'s' if count > 1 else ''} will be invalid", file=sys.stderr)


def _kept(journal: Journal, versions: list[str]) -> tuple[array[int], array[int]]:
    """The places in the suite of the cases whose report the journal holds for their ``versions`` (none unless
    resuming), and where each of those reports starts in the journal."""
    index = journal.take_kept()
    positions, offsets = array("q"), array("q")
    for position, version in enumerate(versions):
        if version in index:
            positions.append(position)
            offsets.append(index[version])
    return positions, offsets


def _run_batch(evaluator: Evaluator, spool: _Spool, kept: tuple[array[int], array[int]], journal: Journal,
               outputs: Outputs, workers: int, signals: StopSignals, *, quiet: bool = False) -> None:
    """Evaluate the cases of ``spool`` whose report the journal does not hold (``kept``: all of them unless
    resuming), each report's line reaching the journal as its case finishes (made while workers run the other
    cases), and every report reaching ``outputs`` in suite order (:class:`_InOrder`).

    A stop signal that arrived while a case ran in this process may have been taken by the database driver for
    a cancel of its query (SQLite's progress handler swallows it): every case is checked for one
    (:meth:`~sqlcmp_dagster.stopping.StopSignals.check`) before its report is kept, so that report is dropped
    and the stop goes on."""
    from sqlcmp_dagster.progress import Progress

    todo = spool.count - len(kept[0])
    if todo < spool.count:
        say(f"sqlcmp: resuming: {spool.count - todo} of {spool.count} reports kept from {journal.path}",
             file=sys.stderr)
    progress = Progress(todo, sys.stderr, quiet=quiet)
    order = _InOrder(outputs, journal, *kept)
    taken: dict[int, tuple[int, str]] = {}  # the cases in the workers' hands, by index in the stream: place, version

    def to_evaluate() -> Iterator[CompareRequest]:
        kept_places = iter(kept[0])
        next_kept = next(kept_places, None)
        index = 0
        for position, version, case in spool.cases():
            if position == next_kept:
                next_kept = next(kept_places, None)
                continue
            taken[index] = position, version
            index += 1
            yield case

    def arrived(report: Report) -> None:
        signals.check()
        progress.advance(report.case_id)

    try:
        order.drain()  # the kept reports before the first case to evaluate
        stream = evaluator.evaluate_stream(to_evaluate(), workers=workers, progress=arrived)
        with closing(stream):
            for index, report in stream:
                position, version = taken.pop(index)
                line = report_line(report)
                order.arrived(position, outputs.entry(report, line), journal.record(version, line))
    finally:
        evaluator.close()
        progress.close()
    assert order.next == spool.count, "every case reached the outputs"


class _InOrder:
    """Hands each case's entry (:class:`~sqlcmp_dagster.cli.outputs.Entry`) to the outputs in suite order. With
    workers, reports finish in another order (a window's cases are grouped by question): one that comes ahead of
    its turn waits here as its entry, its line left in the journal when it reached it, so what waits is bounded
    by the windows in the workers' hands, not by the suite, and is a few fields a report. A kept report
    (``--resume``) is read back from the journal when its turn comes."""

    def __init__(self, outputs: Outputs, journal: Journal, kept_places: array[int], kept_offsets: array[int]) -> None:
        self.outputs, self.journal = outputs, journal
        self.kept_places, self.kept_offsets = kept_places, kept_offsets
        #: The place of the next case the outputs take.
        self.next = 0
        self._kept = 0
        self._waiting: dict[int, tuple[Entry, int | None]] = {}

    def arrived(self, position: int, entry: Entry, offset: int | None) -> None:
        """The entry of the case at ``position``; ``offset``: where the journal holds its line, if it does."""
        self._waiting[position] = (entry, None) if offset is None or position == self.next \
            else (entry._replace(line=None), offset)
        self.drain()

    def drain(self) -> None:
        """Hand on every entry whose turn has come."""
        from sqlcmp_dagster.engine.models import Report

        while True:
            if self._kept < len(self.kept_places) and self.kept_places[self._kept] == self.next:
                line = self.journal.line_at(self.kept_offsets[self._kept])
                entry = self.outputs.entry(Report.model_validate_json(line), line)
                self._kept += 1
            elif self.next in self._waiting:
                entry, offset = self._waiting.pop(self.next)
                if offset is not None:
                    entry = entry._replace(line=self.journal.line_at(offset))
            else:
                return
            self.outputs.add(entry)
            self.next += 1
