"""PostgreSQL's sandbox in depth (engine/sandbox/postgres.py): each wall tested with the statement gate switched
off, so that what holds is the server's and the session's own doing, on the real server of .ci/services.sh."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import pg_schema

from sqlcmp_dagster.engine import execution
from sqlcmp_dagster.engine.execution import ExecutionAdapter, PrivilegedRoleError
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.parsing import parse
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.sandbox.postgres import APPLICATION_NAME, TERMINATE_GRACE_MS

SCHEMA = "sqlcmp_pg_sandbox"


@pytest.fixture(scope="module")
def pg(pg_service: tuple[str, str]) -> tuple[str, str]:
    """(the SELECT-only role's URL, the superuser's URL) with a table and a function that ignores cancels."""
    pg_schema(pg_service[1], SCHEMA,
              f"CREATE TABLE {SCHEMA}.t AS SELECT g AS a FROM generate_series(1, 10) g",
              # What a hostile query could reach through any function the evaluated schema offers: a loop that
              # catches every cancel. Only a terminate ends it.
              f"""CREATE FUNCTION {SCHEMA}.stubborn(seconds float) RETURNS int LANGUAGE plpgsql AS $f$
                  DECLARE stop timestamptz := clock_timestamp() + seconds * interval '1 second';
                  BEGIN
                    WHILE clock_timestamp() < stop LOOP
                      BEGIN PERFORM pg_sleep(0.2); EXCEPTION WHEN query_canceled THEN NULL; END;
                    END LOOP;
                    RETURN 1;
                  END $f$""",
              f"GRANT USAGE ON SCHEMA {SCHEMA} TO sqlcmp_select",
              f"GRANT SELECT ON ALL TABLES IN SCHEMA {SCHEMA} TO sqlcmp_select",
              f"GRANT EXECUTE ON FUNCTION {SCHEMA}.stubborn(float) TO sqlcmp_select")
    return pg_service


@pytest.fixture()
def no_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The statement gate switched off: every text reaches the server."""
    monkeypatch.setattr(execution, "gate_reason", lambda outcome, dialect, sql: None)
    yield


def admin_scalar(admin_url: str, sql: str, **params: Any) -> Any:
    engine = sa.create_engine(admin_url)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(sql), params).scalar()
    finally:
        engine.dispose()


def role_state(admin_url: str) -> dict[str, Any]:
    """What an injected statement would leave behind: the role's settings, large objects, its password."""
    return {
        "settings": admin_scalar(admin_url, "SELECT string_agg(array_to_string(setconfig, ','), ';') "
                                            "FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole "
                                            "WHERE r.rolname = 'sqlcmp_select'"),
        "large_objects": admin_scalar(admin_url, "SELECT count(*) FROM pg_largeobject_metadata"),
        "password": admin_scalar(admin_url, "SELECT rolpassword FROM pg_authid WHERE rolname = 'sqlcmp_select'"),
    }


def case_backends(admin_url: str) -> int:
    """Backends of the adapter's sessions still alive (the admin's own and other roles' excluded)."""
    return int(admin_scalar(admin_url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
                                       "AND pid <> pg_backend_pid()", name=APPLICATION_NAME))


INJECTIONS = [
    "SELECT a FROM {s}.t) s; COMMIT; ALTER ROLE CURRENT_USER SET search_path = public; SELECT * FROM (SELECT 1",
    "SELECT a FROM {s}.t) s; COMMIT; ALTER ROLE CURRENT_USER PASSWORD 'owned'; SELECT * FROM (SELECT 1",
    "SELECT a FROM {s}.t) s; COMMIT; SELECT lo_from_bytea(0, 'x'); SELECT * FROM (SELECT 1",
    "SELECT a FROM {s}.t) s; COMMIT; NOTIFY sqlcmp_channel; SELECT * FROM (SELECT 1",
    "SELECT 1) s; COMMIT; DO $d$ BEGIN PERFORM 1; END $d$; SELECT * FROM (SELECT 1",
    "SELECT 1) s; SET default_transaction_read_only = off; COMMIT; SELECT * FROM (SELECT 1",
]


@pytest.mark.parametrize("sql", INJECTIONS)
def test_a_second_statement_is_the_servers_error_with_the_gate_off(pg: tuple[str, str], no_gate: None,
                                                                   sql: str) -> None:
    """Every statement made of the query's text goes through the extended protocol: whatever the gate read, a
    second statement is refused by the server and nothing of it happens."""
    url, admin_url = pg
    before = role_state(admin_url)
    adapter = ExecutionAdapter(url, timeout_ms=3_000)
    try:
        outcome = adapter.execute(sql.format(s=SCHEMA), parsed=parse("SELECT 1", "postgres"))
        plan = adapter.explain(sql.format(s=SCHEMA))
    finally:
        adapter.close()
    assert not outcome.success and outcome.error is not None
    assert "cannot insert multiple commands into a prepared statement" in outcome.error.message, outcome.error
    assert plan is None
    assert role_state(admin_url) == before


def test_a_cancel_that_is_caught_ends_the_case_and_its_backend(pg: tuple[str, str]) -> None:
    """A statement that catches every cancel is terminated TERMINATE_GRACE_MS after the timeout: the case ends
    as a timeout within the query's timeout plus two seconds, and its backend is gone when it ends."""
    url, admin_url = pg
    adapter = ExecutionAdapter(url, timeout_ms=1_000)
    try:
        started = time.monotonic()
        outcome = adapter.execute(f"SELECT {SCHEMA}.stubborn(30) AS x")
        took = time.monotonic() - started
        assert outcome.error is not None and outcome.error.category == "timeout", outcome
        assert took < 1.0 + 2.0, took
        assert TERMINATE_GRACE_MS <= 2_000
        for _ in range(20):  # the terminate is asynchronous on the server: give it a moment to finish
            if case_backends(admin_url) == 0:
                break
            time.sleep(0.1)
        assert case_backends(admin_url) == 0
        # the adapter is still usable: the next case gets a fresh connection
        assert adapter.execute(f"SELECT count(*) AS n FROM {SCHEMA}.t").success
    finally:
        adapter.close()


def test_a_connection_killed_from_outside_is_retried_then_an_engine_fault(pg: tuple[str, str]) -> None:
    """A sibling's (or an operator's) pg_terminate_backend is not the model's failure: the query runs again on a
    fresh connection; killed every time, the case is an engine fault (invalid), never a FAIL."""
    url, admin_url = pg
    slow = f"SELECT count(*) AS n FROM {SCHEMA}.t, (SELECT pg_sleep(0.8)) AS s"
    # while the query runs, its backend shows the cursor's FETCH: every active session of the adapter is killed
    kill = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :name "
            "AND state = 'active' AND pid <> pg_backend_pid()")
    killed: list[int] = []

    def killer(times: int, stop: threading.Event) -> None:
        while len(killed) < times and not stop.is_set():
            time.sleep(0.3)
            if admin_scalar(admin_url, f"SELECT count(*) FROM ({kill}) k", name=APPLICATION_NAME):
                killed.append(1)

    stop = threading.Event()
    once = threading.Thread(target=killer, args=(1, stop))
    once.start()
    adapter = ExecutionAdapter(url, timeout_ms=10_000)
    try:
        outcome = adapter.execute(slow)
    finally:
        stop.set()
        once.join()
        adapter.close()
    assert len(killed) == 1
    assert outcome.success and outcome.relation is not None, outcome.error
    stop = threading.Event()
    always = threading.Thread(target=killer, args=(100, stop))
    always.start()
    try:
        report = Evaluator().evaluate(CompareRequest(db=url, expected_sql=f"SELECT count(*) AS n FROM {SCHEMA}.t",
                                                     actual_sql=slow))
    finally:
        stop.set()
        always.join()
    assert len(killed) > 2
    assert report.validity.get("case_valid") is False, report  # INVALID: says nothing of the query under test
    assert "ended from outside" in report.model_dump_json()


def test_a_role_that_reads_every_table_is_refused_like_a_superuser(pg: tuple[str, str]) -> None:
    url, admin_url = pg
    reader = sa.make_url(url).set(username="sqlcmp_pg_reader", password="reader")
    with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(sa.text("DROP ROLE IF EXISTS sqlcmp_pg_reader"))
        connection.execute(sa.text("CREATE ROLE sqlcmp_pg_reader LOGIN PASSWORD 'reader' IN ROLE pg_read_all_data"))
    try:
        with pytest.raises(PrivilegedRoleError, match="pg_read_all_data"):
            ExecutionAdapter(reader.render_as_string(hide_password=False))
        trusted = ExecutionAdapter(reader.render_as_string(hide_password=False), allow_privileged_role=True)
        trusted.close()
    finally:
        with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as connection:
            connection.execute(sa.text("DROP ROLE IF EXISTS sqlcmp_pg_reader"))


def test_missing_role_defaults_are_named_when_the_adapter_connects(pg: tuple[str, str]) -> None:
    """The recipe's role-level defaults back the session's own settings; each one a role lacks is named."""
    url, admin_url = pg
    configured = ExecutionAdapter(url)
    assert configured.setup_warnings == []  # .ci/services.sh sets them on the test role
    configured.close()
    bare = sa.make_url(url).set(username="sqlcmp_pg_bare", password="bare")
    with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(sa.text("DROP ROLE IF EXISTS sqlcmp_pg_bare"))
        connection.execute(sa.text("CREATE ROLE sqlcmp_pg_bare LOGIN PASSWORD 'bare'"))
        connection.execute(sa.text("ALTER ROLE sqlcmp_pg_bare SET statement_timeout = '30s'"))
    try:
        adapter = ExecutionAdapter(bare.render_as_string(hide_password=False))
        warned = " ".join(adapter.setup_warnings)
        adapter.close()
        for name in ("default_transaction_read_only", "lock_timeout", "idle_in_transaction_session_timeout",
                     "temp_file_limit", "log_min_messages"):
            assert name in warned
        assert "statement_timeout" not in warned
    finally:
        with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as connection:
            connection.execute(sa.text("DROP ROLE IF EXISTS sqlcmp_pg_bare"))


def test_work_between_interrupt_checks_ends_the_case_in_time(pg: tuple[str, str]) -> None:
    """json_agg over 300 MB checks for interrupts rarely: the cancel and the terminate wait for its next check
    (45 s once), so the client stops waiting ABANDON_AFTER_MS after the timeout and the case is a timeout. The
    bound is the sandbox's (timeout + 2 s); the margin beyond it is the loaded machine's."""
    url, _ = pg
    adapter = ExecutionAdapter(url, timeout_ms=2_000)
    try:
        for _ in range(2):
            started = time.monotonic()
            outcome = adapter.execute("SELECT json_agg(repeat('y', 1000)) AS a FROM generate_series(1, 300000)")
            took = time.monotonic() - started
            assert outcome.error is not None and outcome.error.category == "timeout", outcome
            assert took < 2.0 + 2.0 + 1.0, took
        assert adapter.execute(f"SELECT count(*) AS n FROM {SCHEMA}.t").success
    finally:
        adapter.close()


def test_a_backslash_in_a_plain_string_is_read_as_the_gate_reads_it(pg: tuple[str, str]) -> None:
    """With standard_conforming_strings off (a role's or database's default), PostgreSQL would read 'a\\' as an
    unfinished string and run what the gate read as a literal: each session sets it on."""
    url, admin_url = pg
    with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(sa.text("ALTER ROLE sqlcmp_select SET standard_conforming_strings = off"))
    try:
        adapter = ExecutionAdapter(url, timeout_ms=3_000)
        try:
            outcome = adapter.execute("SELECT 'a\\' AS x, ' || current_setting(''is_superuser'') AS y --' AS z")
        finally:
            adapter.close()
    finally:
        with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as connection:
            connection.execute(sa.text("ALTER ROLE sqlcmp_select RESET standard_conforming_strings"))
    assert outcome.success and outcome.relation is not None, outcome.error
    assert outcome.relation.names == ["x", "z"] and outcome.relation.frame.row(0)[0] == "a\\"
