"""What people read after a run: CSV, --only-failed, show, diff with McNemar's test, the HTML report in a real
browser, progress lines, and the exit statuses."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import service
from sqlcmp_dagster.cli import main
from sqlcmp_dagster.escaping import CONTROLS
from sqlcmp_dagster.reporting.diff import mcnemar_exact

CASES = [  # (case id, expected, actual in the old run, actual in the new run)
    ("keeps_passing", "SELECT name FROM products", "SELECT name FROM products", "SELECT name FROM products"),
    ("regresses", "SELECT name FROM products WHERE price > 17", "SELECT name FROM products WHERE price > 17",
     "SELECT name FROM products WHERE price >= 17"),
    ("gets_fixed", "SELECT count(*) FROM orders", "SELECT count(*) FROM customers", "SELECT count(*) FROM orders"),
    ("broken_gold", "SELECT nope FROM nowhere", "SELECT 1", "SELECT 1"),
]


def _suite(path: Path, run: int) -> Path:
    path.write_text("".join(json.dumps({"case_id": case_id, "user_query": f"question {case_id}", "expected_sql": gold,
                                        "actual_sql": (old, new)[run], "db": "shop"}) + "\n"
                            for case_id, gold, old, new in CASES), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> dict[str, Path]:
    """Two evaluated runs of the same cases: one case regresses, one is fixed, one is invalid in both."""
    folder = tmp_path_factory.mktemp("runs")
    paths = {}
    for run, name in enumerate(("old", "new")):
        paths[name] = folder / f"{name}.jsonl"
        assert main(["evaluate", str(_suite(folder / f"{name}_suite.jsonl", run)), "--db-dir", str(sample_dir),
                     "--out", str(paths[name]), "--quiet"]) == 1
    return paths


def test_csv_and_only_failed(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(runs["new"]), "--csv", str(tmp_path / "all.csv")]) == 0
    with (tmp_path / "all.csv").open(encoding="utf-8", newline="") as handle:
        rows = {row["case_id"]: row for row in csv.DictReader(handle)}
    assert [rows[c]["outcome"] for c, *_ in CASES] == ["pass", "fail", "pass", "invalid"]
    assert rows["regresses"]["likely_source_clause"] == "selection_predicate"
    assert rows["regresses"]["user_query"] == "question regresses" and rows["regresses"]["hardness"] == "easy"
    capsys.readouterr()
    assert main(["report", str(runs["new"]), "--only-failed", "--csv", str(tmp_path / "failed.csv")]) == 0
    out = capsys.readouterr().out
    assert "failed cases (1):\n  regresses: fail (moderate issue)" in out
    with (tmp_path / "failed.csv").open(encoding="utf-8", newline="") as handle:
        assert [row["case_id"] for row in csv.DictReader(handle)] == ["regresses"]  # invalid is not a failure


def test_show_one_case_and_version(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "broken_gold", "--reports", str(runs["new"])]) == 3  # the case's own exit status
    assert capsys.readouterr().out.startswith("case broken_gold: INVALID (no expected query parses and executes)")
    assert main(["show", "nope", "--reports", str(runs["new"])]) == 2
    assert "has no case 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert re.fullmatch(r"sqlcmp \S+\n", capsys.readouterr().out)


def test_every_case_is_written_and_read_back_whatever_its_text(tmp_path: Path, sample_dir: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Text no JSON report could carry (a lone surrogate, which a JSON suite can spell, in a case id or a given
    result's column name and cells) is made writable as the case is read, and text a reports file line may
    hold but ``str.splitlines`` breaks at (U+2028, U+0085 in a result) is read back as one line: every case's
    report is written, and ``show`` reads each one (a review's findings)."""
    cases = [{"case_id": "surrogate\ud800", "expected_sql": "SELECT 1", "actual_sql": "SELECT 2",
              "expected_result": {"columns": ["a\ud800"], "rows": [["x\udcff"]]},
              "actual_result": {"columns": ["a\ud800"], "rows": [["y"]]}},
             {"case_id": "separators", "db": "shop", "actual_sql": "SELECT 'a' AS v",
              "expected_sql": "SELECT 'a' || char(8232) || 'b' || char(133) AS v"}]
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps(case) + "\n" for case in cases), encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet"]) == 1
    capsys.readouterr()
    assert [json.loads(line)["case_id"] for line in out.read_text(encoding="utf-8").split("\n") if line] == \
        ["surrogate?", "separators"]
    assert main(["show", "surrogate?", "--reports", str(out)]) == 1
    assert main(["show", "separators", "--reports", str(out)]) == 1
    assert "missing rows (sample): ('a\\u2028b\\x85',)" in capsys.readouterr().out


def test_an_infinite_cell_is_not_read_back_as_null(tmp_path: Path, sample_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """JSON has no infinity: a wrong infinite answer was written as ``null`` and shown as a NULL once read back
    (a review's finding); it is written as the text ``-Infinity``."""
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"case_id": "inf", "db": "shop", "expected_sql": "SELECT NULL AS a", '
                     '"actual_sql": "SELECT -1e999 AS a"}\n', encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet"]) == 1
    capsys.readouterr()
    assert main(["show", "inf", "--reports", str(out)]) == 1
    assert "extra rows (sample): ('-Infinity',)" in capsys.readouterr().out

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    # compare prints the report it made, whose cell is still a float: a bare -Infinity before, not JSON
    assert main(["compare", "--db", str(sample_dir / "shop.sqlite"), "--expected-sql", "SELECT NULL AS a",
                 "--actual-sql", "SELECT -1e999 AS a", "--format", "json"]) == 1
    shown = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert shown["mismatch_map"]["extra_rows_sample"] == [["-Infinity"]]


def test_diff_counts_regressions_and_gates_ci(runs: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    args = ["diff", str(runs["old"]), str(runs["new"]), "--json-out", str(tmp_path / "diff.json")]
    assert main(args) == 0  # a regression alone does not fail the command ...
    assert main(args + ["--fail-on-regression", "--html", str(tmp_path / "diff.html")]) == 1  # ... unless asked
    out = capsys.readouterr().out
    assert "3 cases valid in both runs: pass rate 66.7% -> 66.7% (2 -> 2); 1 regressed, 1 fixed" in out
    diff = json.loads((tmp_path / "diff.json").read_text(encoding="utf-8"))
    assert (diff["regressed"], diff["fixed"], diff["mcnemar_p_value"]) == (["regresses"], ["gets_fixed"], 1.0)
    assert diff["severity_changes"] == {"pass -> moderate issue": 1, "major issue -> pass": 1}
    page = (tmp_path / "diff.html").read_text(encoding="utf-8")
    assert 'data-outcome="regressed"' in page and 'data-outcome="fixed"' in page


def test_output_into_a_closed_pipe_ends_quietly(runs: dict[str, Path]) -> None:
    """``sqlcmp diff OLD NEW | head -1``: the reader leaves early; no traceback, exit 141 as Unix tools do."""
    process = subprocess.Popen([sys.executable, "-m", "sqlcmp_dagster.cli", "diff", str(runs["old"]), str(runs["new"])],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.close()  # long before the command has imported its modules and written anything
    _, err = process.communicate(timeout=300)
    assert process.returncode == 141 and b"Traceback" not in err, err.decode()


@pytest.mark.parametrize(("regressed", "fixed", "p_value"), [
    (0, 5, 0.0625),  # 2 * 0.5**5
    (2, 10, 2 * (1 + 12 + 66) / 4096),  # binomial(12, 1/2): P(X <= 2), doubled
    (3, 3, 1.0),
])
def test_mcnemar_exact_is_the_two_sided_binomial_test(regressed: int, fixed: int, p_value: float) -> None:
    assert mcnemar_exact(regressed, fixed) == pytest.approx(p_value, rel=1e-12)
    assert mcnemar_exact(fixed, regressed) == mcnemar_exact(regressed, fixed)


def test_progress_lines_when_not_a_terminal_and_quiet(tmp_path: Path, sample_dir: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps({"case_id": f"c{i}", "expected_sql": f"SELECT {i}", "actual_sql": f"SELECT {i}",
                                         "db": "shop"}) + "\n" for i in range(20)), encoding="utf-8")
    base = ["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(tmp_path / "r.jsonl")]
    assert main(base) == 0
    lines = capsys.readouterr().err.splitlines()  # captured stderr is not a terminal: plain lines, one per tenth
    assert len(lines) == 10 and lines[-1].startswith("[20/20] 100%")
    assert all(re.fullmatch(r"\[\d+/20\] +\d+%  [\d.]+ cases/s  ETA \d+:\d\d", line) for line in lines)
    assert main(base + ["--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_exit_statuses_for_invalid_cases_missing_databases_and_non_databases(
        tmp_path: Path, sample_dir: Path, sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = ["compare", "--db", str(sample_db), "--expected-sql", "SELECT nope FROM nowhere", "--actual-sql", "SELECT 1"]
    assert main(broken) == 3
    assert capsys.readouterr().out.startswith("case cli: INVALID")
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"case_id": "a", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "gone"}\n'
                     '{"case_id": "b", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "gone"}\n',
                     encoding="utf-8")
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(tmp_path / "r.jsonl")]) == 3
    assert f"database 'gone' not found under {sample_dir}: its 2 cases will be invalid" in capsys.readouterr().err
    not_a_database = tmp_path / "notes.sqlite"
    not_a_database.write_text("just text", encoding="utf-8")
    for target in (str(not_a_database), f"sqlite:///{not_a_database}"):
        assert main(["compare", "--db", target, "--expected-sql", "SELECT 1", "--actual-sql", "SELECT 1"]) == 2
        assert "not a SQLite database" in capsys.readouterr().err


def test_duplicate_case_ids_are_reported(tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"case_id": "a", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"}\n'
                     '{"case_id": "a", "expected_sql": "SELECT 2", "actual_sql": "SELECT 2", "db": "shop"}\n',
                     encoding="utf-8")
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(tmp_path / "r.jsonl")]) == 2
    assert f"{suite}:2: duplicate case_id 'a' (first on line 1): skipped" in capsys.readouterr().err
    assert len((tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()) == 1


def test_html_report_filters_in_a_headless_browser(runs: dict[str, Path], tmp_path: Path) -> None:
    chromium = service("SQLCMP_TEST_CHROMIUM")
    page = tmp_path / "report.html"
    assert main(["report", str(runs["new"]), "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text  # self-contained: nothing is fetched
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / 'p'}",
             "--virtual-time-budget=5000", "--window-size=1280,1600"]
    screenshot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={screenshot}", page.as_uri() + "#outcome=fail"], capture_output=True,
                   timeout=120, check=True)
    assert screenshot.stat().st_size > 10_000 and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def visible_rows(fragment: str) -> set[str]:
        dom = subprocess.run([*flags, "--dump-dom", page.as_uri() + fragment], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        rows = re.findall(r'<tr data-outcome="\w+" data-group="\w+"[^>]*?( hidden(?:="")?)?>\s*<td><a href="#case-(\w+)"',
                          dom)
        assert len(rows) == len(CASES), dom[:2000]
        return {case_id for hidden, case_id in rows if not hidden}

    assert visible_rows("") == {c for c, *_ in CASES}
    assert visible_rows("#outcome=fail") == {"regresses"}
    assert visible_rows("#outcome=pass&q=fixed") == {"gets_fixed"}
    assert visible_rows("#q=price") == {"regresses"}  # the search reaches the question and the SQL



def _in_browser(chromium: str, url: str, expression: str, profile: Path) -> Any:
    """The value of the JavaScript ``expression`` in headless Chromium once ``url`` has loaded (through the
    DevTools protocol: the page's scroll position and hidden elements are not in a dumped DOM)."""
    from websockets.sync.client import connect

    browser = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-sync", "--disable-background-networking", "--disable-component-update",
                                f"--user-data-dir={profile}", "--remote-debugging-port=0", "--window-size=1280,600",
                                url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(600):  # Chromium writes its port once it listens
            if port_file.is_file() and port_file.read_text().strip():
                break
            assert browser.poll() is None, "Chromium exited before it listened"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
        page = next(p for p in pages if p["type"] == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=None) as socket:
            for number in range(600):  # until the page has loaded and its script has run
                socket.send(json.dumps({"id": number, "method": "Runtime.evaluate", "params": {
                    "expression": f"document.readyState === 'complete' ? JSON.stringify({expression}) : null",
                    "returnByValue": True}}))
                answer = json.loads(socket.recv(timeout=30))
                value = answer["result"]["result"].get("value")
                if value is not None:
                    return json.loads(value)
                time.sleep(0.1)
        raise AssertionError(f"{url} did not load")
    finally:
        browser.kill()
        browser.wait()


def test_html_filters_hide_details_and_open_at_the_table(runs: dict[str, Path], tmp_path: Path) -> None:
    """A filter hid the table's rows but not the cases' details below it, and a filter in the address opened the
    page at its top, no case in view; the severity chart's "pass" beside the outcome chart's "passed" is
    explained when they differ (a review's findings)."""
    chromium = service("SQLCMP_TEST_CHROMIUM")
    page = tmp_path / "report.html"
    assert main(["report", str(runs["new"]), "--html", str(page)]) == 0
    state = ("{shown: Array.from(document.querySelectorAll('details.case')).filter(d => !d.hidden && "
             "d.getBoundingClientRect().height > 0).map(d => d.id), scrolled: scrollY, "
             "table: document.getElementById('cases').getBoundingClientRect().top, height: innerHeight}")
    unfiltered = _in_browser(chromium, page.as_uri(), state, tmp_path / "p1")
    assert sorted(unfiltered["shown"]) == sorted(f"case-{c}" for c, *_ in CASES)
    assert unfiltered["scrolled"] == 0 and unfiltered["table"] > unfiltered["height"]  # below the fold
    failed = _in_browser(chromium, page.as_uri() + "#outcome=fail", state, tmp_path / "p2")
    assert failed["shown"] == ["case-regresses"]
    assert failed["scrolled"] > 0 and 0 <= failed["table"] < failed["height"]  # the filtered table is in view


ESC_TITLE = "\x1b]0;pwned\x07"  # an escape sequence that retitles the terminal window


def _hostile_suite(path: Path, actual: str) -> Path:
    """Cases whose text drives a terminal, a spreadsheet and the HTML page's anchors, as a model's output or a
    suite from elsewhere could hold it."""
    cases = [
        {"case_id": f"id{ESC_TITLE}\r\x1b[2K", "db": "shop", "expected_sql": "SELECT 'y' AS a",
         "actual_sql": f"SELECT 'x' AS \"{ESC_TITLE}\", 2", "context": {"difficulty": f"d{ESC_TITLE}\u202e"}},
        {"case_id": '=HYPERLINK("http://evil.invalid/","click")', "user_query": "@SUM(1+1)*cmd|' /C calc'!A0",
         "db": "shop", "expected_sql": "SELECT name, price FROM products WHERE price > 17", "actual_sql": actual},
        {"case_id": "orders total", "db": "shop", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1"},
        {"case_id": "orders_total", "db": "shop", "expected_sql": "SELECT 1", "actual_sql": "SELECT 2"},
        {"case_id": "escapes_db_dir", "db": "../shop", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1"},
    ]
    path.write_text("".join(json.dumps(case) + "\n" for case in cases), encoding="utf-8")
    return path


def test_text_a_case_controls_never_drives_the_terminal(tmp_path: Path, sample_dir: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Every command that prints what a case holds (its id, a label, a hostile query's column name, a
    database's error around a name) prints the characters that drive a terminal escaped (a review's finding:
    ``show``, ``report``, ``diff`` and the summary printed them raw)."""
    runs = {}
    for name, actual in (("old", "SELECT name, price FROM products WHERE price > 17"),
                         ("new", "SELECT price, name FROM products WHERE price >= 17")):
        runs[name] = tmp_path / f"{name}.jsonl"
        main(["evaluate", str(_hostile_suite(tmp_path / f"{name}_suite.jsonl", actual)), "--db-dir", str(sample_dir),
              "--out", str(runs[name])])
    case_id = json.loads(runs["new"].read_text(encoding="utf-8").split("\n")[0])["case_id"]
    assert main(["compare", "--db", str(sample_dir / "shop.sqlite"), "--expected-sql", "SELECT 1",
                 "--actual-sql", f'SELECT * FROM "{ESC_TITLE}"']) == 1
    for argv in (["show", case_id, "--reports", str(runs["new"])],
                 ["show", case_id, "--reports", str(runs["new"]), "--format", "json"],
                 ["report", str(runs["new"]), "--only-failed"], ["diff", str(runs["old"]), str(runs["new"])]):
        assert main(argv) in (0, 1)
    printed = capsys.readouterr()
    for stream in (printed.out, printed.err):
        assert not {chr(code) for code in CONTROLS} & set(stream), [c for c in stream if ord(c) in CONTROLS][:5]
    assert "\\x1b]0;pwned\\x07" in printed.out  # shown, escaped
    assert "no such table: \\x1b]0;pwned\\x07" in printed.out


def test_csv_cells_never_run_as_formulas_and_html_anchors_and_samples(tmp_path: Path, sample_dir: Path) -> None:
    """A case's text that starts as a formula is written as text in the CSV; two ids that map to one anchor get
    two; an extra row of the HTML report stands under the actual query's own column names; a ``db`` that is a
    path out of ``--db-dir`` is refused for its case alone (a review's findings)."""
    suite = _hostile_suite(tmp_path / "suite.jsonl", "SELECT price, CASE WHEN name = 'Atlas' THEN 'atlas' ELSE name "
                                                     "END AS name FROM products WHERE price > 17")
    out, csv_out, html_out = tmp_path / "r.jsonl", tmp_path / "cases.csv", tmp_path / "cases.html"
    main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--csv", str(csv_out),
          "--html", str(html_out), "--quiet"])
    with csv_out.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5
    assert rows[1]["case_id"] == "'" + '=HYPERLINK("http://evil.invalid/","click")'
    assert rows[1]["user_query"].startswith("'@SUM")
    reports = {json.loads(line)["case_id"]: json.loads(line) for line in out.read_text(encoding="utf-8").split("\n")
               if line}
    assert not reports["escapes_db_dir"]["validity"]["case_valid"]
    assert "cannot open database '../shop': database '../shop' is not a db id under" in \
        reports["escapes_db_dir"]["explanations"][0]
    page = html_out.read_text(encoding="utf-8")
    anchors = re.findall(r'<details class="case" id="([^"]+)"', page)
    assert len(anchors) == len(set(anchors)) == 5
    extra = next(section.split("</table>", 1)[0] for section in page.split("Actual rows not expected (sample)")[1:]
                 if "<th>price</th>" in section.split("</table>", 1)[0])
    assert re.findall(r"<th>([^<]*)</th>", extra) == ["price", "name"]
    # the row's values in the actual query's order; of the nearly right row, only the wrong name is marked
    assert re.findall(r"<td( class=\"cell-diff\")?>([^<]*)</td>", extra) == \
        [("", "29.99"), (' class="cell-diff"', "atlas")]


def test_outputs_are_written_before_a_reader_leaves(tmp_path: Path, sample_dir: Path) -> None:
    """``sqlcmp evaluate ... --csv F | head -1``: the reader leaves early, the files are still written."""
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"case_id": "a", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"}\n',
                     encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate", str(suite), "--db-dir",
                                str(sample_dir), "--out", str(tmp_path / "r.jsonl"), "--csv", str(tmp_path / "c.csv"),
                                "--summary-out", str(tmp_path / "s.json")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=300)
    assert process.returncode == 141 and b"Traceback" not in err, err.decode()
    assert (tmp_path / "c.csv").is_file() and (tmp_path / "s.json").is_file()


def test_dagster_breakdown_tables_keep_one_row_per_label() -> None:
    """A database name or label holding ``|``, a line break or a Markdown link stays one cell of one row."""
    from sqlcmp_dagster.assets.evaluation_summary import database_table

    row = {"cases": 1, "passed": 1, "failed": 0, "vacuous_passes": 0, "invalid": 0, "pass_rate": 1.0}
    table = database_table({"x | 999 |\n| [click](javascript:alert(1)) ![t](http://a.invalid/p.png)": row})
    assert len(table.split("\n")) == 3
    assert table.split("\n")[2].count("|") - table.split("\n")[2].count("\\|") == 8  # seven cells
    assert "[click]" not in table and "![t]" not in table


def test_the_html_report_says_why_severity_pass_is_fewer_than_passed(tmp_path: Path, sample_dir: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled suite has passes with a counterexample on a neighbor database: each is a minor issue."""
    from sqlcmp_dagster.cases.sample import sample_suite_path

    out, page = tmp_path / "r.jsonl", tmp_path / "r.html"
    main(["evaluate", str(sample_suite_path()), "--db-dir", str(sample_dir), "--out", str(out), "--html", str(page),
          "--summary-out", str(tmp_path / "s.json"), "--quiet"])
    summary = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    minor = summary["passed"] - summary["severity_counts"]["pass"]
    assert minor == summary["passes_with_counterexample"] > 0
    note = re.search(r'<p class="muted" id="severity-note">([^<]*)</p>', page.read_text(encoding="utf-8"))
    assert note is not None and note[1].startswith(f"{minor} of the {summary['passed']} passes count as a minor issue")


def test_diff_counts_one_case_in_the_singular(runs: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    fewer = tmp_path / "fewer.jsonl"
    fewer.write_text("".join(runs["new"].read_text(encoding="utf-8").splitlines(keepends=True)[1:]), encoding="utf-8")
    assert main(["diff", str(runs["old"]), str(fewer), "--html", str(tmp_path / "diff.html")]) == 0
    assert "not paired: 1 case only in the old run, 0 only in the new" in capsys.readouterr().out
    assert "Not paired: 1 case only in the old run" in (tmp_path / "diff.html").read_text(encoding="utf-8")
