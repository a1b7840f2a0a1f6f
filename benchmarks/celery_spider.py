"""Spider dev through docs/dagster.md's scale-out deployment, against ``sqlcmp evaluate`` on the same cores: the
figure of the target "the Celery path's wall time for Spider dev <= 3x the CLI's".

    SQLCMP_SPIDER_DIR=$S python benchmarks/celery_spider.py --suite spider.jsonl \\
        --pg-admin-url postgresql://sqlcmp:sqlcmp@127.0.0.1:5432/postgres --redis-url redis://127.0.0.1:6379/9

``--suite`` is Spider dev imported by ``sqlcmp import spider``. The deployment is the one the scale-out tests
start (tests/test_scale_out.py's :class:`Processes`): PostgreSQL run/event/schedule storage in a fresh database
(dropped afterwards), runs launched onto two ``dagster-celery`` workers of concurrency 1 on the Redis database of
``--redis-url`` (emptied before and after), each run executed whole by the worker that takes it, the daemon
running the case sensor, and the case store ``--store`` (default: a local folder; an object store's URL such as
``s3://bucket/prefix`` with its ``AWS_*`` variables set). Its time runs from the daemon's start to the moment
every case's report is in the store and every run of the case sensor has ended: the daemon's start, the sensor's
first tick, the run queue, every run on the workers, and storing. The workers and the code server are started
and ready before it, as they are already running in a deployment that gets a suite. The peer is ``sqlcmp
evaluate --workers 2 --no-cache`` over the same suite, in the same run; ``--rounds`` alternates the two.

``--chunks`` and ``--cases-per-run`` are the deployment's ``SQLCMP_CASE_CHUNKS`` and ``SQLCMP_CASES_PER_RUN``:
by default docs/dagster.md's 16 chunks of cases in runs of 8 chunks (2 runs, each a Celery task that one worker
executes); ``--chunks 0 --cases-per-run 520`` takes a partition per case, in runs of 520 cases.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the deployment the scale-out tests start, not a copy of it

import dagster as dg
import sqlalchemy as sa
import yaml
from test_scale_out import BIN, CELERY_YAML, DONE, RUN_LAUNCHER, WORKERS, Processes, deployment_environment

from sqlcmp_dagster.event_log_postgres import postgres_instance
from sqlcmp_dagster.resources.storage import read_asset

#: The target: the deployment's wall time over the CLI's.
TARGET = 3.0


def cli_seconds(suite: Path, db_dir: Path, work: Path) -> float:
    """Wall time of ``sqlcmp evaluate --workers 2`` over ``suite``, the gold cache off (the deployment's is cold)."""
    started = time.perf_counter()
    done = subprocess.run([str(BIN / "sqlcmp"), "evaluate", str(suite), "--db-dir", str(db_dir), "--workers", "2",
                           "--no-cache", "--quiet", "--out", str(work / "cli.jsonl")], capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 1: some case failed, as some of Spider dev's do
        raise RuntimeError(f"sqlcmp evaluate exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - started


def deployment_seconds(suite: Path, db_dir: Path, work: Path, pg_admin_url: str, redis_url: str,
                       cases_per_run: int, store: str | None, chunks: int = 0) -> tuple[float, str]:
    """Wall time of the deployment over ``suite`` (see the module's docstring) and its :func:`breakdown`."""
    import redis

    case_ids = {json.loads(line)["case_id"] for line in suite.read_text(encoding="utf-8").splitlines() if line}
    cases, home = work / "cases", work / "dagster_home"
    # a folder of its own under an object store's URL: a round must not find the objects of the round before
    store = f"{store.rstrip('/')}/{uuid.uuid4().hex[:10]}" if store else str(work / "store")
    cases.mkdir()
    home.mkdir()
    (cases / "suite.jsonl").write_bytes(suite.read_bytes())
    admin = sa.create_engine(pg_admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    database = f"sqlcmp_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.execute(sa.text(f"CREATE DATABASE {database}"))
    url = sa.make_url(pg_admin_url).set(database=database).render_as_string(hide_password=False)
    (home / "dagster.yaml").write_text(yaml.safe_dump({**postgres_instance(url), **RUN_LAUNCHER,
                                                       "telemetry": {"enabled": False}}), encoding="utf-8")
    (home / "celery.yaml").write_text(CELERY_YAML, encoding="utf-8")
    broker = redis.Redis.from_url(redis_url)
    broker.flushdb()
    env = deployment_environment(home, cases, db_dir, store, SQLCMP_EXECUTOR="in_process",
                                 SQLCMP_CELERY_BROKER=redis_url, SQLCMP_CASES_PER_RUN=str(cases_per_run),
                                 SQLCMP_CASE_CHUNKS=str(chunks))
    processes = Processes(work, env)
    try:
        processes.prepare(home)
        wait_for_workers(processes)
        started = time.perf_counter()
        processes.start_daemon()
        with dg.DagsterInstance.from_config(str(home)) as instance:
            while True:
                time.sleep(0.25)  # the end is known to a quarter of a second
                runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": "case_sensor"}))
                if runs and all(run.status in DONE for run in runs) and \
                        case_ids <= set(read_asset(store, "case_reports")["case_id"].to_list()):
                    return time.perf_counter() - started, breakdown(instance, runs, started)
                if any(process.poll() is not None for process, _ in processes.started):
                    raise RuntimeError(f"a process of the deployment ended:\n{processes.logs()}")
                if time.perf_counter() - started > 3600:
                    raise TimeoutError(f"not done in an hour:\n{processes.logs()}")
    finally:
        processes.stop()
        broker.flushdb()
        with admin.connect() as connection:
            connection.execute(sa.text(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        admin.dispose()


def wait_for_workers(processes: Processes, timeout: float = 300) -> None:
    """Return once every worker started by ``processes`` has said it is ready (Celery's "<name>@<host> ready."
    in its log): a worker still importing would share the cores with the daemon's start, which is timed."""
    deadline = time.monotonic() + timeout
    workers = [log for _, log in processes.started if log.stem in WORKERS]
    while not all(" ready." in log.read_text(errors="replace") for log in workers):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the workers were not ready in {timeout:.0f} s:\n{processes.logs()}")
        time.sleep(0.2)


#: The events that mark a run's way from the queue to its first step, by the name printed.
STAGES = {dg.DagsterEventType.RUN_ENQUEUED: "queued", dg.DagsterEventType.RUN_DEQUEUED: "taken from the queue",
          dg.DagsterEventType.RUN_STARTING: "sent to a worker", dg.DagsterEventType.RUN_START: "begun by it"}


def breakdown(instance: dg.DagsterInstance, runs: list[dg.DagsterRun], started: float) -> str:
    """Where a deployment's time went: per run, when it started after the daemon did, its length, and each
    step's length (from its STEP_START to its STEP_SUCCESS or STEP_FAILURE)."""
    origin = time.time() - (time.perf_counter() - started)
    created = min(instance.get_run_record_by_id(run.run_id).create_timestamp.timestamp() for run in runs)
    lines = [(f"  the case sensor's first run created at +{created - origin:.1f} s (the daemon's start, the first "
             f"tick: hashing every case, adding the partitions)")]
    for run in sorted(runs, key=lambda r: r.run_id):
        record = instance.get_run_record_by_id(run.run_id)
        begun, ended = (record.start_time or origin), (record.end_time or origin)
        steps: dict[str, float] = {}
        stages: dict[str, float] = {}
        for entry in instance.all_logs(run.run_id):
            event = entry.dagster_event
            if event is not None and event.event_type in STAGES:
                stages.setdefault(STAGES[event.event_type], entry.timestamp - origin)
            if event is None or event.step_key is None:
                continue
            if event.event_type == dg.DagsterEventType.STEP_START:
                steps[event.step_key] = -entry.timestamp
            elif event.event_type in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
                steps[event.step_key] = steps.get(event.step_key, 0.0) + entry.timestamp
        lines.append(f"  run {run.run_id[:8]}: " + ", ".join(f"{stage} +{at:.1f} s" for stage, at in stages.items())
                     + f"; started at +{begun - origin:.1f} s, took {ended - begun:.1f} s; "
                     + ", ".join(f"{step} {seconds:.1f} s" for step, seconds in steps.items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, required=True, help="Spider dev imported by 'sqlcmp import spider'")
    parser.add_argument("--db-dir", type=Path, help="its databases (default: $SQLCMP_SPIDER_DIR/database)")
    parser.add_argument("--pg-admin-url", required=True, help="a PostgreSQL role that may create databases")
    parser.add_argument("--redis-url", required=True, help="a Redis database the benchmark may empty")
    parser.add_argument("--chunks", type=int, default=16, help="partitions of N chunks of cases (0: one per case)")
    parser.add_argument("--cases-per-run", type=int, default=8, help="partitions per run: chunks, or cases")
    parser.add_argument("--store", help="the case store's URL (default: a local folder of the run's own)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    db_dir = args.db_dir or Path(os.environ["SQLCMP_SPIDER_DIR"]) / "database"
    for round_ in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory() as cli_work, tempfile.TemporaryDirectory() as deployment_work:
            cli = cli_seconds(args.suite, db_dir, Path(cli_work))
            deployed, where = deployment_seconds(args.suite, db_dir, Path(deployment_work), args.pg_admin_url,
                                                args.redis_url, args.cases_per_run, args.store, args.chunks)
        unit = f"chunks of {args.chunks}" if args.chunks else "cases"
        print(f"round {round_}: CLI --workers 2 {cli:.1f} s; Celery deployment (runs of <= {args.cases_per_run} "
              f"{unit}, 2 workers) {deployed:.1f} s: {deployed / cli:.2f}x (target <= {TARGET:.0f}x)\n{where}",
              flush=True)


if __name__ == "__main__":
    main()
