from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from sqlcmp_dagster.engine.execution import ExecutionAdapter, resolve_database
from sqlcmp_dagster.engine.sandbox.sqlite import sqlite_read_only
from sqlcmp_dagster.engine.parsing import parse


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def adapter(sample_db: Path) -> ExecutionAdapter:
    return ExecutionAdapter(str(sample_db), timeout_ms=2_000)


def test_execute_materializes_names_types_and_timing(adapter: ExecutionAdapter) -> None:
    execution = adapter.execute("SELECT name, price, discontinued FROM products ORDER BY product_id")
    assert execution.success and execution.relation is not None
    assert execution.relation.names == ["name", "price", "discontinued"]
    assert [c["type"] for c in execution.relation.schema()] == ["String", "Float64", "Int64"]
    assert execution.relation.height == 12
    assert execution.elapsed_ms > 0


def _counting_to(n: int) -> str:
    return f"WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {n}) SELECT count(*) FROM n"


def test_sqlite_counts_a_querys_steps_the_same_on_every_run(adapter: ExecutionAdapter) -> None:
    """The steps are SQLite's own count of the work (in units of the progress handler's interval): the same on
    every run of one query whatever the machine's load, growing with the rows the query goes through, and on a
    kept connection never carried over from the query before."""
    small, large = (adapter.execute(_counting_to(n)) for n in (20_000, 200_000))
    assert small.steps is not None and large.steps is not None and 0 < small.steps < large.steps
    assert 8 * small.steps <= large.steps <= 12 * small.steps
    assert [adapter.execute(_counting_to(200_000)).steps for _ in range(3)] == [large.steps] * 3
    assert adapter.execute("SELECT name FROM products").steps == 0  # a few dozen steps: below one interval
    failed = adapter.execute("SELECT * FROM nope")
    assert not failed.success and failed.steps is None


@pytest.mark.parametrize(
    ("sql", "category", "message"),
    [
        ("SELECT * FROM nope", "missing_table", "no such table: nope"),
        ("SELECT nope FROM products", "missing_column", "no such column: nope"),
        ("SELECT customer_id FROM orders JOIN customers ON customers.customer_id = orders.customer_id",
         "ambiguous_reference", "ambiguous column name: customer_id"),
        ("SELECT customer_id FROM orders WHERE count(*) > 1", "invalid_aggregation", "misuse of aggregate"),
        ("SELECT abs(1, 2)", "invalid_aggregation", "wrong number of arguments"),
    ],
)
def test_sqlite_errors_map_to_the_taxonomy_and_keep_the_raw_message(
    adapter: ExecutionAdapter, sql: str, category: str, message: str
) -> None:
    # The engine's own message is what is mapped: the gate is handed a parse of SELECT 1 (sqlglot itself refuses
    # abs(1, 2), and the adapter never runs text the gate cannot read).
    execution = adapter.execute(sql, parsed=parse("SELECT 1", "sqlite"))
    assert not execution.success and execution.error is not None
    assert execution.error.category == category
    assert message in execution.error.message


def test_timeout_interrupts_sqlite_and_the_database_stays_usable(adapter: ExecutionAdapter) -> None:
    runaway = "SELECT count(*) FROM " + ", ".join(f"products p{i}" for i in range(8))  # 12 ** 8 rows, inline
    started = time.monotonic()
    execution = adapter.execute(runaway, timeout_ms=200)
    elapsed = time.monotonic() - started
    assert execution.error is not None and execution.error.category == "timeout"
    assert elapsed < 0.2 + 1.0
    assert adapter.execute("SELECT count(*) FROM products").success


def test_one_watchdog_thread_serves_every_query_and_forked_children(adapter: ExecutionAdapter,
                                                                    sample_db: Path) -> None:
    """Deadlines are armed on one thread per process (not a thread per query), and a forked child (a worker)
    gets a watchdog of its own (the parent's thread does not exist there)."""
    runaway = "SELECT count(*) FROM " + ", ".join(f"products p{i}" for i in range(8))  # 12 ** 8 rows, inline
    for _ in range(200):
        assert adapter.execute("SELECT count(*) FROM products", timeout_ms=60_000).success
    watchdogs = [t for t in threading.enumerate() if t.name == "sqlcmp-query-watchdog"]
    assert len(watchdogs) == 1
    assert adapter.execute(runaway, timeout_ms=100).error.category == "timeout"  # type: ignore[union-attr]
    child = multiprocessing.get_context("fork").Process(target=_child_times_out, args=(str(sample_db),))
    child.start()
    child.join(60)
    assert child.exitcode == 0


def _child_times_out(target: str) -> None:
    runaway = "SELECT count(*) FROM " + ", ".join(f"products p{i}" for i in range(8))  # 12 ** 8 rows, inline
    execution = ExecutionAdapter(target).execute(runaway, timeout_ms=100)
    raise SystemExit(0 if execution.error is not None and execution.error.category == "timeout" else 1)


def test_cross_join_blowup_is_interrupted(adapter: ExecutionAdapter) -> None:
    sql = "SELECT count(*) FROM order_items a, order_items b, order_items c, order_items d"
    execution = adapter.execute(sql, timeout_ms=150)
    assert execution.error is not None and execution.error.category == "timeout"


@pytest.mark.parametrize("sql", ["DELETE FROM orders", "DROP TABLE orders", "SELECT 1; DELETE FROM orders",
                                 "UPDATE products SET price = 0", "PRAGMA user_version = 7",
                                 "ATTACH DATABASE ':memory:' AS x"])
def test_writes_are_refused_and_the_file_is_unchanged(adapter: ExecutionAdapter, sample_db: Path, sql: str) -> None:
    before = _digest(sample_db)
    execution = adapter.execute(sql)
    assert execution.error is not None and execution.error.category == "unsafe_statement"
    assert _digest(sample_db) == before


def test_the_connection_itself_is_read_only_even_past_the_gate(adapter: ExecutionAdapter, sample_db: Path) -> None:
    """Defence in depth: a write that slipped past the statement gate still fails in the engine."""
    before = _digest(sample_db)
    forged = parse("SELECT 1", "sqlite")  # the gate sees SELECT 1; the engine is handed the DELETE
    with pytest.raises(sqlite3.DatabaseError, match="not authorized|readonly|read-only"):
        sqlite_read_only(sample_db).execute("DELETE FROM orders")
    execution = adapter.execute("DELETE FROM orders", parsed=forged)
    assert execution.error is not None and execution.error.category == "permission_error", execution.error
    assert _digest(sample_db) == before


def test_max_result_rows_caps_materialization_with_a_warning(adapter: ExecutionAdapter) -> None:
    execution = adapter.execute("SELECT * FROM order_items", max_rows=10)
    assert execution.success and execution.relation is not None
    assert execution.relation.height == 10 and execution.relation.truncated
    assert any("max_result_rows=10" in w for w in execution.warnings)


def test_mixed_type_column_keeps_numbers_and_text_apart(adapter: ExecutionAdapter) -> None:
    execution = adapter.execute("SELECT 1 UNION ALL SELECT '1'")
    assert execution.relation is not None
    values = execution.relation.frame[:, 0].to_list()
    assert len(set(values)) == 2


def test_non_utf8_text_does_not_fail_the_query(tmp_path: Path) -> None:
    """Text that is not UTF-8 comes back with replacement characters, wherever it stands in the result: every
    row, in order, and the same on the next query over the kept connection."""
    path = tmp_path / "bytes.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE t (n INTEGER, a TEXT)")
    connection.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"row {i} é") for i in range(300)])
    connection.execute("INSERT INTO t VALUES (300, CAST(X'FF00FE61' AS TEXT))")
    connection.commit()
    connection.close()
    adapter = ExecutionAdapter(str(path))
    for sql in ("SELECT a FROM t WHERE n = 300", "SELECT n, a FROM t ORDER BY n", "SELECT n, a FROM t ORDER BY n"):
        execution = adapter.execute(sql)
        assert execution.success and execution.relation is not None, execution.error
        values = execution.relation.frame[:, -1].to_list()
        assert values[-1] == b"\xff\x00\xfea".decode("utf-8", errors="replace")
        assert values[:-1] == [f"row {i} é" for i in range(len(values) - 1)]
    assert adapter.execute("SELECT 'ok' || a FROM t WHERE n = 1").relation.frame.item() == "okrow 1 é"


def test_resolve_database_finds_spider_and_flat_layouts(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    sqlite3.connect(tmp_path / "a" / "a.sqlite").close()
    sqlite3.connect(tmp_path / "b.sqlite").close()
    assert resolve_database("a", tmp_path) == str(tmp_path / "a" / "a.sqlite")
    assert resolve_database("b", tmp_path) == str(tmp_path / "b.sqlite")
    with pytest.raises(FileNotFoundError, match="'c' not found"):
        resolve_database("c", tmp_path)


def test_missing_database_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        ExecutionAdapter(str(tmp_path / "absent.sqlite"))


def test_the_statement_gate_walks_a_parsed_query_once(adapter: ExecutionAdapter) -> None:
    """The neighbor search runs one parsed query on many databases: the gate's walk happens once per parsed
    query, and its refusal holds on every run."""
    from unittest import mock

    from sqlcmp_dagster.engine.sandbox import gate as gate_module

    safe, hostile = parse("SELECT count(*) FROM products", "sqlite"), parse("DELETE FROM products", "sqlite")
    with mock.patch.object(gate_module, "unsafe_reason", wraps=gate_module.unsafe_reason) as gate:
        for _ in range(3):
            assert adapter.execute("SELECT count(*) FROM products", parsed=safe).success
            refused = adapter.execute("DELETE FROM products", parsed=hostile)
            assert refused.error is not None and refused.error.category == "unsafe_statement"
        assert gate.call_count == 2
        adapter.execute("DELETE FROM products")  # parsed anew: a new parsed query, walked again
        assert gate.call_count == 3


class _Rows:
    """A DBAPI cursor over given rows (``fetchmany`` only)."""

    def __init__(self, rows: list[tuple[object, ...]]) -> None:
        self.rows = rows

    def fetchmany(self, size: int) -> list[tuple[object, ...]]:
        taken, self.rows = self.rows[:size], self.rows[size:]
        return taken


def test_fetch_bounded_keeps_plain_rows_whole_and_cuts_and_caps_row_by_row() -> None:
    """Round trips of plain cells (numbers, NULL, short text and bytes) are kept as they came; a round trip with
    a cell to cut, a cut cell or the byte cap inside it is taken row by row, with the same caps, cuts and
    counts."""
    from sqlcmp_dagster.engine.sandbox.bounds import CutText, fetch_bounded, row_cost

    plain = [(i, float(i), None, f"t{i:04}", b"b") for i in range(3000)]
    fetched = fetch_bounded(_Rows(plain), 10_000, 1 << 30, 8)
    assert fetched.rows == plain and not fetched.truncated and not fetched.warnings
    assert all(a is b for a, b in zip(fetched.rows, plain))
    # each row counts 8 + 8 + 8 + 5 + 1 bytes: the cap falls inside a round trip, at the 101st row
    # each row counted as it is held here: a tuple and five objects, plus 6 bytes of text and binary
    capped = fetch_bounded(_Rows(plain), 10_000, 100 * row_cost(plain[0]) + 10, 8)
    assert row_cost(plain[0]) == 56 + 5 * 40 + 6
    assert len(capped.rows) == 101 and capped.truncated and "max_result_bytes" in capped.warnings[-1]
    # the row that crosses the cap is kept cut small, however large its cells under max_cell_bytes were (a
    # review's finding: it was kept whole)
    wide = fetch_bounded(_Rows([(1, "x" * 1000, "y" * 1000)]), 10_000, 100, 5000)
    assert wide.truncated and wide.rows[0][0] == 1 and len(wide.rows[0][1]) < 200
    assert wide.rows[0][1].startswith("x" * 64 + "…[cut at 64 of 1000 characters, sha256 ")
    long_cells = [(1, "short"), (2, "x" * 20), (3, CutText("kept as cut")), (4, memoryview(b"\x00\xff"))]
    cut = fetch_bounded(_Rows(long_cells), 10_000, 1 << 30, 8)
    assert cut.rows[0] == (1, "short") and cut.rows[1][1].startswith("xxxxxxxx…[cut at 8 of 20 characters")
    assert cut.rows[2][1] == "kept as cut" and cut.rows[3][1] == b"\x00\xff"
    assert cut.warnings == ["2 cell(s) longer than max_cell_bytes=8 were cut (compared by prefix and digest)"]
    assert fetch_bounded(_Rows(plain), 50, 1 << 30, 8).rows == plain[:50]


def test_a_kept_sqlite_connection_carries_nothing_to_the_next_query(sample_db: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One sandboxed connection serves query after query; no query's length limit, transaction or interrupt
    reaches the next one, and a database file replaced at its path is read anew."""
    from sqlcmp_dagster.engine import execution

    database = tmp_path / "own.sqlite"  # replaced below: not the session's sample database
    database.write_bytes(sample_db.read_bytes())
    opened = []
    monkeypatch.setattr(execution, "sqlite_read_only",
                        lambda path: opened.append(1) or sqlite_read_only(path))  # type: ignore[func-returns-value]
    adapter = ExecutionAdapter(str(database), timeout_ms=2_000)
    for _ in range(50):
        assert adapter.execute("SELECT count(*) FROM products").success
    assert len(opened) == 1
    long_value = "SELECT length(hex(zeroblob(3000)))"
    too_long = adapter.execute(long_value, max_cell_bytes=1_000)
    assert too_long.error is not None and "max_cell_bytes=1,000" in too_long.error.message
    assert adapter.execute(long_value).success
    forged = adapter.execute("SAVEPOINT sqlcmp_left_open", parsed=parse("SELECT 1", "sqlite"))
    assert forged.error is not None and forged.error.category == "unsafe_statement"
    assert adapter.execute("SELECT count(*) FROM products").success
    assert adapter.execute("SELECT count(*) FROM products", parsed=parse("SELECT 1", "sqlite")).success
    runaway = "SELECT count(*) FROM " + ", ".join(f"products p{i}" for i in range(8))  # 12 ** 8 rows, inline
    assert adapter.execute(runaway, timeout_ms=100).error.category == "timeout"  # type: ignore[union-attr]
    assert adapter.execute("SELECT count(*) FROM products").success
    assert len(opened) == 1
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(sample_db.read_bytes())
    with sqlite3.connect(copy) as writer:
        writer.execute("DELETE FROM products WHERE product_id > 2")
    writer.close()
    kept = adapter.execute("SELECT count(*) FROM products").relation
    copy.replace(database)
    replaced = adapter.execute("SELECT count(*) FROM products").relation
    assert kept is not None and replaced is not None
    assert kept.frame.item() == 12 and replaced.frame.item() == 2 and len(opened) == 2
    adapter.close()


def test_a_run_over_sqlite_files_never_imports_sqlalchemy() -> None:
    """SQLAlchemy serves servers, DuckDB and URLs; a batch over SQLite files (queries that succeed and fail, the
    neighbor search, the fix search) runs without importing it, which spares every process start its import."""
    import json
    import subprocess
    import sys

    from sqlcmp_dagster.cases.sample import sample_db_dir, sample_suite_path

    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from sqlcmp_dagster.cases.suite import load_suite\n"
        "from sqlcmp_dagster.engine.pipeline import Evaluator\n"
        f"suite = load_suite(Path({str(sample_suite_path())!r}))\n"
        f"reports = Evaluator(db_dir={str(sample_db_dir())!r}).evaluate_all(suite.cases)\n"
        "print(json.dumps({'verdicts': sorted({r.deterministic_verdict for r in reports}),\n"
        "                  'errors': sorted({e for r in reports for e in r.error_types}),\n"
        "                  'searched': sum(bool(r.metrics['diagnostics'] and r.metrics['diagnostics'].get('neighbors_tried'))\n"
        "                                  for r in reports),\n"
        "                  'sqlalchemy': 'sqlalchemy' in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert {"pass", "fail"} <= set(seen["verdicts"]) and "missing_table" in seen["errors"] and seen["searched"]
    assert seen["sqlalchemy"] is False


def test_a_failing_sqlite_query_while_another_thread_imports_sqlalchemy(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """While another thread imports SQLAlchemy, ``sqlalchemy.exc`` is in ``sys.modules`` before its classes are
    defined: a SQLite query failing then is still told apart by its own error (none of SQLAlchemy's can have been
    raised), not lost to the ``except`` clause that names them."""
    import sys
    import types

    path = tmp_path / "t.sqlite"
    sqlite3.connect(path).close()
    monkeypatch.setitem(sys.modules, "sqlalchemy.exc", types.ModuleType("sqlalchemy.exc"))  # classes not yet made
    execution = ExecutionAdapter(str(path)).execute("SELECT * FROM nowhere")
    assert execution.error is not None and execution.error.category == "missing_table"
