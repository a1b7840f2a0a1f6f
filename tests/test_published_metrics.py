"""The benchmarks' published metrics: Spider's exact set match, BIRD's EX, Soft-F1 and R-VES reward, per case
in reports, per level in the summary and the text table, and equal to the official scripts on Spider dev when
their checkouts are given (``SQLCMP_TEST_SUITE_EVAL``, ``SQLCMP_BIRD_EVAL``, ``SQLCMP_OFFICIAL_PYTHON``)."""

from __future__ import annotations

import csv
import os
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import datetime
import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID
from sqlcmp_dagster.cases.suite_export import export_test_suite
from sqlcmp_dagster.engine import bird_metrics
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.published_metrics import (
    bird_scores,
    case_values,
    render_table,
    summarize_published,
)
from sqlcmp_dagster.engine.relation import PLAIN_CELLS, relation_from_rows
from sqlcmp_dagster.engine.spider_execution import passes_test_suite
from sqlcmp_dagster.engine.spider_match import (
    SpiderSchema,
    exact_set_match,
    read_schema,
)
from sqlcmp_dagster.engine.summary import render_summary, summarize

SCHEMA = SpiderSchema({"singer": ["singer_id", "name", "age"], "song": ["song_id", "singer_id", "title"]},
                      {"__song.singer_id__": "__singer.singer_id__", "__singer.singer_id__": "__singer.singer_id__"})


@pytest.mark.parametrize(("gold", "predicted", "expected"), [
    # values are not compared, nor is DISTINCT, nor the order of select items or of AND-ed conditions
    ("SELECT name FROM singer WHERE age > 20", "SELECT name FROM singer WHERE age > 99", True),
    ("SELECT DISTINCT name, age FROM singer", "SELECT age, name FROM singer", True),
    ("SELECT name FROM singer WHERE age > 1 AND name = 'a'", "SELECT name FROM singer WHERE name = 'b' AND age > 1",
     True),
    # the operator, the aggregate, AND against OR, a LIMIT's presence and the tables are compared
    ("SELECT name FROM singer WHERE age > 20", "SELECT name FROM singer WHERE age < 20", False),
    ("SELECT count(*) FROM singer", "SELECT max(age) FROM singer", False),
    ("SELECT name FROM singer WHERE age > 1 AND name = 'a'", "SELECT name FROM singer WHERE age > 1 OR name = 'a'",
     False),
    ("SELECT name FROM singer ORDER BY age LIMIT 1", "SELECT name FROM singer ORDER BY age LIMIT 3", True),
    ("SELECT name FROM singer ORDER BY age LIMIT 1", "SELECT name FROM singer ORDER BY age", False),
    # a join's column stands for its foreign-key group
    ("SELECT T1.name FROM singer AS T1 JOIN song AS T2 ON T1.singer_id = T2.singer_id GROUP BY T2.singer_id",
     "SELECT T1.name FROM singer AS T1 JOIN song AS T2 ON T1.singer_id = T2.singer_id GROUP BY T1.singer_id", True),
    # outside Spider's grammar: a column alias, an unknown column, text that is not SQL
    ("SELECT name FROM singer", "SELECT name AS n FROM singer", False),
    ("SELECT name FROM singer", "SELECT nickname FROM singer", False),
    ("SELECT name FROM singer", "'", False),
])
def test_exact_set_match(gold: str, predicted: str, expected: bool) -> None:
    assert exact_set_match(SCHEMA, gold, predicted) is expected


def test_exact_set_match_reads_each_gold_query_by_its_own_schema() -> None:
    """A gold query's comparable form is remembered for the next case (``_comparable_gold``), by the schema too:
    a join's column stands for its foreign-key group only where the schema declares the key, and a gold query is
    inside the grammar only where its columns exist."""
    gold = "SELECT T1.name FROM singer AS T1 JOIN song AS T2 ON T1.singer_id = T2.singer_id GROUP BY T2.singer_id"
    predicted = gold.replace("GROUP BY T2", "GROUP BY T1")
    without_keys = SpiderSchema(SCHEMA.tables, {})
    assert exact_set_match(SCHEMA, gold, predicted) is True
    assert exact_set_match(without_keys, gold, predicted) is False
    assert exact_set_match(SCHEMA, gold, predicted) is True
    with_nickname = SpiderSchema({**SCHEMA.tables, "singer": [*SCHEMA.tables["singer"], "nickname"]}, {})
    assert exact_set_match(SCHEMA, "SELECT nickname FROM singer", "SELECT nickname FROM singer") is None
    assert exact_set_match(with_nickname, "SELECT nickname FROM singer", "SELECT nickname FROM singer") is True


def test_exact_set_match_has_no_verdict_for_a_gold_query_outside_the_grammar() -> None:
    assert exact_set_match(SCHEMA, "SELECT name AS n FROM singer", "SELECT name FROM singer") is None


@pytest.mark.parametrize("chained", [300, 3000])
def test_exact_set_match_of_set_operations_chained_past_the_recursion_limit_has_no_verdict(chained: int) -> None:
    query = " UNION ".join("SELECT name FROM singer" for _ in range(chained))
    assert exact_set_match(SCHEMA, query, query) is None


def test_schema_and_foreign_keys_are_read_from_the_database(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as connection:
        connection.executescript("CREATE TABLE Singer (Singer_ID INTEGER PRIMARY KEY, Name TEXT);"
                                 "CREATE TABLE Song (Song_ID INTEGER, Singer_ID INTEGER REFERENCES Singer(Singer_ID));")
    connection.close()
    schema = read_schema(sqlite3.connect(path))
    assert schema.tables == {"singer": ["singer_id", "name"], "song": ["song_id", "singer_id"]}
    assert schema.foreign_keys == {"__singer.singer_id__": "__singer.singer_id__",
                                   "__song.singer_id__": "__singer.singer_id__"}


def test_bird_rules_differ_from_a_bag_comparison() -> None:
    """EX compares sets of rows with columns in place; Soft-F1 pairs unique rows by position."""
    assert bird_metrics.execution_match([(1,), (1,), (2,)], [(2,), (1,)])
    assert not bird_metrics.execution_match([(1, "a")], [("a", 1)])
    assert bird_metrics.soft_f1([(1, "a")], [("a", 1)]) == 1.0  # a cell matches anywhere in its row
    assert bird_metrics.soft_f1([(1,), (2,)], [(2,), (1,)]) == 0.0  # rows pair by position
    assert bird_metrics.soft_f1([(1,)], [(1,), (5,)]) == pytest.approx(2 / 3)
    assert [bird_metrics.ves_reward(bird_metrics.time_ratio(r)) for r in ([1.0] * 99 + [2.0], [0.3] * 5 + [0.4])] \
        == [1.0, 0.5]


def test_bird_metrics_of_equal_rows_are_the_rules_own() -> None:
    """Equal results and equal rows are scored without the per-cell loop (a million-row result spent seconds
    there): what BIRD's rules give, with ``1 == 1.0 == True`` and a NaN equal only to itself as Python has them."""
    nan = float("nan")

    def soft_f1(gold: list[tuple[object, ...]], predicted: list[tuple[object, ...]]) -> float:  # the rules' loop
        if not predicted and not gold:
            return 1.0
        predicted, gold = list(dict.fromkeys(predicted)), list(dict.fromkeys(gold))
        matched = predicted_only = gold_only = 0.0
        for index, gold_row in enumerate(gold):
            if index >= len(predicted):
                gold_only += 1
                continue
            row, width = predicted[index], len(gold_row)
            matched += sum(value in gold_row for value in row) / width
            predicted_only += sum(value not in gold_row for value in row) / width
            gold_only += sum(value not in row for value in gold_row) / width
        predicted_only += max(len(predicted) - len(gold), 0)
        precision = matched / (matched + predicted_only) if matched + predicted_only > 0 else 0.0
        recall = matched / (matched + gold_only) if matched + gold_only > 0 else 0.0
        return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0

    rows: list[tuple[object, ...]] = [(1, "a"), (2, nan), (True, None), (1, "a"), (3.5, "b")]
    pairs = [(rows, list(rows)), (rows, [(1.0, "a"), (2, nan), (1, None), (3.5, "b")]),
             (rows, [(1, "a"), (2, float("nan")), (True, None), (3.5, "c")]), ([], []), (rows, []), ([], rows),
             (rows, rows[::-1]), ([(nan,)], [(nan,)]), ([(nan,)], [(float("nan"),)])]
    for gold, predicted in pairs:
        assert bird_metrics.soft_f1(gold, predicted) == soft_f1(gold, predicted)
        assert bird_metrics.execution_match(gold, predicted) == (set(predicted) == set(gold))


def test_reports_carry_them_and_the_summary_breaks_them_down(run: Callable[..., Report]) -> None:
    passing = run("SELECT name FROM customers WHERE customer_id < 3", "SELECT name FROM customers WHERE customer_id <= 2")
    wrong = run("SELECT name, customer_id FROM customers", "SELECT customer_id, name FROM customers")
    broken = run("SELECT name FROM customers", "SELECT nope FROM customers")
    assert passing.metrics["structure"]["spider_exact_set_match"] is False  # '<' is not '<='
    assert passing.metrics["result"]["bird_execution_match"] is True
    assert passing.metrics["result"]["bird_soft_f1"] == 1.0
    assert case_values(passing)["bird_ves_reward"] in (0.25, 0.5, 0.75, 1.0, 1.25)
    assert case_values(wrong)["bird_ves_reward"] == 0.0
    # sqlcmp permutes columns; BIRD compares them in place
    assert wrong.deterministic_verdict == "pass" and wrong.metrics["result"]["bird_execution_match"] is False
    assert wrong.metrics["structure"]["spider_exact_set_match"] is True
    assert broken.metrics["result"] is None
    assert case_values(broken) == {"spider_exact_set_match": False, "spider_test_suite_match": None,
                                   "bird_execution_match": False, "bird_soft_f1": 0.0, "bird_ves_reward": 0.0}
    published = summarize([passing, wrong, broken])["published_metrics"]
    assert published["overall"]["cases"] == 3
    assert published["overall"]["spider_exact_set_match_accuracy"] == pytest.approx(1 / 3, abs=1e-6)
    assert published["overall"]["bird_execution_accuracy"] == pytest.approx(1 / 3, abs=1e-6)
    assert published["overall"]["bird_soft_f1"] == pytest.approx((1.0 + 1.0 + 0.0) / 3, abs=1e-6)
    assert sum(row["cases"] for row in published["per_hardness"].values()) == 3
    table = render_table(published)
    assert table.splitlines()[0] == "| level | cases | Spider EM | BIRD EX | Soft-F1 | R-VES |"
    assert table.splitlines()[-1].startswith("| all | 3 | 33.3 | 33.3 | 66.7 |")
    assert table in render_summary(summarize([passing, wrong, broken])).replace("\n  ", "\n")


def test_reports_without_them_have_no_published_section(run: Callable[..., Report]) -> None:
    report = run("SELECT name FROM customers", "SELECT name FROM customers")
    stripped = report.model_copy(update={"metrics": {**report.metrics, "structure": None, "result": None}})
    assert summarize_published([stripped]) == {}
    assert "published metrics" not in render_summary(summarize([stripped]))


def _evaluate(db_dir: Path, cases: list[tuple[str, str]]) -> list[Report]:
    evaluator = Evaluator(db_dir=db_dir, default_db=SAMPLE_DB_ID)
    try:
        return [evaluator.evaluate(CompareRequest(case_id=str(i), expected_sql=[gold], actual_sql=actual))
                for i, (gold, actual) in enumerate(cases)]
    finally:
        evaluator.close()


def test_test_suite_passes_only_on_every_database_of_the_folder(sample_db: Path, tmp_path: Path) -> None:
    """A folder with several .sqlite files is a test suite: a prediction right on the case's database but wrong on
    another fails it; the official rules apply (DISTINCT dropped); a blocked prediction fails it; a folder of one
    database has no test-suite verdict."""
    folder = tmp_path / "suite" / SAMPLE_DB_ID
    folder.mkdir(parents=True)
    shutil.copyfile(sample_db, folder / f"{SAMPLE_DB_ID}.sqlite")
    shutil.copyfile(sample_db, folder / f"{SAMPLE_DB_ID}_2.sqlite")
    with sqlite3.connect(folder / f"{SAMPLE_DB_ID}_2.sqlite") as connection:
        connection.execute("INSERT INTO customers (customer_id, name, city, signup_date) VALUES (0, 'Zero', 'Nowhere', '2024-01-01')")
    connection.close()
    cases = [("SELECT name FROM customers WHERE customer_id < 3", "SELECT name FROM customers WHERE customer_id <= 2"),
             ("SELECT name FROM customers WHERE customer_id < 3",
              "SELECT name FROM customers WHERE customer_id IN (1, 2)"),
             ("SELECT DISTINCT city FROM customers", "SELECT city FROM customers"),
             ("SELECT name FROM customers", "SELECT nope FROM customers")]
    reports = _evaluate(tmp_path / "suite", cases)
    assert [r.deterministic_verdict for r in reports] == ["pass", "pass", "fail", "fail"]
    assert [r.metrics["validation"]["spider_test_suite_match"] for r in reports] == [True, False, True, False]
    single = _evaluate(sample_db.parent, cases[:1])[0]
    assert "spider_test_suite_match" not in single.metrics["validation"]
    assert summarize(reports)["published_metrics"]["overall"]["spider_test_suite_accuracy"] == 0.5


def test_export_writes_each_counterexample_as_a_test_suite_database(sample_db: Path, tmp_path: Path) -> None:
    """A pass with a neighbor counterexample is exported beside a copy of its database; on the exported folder the
    case fails the test suite while it still passes on its own database."""
    cases = [("SELECT name FROM customers WHERE customer_id < 3",
              "SELECT name FROM customers WHERE customer_id IN (1, 2)"),
             ("SELECT count(*) FROM orders", "SELECT count(*) FROM orders")]
    first = _evaluate(sample_db.parent, cases)
    assert first[0].deterministic_verdict == "pass"
    export = export_test_suite(first, tmp_path / "suite")
    assert export.databases == {SAMPLE_DB_ID: 1} and export.skipped == []
    files = sorted(path.name for path in (tmp_path / "suite" / SAMPLE_DB_ID).iterdir())
    assert files[0] == f"{SAMPLE_DB_ID}.sqlite" and len(files) == 2
    again = _evaluate(tmp_path / "suite", cases)
    assert [r.deterministic_verdict for r in again] == ["pass", "pass"]
    assert [r.metrics["validation"]["spider_test_suite_match"] for r in again] == [False, True]


def _official_checkouts() -> tuple[Path, Path, str]:
    checkouts = [os.environ.get(name) for name in ("SQLCMP_TEST_SUITE_EVAL", "SQLCMP_BIRD_EVAL",
                                                   "SQLCMP_OFFICIAL_PYTHON")]
    if not all(checkouts):
        pytest.skip("set SQLCMP_TEST_SUITE_EVAL, SQLCMP_BIRD_EVAL (checkouts of the official scripts) and "
                    "SQLCMP_OFFICIAL_PYTHON (a Python with their imports) to compare with them")
    return Path(checkouts[0] or ""), Path(checkouts[1] or ""), checkouts[2] or ""


@pytest.mark.spider
def test_equal_to_the_official_scripts_on_every_spider_dev_case(spider_dir: Path, tmp_path: Path) -> None:
    """Spider EM (and hardness) equal evaluation.py's per-case result on SuperSQL's 1,034 cases (746 matches),
    BIRD EX and Soft-F1 equal mini_dev's on every case."""
    test_suite_eval, bird_eval, python = _official_checkouts()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import official_metrics as official

    rows = official.sqlcmp_reports(spider_dir, tmp_path)
    cases = tmp_path / "cases.json"
    cases.write_text(official.json.dumps(official.official_cases(rows, spider_dir / "database")), encoding="utf-8")
    spider = official.run_driver(python, test_suite_eval, official.SPIDER_DRIVER, str(cases),
                                 str(spider_dir / "tables.json"))
    bird = official.run_driver(python, bird_eval / "evaluation", official.BIRD_DRIVER, str(cases))
    assert official.disagreements(rows, spider, bird) == {"spider_exact_set_match": [], "hardness": [],
                                                          "bird_execution_match": [], "bird_soft_f1": []}
    assert sum(row["exact"] for row in spider) == 746


@pytest.mark.spider
def test_test_suite_equal_to_exec_eval_on_an_exported_folder(spider_dir: Path, tmp_path: Path) -> None:
    """On the first 300 SuperSQL cases: the counterexamples exported as a test suite, the suite evaluated on it, and
    exec_eval's verdict on the same folder equal on every case of a db id with several databases."""
    test_suite_eval, _, python = _official_checkouts()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import official_metrics as official

    found = official.test_suite_comparison(spider_dir, tmp_path, python, test_suite_eval, limit=300)
    assert found["databases"] > 0 and found["compared"] > 0
    assert found["differ"] == []


def test_report_prints_the_table_and_csv_carries_each_case(run: Callable[..., Report], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from sqlcmp_dagster.cli import main

    reports = [run("SELECT name FROM customers", "SELECT name FROM customers"),
               run("SELECT name FROM customers", "SELECT nope FROM customers")]
    path = tmp_path / "reports.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in reports), encoding="utf-8")
    assert main(["report", str(path), "--csv", str(tmp_path / "cases.csv")]) == 0
    out = capsys.readouterr().out
    assert "| level | cases | Spider EM | BIRD EX | Soft-F1 | R-VES |" in out
    assert "| all | 2 | 50.0 | 50.0 | 50.0 |" in out
    with (tmp_path / "cases.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["spider_exact_set_match"], r["bird_execution_match"], r["bird_soft_f1"]) for r in rows] \
        == [("True", "True", "1.0"), ("False", "False", "0.0")]


def test_a_test_suite_comparison_with_too_many_column_assignments_has_no_verdict() -> None:
    """Nine columns of one repeated value leave 10**10 column assignments: the comparison stops with no verdict
    instead of trying them, unless the columns' own order (tried first) matches."""
    wide = [tuple([1] * 9 + [i]) for i in range(3)]
    shifted = [tuple([1] * 9 + [i + 10]) for i in range(3)]

    def execute(rows: list[tuple[int, ...]]) -> Callable[[Path, str], list[tuple[int, ...]]]:
        return lambda file, sql: wide if "gold" in sql else rows

    files = [Path("a.sqlite"), Path("b.sqlite")]
    assert passes_test_suite("SELECT gold", "SELECT other", files, execute(shifted)) is None
    assert passes_test_suite("SELECT gold", "SELECT other", files, execute(wide)) is True


@pytest.mark.parametrize(("gold", "predicted"), [
    ([(1, "a"), (1, "a"), (2, None)], [(1, "a"), (1, "a"), (2, None)]),  # equal: told from the columns
    ([(i, f"t{i}", i / 3) for i in range(3000)], [(i, f"t{i}", i / 3) for i in range(3000)]),  # past PLAIN_CELLS
    ([(float("nan"), 1)], [(float("nan"), 1)]),  # NaN equals nothing: scored from the rows
    ([], []), ([(1,)], []), ([(1, "a")], [("a", 1)]), ([(1, "a"), (2, "b")], [(2, "b"), (1, "a")]),
    ([(1, 2)], [(1.0, 2)]),
])
def test_bird_scores_are_the_rules_on_the_rows(gold: list[tuple[object, ...]], predicted: list[tuple[object, ...]]
                                               ) -> None:
    """BIRD EX and Soft-F1 of two results equal column by column are given without making rows of them; every
    pair scores as the rules do on the rows."""
    width = len((gold or predicted or [(None,)])[0])
    names = [f"c{i}" for i in range(width)]
    scores = bird_scores(relation_from_rows(names, gold), relation_from_rows(names, predicted))
    assert scores == (bird_metrics.execution_match(gold, predicted), round(bird_metrics.soft_f1(gold, predicted), 6))


#: Few values per type, so that rows repeat and cells of one row occur in the other.
_CELLS = {
    pl.Int64: st.sampled_from([0, 1, 2, -3]),
    pl.Float64: st.sampled_from([0.0, -0.0, 1.0, 2.5, float("nan")]),
    pl.String: st.sampled_from(["", "a", "1", "b"]),
    pl.Boolean: st.booleans(),
    pl.Date: st.sampled_from([datetime.date(2020, 1, 1), datetime.date(1999, 12, 31)]),
    pl.Binary: st.sampled_from([b"", b"a", b"\x00"]),
}


@st.composite
def _frames(draw: st.DrawFn) -> pl.DataFrame:
    types = draw(st.lists(st.sampled_from([*_CELLS, pl.Null]), min_size=1, max_size=3))
    height = draw(st.integers(0, 12))
    columns = {}
    for i, dtype in enumerate(types):
        cells = st.none() if dtype == pl.Null else st.one_of(st.none(), _CELLS[dtype])
        columns[f"c{i}"] = pl.Series(draw(st.lists(cells, min_size=height, max_size=height)), dtype=dtype)
    return pl.DataFrame(columns)


def _rows(frame: pl.DataFrame) -> list[tuple[object, ...]]:
    return list(zip(*(column.to_list() for column in frame.get_columns())))


@settings(max_examples=400, deadline=None)
@given(_frames(), _frames())
def test_bird_scores_on_frames_are_the_rules_on_the_rows(gold: pl.DataFrame, predicted: pl.DataFrame) -> None:
    """Scored column by column, BIRD EX and Soft-F1 are the rules' values on the rows the frames hold, to the last
    bit: a zero of either sign, NULLs, repeated rows, numbers of three types (``1 == 1.0 == True``), cells of other
    types (never equal but NULL), rows of other widths; the frames decline only a NaN, which polars tells equal to
    every NaN and Python to none."""
    for given in (predicted, gold.clone()):  # the same rows in the same order too: the rules' first answer
        scores = bird_metrics.frame_scores(gold, given)
        if scores is None:  # declined only for a NaN
            assert any(math.isnan(value) for frame in (gold, given) for column in frame.get_columns()
                       if column.dtype == pl.Float64 for value in column.to_list() if value is not None)
            continue
        rows_gold, rows_given = _rows(gold), _rows(given)
        assert scores == (bird_metrics.execution_match(rows_gold, rows_given),
                          bird_metrics.soft_f1(rows_gold, rows_given))


def test_large_results_are_scored_on_their_frames_with_the_rules_values() -> None:
    """Past PLAIN_CELLS cells the scores come from the frames (where a frame is at hand, 770,000-row results took
    seconds as tuples) and are the rules' values on the rows."""
    rows = PLAIN_CELLS
    gold = [(i % 97, f"t{i % 13}", (i % 7) / 3) for i in range(rows)]
    predicted = [(i % 89, f"t{i % 13}", (i % 7) / 3) for i in range(rows + 5)]
    names = ["a", "b", "c"]
    assert bird_metrics.frame_scores(relation_from_rows(names, gold).frame,
                                     relation_from_rows(names, predicted).frame) is not None
    assert bird_scores(relation_from_rows(names, gold), relation_from_rows(names, predicted)) == \
        (bird_metrics.execution_match(gold, predicted), round(bird_metrics.soft_f1(gold, predicted), 6))


def test_a_wide_prediction_is_scored_by_the_rules_on_its_rows() -> None:
    """A model's answer of 2,000 columns against 19 expected ones: Soft-F1's frame form made an expression per pair
    of columns (38,000, 3.3 s and 1.2 GB for 48 rows: a review's finding). Past FRAME_COLUMN_PAIRS pairs the frames
    decline, and the scores are the rules' on the rows."""
    gold = [tuple(f"v{r}_{i}" for i in range(19)) for r in range(48)]
    predicted = [tuple(f"v{r}_{i % 19}" for i in range(2000)) for r in range(48)]
    gold_relation = relation_from_rows([f"g{i}" for i in range(19)], gold)
    predicted_relation = relation_from_rows([f"p{i}" for i in range(2000)], predicted)
    assert bird_metrics.frame_scores(gold_relation.frame, predicted_relation.frame) is None
    assert 19 * 2000 > bird_metrics.FRAME_COLUMN_PAIRS >= 19 * 19
    assert bird_scores(gold_relation, predicted_relation) == \
        (bird_metrics.execution_match(gold, predicted), round(bird_metrics.soft_f1(gold, predicted), 6))
