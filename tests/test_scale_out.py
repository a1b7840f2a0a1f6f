"""Scale-out: the unchanged evaluation job on Dagster's multiprocess executor and on two Celery workers
(``dagster-celery``, Redis broker, each run a task that a worker executes whole), with PostgreSQL run/event
storage and the S3-compatible case store; the case sensor's first load split into runs of at most N cases by the
layer assets' ``BackfillPolicy.multi_run(N)``.

Every service is the one ``.ci/services.sh`` starts (Redis, PostgreSQL, moto on loopback); every command is
docs/dagster.md's ("Scale-out"). The reports must equal those of the in-process run, timings aside.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from conftest import service
from sqlcmp_dagster.assets.common import RANGE_END, RANGE_START
from sqlcmp_dagster.cases.chunks import chunk_of
from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.engine.records import reports_from_frame
from sqlcmp_dagster.local import sensor_tick
from sqlcmp_dagster.resources.storage import read_asset

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's console scripts: dagster, dagster-daemon, dagster-celery, celery
#: The workers' and the runs' executor settings: the executor reads the broker's URL from the environment, and
#: this file (the workers' ``-y``) names the same variables.
CELERY_YAML = """execution:
  config:
    broker:
      env: SQLCMP_CELERY_BROKER
    backend:
      env: SQLCMP_CELERY_BROKER
"""
#: The deployment's two Celery workers.
WORKERS = ("sqlcmp-w1", "sqlcmp-w2")
#: Settings of ``$DAGSTER_HOME/dagster.yaml``. The runs go to the broker as Celery tasks (dagster-celery's run
#: launcher), and each worker executes a whole run, its steps one after another in the worker's process (the
#: in-process executor): no process to start per run, no task and no round trip through the broker per step.
#: Dagster's run queue lets as many runs go as there are workers, checking every second: a run waiting on the
#: broker is STARTING, which run monitoring fails after 180 s, while one waiting in Dagster's queue is QUEUED.
RUN_LAUNCHER = {"run_launcher": {"module": "dagster_celery.launcher", "class": "CeleryRunLauncher",
                                 "config": {"broker": {"env": "SQLCMP_CELERY_BROKER"},
                                            "backend": {"env": "SQLCMP_CELERY_BROKER"}}},
                "run_queue": {"max_concurrent_runs": len(WORKERS), "dequeue_interval_seconds": 1}}
#: Each worker: one process (a run at a time), the code location and the instance's PostgreSQL storage imported
#: once as it starts (``-i``) rather than by its first run (each run's task opens an instance of its own: with the
#: storage's modules to import, the first run began about a second after a worker took it), and a run taken from
#: the broker only when that process is free: by default a busy worker also holds the next task, while the other
#: worker may have none.
WORKER_OPTIONS = ("-i", "sqlcmp_dagster.definitions", "-i", "sqlcmp_dagster.event_log_postgres", "--",
                  "--concurrency=1", "--disable-prefetch")
#: The deployment's workspace: the code location served by its own code server, which the daemon (and a
#: webserver) use instead of each starting one as they start.
WORKSPACE = "deploy/workspace.yaml"
#: The code server's command line, but for its port (``SQLCMP_CODE_SERVER_PORT``, which the workspace names).
CODE_SERVER_OPTIONS = ("-m", "sqlcmp_dagster.definitions", "-a", "defs", "--location-name",
                       "sqlcmp_dagster.definitions", "-h", "127.0.0.1")
#: Spider dev's 1,034 cases as docs/dagster.md's deployment takes them: 16 chunks of cases (a partition each), in
#: two runs of 8 chunks, one per worker.
CHUNKS, CHUNKS_PER_RUN = 16, 8
#: Clock limits of the sampled cases, far above what any of them needs even on a heavily loaded machine. The
#: engine's clocks are safety caps (a query's timeout, the case's budget, the fix search's and the neighbor
#: search's share of it): a case that hits one says so in its report, so on a machine slow enough to hit one
#: in one run and not in the other the reports would differ for a reason that is not the executor's.
UNHURRIED = {"query_timeout_ms": 120_000, "neighbor_time_budget_ms": 360_000}
#: The multiprocess executor's steps forked from one server process that imported the code location once, instead
#: of a fresh interpreter per step importing dagster and the package again (seconds of CPU each).
FORKSERVER_YAML = """execution:
  config:
    multiprocess:
      start_method:
        forkserver:
          preload_modules: [sqlcmp_dagster.definitions]
"""
DONE = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@pytest.fixture
def dagster_home(tmp_path: Path, fresh_pg_database: Any) -> Path:
    """A DAGSTER_HOME whose dagster.yaml puts run, event-log and schedule storage in a fresh PostgreSQL database
    of the CI server (dropped afterwards), with this project's batched event log, and launches runs onto the
    Celery workers, as docs/dagster.md's deployment."""
    pytest.importorskip("dagster_postgres")
    home = tmp_path / "dagster_home"
    home.mkdir()
    from sqlcmp_dagster.event_log_postgres import postgres_instance

    (home / "dagster.yaml").write_text(yaml.safe_dump({**postgres_instance(fresh_pg_database()), **RUN_LAUNCHER,
                                                       "telemetry": {"enabled": False}}), encoding="utf-8")
    (home / "celery.yaml").write_text(CELERY_YAML, encoding="utf-8")
    return home


#: Where :func:`broker` claims a Redis database (1 to 15) for a test: a key per database in database 0.
BROKER_CLAIM = "sqlcmp-test-broker:{}"


@pytest.fixture
def broker() -> Iterator[str]:
    """A Redis database of its own on the loopback server (so no other test's queue is shared), emptied after.
    Claimed in database 0 (SET NX, expiring after an hour if a run dies holding it): tests running at once in
    other pytest-xdist workers, or in another run on the machine, each get another one."""
    redis = pytest.importorskip("redis")
    base = service("SQLCMP_TEST_REDIS_URL")
    claims = redis.Redis.from_url(f"{base}/0")
    token = uuid.uuid4().hex
    number = next((n for n in random.sample(range(1, 16), 15)
                   if claims.set(BROKER_CLAIM.format(n), token, nx=True, ex=3600)), None)
    if number is None:
        pytest.fail("every Redis database 1-15 is claimed by another test")
    url = f"{base}/{number}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
        if claims.get(BROKER_CLAIM.format(number)) == token.encode():
            claims.delete(BROKER_CLAIM.format(number))
        claims.close()


class Processes:
    """Long-running commands of a deployment (workers, the code server, the daemon), each in a session of its own
    so that it stops with every child it started; their output goes to a log file each, shown when a wait times
    out."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env = folder, env
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, *command: str) -> None:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.started.append((process, log))

    def prepare(self, home: Path) -> None:
        """docs/dagster.md's deployment up to the daemon: the storage's tables, the two workers, the code server
        (ready: it answers the daemon's first request), the case sensor turned on. The tables first, by one
        process: Dagster's PostgreSQL storage creates missing tables as an instance opens, and instances opening
        at once on a fresh database race (DuplicateTable)."""
        self.dagster("instance", "migrate")
        for name in WORKERS:
            self.start(name, str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
                       "-y", str(home / "celery.yaml"), "-n", name, *WORKER_OPTIONS)
        self.start("code-server", str(BIN / "dagster"), "code-server", "start", *CODE_SERVER_OPTIONS,
                   "-p", self.env["SQLCMP_CODE_SERVER_PORT"])
        self.wait_for_code_server()
        self.dagster("sensor", "start", "case_sensor", "-w", WORKSPACE)

    def start_daemon(self) -> None:
        """The daemon, on the code server: the last command of the deployment."""
        self.start("daemon", str(BIN / "dagster-daemon"), "run", "-w", WORKSPACE)

    def wait_for_code_server(self, timeout: float = 300) -> None:
        """Return once the code server answers docs/dagster.md's health check."""
        deadline = time.monotonic() + timeout
        check = [str(BIN / "dagster"), "api", "grpc-health-check", "-p", self.env["SQLCMP_CODE_SERVER_PORT"]]
        while subprocess.run(check, env=self.env, capture_output=True, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the code server did not answer in {timeout:.0f} s:\n{self.logs()}")
            time.sleep(0.2)

    def dagster(self, *command: str) -> None:
        """A ``dagster`` command in the deployment's environment, which must succeed."""
        done = subprocess.run([str(BIN / "dagster"), *command], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"dagster {' '.join(command)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
                               f"{self.logs()}")

    def named(self, pid: int) -> str:
        """The name of the started command whose session holds process ``pid`` (a worker's pool process)."""
        session = os.getsid(pid)
        return next(log.stem for process, log in self.started if process.pid == session)

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for _, log in self.started)

    def stop(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, _ in self.started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def deployment_environment(home: Path, cases: Path, db_dir: Path, store: str, **extra: str) -> dict[str, str]:
    """What every process of docs/dagster.md's deployment gets: its locations, a free port for the code server
    and ``extra`` (the executor, the broker, the chunks)."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DAGSTER_HOME": str(home),
            "SQLCMP_CASES_DIR": str(cases), "SQLCMP_DB_DIR": str(db_dir), "SQLCMP_STORAGE_DIR": store,
            "SQLCMP_CODE_SERVER_PORT": str(free_port()), **extra}


def free_port() -> int:
    """A loopback TCP port that nothing listens on now (the code server's)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _comparable(value: Any) -> Any:
    """A report's JSON without measured durations (every ``*_ms`` key): what two runs of a case must share."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if not k.endswith("_ms")}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def _first_difference(left: Any, right: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first field (a dotted path, list indexes in brackets) where two report JSONs differ, with both values;
    None when they are equal."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right)):
            found = _first_difference(left.get(key, "<absent>"), right.get(key, "<absent>"),
                                      f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            found = _first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        return None
    return None if left == right else (path, left, right)


def assert_same_reports(actual: dict[str, Any], reference: dict[str, Any], folder: Path, label: str) -> None:
    """Fail naming the first differing case and field, and how many cases differ; both sides' reports are
    written to ``folder`` first (the store they came from may be gone by the time anyone reads the failure)."""
    if actual == reference:
        return
    for name, reports in ((label, actual), ("in_process", reference)):
        (folder / f"{name}_reports.json").write_text(json.dumps(reports, indent=1, sort_keys=True), encoding="utf-8")
    differing = sorted(case for case in set(actual) | set(reference) if actual.get(case) != reference.get(case))
    first = differing[0]
    field, ours, theirs = _first_difference(actual.get(first, "<absent>"), reference.get(first, "<absent>")) \
        or ("", None, None)
    pytest.fail(f"{len(differing)} of {len(reference)} reports differ from the in-process run's: first case "
                f"{first!r}, field {field!r}: {label} {json.dumps(ours)[:2000]} vs in-process "
                f"{json.dumps(theirs)[:2000]} (other cases: {differing[1:11]}; both sides in {folder})")


def _in_process_reports(cases: Path, db_dir: Path, store: Path) -> dict[str, Any]:
    """The reference: the same cases through every layer in one in-process run (``sqlcmp demo``'s way)."""
    defs = build_definitions(cases_dir=str(cases), db_dir=str(db_dir), storage_dir=str(store))
    with dg.DagsterInstance.ephemeral() as instance:
        tick = sensor_tick(defs, instance, None)
        assert len(tick.runs) == 1 and tick.runs[0].success
    return {r.case_id: _comparable(r.model_dump(mode="json"))
            for r in reports_from_frame(read_asset(str(store), "case_reports"))}


def _wait_for_sensor_runs(instance: dg.DagsterInstance, count: int, processes: Processes,
                          timeout: float = 1800) -> list[dg.DagsterRun]:
    """The case sensor's runs once ``count`` of them have finished (the summary's own runs, which its automation
    sensor may start meanwhile, are not counted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": "case_sensor"}))
        if len(runs) >= count and all(run.status in DONE for run in runs):
            return runs
        time.sleep(2)
    pytest.fail(f"{count} runs did not finish in {timeout:.0f} s: "
                f"{[(r.run_id[:8], r.status.value) for r in instance.get_runs()]}\n{processes.logs()}")


def _spider_dev(spider_suites: dict[str, Path], folder: Path) -> list[str]:
    """Spider dev's SuperSQL cases, all 1,034, under :data:`UNHURRIED` clock limits, as a suite in ``folder``."""
    cases = [json.loads(line) for line in spider_suites["supersql"].read_text(encoding="utf-8").splitlines()]
    suite = [{**case, "config": {**(case.get("config") or {}), **UNHURRIED}} for case in cases]
    folder.mkdir()
    (folder / "spider.jsonl").write_text("".join(json.dumps(case) + "\n" for case in suite), encoding="utf-8")
    return [case["case_id"] for case in suite]


@pytest.mark.spider
@pytest.mark.starts_first
def test_spider_dev_on_two_celery_workers_matches_the_in_process_run(
        tmp_path: Path, spider_suites: dict[str, Path], dagster_home: Path, broker: str, bucket: str) -> None:
    pytest.importorskip("dagster_celery")
    cases = tmp_path / "cases"
    case_ids = _spider_dev(spider_suites, cases)
    store = f"s3://{bucket}/store"
    env = deployment_environment(dagster_home, cases, spider_suites["db_dir"], store, SQLCMP_EXECUTOR="in_process",
                                 SQLCMP_CELERY_BROKER=broker, SQLCMP_CASE_CHUNKS=str(CHUNKS),
                                 SQLCMP_CASES_PER_RUN=str(CHUNKS_PER_RUN))
    processes = Processes(tmp_path, env)
    try:
        processes.prepare(dagster_home)
        processes.start_daemon()
        # The reference run meanwhile: the deployment spends much of its time waiting (process starts, the
        # sensor's first tick, the run queue), and the reports must not depend on the machine's load.
        in_process = _in_process_reports(cases, spider_suites["db_dir"], tmp_path / "local_store")
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            runs = _wait_for_sensor_runs(instance, CHUNKS // CHUNKS_PER_RUN, processes)
            assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS] * len(runs), processes.logs()
            assert {run.job_name for run in runs} == {"evaluation_job"}
            ranges = [(run.tags[RANGE_START], run.tags[RANGE_END]) for run in runs]
            order = instance.get_dynamic_partitions("cases")
            spans = sorted(order[order.index(start):order.index(end) + 1] for start, end in ranges)
            assert [len(span) for span in spans] == [CHUNKS_PER_RUN, CHUNKS - CHUNKS_PER_RUN]  # multi_run(N)
            assert sorted(key for span in spans for key in span) == \
                sorted({chunk_of(case, CHUNKS) for case in case_ids})
            # Each run was one Celery task: its steps ran in the pool process of the worker that took it.
            pids = {run.run_id: {entry.dagster_event.pid for entry in
                                 instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)}
                    for run in runs}
            assert all(len(steps) == 1 for steps in pids.values()), pids
            assert {processes.named(pid) for steps in pids.values() for pid in steps} == set(WORKERS)
    finally:
        processes.stop()
    # Read before the bucket goes: a difference is reported (and both sides written to tmp_path) from here.
    distributed = {r.case_id: _comparable(r.model_dump(mode="json"))
                   for r in reports_from_frame(read_asset(store, "case_reports"))}
    assert sorted(distributed) == sorted(case_ids)
    assert_same_reports(distributed, in_process, tmp_path, "celery")


def test_evaluation_job_on_the_multiprocess_executor_matches_the_in_process_run(
        tmp_path: Path, sample_dir: Path, dagster_home: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    lines = sample_suite_path().read_text(encoding="utf-8").splitlines()[:6]
    (cases / "suite.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    keys = [json.loads(line)["case_id"] for line in lines]
    env = deployment_environment(dagster_home, cases, sample_dir, str(tmp_path / "store"))
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.add_dynamic_partitions("cases", keys)
        tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
        (tmp_path / "forkserver.yaml").write_text(FORKSERVER_YAML, encoding="utf-8")
        out = subprocess.run([str(BIN / "dagster"), "job", "execute", "-m", "sqlcmp_dagster.definitions", "-a", "defs",
                              "-j", "evaluation_job", "-c", str(tmp_path / "forkserver.yaml"),
                              "--tags", json.dumps(tags)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        (run,) = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS
        messages = [event.message for event in instance.all_logs(run.run_id)]
        assert any("multiprocess executor" in (message or "") for message in messages)
    multiprocess = {r.case_id: _comparable(r.model_dump(mode="json"))
                    for r in reports_from_frame(read_asset(str(tmp_path / "store"), "case_reports"))}
    assert_same_reports(multiprocess, _in_process_reports(cases, sample_dir, tmp_path / "local_store"), tmp_path,
                        "multiprocess")


def test_sensor_splits_a_first_load_into_runs_of_the_backfill_policy_size(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlcmp_dagster.assets import sensors
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

    monkeypatch.setattr("sqlcmp_dagster.assets.common.LAYER_BACKFILL_POLICY", dg.BackfillPolicy.multi_run(3))
    cases = tmp_path / "cases"
    cases.mkdir()
    lines = sample_suite_path().read_text(encoding="utf-8").splitlines()[:7]
    (cases / "suite.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    keys = [json.loads(line)["case_id"] for line in lines]
    result = sensors.changed_case_runs(CaseSuiteResource(folder=str(cases)), DatabaseResource(db_dir=str(sample_dir)),
                                       [], None, lambda ids: {})
    spans = [(r.tags.get(sensors.RANGE_START), r.tags.get(sensors.RANGE_END), r.partition_key)
             for r in result.run_requests or []]
    assert spans == [(keys[0], keys[2], None), (keys[3], keys[5], None), (None, None, keys[6])]


@pytest.mark.parametrize("value", ["0", "many", "-2"])
def test_cases_per_run_must_be_a_positive_whole_number(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlcmp_dagster.assets.common import layer_backfill_policy

    monkeypatch.setenv("SQLCMP_CASES_PER_RUN", value)
    with pytest.raises(ValueError, match=f"SQLCMP_CASES_PER_RUN must be a whole number of cases >= 1, not '{value}'"):
        layer_backfill_policy()
    monkeypatch.setenv("SQLCMP_CASES_PER_RUN", "40")
    assert layer_backfill_policy() == dg.BackfillPolicy.multi_run(40)


def test_sensor_keeps_a_suite_whose_first_line_broke_and_says_what_it_cannot_take(
        tmp_path: Path, sample_dir: Path) -> None:
    """A suite whose first line broke stayed a suite no longer, and every partition of its cases was deleted;
    a case with an empty id was loaded and failed the run's blocking contract for every case of it; an id with
    NUL made a PostgreSQL instance refuse every new partition of the tick; an id with ESC or a bidirectional
    override was shown in the UI as another; and none of it was said (reviews' findings). Now the broken line is
    one error, the empty id is refused as the suite loads, the id Dagster cannot hold or show is not added, and
    the sensor says each."""
    from sqlcmp_dagster.assets import sensors
    from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource

    cases = tmp_path / "cases"
    cases.mkdir()
    good = [json.dumps({"case_id": name, "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"})
            for name in ("a", "b")]
    bad = [json.dumps({"case_id": "", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"}),
           *(json.dumps({"case_id": name, "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop"})
             for name in ("nul\u0000id", "esc\u001bid", "case-\u202e1-9"))]
    (cases / "suite.jsonl").write_text("{oops\n" + "".join(line + "\n" for line in good + bad), encoding="utf-8")
    warnings: list[str] = []
    result = sensors.changed_case_runs(CaseSuiteResource(folder=str(cases)), DatabaseResource(db_dir=str(sample_dir)),
                                       ["a", "b"], None, lambda ids: {}, warnings.append)
    assert not any(isinstance(r, dg.DeleteDynamicPartitionsRequest) for r in result.dynamic_partitions_requests or [])
    assert not result.dynamic_partitions_requests  # a and b exist; the NUL id is not added
    assert [w.split(": ", 1)[0] for w in warnings] == \
        ["suite line skipped"] * 2 + [f"case {name!r} is not evaluated in Dagster"
                                      for name in ("nul\x00id", "esc\x1bid", "case-\u202e1-9")]
    assert "invalid JSON" in warnings[0] and "case_id is empty" in warnings[1]


@pytest.mark.starts_first
def test_a_worker_killed_mid_run_ends_with_every_case_reported(tmp_path: Path, sample_dir: Path,
                                                               dagster_home: Path, broker: str) -> None:
    """docs/dagster.md's deployment with SQLCMP_RUN_MAX_SECONDS: the Celery worker running a run is killed
    (SIGKILL) in the middle of a step (a case whose queries take seconds), so the run stays STARTED with nothing
    running it; the daemon's run monitoring fails the run past its time limit, the case sensor requests its cases
    again, the other worker takes them, and every case ends with its report."""
    pytest.importorskip("dagster_celery")
    config = yaml.safe_load((dagster_home / "dagster.yaml").read_text(encoding="utf-8"))
    config["run_monitoring"] = {"enabled": True, "poll_interval_seconds": 5}  # a test's patience
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    cases = tmp_path / "cases"
    cases.mkdir()
    slow = {"case_id": "slow", "db": "shop", "expected_sql": SLOW_SQL, "actual_sql": SLOW_SQL,
            "config": UNHURRIED}
    lines = [json.dumps(slow), *sample_suite_path().read_text(encoding="utf-8").splitlines()[:7]]
    (cases / "suite.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    case_ids = [json.loads(line)["case_id"] for line in lines]
    store = str(tmp_path / "store")
    env = deployment_environment(dagster_home, cases, sample_dir, store, SQLCMP_EXECUTOR="in_process",
                                 SQLCMP_CELERY_BROKER=broker, SQLCMP_CASES_PER_RUN="4", SQLCMP_RUN_MAX_SECONDS="150")
    processes = Processes(tmp_path, env)
    try:
        processes.prepare(dagster_home)
        processes.start_daemon()
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            _kill_the_worker_of(instance, processes, "slow", "executions")
            deadline = time.monotonic() + 1500
            while not set(case_ids) <= set(_reported_case_ids(store)):
                assert time.monotonic() < deadline, (
                    f"cases never reported: {sorted(set(case_ids) - set(_reported_case_ids(store)))}: "
                    f"{[(r.run_id[:8], r.status.value) for r in instance.get_runs()]}\n{processes.logs()}")
                time.sleep(5)
            while True:  # the retry's run ends a moment after its last case is stored
                runs = instance.get_runs(filters=dg.RunsFilter(tags={RANGE_START: "slow"}))
                if all(run.status in DONE for run in runs) or time.monotonic() > deadline:
                    break
                time.sleep(2)
            statuses = sorted(run.status.value for run in runs)
            assert statuses == ["FAILURE", "SUCCESS"], statuses  # the stuck run failed, and its cases ran again
            # Runs fail only by the time limit, never by a step: a retry is a range of the same cases, in order.
            step_failures = [(run.run_id[:8], run.tags.get(RANGE_START), run.tags.get(RANGE_END), entry.step_key)
                             for run in instance.get_runs()
                             for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)]
            assert step_failures == [], f"{step_failures}\n{processes.logs()}"
    finally:
        processes.stop()


#: A query that runs for seconds on SQLite: the step that executes it is still running when its worker is killed.
SLOW_SQL = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10000000) "
            "SELECT count(*) AS c FROM r")


def _kill_the_worker_of(instance: dg.DagsterInstance, processes: Processes, first_case: str, step: str) -> None:
    """SIGKILL the worker running the run that starts at ``first_case`` as soon as the run logs the start of
    ``step`` (the event names the process it ran in: the worker's pool process)."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        for run in instance.get_runs(filters=dg.RunsFilter(tags={RANGE_START: first_case})):
            for event in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START):
                if event.step_key == step:
                    os.killpg(os.getsid(event.dagster_event.pid), signal.SIGKILL)
                    return
        time.sleep(0.5)
    pytest.fail(f"no worker started {step} of the run starting at {first_case}\n{processes.logs()}")


def _reported_case_ids(store: str) -> list[str]:
    """The case ids with a report in the local store ``store``."""
    return read_asset(store, "case_reports")["case_id"].to_list()


def test_executor_is_the_one_sqlcmp_executor_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each choice of SQLCMP_EXECUTOR gives its executor: the deployment's whole runs on a worker run in-process,
    and Celery's per-step executor stays available."""
    pytest.importorskip("dagster_celery")
    from sqlcmp_dagster.definitions import executor_from_environment

    chosen = {}
    for choice in ("multiprocess", "in_process", "celery"):
        monkeypatch.setenv("SQLCMP_EXECUTOR", choice)
        executor = executor_from_environment()
        chosen[choice] = executor.name if executor else None
    assert chosen == {"multiprocess": None, "in_process": "in_process", "celery": "celery"}
    monkeypatch.setenv("SQLCMP_EXECUTOR", "dask")
    with pytest.raises(ValueError, match="SQLCMP_EXECUTOR must be 'multiprocess', 'in_process' or 'celery'"):
        executor_from_environment()
