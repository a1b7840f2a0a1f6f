"""The commands on one pair or on finished reports: ``compare``, ``show``, ``report``, ``diff``, ``import``,
``spider-ex`` and ``cache``."""

from __future__ import annotations

import argparse
import json
import sys

# The engine is imported inside each command, never at the top (see sqlcmp_dagster.cli's main).
from sqlcmp_dagster.cli.common import EXIT_FAIL, EXIT_OUTPUT, EXIT_PASS, UsageError, cache_dir_of, check_input, \
    config_overrides, judge_of, load_reports, open_database, say, say_json, validation_errors, verdict_status
from sqlcmp_dagster.cli.evaluate import check_outputs


def cache_command(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.engine.cache import MISSING, Store, StoreError

    store = Store(cache_dir_of(args))
    if args.action == "clear":
        try:
            count = store.clear()
        except StoreError as error:
            say(f"sqlcmp: cache not cleared: {error}", file=sys.stderr)
            return EXIT_FAIL
        say(f"removed {count} entries from {store.root}")
        return EXIT_PASS
    info = store.info()
    entries = ", ".join(f"{kind} {count}" for kind, count in info.entries.items()) or "none"
    say(f"folder: {info.root}", f"entries: {entries}", f"size: {info.bytes / 2**20:.1f} MB", sep="\n")
    if info.problem is not None:
        say(f"not used: {info.root} {info.problem}", file=sys.stderr)
    # A folder that does not exist yet is a cache before its first run (exit 0); one that exists and cannot be used
    # (a file, another user's, writable by others, unreadable) is a setting to mend, which a script should see.
    return EXIT_PASS if info.problem in (None, MISSING) else EXIT_FAIL


def compare_command(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig
    from sqlcmp_dagster.engine.pipeline import compare
    from sqlcmp_dagster.engine.report import render_text

    options = config_overrides(args)
    try:
        request = CompareRequest(case_id="cli", user_query=args.user_query, expected_sql=args.expected_sql,
                                 actual_sql=args.actual_sql, db=args.db, config=EvalConfig(**options))
    except ValidationError as error:
        raise UsageError(validation_errors(error)) from error
    adapter = open_database(args.db, args.allow_privileged_role)
    try:
        report = compare(request, adapter, judge=judge_of(args))
    finally:
        adapter.close()
    if args.format == "json":
        say_json(report)
    else:
        say(render_text(report))
    return verdict_status(report)


def report_command(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.cli.outputs import Outputs
    from sqlcmp_dagster.engine.summary import render_summary
    from sqlcmp_dagster.reporting.cases import is_failed

    check_outputs(args, "summary_out", "csv", "html")
    reports = load_reports(args.reports)
    if not reports:
        raise UsageError(f"no cases in {args.reports}")
    outputs = Outputs(out=None, summary_out=args.summary_out, table=args.csv, page=args.html,
                      only_failed=args.only_failed)
    try:
        for report in reports:
            outputs.add(outputs.entry(report, None))
        summary = outputs.summary.figures()
        written, failures = outputs.write_rest(summary)
    except BaseException:
        outputs.discard()
        raise
    say(render_summary(summary))
    if args.only_failed:
        failed = [r for r in reports if is_failed(r)]
        say(f"failed cases ({len(failed)}):")
        for report in failed:
            say(f"  {report.case_id}: {report.explanations[0] if report.explanations else report.severity}")
    if args.export_test_suite is not None:
        from sqlcmp_dagster.cases.suite_export import export_test_suite

        export = export_test_suite(reports, args.export_test_suite)
        written.append(f"test suite: {args.export_test_suite} ({sum(export.databases.values())} neighbor databases "
                       f"over {len(export.databases)} db ids)")
        written += [f"not exported: {reason}" for reason in export.skipped]
    if written:
        say(*written, sep="\n")
    return EXIT_OUTPUT if failures else EXIT_PASS


def show_command(args: argparse.Namespace) -> int:
    """One case's report; as text, its headline, then the question and both queries (the lines that differ
    marked), then the details."""
    from sqlcmp_dagster.engine.report import render_text
    from sqlcmp_dagster.reporting.cases import find_report
    from sqlcmp_dagster.reporting.queries import query_lines

    report = find_report(load_reports(args.reports), args.case_id)
    if report is None:
        raise UsageError(f"{args.reports} has no case {args.case_id!r}")
    if args.format == "json":
        say_json(report)
    else:
        headline, _, details = render_text(report).partition("\n")
        say(headline, *query_lines(report), *([details] if details else []), sep="\n")
    return verdict_status(report)


def diff_command(args: argparse.Namespace) -> int:
    from sqlcmp_dagster.reporting.diff import diff_runs, render_diff

    old, new = load_reports(args.old), load_reports(args.new)
    diff = diff_runs(old, new)
    if not diff["cases_in_both"]:
        raise UsageError(f"{args.old} and {args.new} have no case id in common: nothing to compare")
    say(render_diff(diff))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(diff, indent=2, ensure_ascii=False), encoding="utf-8")
        say(f"json: {args.json_out}")
    if args.html is not None:
        from sqlcmp_dagster.reporting.html import write_diff_html

        write_diff_html(diff, old, new, args.html, title=f"{args.old.name} vs {args.new.name}")
        say(f"html: {args.html}")
    return EXIT_FAIL if args.fail_on_regression and diff["regressed"] else EXIT_PASS


def import_command(args: argparse.Namespace) -> int:
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
    say(f"{len(cases)} cases written to {args.out}")
    if tables is not None:
        say(f"{len({c.db for c in cases})} databases in {args.db_dir} match {tables}")
    elif args.db_dir is not None:
        missing = unknown_tables(cases, args.db_dir)
        for db, names in missing.items():
            say(f"warning: {args.db_dir / db}: the gold queries read tables it does not have "
                  f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})", file=sys.stderr)
        if missing:
            say(f"warning: {len(missing)} databases do not have the tables their gold queries read, so those cases "
                  "will be invalid; import again with --tables tables.json (Spider) to check every table and column "
                  "against the published schema", file=sys.stderr)
    return EXIT_PASS


def spider_ex_command(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from sqlcmp_dagster.cases.spider_exec import compare_with_official, render_markdown
    from sqlcmp_dagster.cases.suite import load_suite

    for path, flag in ((args.suite, "suite"), (args.reports, "--reports")):
        check_input(path, flag)
    if not args.db_dir.is_dir():
        raise UsageError(f"--db-dir is not a folder: {args.db_dir}")
    try:
        suite = load_suite(args.suite)
    except ValueError as error:
        raise UsageError(str(error)) from error
    reports = load_reports(args.reports)
    missing = {c.case_id for c in suite.cases} - {r.case_id for r in reports}
    if missing:
        raise UsageError(f"{args.reports} has no report for {len(missing)} suite cases (e.g. {sorted(missing)[:3]})")
    totals, disagreements = compare_with_official(suite.cases, reports, args.db_dir)
    table = render_markdown(totals, disagreements)
    if args.out is not None:
        args.out.write_text(table + "\n", encoding="utf-8")
        say(table.split("\n\n", 1)[0] + f"\ntable: {args.out}")
    else:
        say(table)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"totals": totals, "disagreements": [asdict(d) for d in disagreements]},
                                            indent=2, ensure_ascii=False), encoding="utf-8")
    return EXIT_PASS
