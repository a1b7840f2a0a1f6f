"""``sqlcmp demo``: the bundled sample (or the user's suites) through the Dagster pipeline in-process, with the
paths and commands to go on from there."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

# The engine is imported inside each command, never at the top (see sqlcmp_dagster.cli's main).
from sqlcmp_dagster.cli.common import EXIT_FAIL, EXIT_PASS, UsageError, check_input, counted, listed, report_line, say


#: Where ``sqlcmp demo`` writes by default.
DEMO_OUT_DIR = Path("sqlcmp-demo")


#: The file that marks the demo's copy of the suites (``--out-dir``'s ``cases`` folder) as its own to replace.
DEMO_MARK = ".sqlcmp-demo-cases"


def demo_command(args: argparse.Namespace) -> int:
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
        check_input(suite, "--suite")
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
        # a throwaway local instance: no telemetry (and no banner asking about it), no community modal, and an
        # event log that writes a step's per-case events in one transaction (sqlcmp_dagster.event_log)
        import yaml

        instance_config.write_text(yaml.safe_dump(local_instance(str(home / "history" / "runs"))), encoding="utf-8")

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
            say(f"sqlcmp: stopped by {stop.name}; the next demo runs this tick's cases again", file=sys.stderr)
            return stop.status
        if not all(run.success for run in tick.runs):
            say(f"sqlcmp: a run failed; its logs are in the Dagster UI: {ui}", file=sys.stderr)
            return EXIT_FAIL
        write_text_atomically(cursor_file, tick.cursor or "")
        summary_run = materialize_summary(defs, instance)
        if not summary_run.success:
            say(f"sqlcmp: evaluation_summary failed; its logs are in the Dagster UI: {ui}", file=sys.stderr)
            return EXIT_FAIL
    summary = summary_run.output_for_node("evaluation_summary")
    reports_file = out_dir / "reports.jsonl"
    _export_reports(storage / "case_reports", reports_file)
    write_text_atomically(out_dir / "summary.json", json.dumps(summary, indent=2))
    say(*(f"suite: {suite.resolve()}" for suite in suites), f"databases: {db_dir}", sep="\n")
    evaluated = sorted({event.partition for run in tick.runs for event in run.get_asset_materialization_events()
                        if event.partition is not None})
    say(f"dagster: {counted(len(tick.added), 'case partition')} added, {len(tick.deleted)} deleted; "
         f"{counted(len(evaluated), 'case')} evaluated in {counted(len(tick.runs), 'run')}"
         + (f": {listed(evaluated)}" if evaluated and set(evaluated) != set(tick.added) else ""))
    say(render_summary(summary))
    say(f"reports: {reports_file} (as Parquet: {storage / 'case_reports'})\nsummary: {out_dir / 'summary.json'}")
    say(f"open these results in the Dagster UI:\n  {ui}")
    sqlcmp = _script("sqlcmp", "sqlcmp_dagster.cli")
    first = shlex.quote(str(suites[0].resolve()))
    say(f"evaluate the suite without Dagster:\n  {sqlcmp} evaluate {first} --db-dir {shlex.quote(str(db_dir))} "
         "--out reports.jsonl")
    if args.suite is None:
        say(f"change a case: copy the suite, edit the copy, and run the demo on it:\n  cp {first} my_suite.jsonl\n"
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
    from sqlcmp_dagster.engine.atomic import atomic_path
    from sqlcmp_dagster.engine.records import iter_reports
    from sqlcmp_dagster.resources.storage import read_asset

    frame = read_asset(str(folder.parent), folder.name).sort("case_id", maintain_order=True)
    with atomic_path(out) as partial, partial.open("w", encoding="utf-8") as lines:
        lines.writelines(report_line(report) for report in iter_reports(frame))  # not all reports at once
