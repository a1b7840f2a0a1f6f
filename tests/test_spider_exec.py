"""The official Spider execution-accuracy semantics, and the reason named for each verdict that differs from
sqlcmp's: every reason is produced here by a real comparison that differs in exactly that way."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqlcmp_dagster.cases.spider_exec import (REASONS, compare_with_official, denotations_equal,
                                              explain_difference, official_match, render_markdown)
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.sandbox.sqlite import ABANDON_GRACE_S, SqliteConnections, sqlite_read_only
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig
from sqlcmp_dagster.engine.pipeline import compare

SLOW = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) "
        "SELECT count(*) > 0 FROM c")


@pytest.fixture(scope="module")
def scores_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("spider") / "scores"
    folder.mkdir()
    path = folder / "scores.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript("""
        CREATE TABLE t (a INTEGER, name TEXT, score INTEGER, x REAL, note TEXT);
        INSERT INTO t VALUES (1, 'a', 1, 0.1, NULL), (1, 'b', 1, 0.2, 'n'), (2, 'c', 2, 0.3, NULL),
                             (3, 'd', 2, 0.4, 'n');
    """)
    connection.commit()
    connection.close()
    return path


@pytest.fixture(scope="module")
def connection(scores_db: Path) -> Iterator[SqliteConnections]:
    database = SqliteConnections(lambda: sqlite_read_only(scores_db), scores_db)
    yield database
    database.close()


@pytest.mark.parametrize(("gold", "predicted", "config", "official", "ours", "reason"), [
    ("SELECT DISTINCT a FROM t", "SELECT a FROM t", {}, True, False, "distinct_handling"),
    ("SELECT a FROM t WHERE 0", "SELECT a, name FROM t WHERE 0", {}, True, False, "empty_results"),
    ("SELECT 0.1 + 0.2", "SELECT 0.3", {}, False, True, "numeric_tolerance"),
    ("SELECT name FROM t WHERE a IN (SELECT a FROM t ORDER BY a LIMIT 3)",
     "SELECT name FROM t WHERE a IN (SELECT a FROM t ORDER BY a LIMIT 3) ORDER BY name DESC", {}, False, True,
     "order_rule"),
    ("SELECT name, score FROM t ORDER BY score", "SELECT name, score FROM t ORDER BY score, name DESC", {},
     False, True, "ties"),
    ("SELECT 1", SLOW, {"query_timeout_ms": 50}, True, False, "execution"),
    ("SELECT a, name FROM t", "SELECT name, a FROM t", {"require_column_order_match": True}, True, False,
     "column_order"),
    ("SELECT a, name FROM t", "SELECT a AS id, name FROM t", {"require_column_name_match": True}, True, False,
     "column_names"),
    ("SELECT note FROM t", "SELECT note FROM t", {"null_equality_mode": "sql_semantic"}, True, False,
     "null_handling"),
])
def test_each_semantic_difference_is_named(connection: SqliteConnections, scores_db: Path, gold: str,
                                           predicted: str, config: dict[str, int], official: bool, ours: bool,
                                           reason: str) -> None:
    request = CompareRequest(case_id="c", expected_sql=gold, actual_sql=predicted, db=str(scores_db),
                             config=EvalConfig(**config))
    adapter = ExecutionAdapter(str(scores_db))
    try:
        report = compare(request, adapter)
    finally:
        adapter.close()
    assert official_match(connection, gold, predicted) is official
    assert (report.deterministic_verdict == "pass") is ours
    assert explain_difference(connection, request, report, official) == reason


def test_a_prediction_runs_behind_the_sandbox_wall(connection: SqliteConnections) -> None:
    """A review's finding: ``spider-ex`` ran each prediction on a bare connection in the calling thread, so one
    long step of SQLite's (here an ``ltrim`` call of 40,000 by 40,000 characters, seconds in one step) held it
    past any timeout. A prediction that holds its step fails at its timeout, as the official evaluation counts it."""
    zs, zeros = (f"replace(hex(zeroblob(20000)), '0', '{c}')" for c in "z0")
    started = time.monotonic()
    assert official_match(connection, "SELECT 1", f"SELECT length(ltrim({zs}, {zeros} || 'z'))",
                          timeout_ms=300) is False
    assert time.monotonic() - started < 0.3 + ABANDON_GRACE_S + 2


def test_agreeing_cases_are_not_listed(scores_db: Path) -> None:
    requests = [CompareRequest(case_id=f"c{i}", expected_sql=g, actual_sql=p, db="scores")
                for i, (g, p) in enumerate([("SELECT count(*) FROM t", "SELECT 4"),
                                            ("SELECT name, a FROM t", "SELECT a, name FROM t ORDER BY name DESC"),
                                            ("SELECT 1", "SELECT '1'"),
                                            ("SELECT DISTINCT a FROM t", "SELECT a FROM t")])]
    adapter = ExecutionAdapter(str(scores_db))
    try:
        reports = [compare(r.model_copy(update={"db": str(scores_db)}), adapter) for r in requests]
    finally:
        adapter.close()
    totals, disagreements = compare_with_official(requests, reports, scores_db.parent.parent)
    assert totals["cases"] == 4 and totals["official_ex"] == 0.75 and totals["sqlcmp_pass_rate"] == 0.5
    assert [(d.case_id, d.reason) for d in disagreements] == [("c3", "distinct_handling")]
    table = render_markdown(totals, disagreements)
    assert f"| distinct_handling | 1 | {REASONS['distinct_handling']} |" in table
    assert "| c3 | scores | pass | fail | distinct_handling |" in table


def test_official_rule_details() -> None:
    # Python equality: 1 == 1.0; text never equals a number; NULL equals NULL.
    assert denotations_equal([(1, None)], [(1.0, None)], ordered=True)
    assert not denotations_equal([(1,)], [("1",)], ordered=False)
    # a column permutation must be one permutation for every row, not one per row
    assert not denotations_equal([(1, 2), (3, 4)], [(2, 1), (3, 4)], ordered=False)
    assert denotations_equal([(1, 2), (3, 4)], [(2, 1), (4, 3)], ordered=False)
