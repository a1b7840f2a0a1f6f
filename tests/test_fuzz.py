"""Bad input, generated: whatever the SQL, the suite line or the option value, the answer is a report or a
clear error that names the input, never a crash, a hang or a stack trace."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ENGINE_POSTGRES
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import main
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig
from sqlcmp_dagster.engine.pipeline import compare

_SQL_PIECES = st.sampled_from(["SELECT", "FROM", "WHERE", "(", ")", ",", "*", "1", "'x'", "NULL", "products",
                               "name", "price", "=", "+", "/", "0", "JOIN", "ON", "GROUP BY", "ORDER BY", ";",
                               "UNION", "WITH", "AS", "t", "DELETE", "--", "/*", "é", "\x00", "\\"])
sql_like = st.lists(_SQL_PIECES, max_size=25).map(" ".join)
literals = st.binary(max_size=40).map(lambda b: "SELECT '" + b.decode("latin-1").replace("'", "''") + "' AS v")


def _engines(sample_db: Path, tmp_path_factory: pytest.TempPathFactory) -> list[ExecutionAdapter]:
    adapters = [ExecutionAdapter(str(sample_db), timeout_ms=300)]
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path_factory.mktemp("fuzz") / "f.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute("CREATE TABLE products AS SELECT range AS name, range * 1.5 AS price FROM range(10)")
    connection.close()
    adapters.append(ExecutionAdapter(str(path), timeout_ms=300))
    if os.environ.get("SQLCMP_TEST_PG_URL"):
        adapters.append(ExecutionAdapter(os.environ["SQLCMP_TEST_PG_URL"], timeout_ms=300))
    return adapters


@pytest.fixture(scope="module")
def engines(sample_db: Path, tmp_path_factory: pytest.TempPathFactory) -> list[ExecutionAdapter]:
    return _engines(sample_db, tmp_path_factory)


@ENGINE_POSTGRES  # ``engines`` opens the role's session from SQLCMP_TEST_PG_URL
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=st.one_of(sql_like, literals))
def test_generated_sql_always_yields_a_report_on_every_engine(engines: list[ExecutionAdapter], sql: str) -> None:
    for adapter in engines:
        report = compare(CompareRequest(expected_sql="SELECT 1 AS v", actual_sql=sql,
                                        config=EvalConfig(query_timeout_ms=300)), adapter)
        assert report.deterministic_verdict in ("pass", "fail")
        assert "internal engine error" not in " ".join(report.warnings), (adapter.dialect, sql, report.warnings)
        report.model_dump_json().encode("utf-8")


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.one_of(
    st.text(max_size=60),
    st.dictionaries(st.sampled_from(["case_id", "expected_sql", "actual_sql", "db", "config", "user_query"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=10), st.lists(st.integers(), max_size=2),
                              st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)),
                    max_size=6).map(json.dumps)), max_size=8))
def test_malformed_suite_lines_are_named_and_skipped(tmp_path_factory: pytest.TempPathFactory,
                                                     lines: list[str]) -> None:
    path = tmp_path_factory.mktemp("suite") / "suite.jsonl"
    path.write_text("\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines) + "\n",
                    encoding="utf-8", errors="surrogatepass")
    suite = load_suite(path)
    non_blank = [line for line in lines if line.strip() and not line.strip().startswith("//")]
    assert len(suite.cases) + len(suite.errors) == len(non_blank)  # every line is a case or a named error
    for error in suite.errors:
        assert str(error).startswith(f"{path}:") and error.line >= 1 and error.message


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [("--timeout-ms", "0", "query_timeout_ms"), ("--timeout-ms", "abc", "--timeout-ms"), ("--atol", "-3", "numeric_abs"),
     ("--rtol", "nan-ish", "--rtol"), ("--mode", "sideways", "--mode")],
)
def test_bad_option_values_exit_2_naming_the_option(sample_db: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                                    value: str, named: str) -> None:
    with pytest.raises(SystemExit) if value in ("abc", "nan-ish", "sideways") else contextlib.nullcontext():
        code = main(["compare", "--db", str(sample_db), "--expected-sql", "SELECT 1", "--actual-sql", "SELECT 1",
                     flag, value])
        assert code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
