"""Spider and BIRD importers: pairing by question id, clear errors when the files do not line up."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from sqlcmp_dagster.cases.importers import (BenchmarkFormatError, ImportedCase, check_spider_schemas, import_bird,
                                            import_spider, unknown_tables, write_suite)
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import main

def _spider_files(tmp_path: Path, gold: list[str], preds: list[str]) -> tuple[Path, Path, Path]:
    questions = [{"db_id": line.split("\t")[1], "query": line.split("\t")[0], "question": f"q{i}"}
                 for i, line in enumerate(gold)]
    (tmp_path / "dev.json").write_text(json.dumps(questions), encoding="utf-8")
    (tmp_path / "gold.sql").write_text("\n".join(gold) + "\n", encoding="utf-8")
    (tmp_path / "pred.sql").write_text("\n".join(preds) + "\n", encoding="utf-8")
    return tmp_path / "dev.json", tmp_path / "gold.sql", tmp_path / "pred.sql"


def test_spider_pairs_by_question_and_checks_alignment(tmp_path: Path) -> None:
    files = _spider_files(tmp_path, ["SELECT 1\ta", "SELECT 2\tb"], ["SELECT 10", "SELECT 20"])
    cases = import_spider(*files)
    assert [(c.case_id, c.db, c.expected_sql, c.actual_sql, c.user_query) for c in cases] == [
        ("spider-0000", "a", "SELECT 1", "SELECT 10", "q0"), ("spider-0001", "b", "SELECT 2", "SELECT 20", "q1")]
    files[1].write_text("SELECT 2\tb\nSELECT 1\ta\n", encoding="utf-8")  # gold reordered: not aligned
    with pytest.raises(BenchmarkFormatError, match=r"gold.sql:1: database 'b' but question 0"):
        import_spider(*files)
    files[2].write_text("SELECT 10\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match="length mismatch.*1 predictions"):
        import_spider(*files)


def test_spider_predictions_that_name_their_database_or_are_empty(tmp_path: Path) -> None:
    files = _spider_files(tmp_path, ["SELECT 1\ta", "SELECT 2\tb", "SELECT 3\ta"],
                          ["SELECT 10\ta", "", "SELECT x FROM t WHERE y = '\tb'"])
    files[2].write_text(files[2].read_text(encoding="utf-8") + "\n\n", encoding="utf-8")  # trailing blanks
    cases = import_spider(*files)
    # the database field is checked and dropped; a blank line is that question's empty prediction; a tab inside
    # the SQL that is not followed by a database id stays part of the SQL
    assert [c.actual_sql for c in cases] == ["SELECT 10", "", "SELECT x FROM t WHERE y = '\tb'"]
    assert load_suite(_written(cases, tmp_path)).cases[1].actual_sql == ""
    files[2].write_text("SELECT 10\tb\n\nSELECT 30\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"pred.sql:1: prediction is on database 'b' but question 0 is on 'a'"):
        import_spider(*files)
    files[2].write_text("SELECT 10\n\n\nSELECT 30\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"4 predictions \(2 of them blank lines"):
        import_spider(*files)


def _written(cases: list[ImportedCase], tmp_path: Path) -> Path:
    write_suite(cases, tmp_path / "suite.jsonl")
    return tmp_path / "suite.jsonl"


def test_bird_pairs_by_question_id_not_position(tmp_path: Path) -> None:
    questions = [{"question_id": 7, "db_id": "x", "question": "q7", "SQL": "SELECT 7", "evidence": "hint",
                  "difficulty": "challenging"},
                 {"question_id": 3, "db_id": "y", "question": "q3", "SQL": "SELECT 3", "evidence": ""}]
    (tmp_path / "q.json").write_text(json.dumps(questions), encoding="utf-8")
    preds = {"3": "SELECT 30\t----- bird -----\ty", "7": "SELECT 70\t----- bird -----\tx"}
    (tmp_path / "p.json").write_text(json.dumps(preds), encoding="utf-8")
    cases = import_bird(tmp_path / "q.json", tmp_path / "p.json")
    assert [(c.case_id, c.actual_sql, c.context) for c in cases] == [
        ("bird-7", "SELECT 70", {"evidence": "hint", "difficulty": "challenging"}), ("bird-3", "SELECT 30", None)]
    (tmp_path / "p.json").write_text(json.dumps({"3": preds["3"], "8": preds["7"]}), encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"1 without a prediction \(e.g. \['7'\]\).*\['8'\]"):
        import_bird(tmp_path / "q.json", tmp_path / "p.json")


def test_real_spider_dev_imports_through_the_cli(spider_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "suite.jsonl"
    code = main(["import", "spider", "--questions", str(spider_dir / "dev.json"),
                 "--gold", str(spider_dir / "dev_gold.sql"), "--pred", str(spider_dir / "predictions" / "SuperSQL.sql"),
                 "--db-dir", str(spider_dir / "database"), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0 and "1034 cases written" in captured.out
    # The databases have their published names: every table a gold query reads is there, so no warning.
    assert captured.err == ""
    suite = load_suite(out)
    assert not suite.errors and len(suite.cases) == 1034
    assert suite.cases[0].expected_sql == ["SELECT count(*) FROM singer"] and suite.cases[0].db == "concert_singer"


def test_import_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _spider_files(tmp_path, ["SELECT 1\ta"], ["SELECT 1", "SELECT 2"])
    code = main(["import", "spider", "--questions", str(files[0]), "--gold", str(files[1]), "--pred", str(files[2]),
                 "--out", str(tmp_path / "o.jsonl")])
    assert code == 2 and "length mismatch" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def test_unknown_tables_names_what_the_gold_queries_miss(tmp_path: Path) -> None:
    for db, ddl in (("a", "CREATE TABLE Singer (id INTEGER)"), ("b", "CREATE TABLE sänger (id INTEGER)")):
        (tmp_path / db).mkdir()
        connection = sqlite3.connect(tmp_path / db / f"{db}.sqlite")
        connection.execute(ddl)
        connection.close()
    cases = [ImportedCase("1", "q", "WITH x AS (SELECT id FROM singer) SELECT * FROM x", "SELECT 1", "a"),
             ImportedCase("2", "q", "SELECT s.id FROM singer AS s JOIN concert ON 1", "SELECT 1", "b"),
             ImportedCase("3", "q", "SELEC nonsense", "SELECT 1", "b")]
    # letter case and CTE names are not missing tables; an unparsable gold query is left to the evaluation
    assert unknown_tables(cases, tmp_path) == {"b": ["concert", "singer"]}


def _tables_json(path: Path) -> Path:
    entry = {"db_id": "a", "table_names_original": ["Singer", "concert"],
             "column_names_original": [[-1, "*"], [0, "id"], [0, "Name"], [1, "concert_id"]]}
    path.write_text(json.dumps([entry]), encoding="utf-8")
    return path


@pytest.mark.parametrize(("ddl", "problem"), [
    (["CREATE TABLE singer (ID INTEGER, name TEXT, extra REAL)", "CREATE TABLE Concert (concert_id INTEGER)"], None),
    (["CREATE TABLE singer (id INTEGER)"], "missing tables concert; missing columns Singer.Name"),
    (["CREATE TABLE sänger (id INTEGER, name TEXT)", "CREATE TABLE concert (nr INTEGER)"],
     "missing tables Singer; missing columns concert.concert_id"),
])
def test_check_spider_schemas_names_every_missing_table_and_column(tmp_path: Path, ddl: list[str],
                                                                   problem: str | None) -> None:
    (tmp_path / "a").mkdir()
    connection = sqlite3.connect(tmp_path / "a" / "a.sqlite")
    for statement in ddl:
        connection.execute(statement)
    connection.close()
    tables = _tables_json(tmp_path / "tables.json")
    if problem is None:  # letter case is ignored and extra tables or columns are allowed
        check_spider_schemas(tmp_path, tables, ["a", "a"])
        return
    with pytest.raises(BenchmarkFormatError) as raised:
        check_spider_schemas(tmp_path, tables, ["a"])
    assert str(raised.value) == f"{tmp_path / 'a' / 'a.sqlite'} does not match tables.json: {problem}"


def test_check_spider_schemas_refuses_unknown_databases_and_non_databases(tmp_path: Path) -> None:
    tables = _tables_json(tmp_path / "tables.json")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "b.sqlite").write_bytes(b"no database")
    with pytest.raises(BenchmarkFormatError, match="no schema for database 'b'"):
        check_spider_schemas(tmp_path, tables, ["b"])
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "a.sqlite").write_bytes(b"this is not a SQLite file, only text long enough to look like one")
    with pytest.raises(BenchmarkFormatError, match=r"a\.sqlite: not a readable SQLite database"):
        check_spider_schemas(tmp_path, tables, ["a"])


def test_import_with_tables_needs_db_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _spider_files(tmp_path, ["SELECT 1\ta"], ["SELECT 1"])
    code = main(["import", "spider", "--questions", str(files[0]), "--gold", str(files[1]), "--pred", str(files[2]),
                 "--tables", str(_tables_json(tmp_path / "tables.json")), "--out", str(tmp_path / "o.jsonl")])
    assert code == 2 and "--tables needs --db-dir" in capsys.readouterr().err


def test_untrusted_prediction_and_question_files(tmp_path: Path) -> None:
    """A carriage return inside a prediction split it in two and, with an empty last prediction dropped,
    paired every later prediction with the question before its own; a byte-order mark stuck to the first
    prediction; a BIRD question without db_id or SQL ended in a traceback (a review's findings)."""
    files = _spider_files(tmp_path, ["SELECT 1\ta", "SELECT 2\tb", "SELECT 3\ta"], ["x", "y", "z"])
    files[2].write_bytes(b"SELECT id\rFROM t\nSELECT name FROM t\n\n")
    with pytest.raises(BenchmarkFormatError, match=r"pred.sql:1: a carriage return inside the line"):
        import_spider(*files)
    files[2].write_bytes(b"\xef\xbb\xbfSELECT 10\r\nSELECT 20\r\nSELECT 30\r\n")  # a BOM, CRLF line ends
    assert [c.actual_sql for c in import_spider(*files)] == ["SELECT 10", "SELECT 20", "SELECT 30"]
    questions, predictions = tmp_path / "bird.json", tmp_path / "bird_pred.json"
    questions.write_text(json.dumps([{"question_id": 0, "question": "q", "SQL": "SELECT 1"}]), encoding="utf-8")
    predictions.write_text(json.dumps({"0": "SELECT 1"}), encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"question 0 is not an object with 'db_id' and 'SQL'"):
        import_bird(questions, predictions)
