from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import JUDGE_PASS
from sqlcmp_dagster.cli import EXIT_STATUSES, main


def test_compare_pass_text(sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", "--db", str(sample_db), "--expected-sql", "SELECT name FROM products",
                 "--actual-sql", "select NAME from products"])
    assert code == 0
    assert capsys.readouterr().out.startswith("case cli: PASS (pass)")


def test_compare_fail_json_is_machine_readable(sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", "--db", f"sqlite:///{sample_db}", "--expected-sql", "SELECT name FROM products",
                 "--actual-sql", "SELECT name, price FROM products", "--format", "json"])
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    assert report["deterministic_verdict"] == "fail"
    assert report["diagnostic_scores"]["likely_source_clause"] == "projection"


def test_compare_options_reach_the_config(sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare", "--db", str(sample_db), "--expected-sql", "SELECT 1.0 AS v", "--actual-sql", "SELECT 1.05 AS v",
            "--format", "json"]
    assert main(args) == 1
    capsys.readouterr()
    assert main(args + ["--atol", "0.1", "--mode", "exact"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["metrics"]["result"]["result_equality_family"]["comparison_mode"] == "exact"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--db", "/no/such.sqlite"], "--db: SQLite database not found"),
        (["--db", "{folder}"], "--db {folder}: a folder, not a database file\n"),
        (["--db", "sqlite:///{folder}"], "--db sqlite:///{folder}: a folder, not a database file\n"),
        (["--db", "{db}", "--atol", "-1"], "numeric_abs_tolerance"),
        (["--db", "{db}", "--config", "/no/such.yaml"], "--config /no/such.yaml"),
        (["--db", "nosuchdriver://x"], "--db 'nosuchdriver://x'"),
        (["--db", "{db}", "--config", "{alias}"], "an alias (*name)"),
        (["--db", "{db}", "--config", "{latin1}"], "not UTF-8 text"),
    ],
)
def test_compare_bad_input_exits_2_with_a_message(sample_db: Path, capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "alias.yaml").write_text("a: &a [1, 2]\nquery_timeout_ms: *a\n", encoding="utf-8")
    (tmp_path / "latin1.yaml").write_bytes("dialect: caf\xe9\n".encode("latin-1"))
    argv = ["compare", "--expected-sql", "SELECT 1", "--actual-sql", "SELECT 1"]
    def filled(text: str) -> str:
        return text.replace("{db}", str(sample_db)).replace("{alias}", str(tmp_path / "alias.yaml")) \
            .replace("{latin1}", str(tmp_path / "latin1.yaml")).replace("{folder}", str(tmp_path))

    argv += [filled(a) for a in args]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert filled(message) in captured.err and "Traceback" not in captured.err


def test_evaluate_writes_one_report_per_case_and_reports_bad_lines(
    tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        '{"case_id": "a", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"}\n'
        '{"case_id": "b", "expected_sql": "SELECT 1", "actual_sql": "SELECT 2", "db": "shop"}\n'
        '{"case_id": "c", "expected_sql": 5}\n'
        '{"case_id": "d", "expected_sql": "SELECT 1 WHERE 0", "actual_sql": "SELECT 2 WHERE 0", "db": "shop"}\n',
        encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    code = main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--workers", "2",
                 "--summary-out", str(tmp_path / "summary.json")])
    assert code == 2  # a suite line could not be loaded; the others were still evaluated
    captured = capsys.readouterr()
    assert f"{suite}:3: case 'c'" in captured.err
    reports = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["case_id"], r["deterministic_verdict"]) for r in reports] == [("a", "pass"), ("b", "fail"),
                                                                              ("d", "pass")]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["passed"], summary["failed"], summary["load_errors"]) == (2, 1, 1)
    assert summary["pass_rate"] == pytest.approx(2 / 3, abs=1e-6)
    # d passes on two empty results: counted as a pass, and apart as vacuous, overall and for its database
    assert summary["vacuous_passes"] == summary["per_database"]["shop"]["vacuous_passes"] == 1
    assert "3 cases: 2 passed, 1 failed (pass rate 66.7%)" in captured.out
    assert "vacuous passes (both results empty): 1 of 2" in captured.out


def test_evaluate_starts_the_worker_server_before_the_engine_is_imported(tmp_path: Path, sample_dir: Path) -> None:
    """With --workers the server that forks the workers imports the engine (about 0.4 s) while this process
    imports it too, one core each; so the command's own imports must not pull the engine in before it, nor its
    models and pydantic (about 0.2 s), which the workers would wait for."""
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(f'{{"case_id": "{i}", "expected_sql": "SELECT {i}", "actual_sql": "SELECT 1", '
                             f'"db": "shop"}}\n' for i in range(3)), encoding="utf-8")
    script = f"""
import sys
from sqlcmp_dagster import cli
heavy = ("polars", "sqlglot", "sqlalchemy", "pydantic", "yaml", "sqlcmp_dagster.engine.models",
         "sqlcmp_dagster.engine.pipeline")
print(sorted(m for m in heavy if m in sys.modules))
started = cli.start_server
cli.start_server = lambda: (print(sorted(m for m in heavy if m in sys.modules)), started())
code = cli.main(["evaluate", {str(suite)!r}, "--db-dir", {str(sample_dir)!r}, "--out", {str(tmp_path / "r.jsonl")!r},
                 "--workers", "2", "--quiet"])
print(code)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    lines = run.stdout.splitlines()
    assert lines[:2] == ["[]", "[]"], run.stderr  # nothing heavy after the CLI's import, nor when the server starts
    assert lines[-1] == "1"  # and the batch ran: two cases fail
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 3


def test_demo_runs_the_bundled_sample(tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SQLCMP_SAMPLE_DIR", str(sample_dir))
    assert main(["demo", "--out-dir", str(tmp_path / "demo")]) == 0
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    # Both bundled suite files: 33 cases plus the one whose expected query is broken on purpose.
    assert (summary["cases"], summary["passed"], summary["invalid_cases"]) == (34, 11, 1)
    assert len((tmp_path / "demo" / "reports.jsonl").read_text().splitlines()) == 34
    stored = pl.scan_parquet(tmp_path / "demo" / "storage" / "case_reports" / "*.parquet").collect()
    assert sorted(stored["case_id"]) == sorted(json.loads(line)["case_id"] for line in
                                               (tmp_path / "demo" / "reports.jsonl").read_text().splitlines())
    out = capsys.readouterr().out
    assert "dagster: 34 case partitions added, 0 deleted; 34 cases evaluated in 1 run\n" in out
    commands = _printed_commands(out)
    # where the bundled suite is, and how to change a case without editing the installed package
    copy = next(c for c in commands if c[0] == "cp")
    assert Path(copy[1]).is_file() and copy[1].endswith("suite.jsonl") and f"suite: {copy[1]}" in out
    assert [c[1:4] for c in commands if "demo" in c] == [["demo", "--suite", "my_suite.jsonl"]]
    ui = next(c for c in commands if "dev" in c)  # Dagster's recommended command (dagster-dg-cli is a dependency)
    assert Path(ui[0]).name == "dg" and ui[-3:] == ["dev", "-m", "sqlcmp_dagster.definitions"], ui
    assert f"SQLCMP_CASES_DIR={tmp_path / 'demo' / 'cases'} SQLCMP_DB_DIR={sample_dir} " in out


def _printed_commands(out: str) -> list[list[str]]:
    """The commands the demo printed (its indented lines, as a shell splits them), each checked to run as
    written in a fresh shell: its program is a path that exists, or a name on PATH, past any NAME=value."""
    commands = []
    for line in out.splitlines():
        if line.startswith("  ") and not line.startswith("   ") and not line.strip()[0].isdigit():
            words = [w for w in shlex.split(line) if not re.fullmatch(r"[A-Z_]+=.*", w)]
            if words and (words[0] in ("cp",) or "/" in words[0] or shutil.which(words[0])):
                assert shutil.which(words[0]) or Path(words[0]).is_file(), line
                commands.append(words)
    return commands


def test_demo_takes_a_suite_and_names_the_cases_it_evaluates_again(
        tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "mine.jsonl"

    def write(actual_b: str) -> None:
        suite.write_text("".join(json.dumps({"case_id": case_id, "expected_sql": "SELECT 1", "actual_sql": actual,
                                             "db": "shop"}) + "\n"
                                 for case_id, actual in (("a", "SELECT 1"), ("b", actual_b), ("c", "SELECT 2"))),
                         encoding="utf-8")

    write("SELECT 1")
    demo = ["demo", "--suite", str(suite), "--db-dir", str(sample_dir), "--out-dir", str(tmp_path / "demo")]
    assert main(demo) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"suite: {suite}\ndatabases: {sample_dir}\n")
    assert "dagster: 3 case partitions added, 0 deleted; 3 cases evaluated in 1 run\n" in out
    assert "3 cases: 2 passed, 1 failed" in out and "cp " not in out  # the copy hint is for the bundled suite
    write("SELECT 3")
    assert main(demo) == 0
    assert "dagster: 0 case partitions added, 0 deleted; 1 case evaluated in 1 run: b\n" in capsys.readouterr().out
    mine = tmp_path / "elsewhere" / "cases"
    mine.mkdir(parents=True)
    (mine / "keep.jsonl").write_text("{}\n", encoding="utf-8")
    assert main(["demo", "--suite", str(suite), "--out-dir", str(mine.parent)]) == 2  # a folder it did not make
    assert "was not made by sqlcmp demo" in capsys.readouterr().err and (mine / "keep.jsonl").is_file()


def test_compare_with_a_judge_server(sample_db: Path, serve: Any, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")  # the provider's usual variable; the local server ignores it
    server = serve(lambda n: (200, json.dumps(JUDGE_PASS), 0.0))
    code = main(["compare", "--db", str(sample_db), "--expected-sql", "SELECT name FROM products ORDER BY price",
                 "--actual-sql", "SELECT name FROM products ORDER BY price DESC", "--format", "json",
                 "--judge-model", "openai/local-test", "--judge-api-base", server.base])
    report = json.loads(capsys.readouterr().out)
    assert code == 1  # the advisory pass never changes the exit status: the deterministic verdict is fail
    assert (report["deterministic_verdict"], report["ai_advisory_verdict"]) == ("fail", "pass")
    assert server.calls == 1


def test_evaluate_with_a_judge_writes_the_judged_reports(sample_dir: Path, serve: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A report's line is made as its case finishes, before the judge runs over the batch; the judged report
    (a new object) must replace it in the file."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server = serve(lambda n: (200, json.dumps(JUDGE_PASS), 0.0))
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(f'{{"case_id": "{i}", "expected_sql": "SELECT 1", "actual_sql": "SELECT {i}", '
                             f'"db": "shop"}}\n' for i in (1, 2)), encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    code = main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet",
                 "--judge-model", "openai/local-test", "--judge-api-base", server.base])
    capsys.readouterr()
    reports = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 1 and server.calls == 1  # the exact match is not sent to the judge (its policy)
    assert [(r["case_id"], r["deterministic_verdict"], r["ai_advisory_verdict"]) for r in reports] == [
        ("1", "pass", None), ("2", "fail", "pass")]
    assert all("judge" in r["run_metadata"] for r in reports)  # every report is the judged one, skipped or not


def test_the_command_ends_without_teardown_and_loses_no_output(tmp_path: Path, sample_dir: Path) -> None:
    """``sqlcmp`` (``cli.run``) ends the process with ``os._exit`` once main has returned: the exit status, the
    whole summary on stdout and every report must still be there, with workers too (their server exits with
    this process)."""
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(f'{{"case_id": "{i}", "expected_sql": "SELECT 1", "actual_sql": "SELECT {i % 2}", '
                             f'"db": "shop"}}\n' for i in range(6)), encoding="utf-8")
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}  # as users run it
    for workers in ("1", "2"):
        out = tmp_path / f"reports-{workers}.jsonl"
        run = subprocess.run([sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate", str(suite), "--db-dir",
                              str(sample_dir), "--out", str(out), "--quiet", "--workers", workers],
                             capture_output=True, text=True, timeout=300, env=buffered)
        assert run.returncode == 1, run.stderr  # three cases fail
        assert run.stdout.rstrip().endswith(f"reports: {out}") and "6 cases: 3 passed, 3 failed" in run.stdout
        assert len(out.read_text().splitlines()) == 6 and run.stderr == ""
    usage = subprocess.run([sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate", str(tmp_path / "missing.jsonl"),
                            "--out", str(tmp_path / "r.jsonl")], capture_output=True, text=True, timeout=300,
                           env=buffered)
    assert usage.returncode == 2 and "suite not found" in usage.stderr


def test_sqlglot_does_not_echo_a_hostile_query_to_stderr(sample_db: Path) -> None:
    """sqlglot warns that a statement it reads as a Command "contains unsupported syntax", quoting the text: a
    hostile query's escape sequences reached the terminal through Python's last-resort handler (a review's
    finding). The gate's refusal is in the report; nothing of the text is on stderr."""
    out = subprocess.run([sys.executable, "-m", "sqlcmp_dagster.cli", "compare", "--db", str(sample_db),
                          "--expected-sql", "SELECT 1 AS a", "--actual-sql", "SHOW '\x1b[2J\x1b[31mPWNED'"],
                         capture_output=True, text=True, timeout=300)
    assert "\x1b" not in out.stderr + out.stdout and "PWNED" not in out.stderr, out.stderr
    assert "not a read-only query: SHOW statement" in out.stdout


@pytest.mark.parametrize(("option", "value"), [("max_cell_bytes", 2**31), ("query_timeout_ms", 10**30),
                                               ("numeric_abs_tolerance", float("inf")),
                                               ("neighbor_sample_rows", 10**30)])
def test_an_option_past_what_the_engines_hold_is_refused_by_name(tmp_path: Path, sample_dir: Path, option: str,
                                                                 value: float, capsys: pytest.CaptureFixture[str]
                                                                 ) -> None:
    """A case's config past what the engines hold failed deep inside one of them (every query of the case, on
    SQLite, for max_cell_bytes of 2 GiB), and an infinite tolerance made every number equal (a review's
    findings): the case is refused as it loads, naming the option, and the other case runs."""
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"case_id": "odd", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop",
                                 "config": {option: value}}) + "\n"
                     + json.dumps({"case_id": "fine", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1",
                                   "db": "shop"}) + "\n", encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet"]) == 2
    assert f"config.{option}" in capsys.readouterr().err
    assert [json.loads(line)["case_id"] for line in out.read_text(encoding="utf-8").split("\n") if line] == ["fine"]


def test_a_database_that_cannot_be_opened_makes_the_case_invalid_whichever_side_needed_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A case with its expected result given still needs the database for the actual query: when that database is
    not there, the case says nothing about the query under test (it used to fail as the model's error)."""
    given = {"columns": ["v"], "rows": [[1]]}
    cases = [{"case_id": "expected_given", "expected_sql": "SELECT 1 AS v", "actual_sql": "SELECT 1 AS v",
              "expected_result": given},
             {"case_id": "actual_given", "expected_sql": "SELECT 1 AS v", "actual_sql": "SELECT 1 AS v",
              "actual_result": given},
             {"case_id": "none_given", "expected_sql": "SELECT 1 AS v", "actual_sql": "SELECT 1 AS v"},
             {"case_id": "both_given", "expected_sql": "SELECT 1 AS v", "actual_sql": "SELECT 1 AS v",
              "expected_result": given, "actual_result": given}]
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps({**case, "db": "shop"}) + "\n" for case in cases), encoding="utf-8")
    (tmp_path / "empty").mkdir()
    out = tmp_path / "reports.jsonl"
    code = main(["evaluate", str(suite), "--db-dir", str(tmp_path / "empty"), "--out", str(out), "--quiet"])
    assert code == 3  # no valid case failed, some were invalid
    reports = {r["case_id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    for case_id in ("expected_given", "actual_given", "none_given"):
        validity = reports[case_id]["validity"]
        assert validity["case_valid"] is False and "cannot open database 'shop'" in validity["invalid_reason"]
        assert [line for line in reports[case_id]["explanations"] if "shop" in line] == [
            reports[case_id]["explanations"][0]]  # said once
    assert reports["both_given"]["validity"]["case_valid"] is True  # it needs no database
    assert "1 passed, 0 failed" in capsys.readouterr().out


def test_a_database_password_is_never_written(tmp_path: Path, sample_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A URL's password, in its user information or as a query parameter, is shown as *** on stderr, in the
    reports, the text of a case, the summary, the CSV and the HTML report; a password that holds a ``?`` (which
    SQLAlchemy takes into it), an ``@`` (whose tail the driver quotes as the host it could not resolve) or a line
    break, and a ``?password=`` holding ``#`` or a space too, which reviews found written whole or in part."""
    secret = "Pa55-w0rd"
    refused = [f"postgresql+psycopg2://who:{secret}@127.0.0.1:1/sales",
               f"postgresql+psycopg2://who@127.0.0.1:1/sales?password={secret}",
               f"nosuchdriver://who:{secret}@h/sales",
               f"postgresql+psycopg2://who:x?{secret}@127.0.0.1:1/sales",
               f"postgresql+psycopg2://who:x@{secret}@127.0.0.1:1/sales",
               f"postgresql+psycopg2://who:x\n{secret}@127.0.0.1:1/sales",
               f"postgresql+psycopg2://who@127.0.0.1:1/sales?password=x#{secret}",
               f"postgresql+psycopg2://who@127.0.0.1:1/sales?password=x {secret}"]
    for url in refused:
        assert main(["compare", "--db", url, "--expected-sql", "SELECT 1", "--actual-sql", "SELECT 1"]) == 2
        captured = capsys.readouterr()
        assert "--db 'postgresql+psycopg2://who" in captured.err or "nosuchdriver://who:***@h" in captured.err
        assert secret not in captured.err + captured.out
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps({"case_id": f"c{i}", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1",
                                         "db": url}) + "\n" for i, url in enumerate(refused)), encoding="utf-8")
    out, html, csv_out = tmp_path / "r.jsonl", tmp_path / "r.html", tmp_path / "r.csv"
    assert main(["evaluate", str(suite), "--out", str(out), "--html", str(html), "--csv", str(csv_out),
                 "--summary-out", str(tmp_path / "s.json"), "--quiet"]) == 3
    assert main(["show", "c0", "--reports", str(out)]) == 3
    written = capsys.readouterr()
    reports = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all("***" in r["validity"]["invalid_reason"] for r in reports)
    for text in (written.out, written.err, *(p.read_text(encoding="utf-8") for p in (out, html, csv_out,
                                                                                       tmp_path / "s.json"))):
        assert secret not in text


def test_a_postgresql_password_given_as_a_parameter_is_not_in_the_report(
        pg_service: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """SQLAlchemy hides the password of a URL's user information, not one given as ``?password=`` (which the
    driver takes as well): the report's database identifier hid the first only."""
    import sqlalchemy as sa

    url = sa.make_url(pg_service[0])
    password = url.password
    assert password  # the service's role has one
    given = url.set(password=None).update_query_dict({"password": password}).render_as_string(hide_password=False)
    assert main(["compare", "--db", given, "--expected-sql", "SELECT 1", "--actual-sql", "SELECT 1",
                 "--format", "json"]) == 0
    database = json.loads(capsys.readouterr().out)["run_metadata"]["database"]
    assert database.endswith("password=***") and f"={password}" not in database


@pytest.mark.parametrize("command", ["compare", "evaluate", "report", "show", "diff", "import spider",
                                     "import bird", "spider-ex", "demo"])
def test_each_command_help_gives_its_own_exit_status_in_plain_text(command: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command.split(), "--help"])
    shown = capsys.readouterr().out
    own = EXIT_STATUSES[command.split()[0]]
    assert "``" not in shown and shown.rstrip().endswith(own.rstrip())
    assert all(text not in shown for name, text in EXIT_STATUSES.items() if text != own and name != "sqlcmp")


def test_the_top_level_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    assert "``" not in shown and "The sqlcmp command line: compare one pair" in shown


def test_show_exits_with_the_case_verdict(tmp_path: Path, sample_dir: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps({"case_id": case_id, "expected_sql": expected, "actual_sql": "SELECT 1",
                                         "db": "shop"}) + "\n"
                             for case_id, expected in (("passes", "SELECT 1"), ("fails", "SELECT 2"),
                                                       ("invalid", "SELECT nope FROM nothing"))),
                     encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet"]) == 1
    assert [main(["show", case_id, "--reports", str(out), *fmt]) for case_id in ("passes", "fails", "invalid")
            for fmt in ([], ["--format", "json"])] == [0, 0, 1, 1, 3, 3]
    capsys.readouterr()
    assert main(["report", str(out)]) == 0  # the summary was written: evaluate's status says how the run went


@pytest.mark.parametrize("content", ["", "\n\n", '{"case_id": "broken"}\n'])
def test_a_suite_or_reports_file_without_cases_is_bad_input(content: str, tmp_path: Path, sample_dir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content, encoding="utf-8")
    assert main(["evaluate", str(empty), "--db-dir", str(sample_dir), "--out", str(tmp_path / "r.jsonl"),
                 "--quiet"]) == 2
    assert f"sqlcmp: no cases in {empty}" in capsys.readouterr().err
    if content != '{"case_id": "broken"}\n':  # a reports file's broken line is an error of its own
        assert main(["report", str(empty)]) == 2
        assert capsys.readouterr().err == f"sqlcmp: no cases in {empty}\n"


def test_evaluate_db_naming_a_folder_points_to_db_dir(tmp_path: Path, sample_dir: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"case_id": "a", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1"}\n', encoding="utf-8")
    assert main(["evaluate", str(suite), "--db", str(sample_dir), "--out", str(tmp_path / "r.jsonl")]) == 2
    assert capsys.readouterr().err == (f"sqlcmp: --db {sample_dir}: a folder, not a database file (a folder of "
                                       "databases named by the cases' db is --db-dir)\n")


def test_inputs_from_a_pipe_are_read_once(tmp_path: Path, sample_dir: Path) -> None:
    """``--pred /dev/stdin`` (or ``<(cut -f1 gold.sql)``) was read twice, the second time empty: '0 predictions'.
    A suite from a pipe was refused as not found (not a regular file) and as having no suffix."""
    questions = [{"db_id": "shop", "query": f"SELECT {i}", "question": f"question {i}"} for i in (1, 2)]
    (tmp_path / "dev.json").write_text(json.dumps(questions), encoding="utf-8")
    (tmp_path / "gold.sql").write_text("SELECT 1\tshop\nSELECT 2\tshop\n", encoding="utf-8")
    command = [sys.executable, "-m", "sqlcmp_dagster.cli"]
    imported = subprocess.run([*command, "import", "spider", "--questions", str(tmp_path / "dev.json"),
                               "--gold", str(tmp_path / "gold.sql"), "--pred", "/dev/stdin",
                               "--out", str(tmp_path / "suite.jsonl")],
                              input="SELECT 1\nSELECT 3\n", capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr
    suite = (tmp_path / "suite.jsonl").read_text(encoding="utf-8")
    assert [json.loads(line)["actual_sql"] for line in suite.splitlines()] == ["SELECT 1", "SELECT 3"]
    evaluated = subprocess.run([*command, "evaluate", "/dev/stdin", "--db-dir", str(sample_dir), "--out",
                                str(tmp_path / "r.jsonl"), "--quiet"], input=suite, capture_output=True, text=True,
                               timeout=300)
    assert evaluated.returncode == 1, evaluated.stderr  # the second prediction is wrong
    assert "2 cases: 1 passed, 1 failed" in evaluated.stdout


def test_show_gives_the_question_and_both_queries_first_with_the_differing_lines_marked(
        tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"case_id": "filter", "user_query": "Products over 30", "db": "shop",
                                 "expected_sql": "SELECT name FROM products WHERE price > 30",
                                 "actual_sql": "SELECT name FROM products WHERE price > 29"}) + "\n"
                     + json.dumps({"case_id": "typo", "db": "shop", "expected_sql": "SELECT name FROM products",
                                   "actual_sql": "SELEC name FORM products"}) + "\n", encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet"])
    capsys.readouterr()
    assert main(["show", "filter", "--reports", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("case filter: FAIL") and lines[1:14] == [
        "question: Products over 30",
        "expected query:", "    SELECT", "      name", "    FROM products", "    WHERE", "      price > 30   <- differs",
        "actual query:", "    SELECT", "      name", "    FROM products", "    WHERE", "      price > 29   <- differs"]
    assert main(["show", "typo", "--reports", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:6] == ["expected query:", "    SELECT", "      name", "    FROM products",
                          "actual query: does not parse"]


def test_each_fact_is_said_once_with_the_right_plural(sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The verified fix and the probe that found it said the same thing; '1 actual rows are not expected'."""
    assert main(["compare", "--db", str(sample_db), "--expected-sql", "SELECT name FROM products WHERE price > 30",
                 "--actual-sql", "SELECT name FROM products WHERE price > 29"]) == 1
    out = capsys.readouterr().out
    assert "verified fix: taking the WHERE clause from the expected query makes the results match" in out
    assert "re-running the actual query with the expected WHERE clause" not in out
    assert "actual returns 3 rows, expected 2 (1.50x)" in out
    assert "2 of 2 expected rows are in the actual result; 1 actual row is not expected" in out
