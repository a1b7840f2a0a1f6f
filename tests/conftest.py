"""Shared fixtures: the bundled sample database, built once per test session into a temporary folder."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database
from sqlcmp_dagster.engine.context import current
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report
from sqlcmp_dagster.engine.neighbors.schema import Schema, read_schema
from sqlcmp_dagster.engine.pipeline import Evaluator


#: A valid answer of the advisory judge (every AI-judge metric), advising "pass".
JUDGE_PASS = {"intent_adequacy_judgment": "adequate", "database_scoped_equivalence_judgment": "equivalent",
              "acceptable_deviation_judgment": "harmless", "short_rationale": "Only the order differs.",
              "evidence_bullets": ["bag results equal", "ordering_error_flag"],
              "decision_summary": "harmless: order only", "severity_classification": "minor issue",
              "confidence": 0.8, "evidence_strength": "high", "ambiguous_case": False, "advisory_verdict": "pass"}


#: The pytest-xdist group of every test that opens sessions as the engine's PostgreSQL role or reads or changes
#: what is the server's, not a database's: its sessions named APPLICATION_NAME (counted, or killed), that role's
#: settings, roles of fixed names, the server itself (stopped and started again). Such tests run one after another
#: on one worker, as they did before the suite ran in parallel. A test whose fixtures include ``pg_service`` is put
#: in it here (:func:`pytest_collection_modifyitems`); one that reaches the role otherwise is marked with this.
ENGINE_POSTGRES = pytest.mark.xdist_group("engine-postgres")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject.toml's addopts): a pytest-xdist worker more than the cores this process may use.
    About half of the suite's time is spent waiting (on Celery workers, run monitoring, a webserver, a browser,
    a subprocess's timeout): with one worker a core, the cores idled meanwhile (on 2 cores, one run: 723 s with
    2 workers, 548 s with 3). PYTEST_XDIST_AUTO_NUM_WORKERS, when set, decides instead (pytest-xdist's own)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test whose fixtures include ``pg_service`` joins :data:`ENGINE_POSTGRES`'s group (before
    pytest-xdist's own hook reads the groups). The test that restarts the PostgreSQL server goes first (see
    :func:`postgres_up`), then those marked ``starts_first`` (minutes spent mostly waiting on a deployment's
    processes), so that pytest-xdist's other workers run the rest meanwhile instead of waiting for them at the
    end. The sort is stable: the other tests keep their order."""
    for item in items:
        if "pg_service" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("xdist_group"):
            item.add_marker(ENGINE_POSTGRES)
    items.sort(key=lambda item: ("postgres_alone" not in getattr(item, "fixturenames", ()),
                                 item.get_closest_marker("starts_first") is None))


@pytest.fixture(autouse=True)
def grouped_by_xdist(request: pytest.FixtureRequest) -> None:
    """A pytest-xdist worker under --dist loadgroup names each grouped test ``nodeid@group``, which is how the
    scheduler keeps a group on one worker. Unnamed, the group's tests would run at once on several workers and
    fail by chance; each fails here instead, saying why (pytest 9.2 with pytest-xdist 3.8: pyproject.toml)."""
    item = request.node
    if getattr(request.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group") \
            and "@" not in item.nodeid.rpartition("]")[2]:
        pytest.fail("pytest-xdist did not keep this test's xdist_group on one worker: use a pytest and "
                    "pytest-xdist whose --dist loadgroup works (see pyproject.toml)", pytrace=False)


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run that every pytest-xdist worker shares (each worker's own base folder is in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def postgres_server_lock(tmp_path_factory: pytest.TempPathFactory, *, alone: bool) -> Iterator[None]:
    """Held while a test needs the PostgreSQL server up (shared: any number at once), or ``alone`` while a test
    stops and starts it, which waits for every other holder to finish first: a Dagster storage on the server in
    another worker would otherwise lose its connections in the middle of a run."""
    with (run_folder(tmp_path_factory) / "postgres-server.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: The file :func:`postgres_alone` leaves in :func:`run_folder` once its test is over and the server is up.
POSTGRES_RESTARTED = "postgres-restarted"


@pytest.fixture
def postgres_alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The PostgreSQL server for this test alone (it stops and starts it): every test holding
    :func:`postgres_up` in another worker finishes first, and none starts until this test is over."""
    try:
        with postgres_server_lock(tmp_path_factory, alone=True):
            yield
    finally:
        (run_folder(tmp_path_factory) / POSTGRES_RESTARTED).touch()


@pytest.fixture
def postgres_up(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The PostgreSQL server stays up for the test (:func:`postgres_server_lock`). Under pytest-xdist, when the
    run holds the test that restarts the server, this first waits for that test to be over: it runs first, on
    the worker of :data:`ENGINE_POSTGRES`'s group (the group goes out first), while a Dagster deployment that
    got the server first would hold it for minutes. Tests in that group need not ask: they run on the
    restarting test's worker, in turn."""
    restarts = any("postgres_alone" in getattr(item, "fixturenames", ()) for item in request.session.items)
    if restarts and os.environ.get("PYTEST_XDIST_WORKER"):
        restarted, deadline = run_folder(tmp_path_factory) / POSTGRES_RESTARTED, time.monotonic() + 600
        while not restarted.exists() and time.monotonic() < deadline:  # bounded: never a run that hangs
            time.sleep(0.2)
    with postgres_server_lock(tmp_path_factory, alone=False):
        yield


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cache folder of every ``sqlcmp evaluate`` the tests run (in this process or a child): one of the
    run's own, never the user's. Every pytest-xdist worker shares it, as every test of a run in one process
    does (the store takes writers in several processes): a worker of its own would evaluate again the gold
    queries another worker already ran."""
    with pytest.MonkeyPatch.context() as patch:
        folder = run_folder(tmp_path_factory) / "cache"
        folder.mkdir(exist_ok=True)
        patch.setenv("SQLCMP_CACHE_DIR", str(folder))
        yield folder


def forget_reports() -> None:
    """Drop the deterministic reports this process keeps for the next case with the same inputs
    (``pipeline.REPORTS_KEPT``), as a new process starts: for a test that stands for separate runs."""
    reports = current().reports
    with reports.lock:
        reports.entries.clear()


@pytest.fixture(autouse=True)
def no_kept_reports() -> None:
    """Each test starts with no deterministic report kept from an earlier one: a test that counts what a case
    runs, or swaps a part of the engine, would otherwise read the report of a test before it with the same case."""
    forget_reports()


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sample")
    build_sample_database(folder / f"{SAMPLE_DB_ID}.sqlite")
    return folder


@pytest.fixture(scope="session")
def sample_db(sample_dir: Path) -> Path:
    return sample_dir / f"{SAMPLE_DB_ID}.sqlite"


@pytest.fixture(scope="session")
def evaluator(sample_dir: Path) -> Evaluator:
    return Evaluator(db_dir=sample_dir, default_db=SAMPLE_DB_ID)


@pytest.fixture
def run(evaluator: Evaluator) -> Callable[..., Report]:
    """Compare ``actual`` with ``expected`` on the sample database under the given config options."""

    def _run(expected: str | list[str], actual: str, **config: Any) -> Report:
        request = CompareRequest(expected_sql=expected, actual_sql=actual, config=EvalConfig(**config))
        return evaluator.evaluate(request)

    return _run


class ChatServer:
    """A tiny OpenAI-compatible chat-completions server on loopback, scripted per request."""

    def __init__(self, script: Callable[[int], tuple[int, Any, float]]) -> None:
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server._lock:
                    server.calls += 1
                    number = server.calls
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                status, content, delay = script(number)
                time.sleep(delay)
                # Done before the answer is sent: the client may send its next request the moment it has the
                # answer, before this thread would run a decrement placed after the write (3 in flight of 2, once
                # in CI); a client past its bound still shows, its requests overlapping in the delay above.
                with server._lock:
                    server.in_flight -= 1
                body = {"id": f"c{number}", "object": "chat.completion", "created": 0, "model": "local-test",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
                payload = json.dumps(body if status == 200 else {"error": {"message": "slow down"}}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int], tuple[int, Any, float]]], ChatServer]]:
    servers: list[ChatServer] = []

    def start(script: Callable[[int], tuple[int, Any, float]]) -> ChatServer:
        server = ChatServer(script)
        server.thread.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.httpd.shutdown()
        server.httpd.server_close()


def sqlite_file(path: Path, script: str) -> Path:
    """A SQLite database file at ``path`` built by ``script`` (statements separated by semicolons)."""
    connection = sqlite3.connect(path)
    connection.executescript(script)
    connection.commit()
    connection.close()
    return path


def compare_on(db: Path, expected: str, actual: str, **config: object) -> Report:
    """One pair's report on the database file ``db``, under ``config`` (EvalConfig's fields)."""
    evaluator = Evaluator(default_db=str(db))
    try:
        return evaluator.evaluate(CompareRequest(expected_sql=expected, actual_sql=actual,
                                                 config=EvalConfig(**config)))  # type: ignore[arg-type]
    finally:
        evaluator.close()


def schema_of(path: Path) -> Schema:
    """The schema of the SQLite file at ``path``, read as the neighbor search reads it."""
    database = ExecutionAdapter(str(path))
    try:
        schema = read_schema(database, 40, 10_000)
    finally:
        database.close()
    assert not isinstance(schema, str), schema
    return schema


def plain_tables_of(path: Path) -> dict[str, frozenset[str]] | None:
    """The base tables the equivalence proof resolves names against on the SQLite file at ``path``
    (:attr:`~sqlcmp_dagster.engine.neighbors.schema.Schema.plain_tables`)."""
    return schema_of(path).plain_tables


def service(variable: str) -> str:
    """The value of a service variable set by ``.ci/services.sh``; without it the test is skipped, or fails when
    ``SQLCMP_REQUIRE_SERVICES=1`` (as in CI)."""
    value = os.environ.get(variable)
    if not value:
        if os.environ.get("SQLCMP_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{variable} is not set: run .ci/services.sh")
        pytest.skip(f"{variable} not set (run .ci/services.sh to start the service)")
    return value


@contextmanager
def dagster_webserver(home: Path, **env: str) -> Iterator[str]:
    """``dagster-webserver`` on a free loopback port over the project's workspace.yaml, with ``DAGSTER_HOME`` at
    ``home`` and ``env`` added to the environment; yields its base URL and stops it after."""
    root = Path(__file__).resolve().parents[1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    command = [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port),
               "-w", str(root / "workspace.yaml")]
    process = subprocess.Popen(command, cwd=root, env={**os.environ, "DAGSTER_HOME": str(home), **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if process.poll() is not None:
                error = process.stderr.read().decode() if process.stderr else ""
                pytest.fail(f"dagster-webserver exited: {error[-2000:]}")
            try:
                urllib.request.urlopen(base + "/server_info", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("dagster-webserver did not answer within 120 s")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def spider_data_dir() -> Path:
    """The real Spider dev set: ``SQLCMP_SPIDER_DIR``, else ``../shared/data/spider`` beside the project."""
    configured = os.environ.get("SQLCMP_SPIDER_DIR")
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "data" / "spider"


@pytest.fixture(scope="session")
def spider_dir() -> Path:
    folder = spider_data_dir()
    if not (folder / "dev.json").is_file():
        message = f"the real Spider dev set is not at {folder} (set SQLCMP_SPIDER_DIR)"
        if os.environ.get("SQLCMP_REQUIRE_SPIDER"):  # CI: the data is beside the clone, so absence is a failure
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def spider_suites(spider_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Spider dev imported twice through the CLI (SuperSQL's predictions, and gold as the prediction), with every
    database checked against tables.json; the cases run on the databases where they are (read-only). Imported
    once per run: the first pytest-xdist worker to ask imports, under a lock, and the others read its files."""
    from filelock import FileLock

    folder = run_folder(tmp_path_factory) / "spider"
    with FileLock(f"{folder}.lock"):
        if not (folder / "imported").is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that died part way through
            folder.mkdir()
            _import_spider(spider_dir, folder)
            (folder / "imported").touch()
    return {"db_dir": spider_dir / "database", "supersql": folder / "supersql.jsonl", "gold": folder / "gold.jsonl"}


def _import_spider(spider_dir: Path, folder: Path) -> None:
    """:func:`spider_suites`'s two suites, written to ``folder``."""
    from sqlcmp_dagster.cli import main

    gold_as_prediction = folder / "gold_pred.sql"
    gold_as_prediction.write_text("".join(line.split("\t")[0] + "\n" for line in
                                          (spider_dir / "dev_gold.sql").read_text(encoding="utf-8").splitlines()
                                          if line.strip()), encoding="utf-8")
    for name, prediction in (("supersql", spider_dir / "predictions" / "SuperSQL.sql"), ("gold", gold_as_prediction)):
        code = main(["import", "spider", "--questions", str(spider_dir / "dev.json"),
                     "--gold", str(spider_dir / "dev_gold.sql"), "--pred", str(prediction),
                     "--db-dir", str(spider_dir / "database"), "--tables", str(spider_dir / "tables.json"),
                     "--out", str(folder / f"{name}.jsonl")])
        assert code == 0


@pytest.fixture(scope="session")
def pg_service() -> tuple[str, str]:
    """The PostgreSQL of ``.ci/services.sh``: (the engine's URL, a SELECT-only role; the superuser's URL, which
    only builds test tables, holds Dagster's storage and proves the engine refuses it). Skipped without the
    service unless ``SQLCMP_REQUIRE_SERVICES=1``."""
    url, admin_url = os.environ.get("SQLCMP_TEST_PG_URL"), os.environ.get("SQLCMP_TEST_PG_ADMIN_URL")
    if not (url and admin_url):
        if os.environ.get("SQLCMP_REQUIRE_SERVICES") == "1":
            pytest.fail("SQLCMP_TEST_PG_URL / SQLCMP_TEST_PG_ADMIN_URL not set: run .ci/services.sh")
        pytest.skip("SQLCMP_TEST_PG_URL not set (run .ci/services.sh)")
    return url, admin_url


def pg_schema(admin_url: str, schema: str, *statements: str) -> None:
    """Recreate ``schema`` as the superuser and run ``statements`` in it (the engine's role may read it)."""
    import sqlalchemy as sa

    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        for statement in (f"DROP SCHEMA IF EXISTS {schema} CASCADE", f"CREATE SCHEMA {schema}", *statements):
            connection.execute(sa.text(statement))
    admin.dispose()


@pytest.fixture(scope="session")
def tiny_duck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB file with a table t(a, b) of ten rows."""
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path_factory.mktemp("duck") / "tiny.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute("CREATE TABLE t AS SELECT range AS a, 'v' || range AS b FROM range(10)")
    connection.close()
    return path


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh bucket on the loopback S3-compatible server of ``.ci/services.sh`` (``SQLCMP_TEST_S3_ENDPOINT``);
    the store is configured as a deployment would be, by URL and the standard AWS environment variables (set
    here, so child processes inherit them)."""
    endpoint = service("SQLCMP_TEST_S3_ENDPOINT")
    s3fs = pytest.importorskip("s3fs")
    for name, value in (("AWS_ACCESS_KEY_ID", "sqlcmp"), ("AWS_SECRET_ACCESS_KEY", "sqlcmp"),
                        ("AWS_ENDPOINT_URL_S3", endpoint), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    name = f"sqlcmp-dagster-{uuid.uuid4().hex[:12]}"
    filesystem = s3fs.S3FileSystem(endpoint_url=endpoint, key="sqlcmp", secret="sqlcmp")
    filesystem.mkdir(name)
    yield name
    filesystem.rm(name, recursive=True)


@pytest.fixture
def fresh_pg_database(postgres_up: None) -> Iterator[Callable[[], str]]:
    """A factory of PostgreSQL databases of their own on the CI server (its superuser owns them, as Dagster's
    storage needs), each a URL; all are dropped after the test."""
    import sqlalchemy as sa

    admin_url = service("SQLCMP_TEST_PG_ADMIN_URL")
    # A new connection for each statement: a kept one may be closed by the server while the test runs.
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    names: list[str] = []

    def create() -> str:
        name = f"sqlcmp_test_{uuid.uuid4().hex[:10]}"
        with admin.connect() as connection:
            connection.execute(sa.text(f"CREATE DATABASE {name}"))
        names.append(name)
        return sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)

    yield create
    with admin.connect() as connection:
        for name in names:
            connection.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


def untimed(value: Any) -> Any:
    """A report's JSON without run_metadata and timings, at any depth: the only parts in which two runs of one
    case may differ (another worker count, a cached run, a resumed or streamed one)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items()
                if k != "run_metadata" and not k.endswith("_ms") and "time" not in k}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value
