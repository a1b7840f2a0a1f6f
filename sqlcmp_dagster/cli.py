"""The ``sqlcmp`` command line: ``compare`` one pair, ``evaluate`` a suite, ``demo`` the bundled sample.

Each command has its own exit status (:data:`EXIT_STATUSES`, shown by its ``--help``): 0 pass, 1 fail, 2 bad input
or usage, 3 invalid case (no expected query runs, or its database cannot be opened, so the query under test could
not be judged), 4 an output that could not be written, 130/143 stopped by SIGINT/SIGTERM, each read for what
the command does. Messages go to stderr, never a stack trace. The README's
"Exit status" has them all.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sqlcmp_dagster.engine.context import current as engine_context
from sqlcmp_dagster.engine.workers import start_server
from sqlcmp_dagster.escaping import terminal_json, terminal_text

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pydantic import ValidationError

    from sqlcmp_dagster.engine.execution import ExecutionAdapter
    from sqlcmp_dagster.engine.judge import JudgeConfig
    from sqlcmp_dagster.engine.models import CompareRequest, Report
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.journal import Journal
    from sqlcmp_dagster.stopping import StopSignals

# Only the standard library is imported before main parses the command line. The engine (polars, sqlglot,
# SQLAlchemy: about 0.4 s), and even its models and pydantic (about 0.2 s), are imported inside the commands that
# use them, so that ``evaluate --workers N`` starts its worker processes' server first thing (see main): the
# workers wait for that server to import the engine, not for this process.

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INVALID, EXIT_OUTPUT = 0, 1, 2, 3, 4
#: What the top-level ``--help`` says (plain text: argparse shows it as written).
DESCRIPTION = "The sqlcmp command line: compare one pair, evaluate a suite, demo the bundled sample."
_USAGE = "  2  bad input or usage (the message on stderr names what and where)"
_VERDICT = f"""  0  pass
  1  fail
{_USAGE}
  3  invalid case: no expected query runs, or its database cannot be opened, so the actual query could not be
     judged"""
#: Each command's exit statuses, as its ``--help`` shows them.
EXIT_STATUSES = {
    "sqlcmp": "each command's --help gives its own exit status; 2 is always bad input or usage",
    "compare": _VERDICT,
    "show": _VERDICT.replace(_USAGE, _USAGE + "; also when the reports file has no such case"),
    "evaluate": f"""  0  every case passed
  1  at least one valid case failed
{_USAGE}; also suite lines that could not be loaded (after the other cases ran)
  3  no valid case failed, but at least one case was invalid
  4  an output could not be written (a full disk): each such file named on stderr, the others written, the
     reports kept in <out>.journal
  130, 143  stopped by SIGINT, SIGTERM: the finished reports kept in <out>.journal, and the command that
     resumes them (--resume) on stderr""",
    "report": f"""  0  the summary (and each export asked for) was written, whatever the verdicts: evaluate's status says
     how the run went
{_USAGE}
  4  an export could not be written (a full disk): each such file named on stderr, the others written""",
    "diff": f"""  0  no case regressed, or no --fail-on-regression
  1  --fail-on-regression, and a case valid in both runs went from pass to fail
{_USAGE}""",
    "import": f"  0  the suite was written\n{_USAGE}",
    "spider-ex": f"  0  the table was written\n{_USAGE}",
    "cache": f"  0  the cache was described or cleared\n{_USAGE}",
    "demo": f"  0  the sample was evaluated\n  1  a Dagster run failed (its logs are in the Dagster UI)\n{_USAGE}\n"
            "  130, 143  stopped by SIGINT, SIGTERM (the next demo runs the tick's cases again)",
}


#: Where ``sqlcmp demo`` writes by default.
DEMO_OUT_DIR = Path("sqlcmp-demo")
#: The file that marks the demo's copy of the suites (``--out-dir``'s ``cases`` folder) as its own to replace.
DEMO_MARK = ".sqlcmp-demo-cases"


class UsageError(Exception):
    """Bad input from the user: reported on stderr with exit status 2."""


def run(argv: list[str] | None = None) -> NoReturn:
    """The ``sqlcmp`` command (the script's entry point): :func:`main`, then the process ends at once.

    When main returns, every output is written and closed; what is left is Python's teardown of the engine it
    imported (polars, sqlglot, SQLAlchemy: about 0.15 s, a tenth of the bundled suite's run), which ``os._exit``
    skips. Only when nothing else can still be at work: no thread but daemons (which an ordinary exit abandons
    too) and no child process; otherwise (the demo's Dagster, say) the interpreter exits as usual."""
    code = main(argv)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # the reader went away, or a stream is closed: nothing more to show
        pass
    if all(thread.daemon or thread is threading.main_thread() for thread in threading.enumerate()) \
            and not multiprocessing.active_children():
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv  # for the line that says how to resume
    if getattr(args, "workers", 1) > 1:
        start_server()  # it imports the engine for the workers on one core while this process does on the other
    engine_context()  # made now: sqlglot's logger is quiet before a suite's queries are read (see engine.context)
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # inside the try: a closed pipe is reported here, not as a traceback at exit
        return code
    except UsageError as error:
        _say(f"sqlcmp: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _say("sqlcmp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``sqlcmp diff ... | head``): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _say(*parts: object, sep: str = " ", file: Any = None) -> None:
    """``print`` for everything the CLI writes to a terminal: the text may hold what a case controls (its id, a
    hostile query's column names and values, a database's error around them), so the characters that would
    drive the terminal are escaped (:func:`~sqlcmp_dagster.escaping.terminal_text`)."""
    print(terminal_text(sep.join(map(str, parts))), file=file)


def _say_json(report: Report) -> None:
    """``report`` as indented JSON on stdout, written as a reports file line is (an infinite cell as the text
    ``"Infinity"``: ``json.dumps`` wrote a bare ``Infinity``, which is not JSON), with no character that drives
    a terminal left raw in it."""
    print(terminal_json(report.model_dump_json(indent=2)))


def _parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="sqlcmp", description=DESCRIPTION,
                                     epilog="exit status: " + EXIT_STATUSES["sqlcmp"], formatter_class=formatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_text, description=help_text,
                                   epilog="exit status:\n" + EXIT_STATUSES[name], formatter_class=formatter)

    one = command("compare", "compare one actual query with the expected one")
    one.add_argument("--db", required=True, help="SQLAlchemy URL, or path to a SQLite (.sqlite, .db) or DuckDB file")
    one.add_argument("--expected-sql", required=True, action="append",
                     help="expected (ground-truth) query; repeat for several acceptable ones")
    one.add_argument("--actual-sql", required=True, help="the query under test (e.g. the model's)")
    one.add_argument("--user-query", default="", help="the natural-language question (shown in reports)")
    _config_options(one)
    one.add_argument("--format", choices=("text", "json"), default="text",
                     help="text for people (default) or the full JSON report")
    one.set_defaults(handler=_compare)

    batch = command("evaluate", "evaluate a suite, one report per line")
    batch.add_argument("suite", type=Path, help="suite file (.jsonl, .yaml, .parquet)")
    target = batch.add_mutually_exclusive_group()
    target.add_argument("--db-dir", type=Path, help="folder of SQLite databases, cases name them by db id")
    target.add_argument("--db", help="database for cases that name none (URL or SQLite path)")
    batch.add_argument("--out", type=Path, required=True, help="output JSONL file, one report per case")
    batch.add_argument("--workers", type=int, default=1,
                       help="worker processes evaluating cases at once (default 1: in this process)")
    batch.add_argument("--summary-out", type=Path, help="also write the summary as JSON here")
    batch.add_argument("--resume", action="store_true",
                       help="keep the reports an earlier run of the same --out finished (its <out>.journal, left "
                            "by a stop, a kill or a failed write) for the cases that did not change, and evaluate "
                            "only the others; the files written are those of a run from scratch")
    _output_options(batch)
    batch.add_argument("--quiet", action="store_true",
                       help="no progress (by default a bar with rate and ETA on a terminal, a line per tenth of "
                            "the cases otherwise)")
    _config_options(batch)
    _cache_options(batch)
    batch.add_argument("--no-cache", action="store_true",
                       help="neither read nor fill the cache (expected queries are still run once per batch)")
    batch.add_argument("--cache-max-mb", type=int, default=1024,
                       help="bound of the cache folder in MB; the least recently used entries go (default 1024)")
    batch.set_defaults(handler=_evaluate)

    kept = command("cache", "describe or clear the cache of expected queries' parses and results")
    kept.add_argument("action", choices=("info", "clear"), help="info: its folder, entries and size; clear: empty it")
    _cache_options(kept)
    kept.set_defaults(handler=_cache)

    report = command("report", "summarize a reports file again, or export it as HTML or CSV")
    report.add_argument("reports", type=Path, help="reports JSONL (sqlcmp evaluate --out)")
    report.add_argument("--summary-out", type=Path, help="also write the summary as JSON here")
    report.add_argument("--export-test-suite", type=Path, metavar="DIR",
                        help="also write each neighbor counterexample as a database of a Spider test suite here "
                             "(DIR/<db id>/*.sqlite, the official test suites' layout)")
    _output_options(report)
    report.set_defaults(handler=_report)

    show = command("show", "one case's report as text")
    show.add_argument("case_id", help="the case id, as in the suite")
    show.add_argument("--reports", type=Path, required=True, help="reports JSONL (sqlcmp evaluate --out)")
    show.add_argument("--format", choices=("text", "json"), default="text",
                      help="text for people (default) or the full JSON report")
    show.set_defaults(handler=_show)

    diff = command("diff", "compare two runs over the same cases: regressions, fixes, McNemar's exact test")
    diff.add_argument("old", type=Path, help="reports JSONL of the earlier run (or the baseline model)")
    diff.add_argument("new", type=Path, help="reports JSONL of the later run (or the candidate model)")
    diff.add_argument("--fail-on-regression", action="store_true",
                      help="exit 1 when any case valid in both runs went from pass to fail (for CI gating)")
    diff.add_argument("--json-out", type=Path, help="also write the diff as JSON here")
    diff.add_argument("--html", type=Path, help="also write the diff as one self-contained HTML file")
    diff.set_defaults(handler=_diff)

    importer = command("import", "turn a Spider or BIRD benchmark into a suite")
    formats = importer.add_subparsers(dest="format", required=True)
    imports: dict[str, Any] = {"epilog": "exit status:\n" + EXIT_STATUSES["import"], "formatter_class": formatter}
    spider = formats.add_parser("spider", help="dev.json + gold SQL file + predictions file", **imports)
    spider.add_argument("--questions", type=Path, required=True, help="Spider's question file (dev.json)")
    spider.add_argument("--gold", type=Path, required=True, help="gold queries, 'SQL<TAB>db_id' a line (dev_gold.sql)")
    spider.add_argument("--pred", type=Path, required=True,
                        help="predictions, one a line in question order: 'SQL' or 'SQL<TAB>db_id'; a blank line "
                             "is an empty prediction")
    spider.add_argument("--tables", type=Path,
                        help="tables.json: check that each database has every table and column it publishes "
                             "(needs --db-dir); a difference is an error naming them, and nothing is written")
    bird = formats.add_parser("bird", help="question JSON with SQL/db_id + predictions JSON keyed by question id",
                              **imports)
    bird.add_argument("--questions", type=Path, required=True,
                      help="BIRD's question file (dev.json: question_id, db_id, question, SQL, evidence, difficulty)")
    bird.add_argument("--pred", type=Path, required=True,
                      help="predictions: a JSON object keyed by question id ('SQL\\t----- bird -----\\tdb_id')")
    for sub in (spider, bird):
        sub.add_argument("--db-dir", type=Path, help="check that every database exists here")
        sub.add_argument("--out", type=Path, required=True, help="the suite to write (JSONL)")
        sub.set_defaults(handler=_import)

    official = command("spider-ex", "compare sqlcmp's verdicts with Spider's official execution accuracy, case by case")
    official.add_argument("suite", type=Path, help="the suite that was evaluated (from sqlcmp import spider)")
    official.add_argument("--reports", type=Path, required=True, help="its reports (sqlcmp evaluate --out)")
    official.add_argument("--db-dir", type=Path, required=True, help="the Spider databases the suite ran on")
    official.add_argument("--out", type=Path, help="write the Markdown table here (default: print it)")
    official.add_argument("--json-out", type=Path, help="also write the totals and disagreements as JSON")
    official.set_defaults(handler=_spider_ex)

    demo = command("demo", "evaluate the bundled sample suite on the bundled SQLite database, through Dagster")
    demo.add_argument("--out-dir", type=Path, default=DEMO_OUT_DIR,
                      help="where the reports, summary, Parquet store and Dagster instance go (default sqlcmp-demo)")
    demo.add_argument("--suite", type=Path, action="append",
                      help="evaluate this suite file instead of the bundled ones (repeat for several): copy the "
                           "bundled suite (the demo prints its path), edit it, and run the demo on it; a run again "
                           "re-evaluates only the cases that changed")
    demo.add_argument("--db-dir", type=Path,
                      help="folder of SQLite databases the suite's cases name (default: the bundled sample's)")
    demo.set_defaults(handler=_demo)
    return parser


def _cache_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", type=Path,
                        help="the cache folder: expected queries' parses and results, kept for the next run "
                             "(default: $SQLCMP_CACHE_DIR, else the user's cache folder, ~/.cache/sqlcmp on Linux)")


def _cache_dir(args: argparse.Namespace) -> Path:
    from sqlcmp_dagster.engine.cache import default_cache_dir

    return args.cache_dir if args.cache_dir is not None else default_cache_dir()


def _cache(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.engine.cache import Store

    store = Store(_cache_dir(args))
    if args.action == "clear":
        _say(f"removed {store.clear()} entries from {store.root}")
        return EXIT_PASS
    info = store.info()
    entries = ", ".join(f"{kind} {count}" for kind, count in info.entries.items()) or "none"
    _say(f"folder: {info.root}", f"entries: {entries}", f"size: {info.bytes / 2**20:.1f} MB", sep="\n")
    if not info.private:
        _say("not used: other users may write to this folder (or it is not yours), and its entries would be "
             "unpickled", file=sys.stderr)
    return EXIT_PASS


class _Version(argparse.Action):
    """``--version``: the engine's version is read only when asked (it is known where the engine is imported)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from sqlcmp_dagster.engine.version import ENGINE_VERSION

        _say(f"sqlcmp {ENGINE_VERSION}")  # on stdout, as argparse's own version action
        parser.exit()


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--html", type=Path, help="also write a self-contained HTML report here")
    parser.add_argument("--csv", type=Path, help="also write the per-case table as CSV here")
    parser.add_argument("--only-failed", action="store_true",
                        help="list and export only the valid cases that failed (the summary still counts all)")


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=("auto", "exact", "order-insensitive", "order-sensitive"),
                        help="result comparison; auto (default) is order-sensitive when the expected query ends "
                             "with ORDER BY")
    parser.add_argument("--atol", type=float, help="numeric absolute tolerance")
    parser.add_argument("--rtol", type=float, help="numeric relative tolerance")
    parser.add_argument("--timeout-ms", type=int, help="query timeout in milliseconds")
    parser.add_argument("--allow-privileged-role", action="store_true",
                        help="run untrusted SQL even as a PostgreSQL superuser or a role that can read server files "
                             "or signal other sessions (refused by default)")
    parser.add_argument("--verdict-scope", choices=("database", "neighborhood"),
                        help="neighborhood: a pass with a counterexample on a neighbor database fails")
    parser.add_argument("--neighbors", type=int,
                        help="at most this many neighbor databases per passing case (default 8; 0: no search): the "
                             "search stops at the first counterexample, and a pair with identical canonical SQL is "
                             "not searched")
    parser.add_argument("--neighbor-seed", type=int,
                        help="seed of the neighbor databases (default 0): the same seed rebuilds the same neighbors")
    parser.add_argument("--config", type=Path, help="JSON or YAML file of configuration options")
    parser.add_argument("--judge-model", help="litellm model of the advisory AI judge (enables the judge)")
    parser.add_argument("--judge-api-base", help="base URL of an OpenAI-compatible judge server")
    parser.add_argument("--judge-config", type=Path, help="JSON or YAML file of judge options (JudgeConfig)")


def _judge(args: argparse.Namespace) -> JudgeConfig | None:
    """The judge configuration from --judge-config and the --judge-* flags, or None when no judge is asked."""
    from pydantic import ValidationError

    from sqlcmp_dagster.engine.judge import JudgeConfig

    options: dict[str, Any] = _options_file(args.judge_config, "--judge-config") if args.judge_config else {}
    if args.judge_model:
        options["model"] = args.judge_model
    if args.judge_api_base:
        options["api_base"] = args.judge_api_base
    if not options:
        return None
    try:
        return JudgeConfig.model_validate(options)
    except ValidationError as error:
        raise UsageError("bad judge configuration: " + _errors(error)) from error


def _config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Options from --config, then the flags on top; validated here so a bad value names its option."""
    from pydantic import ValidationError

    from sqlcmp_dagster.engine.models import EvalConfig

    options: dict[str, Any] = _options_file(args.config, "--config") if args.config is not None else {}
    flags = {"comparison_mode": args.mode, "numeric_abs_tolerance": args.atol,
             "numeric_rel_tolerance": args.rtol, "query_timeout_ms": args.timeout_ms,
             "verdict_scope": args.verdict_scope, "neighbor_count": args.neighbors,
             "neighbor_seed": args.neighbor_seed,
             "enable_ai_judge": True if (args.judge_model or args.judge_config) else None}
    options.update({k: v for k, v in flags.items() if v is not None})
    try:
        EvalConfig.model_validate(options)
    except ValidationError as error:
        raise UsageError("bad configuration: " + _errors(error)) from error
    return options


def _options_file(path: Path, flag: str) -> dict[str, Any]:
    import yaml

    from sqlcmp_dagster.cases.suite import load_yaml

    try:
        loaded = load_yaml(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"{flag} {path}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise UsageError(f"{flag} {path}: not UTF-8 text (byte {error.start})") from error
    except (yaml.YAMLError, RecursionError) as error:
        raise UsageError(f"{flag} {path}: not valid JSON or YAML: {error or 'nested too deep to read'}") from error
    if not isinstance(loaded, dict):
        raise UsageError(f"{flag} {path}: expected a mapping of options")
    return loaded


def _compare(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig
    from sqlcmp_dagster.engine.pipeline import compare
    from sqlcmp_dagster.engine.report import render_text

    options = _config_overrides(args)
    try:
        request = CompareRequest(case_id="cli", user_query=args.user_query, expected_sql=args.expected_sql,
                                 actual_sql=args.actual_sql, db=args.db, config=EvalConfig(**options))
    except ValidationError as error:
        raise UsageError(_errors(error)) from error
    adapter = _open(args.db, args.allow_privileged_role)
    try:
        report = compare(request, adapter, judge=_judge(args))
    finally:
        adapter.close()
    if args.format == "json":
        _say_json(report)
    else:
        _say(render_text(report))
    return _verdict_status(report)


def _verdict_status(report: Report) -> int:
    """The exit status of one case's verdict (``compare``, ``show``): pass, fail, or invalid."""
    if not report.validity.get("case_valid", True):
        return EXIT_INVALID
    return EXIT_PASS if report.deterministic_verdict == "pass" else EXIT_FAIL


def _evaluate(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.cases.suite import load_suite
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.engine.summary import render_summary, summarize
    from sqlcmp_dagster.journal import Journal, JournalBusy, case_versions
    from sqlcmp_dagster.stopping import Stopped, stop_signals

    _check_input(args.suite, "suite")
    if args.db_dir is not None and not args.db_dir.is_dir():
        raise UsageError(f"--db-dir is not a folder: {args.db_dir}")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    _check_outputs(args, "out", "summary_out", "csv", "html")
    if args.db is not None:
        _open(args.db, args.allow_privileged_role, " (a folder of databases named by the cases' db is --db-dir)")\
            .close()
    try:
        suite = load_suite(args.suite, _config_overrides(args))
    except ValueError as error:
        raise UsageError(str(error)) from error
    for problem in suite.errors:
        _say(f"sqlcmp: skipped {problem}", file=sys.stderr)
    if not suite.cases:  # nothing to evaluate is not a success, whether the file is empty or every line broke
        raise UsageError(f"no cases in {args.suite}")
    _warn_missing_databases(suite.cases, args.db_dir, args.db)
    if args.cache_max_mb < 1:
        raise UsageError("--cache-max-mb must be at least 1")
    evaluator = Evaluator(db_dir=args.db_dir, default_db=args.db, judge=_judge(args),
                          allow_privileged_role=args.allow_privileged_role,
                          cache_dir=None if args.no_cache else _cache_dir(args),
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
            written, failures = _write_outputs(args, reports, summary)
        except Stopped as stop:
            journal.close(done=False)
            _say(f"sqlcmp: stopped by {stop.name}; the finished reports are kept in {journal.path}; to go on: "
                 f"{_resume_command(args.argv)}", file=sys.stderr)
            return stop.status
    if journal.failure is not None:
        _say(f"sqlcmp: {journal.path}: {journal.failure.strerror}: later reports did not reach the journal",
             file=sys.stderr)
    _say(render_summary(summary))
    _say(*([] if failed else [f"reports: {args.out}"]), *written, sep="\n")
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


def _check_outputs(args: argparse.Namespace, *names: str) -> None:
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
        _say(f"sqlcmp: cannot write {path}: {error.strerror or error}{'; ' + kept if kept else ''}", file=sys.stderr)
        return True
    return False


def _warn_missing_databases(cases: list[CompareRequest], db_dir: Path | None, default_db: str | None) -> None:
    """Name on stderr, once each, every database the suite refers to that cannot be found or whose SQLite file
    cannot be read (:func:`_sqlite_file_problem`): its cases will be invalid."""
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
                else _sqlite_file_problem(Path(resolved))
        if problems[resolved] is not None:
            message = f"database {target!r} ({resolved}): {problems[resolved]}"
            missing[message] = missing.get(message, 0) + 1
    for message, count in missing.items():
        _say(f"sqlcmp: {message}: its {count} case{'s' if count > 1 else ''} will be invalid", file=sys.stderr)


def _write_outputs(args: argparse.Namespace, reports: list[Report], summary: dict[str, Any]) -> tuple[list[str], int]:
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
            _say(f"sqlcmp: cannot write {path}: {error.strerror or error}", file=sys.stderr)
            failures += 1
            continue
        written.append(f"{name}: {path} ({len(shown)} cases)")
    return written, failures


def _report(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.engine.summary import render_summary, summarize
    from sqlcmp_dagster.reporting.cases import is_failed

    _check_outputs(args, "summary_out", "csv", "html")
    reports = _read_reports(args.reports)
    if not reports:
        raise UsageError(f"no cases in {args.reports}")
    summary = summarize(reports)
    written, failures = _write_outputs(args, reports, summary)
    _say(render_summary(summary))
    if args.only_failed:
        failed = [r for r in reports if is_failed(r)]
        _say(f"failed cases ({len(failed)}):")
        for report in failed:
            _say(f"  {report.case_id}: {report.explanations[0] if report.explanations else report.severity}")
    if args.export_test_suite is not None:
        from sqlcmp_dagster.cases.suite_export import export_test_suite

        export = export_test_suite(reports, args.export_test_suite)
        written.append(f"test suite: {args.export_test_suite} ({sum(export.databases.values())} neighbor databases "
                       f"over {len(export.databases)} db ids)")
        written += [f"not exported: {reason}" for reason in export.skipped]
    if written:
        _say(*written, sep="\n")
    return EXIT_OUTPUT if failures else EXIT_PASS


def _show(args: argparse.Namespace) -> int:
    """One case's report; as text, its headline, then the question and both queries (the lines that differ
    marked), then the details."""
    from sqlcmp_dagster.engine.report import render_text
    from sqlcmp_dagster.reporting.cases import find_report
    from sqlcmp_dagster.reporting.queries import query_lines

    report = find_report(_read_reports(args.reports), args.case_id)
    if report is None:
        raise UsageError(f"{args.reports} has no case {args.case_id!r}")
    if args.format == "json":
        _say_json(report)
    else:
        headline, _, details = render_text(report).partition("\n")
        _say(headline, *query_lines(report), *([details] if details else []), sep="\n")
    return _verdict_status(report)


def _diff(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.reporting.diff import diff_runs, render_diff

    old, new = _read_reports(args.old), _read_reports(args.new)
    diff = diff_runs(old, new)
    if not diff["cases_in_both"]:
        raise UsageError(f"{args.old} and {args.new} have no case id in common: nothing to compare")
    _say(render_diff(diff))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(diff, indent=2, ensure_ascii=False), encoding="utf-8")
        _say(f"json: {args.json_out}")
    if args.html is not None:
        from sqlcmp_dagster.reporting.html import write_diff_html

        write_diff_html(diff, old, new, args.html, title=f"{args.old.name} vs {args.new.name}")
        _say(f"html: {args.html}")
    return EXIT_FAIL if args.fail_on_regression and diff["regressed"] else EXIT_PASS


def _check_input(path: Path, what: str) -> None:
    """``path`` must be there and not be a folder; a pipe (``<(...)``, ``/dev/stdin``) is an input too, which a
    check for a regular file refused."""
    if not path.exists():
        raise UsageError(f"{what} not found: {path}")
    if path.is_dir():
        raise UsageError(f"{what} is a folder, not a file: {path}")


def _read_reports(path: Path) -> list[Report]:
    from sqlcmp_dagster.reporting.cases import ReportsFileError, read_reports

    try:
        return read_reports(path)
    except ReportsFileError as error:
        raise UsageError(str(error)) from error


def _import(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.cases.importers import (BenchmarkFormatError, check_spider_schemas, import_bird,
                                                import_spider, unknown_tables, write_suite)

    tables = getattr(args, "tables", None)
    if tables is not None and args.db_dir is None:
        raise UsageError("--tables needs --db-dir (the databases to check against it)")
    try:
        if args.format == "spider":
            cases = import_spider(args.questions, args.gold, args.pred, args.db_dir)
            if tables is not None:
                check_spider_schemas(args.db_dir, tables, [c.db for c in cases])
        else:
            cases = import_bird(args.questions, args.pred, args.db_dir)
    except BenchmarkFormatError as error:
        raise UsageError(str(error)) from error
    write_suite(cases, args.out)
    _say(f"{len(cases)} cases written to {args.out}")
    if tables is not None:
        _say(f"{len({c.db for c in cases})} databases in {args.db_dir} match {tables}")
    elif args.db_dir is not None:
        missing = unknown_tables(cases, args.db_dir)
        for db, names in missing.items():
            _say(f"warning: {args.db_dir / db}: the gold queries read tables it does not have "
                  f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})", file=sys.stderr)
        if missing:
            _say(f"warning: {len(missing)} databases do not have the tables their gold queries read, so those cases "
                  "will be invalid; import again with --tables tables.json (Spider) to check every table and column "
                  "against the published schema", file=sys.stderr)
    return EXIT_PASS


def _spider_ex(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from sqlcmp_dagster.cases.spider_exec import compare_with_official, render_markdown
    from sqlcmp_dagster.cases.suite import load_suite

    for path, flag in ((args.suite, "suite"), (args.reports, "--reports")):
        _check_input(path, flag)
    if not args.db_dir.is_dir():
        raise UsageError(f"--db-dir is not a folder: {args.db_dir}")
    try:
        suite = load_suite(args.suite)
    except ValueError as error:
        raise UsageError(str(error)) from error
    reports = _read_reports(args.reports)
    missing = {c.case_id for c in suite.cases} - {r.case_id for r in reports}
    if missing:
        raise UsageError(f"{args.reports} has no report for {len(missing)} suite cases (e.g. {sorted(missing)[:3]})")
    totals, disagreements = compare_with_official(suite.cases, reports, args.db_dir)
    table = render_markdown(totals, disagreements)
    if args.out is not None:
        args.out.write_text(table + "\n", encoding="utf-8")
        _say(table.split("\n\n", 1)[0] + f"\ntable: {args.out}")
    else:
        _say(table)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"totals": totals, "disagreements": [asdict(d) for d in disagreements]},
                                            indent=2, ensure_ascii=False), encoding="utf-8")
    return EXIT_PASS


def _demo(args: argparse.Namespace) -> int:
    """Materialize every asset on the bundled sample (or ``--suite``) in-process, into a local DAGSTER_HOME under
    --out-dir.

    The suites are copied into ``--out-dir``'s ``cases`` folder, which the case sensor reads, and the sensor
    cursor is kept beside it, so running the demo again re-materializes only cases that changed (it names them).
    Dagster's own chatter (beta warnings, the first-run telemetry banner, DEBUG event logs) is kept off the
    screen: the demo's output is the summary, where everything is, and the commands to go on, written so that
    they run as printed in a fresh shell.
    """
    import warnings

    from sqlcmp_dagster.cases.sample import INVALID_SUITE, SAMPLE_SUITE, sample_db_dir, sample_suite_path

    suites = args.suite or [sample_suite_path(SAMPLE_SUITE), sample_suite_path(INVALID_SUITE)]
    for suite in suites:
        _check_input(suite, "--suite")
    if args.db_dir is not None and not args.db_dir.is_dir():
        raise UsageError(f"--db-dir is not a folder: {args.db_dir}")
    db_dir = (args.db_dir or sample_db_dir()).resolve()
    out_dir = args.out_dir.resolve()
    cases = _demo_cases(out_dir / "cases", suites)
    home = out_dir / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    import dagster as dg

    from sqlcmp_dagster.event_log import local_instance

    instance_config = home / "dagster.yaml"
    if not instance_config.exists():
        # a throwaway local instance: no telemetry (and no banner asking about it), and an event log that
        # writes a step's per-case events in one transaction (sqlcmp_dagster.event_log)
        import yaml

        instance_config.write_text(yaml.safe_dump({"telemetry": {"enabled": False},
                                                   **local_instance(str(home / "history" / "runs"))}),
                                   encoding="utf-8")

    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    from sqlcmp_dagster.definitions import build_definitions
    from sqlcmp_dagster.engine.atomic import remove_debris, write_text_atomically
    from sqlcmp_dagster.engine.summary import render_summary
    from sqlcmp_dagster.local import materialize_summary, sensor_tick
    from sqlcmp_dagster.stopping import Stopped, stop_signals

    storage = out_dir / "storage"
    for folder in [out_dir, *(path for path in storage.rglob("*") if path.is_dir())]:
        remove_debris(folder)  # what writers killed in an earlier demo left
    defs = build_definitions(cases_dir=str(cases), db_dir=str(db_dir), storage_dir=str(storage))
    cursor_file = out_dir / "sensor_cursor.json"
    cursor = cursor_file.read_text(encoding="utf-8") if cursor_file.is_file() else None
    ui = _shell_line({"DAGSTER_HOME": home, "SQLCMP_STORAGE_DIR": storage, "SQLCMP_CASES_DIR": cases,
                      "SQLCMP_DB_DIR": db_dir}, _dagster_ui())
    with dg.DagsterInstance.get() as instance, stop_signals() as signals:
        try:
            tick = sensor_tick(defs, instance, cursor, signals.check)
        except Stopped as stop:
            _say(f"sqlcmp: stopped by {stop.name}; the next demo runs this tick's cases again", file=sys.stderr)
            return stop.status
        if not all(run.success for run in tick.runs):
            _say(f"sqlcmp: a run failed; its logs are in the Dagster UI: {ui}", file=sys.stderr)
            return EXIT_FAIL
        write_text_atomically(cursor_file, tick.cursor or "")
        summary_run = materialize_summary(defs, instance)
        if not summary_run.success:
            _say(f"sqlcmp: evaluation_summary failed; its logs are in the Dagster UI: {ui}", file=sys.stderr)
            return EXIT_FAIL
    summary = summary_run.output_for_node("evaluation_summary")
    reports_file = out_dir / "reports.jsonl"
    _export_reports(storage / "case_reports", reports_file)
    write_text_atomically(out_dir / "summary.json", json.dumps(summary, indent=2))
    _say(*(f"suite: {suite.resolve()}" for suite in suites), f"databases: {db_dir}", sep="\n")
    evaluated = sorted({event.partition for run in tick.runs for event in run.get_asset_materialization_events()
                        if event.partition is not None})
    _say(f"dagster: {_counted(len(tick.added), 'case partition')} added, {len(tick.deleted)} deleted; "
         f"{_counted(len(evaluated), 'case')} evaluated in {_counted(len(tick.runs), 'run')}"
         + (f": {_listed(evaluated)}" if evaluated and set(evaluated) != set(tick.added) else ""))
    _say(render_summary(summary))
    _say(f"reports: {reports_file} (as Parquet: {storage / 'case_reports'})\nsummary: {out_dir / 'summary.json'}")
    _say(f"open these results in the Dagster UI:\n  {ui}")
    sqlcmp = _script("sqlcmp", "sqlcmp_dagster.cli")
    first = shlex.quote(str(suites[0].resolve()))
    _say(f"evaluate the suite without Dagster:\n  {sqlcmp} evaluate {first} --db-dir {shlex.quote(str(db_dir))} "
         "--out reports.jsonl")
    if args.suite is None:
        _say(f"change a case: copy the suite, edit the copy, and run the demo on it:\n  cp {first} my_suite.jsonl\n"
             f"  {sqlcmp} demo --suite my_suite.jsonl"
             + (f" --out-dir {shlex.quote(str(args.out_dir))}" if args.out_dir != DEMO_OUT_DIR else ""))
    return EXIT_PASS


def _demo_cases(folder: Path, suites: list[Path]) -> Path:
    """``folder`` holding a copy of each of ``suites`` and nothing else: the demo's case sensor reads it, and a
    suite left there by an earlier run with other ``--suite`` files would still be evaluated. A folder the demo
    did not make (no :data:`DEMO_MARK` in it) is never emptied: it may hold the user's own files."""
    import shutil

    names = [suite.name for suite in suites]
    if len(set(names)) < len(names):
        raise UsageError(f"--suite: two suite files share a name ({', '.join(names)}): rename one")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / DEMO_MARK).is_file():
        raise UsageError(f"{folder} exists and was not made by sqlcmp demo: choose another --out-dir")
    contents = [suite.read_bytes() for suite in suites]  # each read once (a pipe), before the old copies go
    if folder.is_dir():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / DEMO_MARK).write_text("the suites sqlcmp demo evaluates: replaced at each run\n", encoding="utf-8")
    for name, content in zip(names, contents):
        (folder / name).write_bytes(content)
    return folder


def _counted(count: int, noun: str) -> str:
    """``count`` ``noun``s, with the right plural.

    >>> _counted(1, "case partition"), _counted(0, "run")
    ('1 case partition', '0 runs')
    """
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _listed(names: list[str], limit: int = 20) -> str:
    """The first ``limit`` of ``names``, then how many more.

    >>> _listed(["a", "b", "c"], limit=2)
    'a, b and 1 more'
    """
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _script(name: str, module: str) -> str:
    """How a fresh shell runs this installation's ``name`` command: its bare name when the shell finds this very
    script; else the script's path (relative when under the current folder, as ``.venv/bin/sqlcmp``), which
    runs without activating the environment; else ``python -m module`` with this interpreter."""
    import shutil

    script = Path(sys.executable).parent / name
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m {module}"
    found = shutil.which(name)
    if found is not None and Path(found).resolve() == script.resolve():
        return name
    try:
        shown = script.relative_to(Path.cwd())
    except ValueError:
        shown = script
    return shlex.quote(str(shown))


def _dagster_ui() -> str:
    """The command that serves the Dagster UI on the demo's definitions: ``dg dev`` (what Dagster recommends:
    ``dagster dev`` warns that it is superseded) when the ``dg`` command is installed (package
    ``dagster-dg-cli``), else ``dagster dev``."""
    tool = "dg" if (Path(sys.executable).parent / "dg").is_file() else "dagster"
    return f"{_script(tool, 'dagster')} dev -m sqlcmp_dagster.definitions"


def _shell_line(environment: dict[str, Path], command: str) -> str:
    """``command`` with ``environment`` set before it, each value quoted for a POSIX shell."""
    return " ".join(f"{name}={shlex.quote(str(value))}" for name, value in environment.items()) + " " + command


def _export_reports(folder: Path, out: Path) -> None:
    """Every stored case report as one JSONL file, in case-id order, replacing ``out`` whole."""
    from sqlcmp_dagster.engine.atomic import write_text_atomically
    from sqlcmp_dagster.engine.records import reports_from_frame
    from sqlcmp_dagster.resources.storage import read_asset

    frame = read_asset(str(folder.parent), folder.name).sort("case_id", maintain_order=True)
    write_text_atomically(out, "".join(_line(report) for report in reports_from_frame(frame)))


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
        _say(f"sqlcmp: resuming: {len(cases) - len(todo)} of {len(cases)} reports kept from {journal.path}",
             file=sys.stderr)
    progress = Progress(len(todo), sys.stderr, quiet=quiet)
    lines: dict[int, str] = {}
    reports: dict[int, Report] = {}

    def arrived(report: Report) -> None:
        signals.check()
        progress.advance(report.case_id)

    def finished(position: int, report: Report) -> None:
        index = todo[position]
        lines[index], reports[index] = _line(report), report
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


def _line(report: Report) -> str:
    """``report`` as one line of a reports file: pydantic's own JSON, compact, UTF-8 unescaped. It is five times
    faster than ``json.dumps`` of ``model_dump(mode="json")`` (0.16 -> 0.03 s for Spider dev's 1,034 reports),
    which a ``--workers N`` run does in its one coordinating process, on the cores its workers run on."""
    return report.model_dump_json() + "\n"


def _open(db: str, allow_privileged_role: bool = False, folder_hint: str = "") -> ExecutionAdapter:
    """The adapter of ``--db``; what keeps it from opening is a usage error that shows the URL without its
    password (:func:`~sqlcmp_dagster.engine.redaction.redact`). ``folder_hint`` follows the message when ``--db``
    names a folder (what the command takes instead)."""
    from sqlcmp_dagster.engine.execution import ExecutionAdapter
    from sqlcmp_dagster.engine.redaction import redact, redacted_url

    _check_database_file(db, folder_hint)
    try:
        return ExecutionAdapter(db, allow_privileged_role=allow_privileged_role)
    except FileNotFoundError as error:
        raise UsageError(f"--db: {error}") from error
    except Exception as error:  # SQLAlchemy's URL and driver errors: bad input, not a crash
        raise UsageError(f"--db {redacted_url(db)!r}: {type(error).__name__}: {redact(str(error), db)}") from error


def _check_database_file(db: str, folder_hint: str = "") -> None:
    """A path (or ``sqlite:///``, ``duckdb:///`` URL) must not name a folder (the engines' own message said the
    database was not found), and a SQLite one must name a SQLite file: SQLite itself would accept any file and
    fail only at the first query, and an empty file would pass ``SELECT 1``."""
    from sqlcmp_dagster.engine.execution import DUCKDB_SUFFIXES

    if db.startswith(("sqlite:///", "duckdb:///")):
        path = Path(db.split(":///", 1)[1].split("?", 1)[0])
    elif "://" in db:
        return
    else:
        path = Path(db)
    if path.is_dir():
        raise UsageError(f"--db {db}: a folder, not a database file{folder_hint}")
    if not path.is_file() or db.startswith("duckdb:///") or path.suffix.lower() in DUCKDB_SUFFIXES:
        return  # the adapter names a missing file, and DuckDB a file that is not its own
    problem = _sqlite_file_problem(path)
    if problem is not None:
        raise UsageError(f"--db {db}: {problem}")


def _sqlite_file_problem(path: Path) -> str | None:
    """Why the SQLite file ``path`` cannot serve queries, or None: unreadable, empty, no SQLite header, or a
    schema SQLite cannot read (a damaged file; damage further in shows as its queries' errors)."""
    import sqlite3
    from urllib.parse import quote

    try:
        with path.open("rb") as handle:
            header = handle.read(16)
    except OSError as error:
        return f"cannot be read: {error.strerror}"
    if header != b"SQLite format 3\x00":
        return "an empty file" if not header else "not a SQLite database (no SQLite header)"
    try:
        connection = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            connection.close()
    except sqlite3.Error as error:
        return f"cannot be read: {error}"
    return None


def _errors(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in error.errors())


if __name__ == "__main__":
    run()
