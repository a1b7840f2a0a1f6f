from __future__ import annotations

import pytest

from sqlcmp_dagster.engine.parsing import parse, unsafe_reason


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("SELECT a FROM t WHERE x = 1 AND y = 2", "select a from t where y=2 and x=1"),
        ("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid",
         "SELECT s.name FROM singer s JOIN concert c ON c.sid = s.id"),
        ("SELECT count(*) FROM t", "SELECT COUNT ( * )\n FROM   t"),
        ("SELECT Name FROM T", "select name from t"),
        ("SELECT a FROM t WHERE (p OR q) AND r", "SELECT a FROM t WHERE r AND (q OR p)"),
    ],
)
def test_formatting_and_aliases_do_not_change_canonical_sql(left: str, right: str) -> None:
    assert parse(left, "sqlite").normalized_sql == parse(right, "sqlite").normalized_sql


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("SELECT a FROM t WHERE x = 1", "SELECT a FROM t WHERE x = 2"),
        ("SELECT a FROM t WHERE a - b > 0", "SELECT a FROM t WHERE b - a > 0"),
        ("SELECT a FROM t WHERE name = 'Ann'", "SELECT a FROM t WHERE name = 'ann'"),
        ("SELECT a FROM t AS x JOIN t AS y ON x.id = y.pid", "SELECT a FROM t AS x JOIN t AS y ON y.id = x.pid"),
        ("SELECT a FROM t WHERE (p OR q) AND r", "SELECT a FROM t WHERE p OR q AND r"),
        # SQLite reads a double-quoted name that matches no column as a string literal (Spider dev 0387).
        ('SELECT a FROM t WHERE town != "Little Lever"', 'SELECT a FROM t WHERE town != "little lever"'),
    ],
)
def test_canonical_sql_keeps_meaningful_differences(left: str, right: str) -> None:
    assert parse(left, "sqlite").normalized_sql != parse(right, "sqlite").normalized_sql


def test_keywords_are_lowercased_but_literals_and_quoted_identifiers_kept() -> None:
    # Quoted identifiers keep their case: PostgreSQL's are case-sensitive, and SQLite reads a double-quoted name
    # that matches no column as a string literal.
    outcome = parse('SELECT "Mixed", \'ABC\' FROM t WHERE x IS NULL', "postgres")
    assert outcome.normalized_sql == 'select "Mixed", \'ABC\' from t where x is null'


@pytest.mark.parametrize("sql", ["", "   ", "SELECT (", "SELEC * FORM t", "SELECT * FROM", "hello world"])
def test_unparseable_text_is_a_parse_failure_with_a_message(sql: str) -> None:
    outcome = parse(sql, "sqlite")
    assert not outcome.success
    assert outcome.error


def test_parse_error_names_the_position() -> None:
    assert "line 1, column" in (parse("SELECT a FROM t WHERE", "sqlite").error or "")


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM t",
        "INSERT INTO t VALUES (1)",
        "UPDATE t SET a = 1",
        "DROP TABLE t",
        "CREATE TABLE u (a INT)",
        "ALTER TABLE t ADD COLUMN b INT",
        "ATTACH DATABASE 'x.db' AS x",
        "PRAGMA journal_mode = WAL",
        "SELECT 1; DROP TABLE t",
        "VACUUM",
    ],
)
def test_writes_and_multi_statements_are_unsafe(sql: str) -> None:
    outcome = parse(sql, "sqlite")
    assert outcome.success
    assert unsafe_reason(outcome)


def test_write_hidden_in_a_cte_is_unsafe() -> None:
    outcome = parse("WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "postgres")
    assert unsafe_reason(outcome) == "not a read-only query: contains DELETE"


@pytest.mark.parametrize("sql", ["SELECT 1", "WITH a AS (SELECT 1) SELECT * FROM a", "SELECT 1 UNION SELECT 2",
                                 "SELECT * FROM (SELECT 1) AS s", "VALUES (1)"])
def test_queries_are_safe(sql: str) -> None:
    assert unsafe_reason(parse(sql, "sqlite")) is None
