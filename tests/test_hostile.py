"""Hostile actual queries against the sandbox, on every engine (issue 11: confidentiality and integrity).

Two walls are tested apart: the gate (every entry of ``hostile_sql.yaml`` is refused with a named reason) and
the engine (the same attack with the gate bypassed by a forged parse still fails: DuckDB without external
access, PostgreSQL under a SELECT-only role). Every test checks that the database is unchanged and that the
canary file's secret appears in no report. PostgreSQL runs against the server of ``.ci/services.sh``:
``SQLCMP_TEST_PG_URL`` is its SELECT-only role, ``SQLCMP_TEST_PG_ADMIN_URL`` a superuser used only to build the
tables and to prove the superuser is refused.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from conftest import ENGINE_POSTGRES, pg_schema

from sqlcmp_dagster.cli import main
from sqlcmp_dagster.engine.execution import ExecutionAdapter, PrivilegedRoleError
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.parsing import parse
from sqlcmp_dagster.engine.pipeline import Evaluator, compare
from sqlcmp_dagster.engine.sandbox.postgres import APPLICATION_NAME

CORPUS: list[dict[str, str]] = yaml.safe_load((Path(__file__).parent / "hostile_sql.yaml").read_text("utf-8"))
#: A parse of SELECT 1 handed in with other SQL: the gate passes, so only the engine can refuse.
FORGED = {dialect: parse("SELECT 1", dialect) for dialect in ("duckdb", "postgres", "sqlite")}


@pytest.fixture()
def no_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The statement gate switched off (with a FORGED parse, nothing of the text is read): the engine's own
    walls alone."""
    from sqlcmp_dagster.engine import execution

    monkeypatch.setattr(execution, "gate_reason", lambda outcome, dialect, sql: None)


@pytest.fixture(scope="module")
def canary(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A file outside every database whose content must never reach a report (readable by the server too)."""
    folder = tmp_path_factory.mktemp("canary")
    folder.chmod(0o755)
    secret = f"SQLCMP-CANARY-{secrets.token_hex(8)}"
    path = folder / "secret.csv"
    path.write_text(f"secret\n{secret}\n", encoding="utf-8")
    path.chmod(0o644)
    return path, secret


@pytest.fixture(scope="module")
def duck(tiny_duck: Path) -> Path:
    return tiny_duck


@pytest.fixture(scope="module")
def pg(pg_service: tuple[str, str]) -> tuple[str, str]:
    """(engine URL of the SELECT-only role, superuser URL) with a table sqlcmp_hostile.t."""
    pg_schema(pg_service[1], "sqlcmp_hostile",
              "CREATE TABLE sqlcmp_hostile.t AS SELECT g AS a, 'v' || g AS b FROM generate_series(0, 9) g")
    return pg_service


def pg_state(admin_url: str) -> dict[str, Any]:
    """What a hostile query must not change on the server: the table, replication slots, advisory locks."""
    with sa.create_engine(admin_url).connect() as connection:
        return {
            "table": connection.execute(sa.text(
                "SELECT md5(string_agg(a || b, ',' ORDER BY a)) FROM sqlcmp_hostile.t")).scalar(),
            "slots": connection.execute(sa.text("SELECT count(*) FROM pg_replication_slots")).scalar(),
            "locks": connection.execute(sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")).scalar(),
        }


def after_case_backends(admin_url: str) -> int:
    """The adapter's sessions (named APPLICATION_NAME) still on the server a moment after a case ended."""
    engine = sa.create_engine(admin_url)
    try:
        for _ in range(20):
            with engine.connect() as connection:
                alive = connection.execute(sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name AND pid <> pg_backend_pid()"),
                    {"name": APPLICATION_NAME}).scalar()
            if not alive:
                return 0
            time.sleep(0.1)
        return int(alive or 0)
    finally:
        engine.dispose()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def report_text(report: Report) -> str:
    return json.dumps(report.model_dump(mode="json"))


@pytest.fixture(scope="module")
def targets(request: pytest.FixtureRequest, duck: Path, sample_db: Path) -> dict[str, str]:
    found = {"duckdb": str(duck), "sqlite": str(sample_db)}
    if any(entry["engine"] == "postgres" for entry in CORPUS):
        found["postgres"] = request.getfixturevalue("pg")[0]
    return found


@ENGINE_POSTGRES  # its PostgreSQL entries reach the role through request.getfixturevalue
@pytest.mark.parametrize("entry", CORPUS, ids=[f"{e['engine']}:{e['sql'][:50]}" for e in CORPUS])
def test_corpus_is_refused_with_its_reason(entry: dict[str, str], canary: tuple[Path, str], tmp_path: Path,
                                           request: pytest.FixtureRequest) -> None:
    engine = entry["engine"]
    if engine == "postgres":
        url, admin_url = request.getfixturevalue("pg")
        target, before = url, pg_state(admin_url)
    else:
        target = request.getfixturevalue("duck" if engine == "duckdb" else "sample_db")
        before = digest(Path(target))
    sql = entry["sql"].replace("{canary}", str(canary[0])).replace("{dir}", str(tmp_path))
    adapter = ExecutionAdapter(str(target), timeout_ms=2000)
    try:
        report = compare(CompareRequest(expected_sql="SELECT 1 AS a", actual_sql=sql), adapter)
    finally:
        adapter.close()
    text = report_text(report)
    assert report.deterministic_verdict == "fail" and entry["reason"] in text, text[:2000]
    assert canary[1] not in text
    assert list(tmp_path.iterdir()) == []  # no log, export or attached file was created
    after = pg_state(request.getfixturevalue("pg")[1]) if engine == "postgres" else digest(Path(target))
    assert after == before
    if engine == "postgres":  # no backend of the case outlives it (seen from an administrator's session)
        assert after_case_backends(request.getfixturevalue("pg")[1]) == 0


@pytest.mark.parametrize("sql", [
    "SELECT content FROM read_text('{canary}')", "SELECT * FROM read_csv('{canary}')", "SELECT * FROM '{canary}'",
    "SELECT * FROM glob('/*')", "SELECT * FROM read_blob('/dev/stdin')",
    "SELECT * FROM read_csv('https://example.com/x.csv')", "CALL enable_logging(storage='file', storage_path='{dir}')",
    "SET enable_external_access = true", "LOAD httpfs", "COPY t TO '{dir}/out.csv'", "ATTACH '{dir}/x.duckdb'",
])
def test_duckdb_engine_refuses_files_past_the_gate(duck: Path, canary: tuple[Path, str], tmp_path: Path,
                                                    sql: str, no_gate: None) -> None:
    """The engine is the first wall: with the gate bypassed, DuckDB itself refuses files, URLs and settings (a
    statement that is no query, ``CALL``, ``SET``, ``LOAD``, ``COPY``, ``ATTACH``, is not run at all)."""
    before = digest(duck)
    adapter = ExecutionAdapter(str(duck), timeout_ms=2000)
    execution = adapter.execute(sql.replace("{canary}", str(canary[0])).replace("{dir}", str(tmp_path)),
                                parsed=FORGED["duckdb"])
    assert not execution.success and execution.error is not None
    assert execution.error.category == "permission_error" or "locked" in execution.error.message \
        or "not as one SELECT" in execution.error.message, execution.error
    assert canary[1] not in execution.error.message
    assert adapter.execute("SELECT count(*) FROM t").success  # the connection is still usable
    adapter.close()
    assert list(tmp_path.iterdir()) == [] and digest(duck) == before


@pytest.mark.parametrize("sql", ["SELECT * FROM (PIVOT t ON b USING count(*))", "FROM (PIVOT t ON a)",
                                 "EXPLAIN SELECT * FROM (PIVOT t ON b)", "SELECT 1; SELECT 2",
                                 "EXPLAIN ANALYZE CREATE TEMP TABLE x AS SELECT 1", "EXPLAIN SELECT 1"])
def test_duckdb_engine_runs_one_query_statement_alone(duck: Path, sql: str, no_gate: None) -> None:
    """A review's finding: DuckDB runs a PIVOT without an IN list as two statements (a MULTI), the first creating
    a type of the values it finds, and the gate let it through inside a subquery. The query process runs only
    what DuckDB's own parser reads as one SELECT (or the adapter's own EXPLAIN of one: ``EXPLAIN ANALYZE`` runs what
    it explains, a second review found); a PIVOT that names its values runs."""
    adapter = ExecutionAdapter(str(duck), timeout_ms=2000)
    execution = adapter.execute(sql, parsed=FORGED["duckdb"])
    assert execution.error is not None and execution.error.category == "unsafe_statement", execution.error
    assert "not as one SELECT" in execution.error.message
    named = adapter.execute("SELECT * FROM (PIVOT t ON b IN ('v1', 'v2') USING count(*))", parsed=FORGED["duckdb"])
    assert named.success and named.relation is not None and named.relation.names == ["a", "v1", "v2"]
    adapter.close()


@pytest.mark.parametrize("sql", [
    "ATTACH '{dir}/x.sqlite' AS x", "ATTACH 'file:{dir}/y.sqlite?mode=rwc' AS y", "PRAGMA query_only = OFF",
    "PRAGMA writable_schema = ON", "SELECT load_extension('{dir}/x.so')", "DELETE FROM orders",
])
def test_sqlite_engine_refuses_files_and_settings_past_the_gate(sample_db: Path, tmp_path: Path, sql: str,
                                                                no_gate: None) -> None:
    """SQLite's authorizer is its engine wall (DuckDB's is its sandbox settings): with the gate bypassed, an
    ATTACH (which would create the file), a pragma that sets something, a denied function or a write is not
    authorized, and no file appears."""
    before = digest(sample_db)
    adapter = ExecutionAdapter(str(sample_db), timeout_ms=2000)
    execution = adapter.execute(sql.replace("{dir}", str(tmp_path)), parsed=FORGED["sqlite"])
    assert execution.error is not None and execution.error.category == "permission_error", execution.error
    assert "not authorized" in execution.error.message
    assert adapter.execute("SELECT count(*) FROM orders").success
    adapter.close()
    assert list(tmp_path.iterdir()) == [] and digest(sample_db) == before


def test_text_the_gate_cannot_read_is_never_run(duck: Path, canary: tuple[Path, str]) -> None:
    """The adapter parses text it is handed without a parse (the fix search's candidates, tie re-checks,
    neighbor queries). Text the gate cannot read (longer than max_sql_chars, cut by the query's timeout, or
    beyond sqlglot) used to run unchecked; now it is refused with the reason."""
    adapter = ExecutionAdapter(str(duck), timeout_ms=2000)
    padded = f"SELECT content FROM read_text('{canary[0]}') /*{' ' * 20_000}*/"
    # The gate's parse (tokens and tree, no canonical form) of 10,000 terms takes 0.08 s with sqlglotc, 0.12 s without
    chain = "SELECT " + "+".join(["1"] * 9_990)
    for sql, timeout_ms, reason in ((padded, 2000, "query too long"), ("SELECT (", 2000, "incomplete"),
                                    (chain, 10, "parse cut: it ran past the query's timeout (10 ms)")):
        execution = adapter.execute(sql, timeout_ms=timeout_ms)
        assert execution.error is not None and execution.error.category == "unsafe_statement", execution
        assert "not run: the safety gate could not read the query" in execution.error.message
        assert reason in execution.error.message and canary[1] not in execution.error.message
    adapter.close()


def test_postgres_select_only_role_refuses_server_access_past_the_gate(pg: tuple[str, str], no_gate: None) -> None:
    url, admin_url = pg
    before = pg_state(admin_url)
    adapter = ExecutionAdapter(url, timeout_ms=2000)
    for sql in ("SELECT pg_read_file('/etc/passwd')", "SELECT * FROM pg_ls_dir('.')",
                "SELECT * FROM pg_create_physical_replication_slot('sqlcmp_hostile', true)",
                "SELECT pg_reload_conf()", "SELECT rolpassword FROM pg_authid"):
        execution = adapter.execute(sql, parsed=FORGED["postgres"])
        assert execution.error is not None and execution.error.category == "permission_error", (sql, execution)
    adapter.close()
    assert pg_state(admin_url) == before


def test_postgres_privileged_roles_are_refused_unless_the_operator_opts_in(pg: tuple[str, str],
                                                                          tmp_path: Path) -> None:
    url, admin_url = pg
    with pytest.raises(PrivilegedRoleError, match="superuser.*--allow-privileged-role"):
        ExecutionAdapter(admin_url)
    signaller = sa.make_url(url).set(username="sqlcmp_hostile_signal", password="signal")
    with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(sa.text("DROP ROLE IF EXISTS sqlcmp_hostile_signal"))
        connection.execute(sa.text("CREATE ROLE sqlcmp_hostile_signal LOGIN PASSWORD 'signal' "
                                   "IN ROLE pg_read_all_data, pg_signal_backend"))
    with pytest.raises(PrivilegedRoleError, match="pg_signal_backend"):
        ExecutionAdapter(signaller.render_as_string(hide_password=False))
    # In a batch the refusal is each case's report (the case is invalid, not the model's error) ...
    report = Evaluator().evaluate(CompareRequest(db=admin_url, expected_sql="SELECT 1", actual_sql="SELECT 1"))
    assert report.blocked_reason == "execution_failure" and report.validity["case_valid"] is False
    assert "privileged PostgreSQL role (superuser)" in report_text(report)
    # ... on the command line a usage error; with the opt-in it runs, and the gate still holds.
    assert main(["compare", "--db", admin_url, "--expected-sql", "SELECT 1", "--actual-sql", "SELECT 1"]) == 2
    assert main(["compare", "--db", admin_url, "--expected-sql", "SELECT 1", "--actual-sql", "SELECT 1",
                 "--allow-privileged-role"]) == 0
    trusted = ExecutionAdapter(admin_url, allow_privileged_role=True)
    refused = trusted.execute("SELECT pg_read_file('/etc/passwd')")
    assert refused.error is not None and refused.error.category == "unsafe_statement"
    trusted.close()


def test_batch_with_backend_killers_leaves_the_other_cases_intact(pg: tuple[str, str], duck: Path,
                                                                  tmp_path: Path, canary: tuple[Path, str]) -> None:
    """Issue 11 item 3: with two workers, a case that signals every other backend used to turn its neighbour
    invalid. Now it is refused, and every other case, on every engine, passes and is written."""
    url, admin_url = pg
    before = pg_state(admin_url)
    good = [{"case_id": f"good{i}", "db": url, "expected_sql": "SELECT count(*) FROM sqlcmp_hostile.t",
             "actual_sql": "SELECT count(a) FROM sqlcmp_hostile.t, (SELECT pg_sleep(0.3)) s"} for i in range(3)]
    good.append({"case_id": "good_duck", "db": str(duck), "expected_sql": "SELECT a FROM t",
                 "actual_sql": "SELECT a FROM t ORDER BY a DESC"})
    hostile = [{"case_id": "killer", "db": url, "expected_sql": "SELECT 1",
                "actual_sql": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"},
               {"case_id": "reader", "db": str(duck), "expected_sql": "SELECT a FROM t",
                "actual_sql": f"SELECT content FROM read_text('{canary[0]}')"}]
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps(case) + "\n" for case in [hostile[0], *good, hostile[1]]), encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    main(["evaluate", str(suite), "--out", str(out), "--workers", "2"])
    reports = {r["case_id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert set(reports) == {c["case_id"] for c in [*good, *hostile]}
    assert all(reports[c["case_id"]]["deterministic_verdict"] == "pass" for c in good), reports
    assert "denied function: pg_terminate_backend" in json.dumps(reports["killer"])
    assert "denied function: read_text" in json.dumps(reports["reader"])
    assert canary[1] not in out.read_text(encoding="utf-8")
    assert pg_state(admin_url) == before
