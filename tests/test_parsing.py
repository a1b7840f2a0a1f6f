from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlglot

from sqlcmp_dagster.engine.parsing import parse, sql_text, tokens_of
from sqlcmp_dagster.engine.sandbox.gate import unsafe_reason


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


@pytest.mark.parametrize("sql", [r'SELECT U&"pg\005fsleep"(1)', r"SELECT U&'\0041' AS a",
                                 "SELECT u&'x' AS a", "SELECT U&'x!0041' UESCAPE '!' AS a",
                                 'SELECT a FROM t WHERE b = U&"pg_sleep"(1) IS NULL'])
def test_unicode_escapes_are_refused_on_postgres_only(sql: str) -> None:
    """PostgreSQL decodes U&"pg\005fsleep" to pg_sleep; sqlglot reads U & "pg\005fsleep", so the deny list
    never saw the name. On PostgreSQL any Unicode escape is refused; on SQLite and DuckDB, which have none,
    the same text is what it reads as (a bitwise AND, an alias), and a spaced ``u & "x"`` is one everywhere."""
    assert unsafe_reason(parse(sql, "postgres"), "postgres", sql).startswith("Unicode escape refused: ")
    spaced = 'SELECT u & "x", "U&x", 1 AS uescape FROM t'
    assert unsafe_reason(parse(spaced, "postgres"), "postgres", spaced) is None
    for dialect in ("sqlite", "duckdb"):
        outcome = parse(sql, dialect)
        assert not outcome.success or unsafe_reason(outcome, dialect, sql) is None, (dialect, sql)


def test_reused_generators_and_tokenizers_give_what_new_ones_give_in_every_thread() -> None:
    """:func:`sql_text` and :func:`tokens_of` keep one sqlglot generator (per dialect and setting) and tokenizer
    (per dialect) per thread. Every node of a few queries, in each dialect, printed by them and its text
    tokenized again (from eight threads at once, interleaved) is what a new generator and tokenizer give."""
    queries = ["SELECT T1.a, COUNT(*) FROM t AS T1 JOIN u ON T1.id = u.id WHERE u.x IN (1, 'b') GROUP BY 1",
               "WITH w AS (SELECT a FROM t) SELECT a FROM w ORDER BY a DESC LIMIT 3",
               "SELECT CAST(a AS TEXT) || 'x', STRFTIME('%Y', d) FROM t UNION SELECT b, c FROM u",
               "SELECT * FROM (VALUES (1, 2)) AS (a, b)"]  # an unnamed alias: sqlglot names it _t0
    work = [(node, dialect, lower) for sql in queries for node in sqlglot.parse_one(sql).walk()
            for dialect in (None, "sqlite", "duckdb", "postgres") for lower in (False, True)]
    expected = [node.sql(dialect=dialect, normalize_functions="lower" if lower else None, copy=True)
                for node, dialect, lower in work]
    with ThreadPoolExecutor(max_workers=8) as pool:
        printed = list(pool.map(lambda item: sql_text(item[0], item[1], lower_functions=item[2], copy=True), work))
    assert printed == expected and len(set(expected)) > 50
    assert len({parse(queries[-1], "duckdb").normalized_sql for _ in range(3)}) == 1
    texts = [(text, dialect) for text, (_, dialect, _) in zip(expected, work)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        tokens = list(pool.map(lambda item: tokens_of(*item), texts))
    assert [[(t.token_type, t.text) for t in found] for found in tokens] == \
        [[(t.token_type, t.text) for t in sqlglot.Dialect.get_or_raise(d).tokenize(text)] for text, d in texts]


@pytest.mark.parametrize("deadline", [None, 60.0])
def test_ordering_operands_changes_none_of_them(deadline: float | None) -> None:
    """The canonical rewrites print operands to order them; sqlglot's default dialect rewrites a SQLite division
    into one by ``NULLIF(b, 0)`` as it prints it, so printing in place wrapped the divisor once per print: a
    division read ``a / nullif(nullif(b, 0), 0)`` in an AND chain and ``a / nullif(b, 0)`` alone (a review's
    finding). A division is the same text wherever it stands, as written."""
    def normalized(sql: str) -> str | None:
        return parse(sql, "sqlite", deadline=None if deadline is None else time.monotonic() + deadline).normalized_sql

    assert normalized("SELECT * FROM t WHERE x = a / b") == "select * from t where a / b = x"
    assert normalized("SELECT * FROM t WHERE y > 1 AND a / b = x OR z") == \
        "select * from t where a / b = x and y > 1 or z"
