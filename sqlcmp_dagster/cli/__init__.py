"""The ``sqlcmp`` command line: ``compare`` one pair, ``evaluate`` a suite, ``demo`` the bundled sample.

Each command has its own exit status (:data:`EXIT_STATUSES`, shown by its ``--help``): 0 pass, 1 fail, 2 bad input
or usage, 3 invalid case (no expected query runs, or its database cannot be opened, so the query under test could
not be judged), 4 an output that could not be written, 130/143 stopped by SIGINT/SIGTERM, each read for what
the command does. Messages go to stderr, never a stack trace. The README's
"Exit status" has them all.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

# Only the standard library is imported before main parses the command line. The engine (polars, sqlglot,
# SQLAlchemy: about 0.4 s), and even its models and pydantic (about 0.2 s), are imported inside the commands that
# use them, so that ``evaluate --workers N`` starts its worker processes' server first thing (see main): the
# workers wait for that server to import the engine, not for this process. The command modules import nothing
# heavier at their top.
from sqlcmp_dagster.cli.commands import cache_command, compare_command, diff_command, import_command, \
    report_command, show_command, spider_ex_command
from sqlcmp_dagster.cli.common import EXIT_FAIL, EXIT_INVALID, EXIT_OUTPUT, EXIT_PASS, EXIT_USAGE, UsageError, say
from sqlcmp_dagster.cli.demo import DEMO_OUT_DIR, demo_command
from sqlcmp_dagster.cli.evaluate import evaluate_command
from sqlcmp_dagster.engine.context import current as engine_context
from sqlcmp_dagster.engine.workers import start_server

__all__ = ["DEMO_OUT_DIR", "EXIT_FAIL", "EXIT_INVALID", "EXIT_OUTPUT", "EXIT_PASS", "EXIT_STATUSES", "EXIT_USAGE",
           "UsageError", "main", "run"]

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
    "cache": f"  0  the cache was described or cleared\n  1  the cache could not be cleared (stderr says why: "
             f"another process holds its lock, say)\n{_USAGE}",
    "demo": f"  0  the sample was evaluated\n  1  a Dagster run failed (its logs are in the Dagster UI)\n{_USAGE}\n"
            "  130, 143  stopped by SIGINT, SIGTERM (the next demo runs the tick's cases again)",
}


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
        say(f"sqlcmp: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        say("sqlcmp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``sqlcmp diff ... | head``): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


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
    one.set_defaults(handler=compare_command)

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
                       help="neither read nor fill the cache (expected queries are still run once per batch, and "
                            "a case that repeats one of the batch still gets its report)")
    batch.add_argument("--cache-max-mb", type=int, default=1024,
                       help="bound of the cache folder in MB; the least recently used entries go (default 1024)")
    batch.set_defaults(handler=evaluate_command)

    kept = command("cache", "describe or clear the cache: expected queries' parses and results, reports of cases "
                            "evaluated before")
    kept.add_argument("action", choices=("info", "clear"), help="info: its folder, entries and size; clear: empty it")
    _cache_options(kept)
    kept.set_defaults(handler=cache_command)

    report = command("report", "summarize a reports file again, or export it as HTML or CSV")
    report.add_argument("reports", type=Path, help="reports JSONL (sqlcmp evaluate --out)")
    report.add_argument("--summary-out", type=Path, help="also write the summary as JSON here")
    report.add_argument("--export-test-suite", type=Path, metavar="DIR",
                        help="also write each neighbor counterexample as a database of a Spider test suite here "
                             "(DIR/<db id>/*.sqlite, the official test suites' layout)")
    _output_options(report)
    report.set_defaults(handler=report_command)

    show = command("show", "one case's report as text")
    show.add_argument("case_id", help="the case id, as in the suite")
    show.add_argument("--reports", type=Path, required=True, help="reports JSONL (sqlcmp evaluate --out)")
    show.add_argument("--format", choices=("text", "json"), default="text",
                      help="text for people (default) or the full JSON report")
    show.set_defaults(handler=show_command)

    diff = command("diff", "compare two runs over the same cases: regressions, fixes, McNemar's exact test")
    diff.add_argument("old", type=Path, help="reports JSONL of the earlier run (or the baseline model)")
    diff.add_argument("new", type=Path, help="reports JSONL of the later run (or the candidate model)")
    diff.add_argument("--fail-on-regression", action="store_true",
                      help="exit 1 when any case valid in both runs went from pass to fail (for CI gating)")
    diff.add_argument("--json-out", type=Path, help="also write the diff as JSON here")
    diff.add_argument("--html", type=Path, help="also write the diff as one self-contained HTML file")
    diff.set_defaults(handler=diff_command)

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
        sub.set_defaults(handler=import_command)

    official = command("spider-ex", "compare sqlcmp's verdicts with Spider's official execution accuracy, case by case")
    official.add_argument("suite", type=Path, help="the suite that was evaluated (from sqlcmp import spider)")
    official.add_argument("--reports", type=Path, required=True, help="its reports (sqlcmp evaluate --out)")
    official.add_argument("--db-dir", type=Path, required=True, help="the Spider databases the suite ran on")
    official.add_argument("--out", type=Path, help="write the Markdown table here (default: print it)")
    official.add_argument("--json-out", type=Path, help="also write the totals and disagreements as JSON")
    official.set_defaults(handler=spider_ex_command)

    demo = command("demo", "evaluate the bundled sample suite on the bundled SQLite database, through Dagster")
    demo.add_argument("--out-dir", type=Path, default=DEMO_OUT_DIR,
                      help="where the reports, summary, Parquet store and Dagster instance go (default sqlcmp-demo)")
    demo.add_argument("--suite", type=Path, action="append",
                      help="evaluate this suite file instead of the bundled ones (repeat for several): copy the "
                           "bundled suite (the demo prints its path), edit it, and run the demo on it; a run again "
                           "re-evaluates only the cases that changed")
    demo.add_argument("--db-dir", type=Path,
                      help="folder of SQLite databases the suite's cases name (default: the bundled sample's)")
    demo.set_defaults(handler=demo_command)
    return parser


def _cache_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", type=Path,
                        help="the cache folder: expected queries' parses and results, and the reports of cases "
                             "whose every input is unchanged, kept for the next run (default: $SQLCMP_CACHE_DIR, "
                             "else the user's cache folder, ~/.cache/sqlcmp on Linux)")


class _Version(argparse.Action):
    """``--version``: the engine's version is read only when asked (it is known where the engine is imported)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from sqlcmp_dagster.engine.version import ENGINE_VERSION

        say(f"sqlcmp {ENGINE_VERSION}")  # on stdout, as argparse's own version action
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
