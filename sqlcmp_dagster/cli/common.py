"""What every command of the command line shares: its exit statuses, saying things on stdout and stderr, reading
inputs and opening databases, and the options every command takes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlcmp_dagster.escaping import terminal_json, terminal_text

if TYPE_CHECKING:
    from pydantic import ValidationError

    from sqlcmp_dagster.engine.execution import ExecutionAdapter
    from sqlcmp_dagster.engine.judge import JudgeConfig
    from sqlcmp_dagster.engine.models import Report

# The engine is imported inside each command, never at the top (see sqlcmp_dagster.cli's main).
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INVALID, EXIT_OUTPUT = 0, 1, 2, 3, 4


class UsageError(Exception):
    """Bad input from the user: reported on stderr with exit status 2."""


def say(*parts: object, sep: str = " ", file: Any = None) -> None:
    """``print`` for everything the CLI writes to a terminal: the text may hold what a case controls (its id, a
    hostile query's column names and values, a database's error around them), so the characters that would
    drive the terminal are escaped (:func:`~sqlcmp_dagster.escaping.terminal_text`)."""
    print(terminal_text(sep.join(map(str, parts))), file=file)


def say_json(report: Report) -> None:
    """``report`` as indented JSON on stdout, written as a reports file line is (an infinite cell as the text
    ``"Infinity"``: ``json.dumps`` wrote a bare ``Infinity``, which is not JSON), with no character that drives
    a terminal left raw in it."""
    print(terminal_json(report.model_dump_json(indent=2)))


def cache_dir_of(args: argparse.Namespace) -> Path:
    from sqlcmp_dagster.engine.cache import default_cache_dir

    return args.cache_dir if args.cache_dir is not None else default_cache_dir()


def judge_of(args: argparse.Namespace) -> JudgeConfig | None:
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
        raise UsageError("bad judge configuration: " + validation_errors(error)) from error


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
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
        raise UsageError("bad configuration: " + validation_errors(error)) from error
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


def verdict_status(report: Report) -> int:
    """The exit status of one case's verdict (``compare``, ``show``): pass, fail, or invalid."""
    if not report.validity.get("case_valid", True):
        return EXIT_INVALID
    return EXIT_PASS if report.deterministic_verdict == "pass" else EXIT_FAIL


def check_input(path: Path, what: str) -> None:
    """``path`` must be there and not be a folder; a pipe (``<(...)``, ``/dev/stdin``) is an input too, which a
    check for a regular file refused."""
    if not path.exists():
        raise UsageError(f"{what} not found: {path}")
    if path.is_dir():
        raise UsageError(f"{what} is a folder, not a file: {path}")


def load_reports(path: Path) -> list[Report]:
    from sqlcmp_dagster.reporting.cases import ReportsFileError, read_reports

    try:
        return read_reports(path)
    except ReportsFileError as error:
        raise UsageError(str(error)) from error


def counted(count: int, noun: str) -> str:
    """``count`` ``noun``s, with the right plural.

    >>> counted(1, "case partition"), counted(0, "run")
    ('1 case partition', '0 runs')
    """
    return f"{count} {noun}{'' if count == 1 else 's'}"


def listed(names: list[str], limit: int = 20) -> str:
    """The first ``limit`` of ``names``, then how many more.

    >>> listed(["a", "b", "c"], limit=2)
    'a, b and 1 more'
    """
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def report_line(report: Report) -> str:
    """``report`` as one line of a reports file: pydantic's own JSON, compact, UTF-8 unescaped. It is five times
    faster than ``json.dumps`` of ``model_dump(mode="json")`` (0.16 -> 0.03 s for Spider dev's 1,034 reports),
    which a ``--workers N`` run does in its one coordinating process, on the cores its workers run on."""
    return report.model_dump_json() + "\n"


def open_database(db: str, allow_privileged_role: bool = False, folder_hint: str = "") -> ExecutionAdapter:
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
    problem = sqlite_file_problem(path)
    if problem is not None:
        raise UsageError(f"--db {db}: {problem}")


def sqlite_file_problem(path: Path) -> str | None:
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


def validation_errors(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in error.errors())
