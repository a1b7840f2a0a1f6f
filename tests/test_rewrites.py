"""Layer 2's equivalence rules (engine/rewrites/): each rule's rewrite returns the same bag of rows as the
original on random databases of one schema (built by the neighbor generator) on SQLite, DuckDB and PostgreSQL;
queries that differ in meaning stay apart; the structural comparison sees the equivalences."""

from __future__ import annotations

import os
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.neighbors.generation import neighbor_rows
from sqlcmp_dagster.engine.neighbors.hints import hints
from sqlcmp_dagster.engine.neighbors.schema import Schema
from sqlcmp_dagster.engine.parsing import canonical_text, parse
from sqlcmp_dagster.engine.layers import structural_layer, validate
from sqlcmp_dagster.engine.records import validation_from_record, validation_record
from sqlcmp_dagster.engine.rewrites import Catalog, equivalence_form
from sqlcmp_dagster.engine.structure import compare_structure, query_shape
from tests.conftest import schema_of, sqlite_file

DDL = ("CREATE TABLE dept (id INTEGER PRIMARY KEY, title TEXT);"
       "CREATE TABLE emp (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, dept_id INTEGER REFERENCES dept(id));")
ROWS = ("INSERT INTO dept VALUES (1, 'sales'), (2, 'ops'), (3, NULL);"
        "INSERT INTO emp VALUES (1, 'ann', 30, 1), (2, 'bob', 41, 2), (3, NULL, NULL, 1), (4, 'cy', 30, NULL),"
        "(5, 'di', 25, 3);")
#: The tables the property tests fill: the generator's rows may repeat a key, which no query here relies on.
PLAIN_DDL = DDL.replace(" PRIMARY KEY", "").replace(" REFERENCES dept(id)", "")
CATALOG: Catalog = {"dept": ["id", "title"], "emp": ["id", "name", "age", "dept_id"]}

#: One query per rule or more (a docstring example shows each rule alone; here they run on data).
QUERIES = [
    "SELECT name FROM emp WHERE 30 < age",
    "SELECT name FROM emp WHERE age BETWEEN 26 AND 35",
    "SELECT name FROM emp WHERE age NOT BETWEEN 26 AND 35",
    "SELECT name FROM emp WHERE name IN ('ann')",
    "SELECT name FROM emp WHERE name = 'ann' OR name = 'bob' OR age = 30 OR name IN ('cy')",
    "SELECT name FROM emp WHERE name <> 'ann' AND name <> 'bob' AND NOT name IN ('cy')",
    "SELECT name FROM emp WHERE NOT (age > 30 AND name = 'bob')",
    "SELECT name FROM emp WHERE NOT (age >= 30 OR NOT name <> 'di')",
    "SELECT name FROM emp WHERE NOT NOT age < 31",
    "SELECT name, age FROM emp ORDER BY 2 DESC, name ASC",
    "SELECT name, age AS years FROM emp ORDER BY years LIMIT 10 OFFSET 0",
    "SELECT emp.name, dept.title FROM emp JOIN dept ON emp.dept_id = dept.id WHERE emp.age > 20",
    "SELECT name, title FROM emp, dept WHERE dept_id = dept.id AND (age > 20 AND title <> 'ops')",
    "SELECT e.name FROM dept AS d JOIN emp AS e ON d.id = e.dept_id",
    "WITH old AS (SELECT name, age FROM emp WHERE age > 26) SELECT name FROM old WHERE age < 40",
    "SELECT age, dept_id FROM emp GROUP BY age, dept_id",
    "SELECT name FROM emp WHERE age IN (SELECT max(age) FROM emp)",
    "SELECT name FROM emp WHERE age NOT IN (SELECT min(age) FROM emp WHERE dept_id = 1)",
    "SELECT title FROM dept WHERE ((id = 1 OR id = 2) AND (title = 'ops' OR title IS NULL))",
    'SELECT "Name" FROM "EMP" WHERE "AGE" > 1',
]


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Schema:
    """The schema as the neighbor search reads it, with its sample of rows (what the generator perturbs)."""
    path = sqlite_file(tmp_path_factory.mktemp("rewrites") / "company.sqlite", DDL + ROWS)
    read = schema_of(path)
    connection = sqlite3.connect(path)
    for name in ("dept", "emp"):
        read.sample[name] = connection.execute(f"SELECT * FROM {name}").fetchall()
    connection.close()
    return read


def rewritten(sql: str, dialect: str) -> str:
    """``sql``'s equivalence form on :data:`CATALOG`, printed in ``dialect``."""
    outcome = parse(sql, dialect)
    assert outcome.tree is not None, outcome.error
    return equivalence_form(outcome.tree, dialect, CATALOG).sql(dialect)


def database(schema: Schema, seed: int) -> dict[str, list[tuple[Any, ...]]]:
    """Random rows for every table: neighbor ``seed`` of the generator, aimed at the literals of every query."""
    trees = [tree for tree in (parse(sql, "sqlite").tree for sql in QUERIES) if tree is not None]
    return neighbor_rows(schema, ["dept", "emp"], hints(trees, schema), seed, random.Random(seed))


def bag(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row) for row in rows)


def _sqlite_runner(rows: dict[str, list[tuple[Any, ...]]]) -> Callable[[str], Counter[tuple[Any, ...]]]:
    connection = sqlite3.connect(":memory:")
    connection.executescript(PLAIN_DDL)
    for name, table_rows in rows.items():
        connection.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(CATALOG[name]))})", table_rows)
    return lambda sql: bag(connection.execute(sql).fetchall())


def _duckdb_runner(rows: dict[str, list[tuple[Any, ...]]]) -> Callable[[str], Counter[tuple[Any, ...]]]:
    duckdb = pytest.importorskip("duckdb")
    connection = duckdb.connect()
    connection.execute(PLAIN_DDL)
    for name, table_rows in rows.items():
        if table_rows:
            connection.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(CATALOG[name]))})", table_rows)
    return lambda sql: bag(connection.execute(sql).fetchall())


@given(seed=st.integers(min_value=0, max_value=10_000))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_every_rewrite_returns_the_same_bag_on_random_databases(schema: Schema, dialect: str, seed: int) -> None:
    rows = database(schema, seed)
    run = _sqlite_runner(rows) if dialect == "sqlite" else _duckdb_runner(rows)
    for sql in QUERIES:
        assert run(rewritten(sql, dialect)) == run(sql), (sql, rewritten(sql, dialect))


#: Columns of emp and literals of their type (NULL is a row's, never a literal's: the rules take literals only).
_VALUES: dict[str, list[str]] = {"age": ["25", "30", "41"], "dept_id": ["1", "2", "3"], "name": ["'ann'", "'bob'", "'cy'"]}


@st.composite
def conditions(draw: st.DrawFn, depth: int = 3) -> str:
    """A random condition on emp's columns: comparisons either way round, BETWEEN, IN lists, IS NULL, under
    NOT, AND and OR."""
    if depth == 0 or draw(st.booleans()):
        column = draw(st.sampled_from(sorted(_VALUES)))
        value = st.sampled_from(_VALUES[column])
        kind = draw(st.sampled_from(["compare", "flipped", "between", "in", "null"]))
        operator = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        if kind == "compare":
            return f"{column} {operator} {draw(value)}"
        if kind == "flipped":
            return f"{draw(value)} {operator} {column}"
        negation = draw(st.sampled_from(["", "NOT "]))
        if kind == "between":
            return f"{column} {negation}BETWEEN {draw(value)} AND {draw(value)}"
        if kind == "in":
            return f"{column} {negation}IN ({', '.join(draw(st.lists(value, min_size=1, max_size=3)))})"
        return f"{column} IS {negation}NULL"
    form = draw(st.sampled_from(["NOT ({})", "({} AND {})", "({} OR {})"]))
    return form.format(*(draw(conditions(depth - 1)) for _ in range(form.count("{}"))))


@given(seed=st.integers(min_value=0, max_value=10_000), where=conditions(), shown=conditions())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_random_conditions_keep_their_rows_and_values(schema: Schema, dialect: str, seed: int, where: str,
                                                      shown: str) -> None:
    """A random condition, as a WHERE (read as true or not) and as a projected value (read as it is)."""
    rows = database(schema, seed)
    run = _sqlite_runner(rows) if dialect == "sqlite" else _duckdb_runner(rows)
    sql = f"SELECT id, {shown} FROM emp WHERE {where}"
    assert run(rewritten(sql, dialect)) == run(sql), rewritten(sql, dialect)


@pytest.fixture(scope="module")
def pg_tables(pg_service: tuple[str, str]) -> Iterator[Any]:
    """A connection (the superuser's, in a schema of this module's own) to PostgreSQL tables of :data:`DDL`."""
    import sqlalchemy as sa

    from tests.conftest import pg_schema

    name = f"sqlcmp_rewrites_{os.getpid()}"
    pg_schema(pg_service[1], name, *(f"CREATE TABLE {name}.{statement.split('CREATE TABLE ')[1]}"
                                     for statement in PLAIN_DDL.split(";") if statement))
    engine = sa.create_engine(pg_service[1], connect_args={"options": f"-c search_path={name}"})
    with engine.connect() as connection:
        yield connection
    engine.dispose()
    pg_schema(pg_service[1], name)


def _pg_runner(connection: Any, rows: dict[str, list[tuple[Any, ...]]]) -> Callable[[str], Counter[tuple[Any, ...]]]:
    import sqlalchemy as sa

    connection.execute(sa.text("DELETE FROM emp; DELETE FROM dept"))
    for name in ("dept", "emp"):
        for row in rows[name]:
            connection.execute(sa.text(f"INSERT INTO {name} VALUES ({', '.join(f':c{i}' for i in range(len(row)))})"),
                               {f"c{i}": value for i, value in enumerate(row)})
    return lambda sql: bag([tuple(row) for row in connection.execute(sa.text(sql)).fetchall()])


@given(seed=st.integers(min_value=0, max_value=10_000))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_rewrite_returns_the_same_bag_on_postgres(schema: Schema, pg_tables: Any, seed: int) -> None:
    run = _pg_runner(pg_tables, database(schema, seed))
    for sql in QUERIES:
        if '"' in sql:  # PostgreSQL keeps the case of quoted names: this one names no table there
            continue
        assert run(rewritten(sql, "postgres")) == run(sql), (sql, rewritten(sql, "postgres"))
    pg_tables.rollback()


@given(seed=st.integers(min_value=0, max_value=10_000), where=conditions(), shown=conditions())
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_conditions_keep_their_rows_and_values_on_postgres(schema: Schema, pg_tables: Any, seed: int,
                                                                  where: str, shown: str) -> None:
    run = _pg_runner(pg_tables, database(schema, seed))
    sql = f"SELECT id, {shown} FROM emp WHERE {where}"
    assert run(rewritten(sql, "postgres")) == run(sql), rewritten(sql, "postgres")
    pg_tables.rollback()


def form(sql: str, dialect: str = "sqlite") -> str:
    outcome = parse(sql, dialect)
    assert outcome.tree is not None, outcome.error
    return canonical_text(equivalence_form(outcome.tree, dialect, CATALOG), dialect)


@pytest.mark.parametrize(("left", "right"), [
    ("SELECT name FROM emp ORDER BY age", "SELECT name FROM emp ORDER BY age ASC"),
    ("SELECT name FROM emp WHERE age > 30", "SELECT name FROM emp WHERE 30 < age"),
    ("SELECT name FROM emp WHERE age BETWEEN 1 AND 5", "SELECT name FROM emp WHERE age >= 1 AND 5 >= age"),
    ("SELECT name FROM emp WHERE name IN ('x')", "SELECT name FROM emp WHERE name = 'x'"),
    ("SELECT name FROM emp WHERE name = 'x' OR name = 'y'", "SELECT name FROM emp WHERE name IN ('y', 'x')"),
    ("SELECT name FROM emp WHERE name <> 'x' AND name <> 'y'", "SELECT name FROM emp WHERE name NOT IN ('x', 'y')"),
    ("SELECT emp.name FROM emp JOIN dept ON emp.dept_id = dept.id",
     "SELECT name FROM dept, emp WHERE dept.id = dept_id"),
    ("SELECT name FROM emp WHERE NOT age > 3", "SELECT name FROM emp WHERE age <= 3"),
    ("SELECT name FROM emp WHERE NOT (age > 3 OR name = 'x')", "SELECT name FROM emp WHERE name <> 'x' AND age <= 3"),
    ("SELECT name, age FROM emp ORDER BY 2", "SELECT name, age FROM emp ORDER BY age"),
    ("SELECT name FROM emp LIMIT 3 OFFSET 0", "SELECT name FROM emp LIMIT 3"),
    ("WITH o AS (SELECT name FROM emp) SELECT name FROM o", "SELECT name FROM (SELECT name FROM emp) AS o"),
    ("SELECT DISTINCT age FROM emp", "SELECT age FROM emp GROUP BY age"),
    ("SELECT name FROM emp WHERE age = (SELECT max(age) FROM emp)",
     "SELECT name FROM emp WHERE age IN (SELECT max(age) FROM emp)"),
    ("SELECT name FROM emp WHERE name = 'dog'", 'SELECT name FROM emp WHERE "dog" = name'),
    ('SELECT "Name" FROM emp', "SELECT name FROM emp"),
])
def test_equivalent_spellings_reach_one_form(left: str, right: str) -> None:
    assert form(left) == form(right)


@pytest.mark.parametrize(("left", "right"), [
    ("SELECT name FROM emp WHERE age >= 3", "SELECT name FROM emp WHERE age > 3"),
    ("SELECT name FROM emp WHERE name LIKE 'a'", "SELECT name FROM emp WHERE name = 'a'"),
    ("SELECT emp.name FROM emp LEFT JOIN dept ON emp.dept_id = dept.id",
     "SELECT emp.name FROM emp JOIN dept ON emp.dept_id = dept.id"),
    ("SELECT name FROM emp UNION SELECT title FROM dept", "SELECT name FROM emp UNION ALL SELECT title FROM dept"),
    ("SELECT id FROM dept EXCEPT SELECT dept_id FROM emp",
     "SELECT id FROM dept WHERE id NOT IN (SELECT dept_id FROM emp)"),
    ("SELECT name FROM emp WHERE name = \"name\"", "SELECT name FROM emp WHERE name = 'name'"),
    ("SELECT name FROM emp WHERE age IN (SELECT age FROM emp WHERE dept_id = 1)",
     "SELECT name FROM emp WHERE age = (SELECT age FROM emp WHERE dept_id = 1)"),
    ("SELECT age FROM emp GROUP BY age, name", "SELECT DISTINCT age FROM emp"),
    ("SELECT name FROM emp ORDER BY age DESC", "SELECT name FROM emp ORDER BY age"),
    ("SELECT name FROM emp LIMIT 3 OFFSET 1", "SELECT name FROM emp LIMIT 3"),
    ("SELECT name FROM emp WHERE NOT age IS NULL", "SELECT name FROM emp WHERE age IS NULL"),
    ("SELECT name FROM emp WHERE name = 'a' OR age = 1", "SELECT name FROM emp WHERE name = 'a' AND age = 1"),
])
def test_different_meanings_stay_apart(left: str, right: str) -> None:
    assert form(left) != form(right)


def test_one_wrong_literal_among_three_conjuncts_or_disjuncts_scores_two_thirds() -> None:
    def similarity(left: str, right: str) -> float:
        shapes = [query_shape(equivalence_form(parse(sql, "sqlite").tree, "sqlite", CATALOG))  # type: ignore[arg-type]
                  for sql in (left, right)]
        return float(compare_structure("", "", *shapes).clause_match["selection_predicate"]["similarity"])

    assert similarity("SELECT a FROM t WHERE (x = 1 AND y = 2) AND z = 3",
                      "SELECT a FROM t WHERE x = 1 AND y = 2 AND z = 4") == pytest.approx(2 / 3, abs=1e-6)
    assert similarity("SELECT a FROM t WHERE x = 1 OR y = 2 OR z = 3",
                      "SELECT a FROM t WHERE x = 1 OR y = 2 OR z = 4") == pytest.approx(2 / 3, abs=1e-6)
    assert similarity("SELECT a FROM t WHERE x = 1", "SELECT a FROM t WHERE y = 2") == 0.0


def test_sqlite_reads_a_quoted_name_by_its_scope() -> None:
    """A double-quoted name is a column where a table in its scope has it, a string elsewhere."""
    assert form('SELECT id FROM dept WHERE "title" = title') == form("SELECT id FROM dept WHERE title = title")
    assert form('SELECT id FROM dept WHERE "name" = title') == form("SELECT id FROM dept WHERE 'name' = title")
    correlated = 'SELECT id FROM dept WHERE title IN (SELECT name FROM emp WHERE "title" = name)'
    assert form(correlated) != form("SELECT id FROM dept WHERE title IN (SELECT name FROM emp WHERE 'title' = name)")


def test_sqlite_keeps_two_collating_operands_in_their_order() -> None:
    """SQLite compares two columns by the left one's collation: ``x < y`` and ``y > x`` differ where ``x`` is
    NOCASE (``'a' < 'B'`` under NOCASE, not under BINARY). DuckDB and PostgreSQL have no such precedence."""
    connection = sqlite3.connect(":memory:")
    connection.executescript("CREATE TABLE c (x TEXT COLLATE NOCASE, y TEXT); INSERT INTO c VALUES ('a', 'B');")
    assert connection.execute("SELECT count(*) FROM c WHERE x < y").fetchall() \
        != connection.execute("SELECT count(*) FROM c WHERE y > x").fetchall()
    assert form("SELECT name FROM emp WHERE name < age") != form("SELECT name FROM emp WHERE age > name")
    assert form("SELECT name FROM emp WHERE name < age", "duckdb") == form("SELECT name FROM emp WHERE age > name",
                                                                          "duckdb")
    assert form("SELECT name FROM emp WHERE age > (SELECT max(age) FROM emp)") \
        == form("SELECT name FROM emp WHERE (SELECT max(age) FROM emp) < age")


def test_the_pipeline_reads_the_schema_and_its_record_keeps_it(tmp_path: Path) -> None:
    """Layer 2 through the pipeline: the schema read with the executions resolves SQLite's double-quoted
    string, and a validation restored from its record (as Dagster's Layer 2 step reads it) compares alike."""
    path = sqlite_file(tmp_path / "company.sqlite", DDL + ROWS)
    database = ExecutionAdapter(str(path))
    try:
        request = CompareRequest(expected_sql=["SELECT name FROM emp WHERE name = 'ann' AND age BETWEEN 1 AND 50"],
                                 actual_sql='SELECT "Name" FROM emp WHERE 50 >= age AND age >= 1 AND "ann" = name')
        validation = validate(request, database)
    finally:
        database.close()
    assert validation.catalog == {name: sorted(columns) for name, columns in CATALOG.items()}
    restored = validation_from_record(*validation_record(validation))
    for structure in (structural_layer(validation)[0], structural_layer(restored)[0]):
        assert structure.normalized_sql_match and structure.clause_weighted_distance == 0.0
    assert validation.actual.parsed.normalized_sql != validation.expected[0].parsed.normalized_sql
