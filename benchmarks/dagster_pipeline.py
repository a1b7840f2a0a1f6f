"""The Dagster pipeline's overhead: a suite through every layer asset and the summary in one run, against the
engine alone over the same cases in one process (1 thread), on the local instance (SQLite run/event storage
as ``sqlcmp demo`` configures it: ``sqlcmp_dagster.event_log``), with ``--stock`` also on Dagster's stock
SQLite event log, and with ``--pg-url`` on PostgreSQL run/event storage (``sqlcmp_dagster.event_log_postgres``;
with ``--stock`` also Dagster's own PostgreSQL event log); and one case-sensor tick over unchanged cases.
``--pg-url`` names a server and a user that may create databases: each PostgreSQL part runs in a new database,
dropped afterwards.

    python benchmarks/dagster_pipeline.py --suite suite.jsonl --db-dir DIR [--pg-url URL] [--stock]
        [--sensor-cases 10000] [--profile DIR]
    python benchmarks/dagster_pipeline.py            # the bundled suite cycled to --cases 1000 cases

Spider dev (1,034 cases; the command BENCHMARKS.md uses), after
``sqlcmp import spider --questions $S/dev.json --gold $S/dev_gold.sql --pred $S/predictions/SuperSQL.sql
--db-dir $S/database --out suite.jsonl``:

    python benchmarks/dagster_pipeline.py --suite suite.jsonl --db-dir $S/database --pg-url postgresql+psycopg2://...

Each part runs in a child process of its own (wall time and peak RSS from Linux /proc do not mix); the Dagster
parts print the time spent storing events (the instance's ``handle_new_event`` is wrapped; split into the
batched per-case materializations, the per-case check results and the rest) and writing and reading the
per-case store (the IO manager's ``handle_output`` and ``load_input``). Each Dagster part ends with its
ratio to the engine (wall and CPU) and the pipeline's own cost per case: (part - engine) / cases, in ms, which
does not shrink when the engine gets faster. The load average is printed before and after each part (the
figures of a loaded machine are not comparable). ``--profile DIR``
runs each Dagster part under cProfile instead and writes ``DIR/<part>.prof`` (times are then inflated; read
the shares).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import peak_mib


def write_suite(folder: Path, count: int) -> None:
    from sqlcmp_dagster.cases.sample import sample_suite_path

    source = [json.loads(line) for line in sample_suite_path().read_text().splitlines()]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "suite.jsonl").open("w") as handle:
        for i in range(count):
            handle.write(json.dumps({**source[i % len(source)], "case_id": f"case{i:05d}"}) + "\n")


def part(name: str, folder: Path, db_dir: Path, work: Path, pg_url: str | None) -> dict[str, float]:
    import dagster as dg

    from sqlcmp_dagster.assets.common import cases_partitions
    from sqlcmp_dagster.assets.sensors import case_sensor
    from sqlcmp_dagster.cases.suite import load_suites
    from sqlcmp_dagster.definitions import build_definitions
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.local import materialize_summary, sensor_tick

    defs = build_definitions(cases_dir=str(folder), db_dir=str(db_dir), storage_dir=str(work / f"store-{name}"))
    if name == "engine":
        evaluator = Evaluator(db_dir=db_dir)
        started, cpu = time.perf_counter(), time.process_time()
        reports = evaluator.evaluate_all(load_suites(folder).cases)
        return {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
                "peak_mib": peak_mib(), "cases": len(reports),
                "passed": sum(r.deterministic_verdict == "pass" for r in reports)}
    with _instance(name, pg_url, work) as instance:
        if name in ("dagster", "dagster-stock", "dagster-pg", "dagster-pg-stock"):
            events = _count_event_time(instance)
            store = _count_store_time()
            started, cpu = time.perf_counter(), time.process_time()
            tick = sensor_tick(defs, instance, None)
            summary = materialize_summary(defs, instance)
            seconds = time.perf_counter() - started
            assert all(run.success for run in tick.runs) and summary.success
            value = summary.output_for_node("evaluation_summary")
            return {"seconds": seconds, "cpu_seconds": time.process_time() - cpu, "peak_mib": peak_mib(),
                    "runs": len(tick.runs), "cases": value["cases"],
                    "passed": value["passed"], **{f"event_{k}": v for k, v in events.items()},
                    **{f"store_{k}": v for k, v in store.items()}}
        # name == "sensor": register the cases as the first tick would (partitions and cursor, without running
        # them), then time a tick that finds nothing changed.
        with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
            first = case_sensor(context)
        instance.add_dynamic_partitions(cases_partitions.name,
                                        list(first.dynamic_partitions_requests[0].partition_keys))
        started = time.perf_counter()
        again = sensor_tick(defs, instance, first.cursor)
        assert not again.runs and not again.added
        return {"seconds": time.perf_counter() - started, "peak_mib": peak_mib()}


def _instance(name: str, pg_url: str | None, work: Path):  # noqa: ANN202 (a context manager)
    import dagster as dg

    from sqlcmp_dagster.event_log import local_instance

    if name == "dagster":
        home = work / "dagster_home"
        home.mkdir()
        return dg.instance_for_test(temp_dir=str(home), overrides=local_instance(str(home / "history" / "runs")))
    if not name.startswith("dagster-pg"):
        return dg.instance_for_test()
    return _pg_instance(pg_url, stock=name == "dagster-pg-stock")


@contextlib.contextmanager
def _pg_instance(server_url: str, stock: bool):  # noqa: ANN202 (yields a DagsterInstance)
    """An instance whose storage is a new database on the PostgreSQL server of ``server_url`` (its user may create
    databases), dropped afterwards: this project's batched event log, or with ``stock`` Dagster's own."""
    import dagster as dg
    import sqlalchemy as sa

    from sqlcmp_dagster.event_log_postgres import postgres_instance

    name = f"sqlcmp_bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f"CREATE DATABASE {name}"))
    url = sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        overrides = {"storage": {"postgres": {"postgres_url": url}}} if stock else postgres_instance(url)
        with dg.instance_for_test(overrides=overrides) as instance:
            yield instance
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def _count_event_time(instance) -> dict[str, float]:  # noqa: ANN001 (dagster's instance)
    """Wrap the instance's event handling so the run reports how long storing its events took: in all, for
    the batches of per-case materializations, and for the per-case check results."""
    from dagster import DagsterEventType

    figures = {"seconds": 0.0, "count": 0, "batch_seconds": 0.0, "batched": 0, "check_seconds": 0.0, "checks": 0}
    single, batch = instance.handle_new_event, instance.event_log_storage.store_event_batch

    def timed(event, **kwargs):  # noqa: ANN001, ANN003, ANN202
        started = time.perf_counter()
        try:
            return single(event, **kwargs)
        finally:
            spent = time.perf_counter() - started
            figures["seconds"] += spent
            figures["count"] += 1
            if event.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                figures["check_seconds"] += spent
                figures["checks"] += 1

    def timed_batch(events):  # noqa: ANN001, ANN202
        started = time.perf_counter()
        try:
            return batch(events)
        finally:
            figures["batch_seconds"] += time.perf_counter() - started
            figures["batched"] += len(events)

    instance.handle_new_event = timed
    instance.event_log_storage.store_event_batch = timed_batch
    return figures


def _count_store_time() -> dict[str, float]:
    """Wrap the case store (the IO manager class) so the run reports how long writing and reading took."""
    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    figures = {"write_seconds": 0.0, "read_seconds": 0.0}

    def timed(method: str, key: str) -> None:
        original = getattr(PartitionedParquetIOManager, method)

        def run(self, *args):  # noqa: ANN001, ANN002, ANN202
            started = time.perf_counter()
            try:
                return original(self, *args)
            finally:
                figures[key] += time.perf_counter() - started

        setattr(PartitionedParquetIOManager, method, run)

    timed("handle_output", "write_seconds")
    timed("load_input", "read_seconds")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--suite", type=Path, help="a suite file (default: the bundled suite cycled)")
    parser.add_argument("--db-dir", type=Path, help="the suite's databases")
    parser.add_argument("--pg-url", help="PostgreSQL URL for a run on PostgreSQL run/event storage")
    parser.add_argument("--sensor-cases", type=int, default=10_000)
    parser.add_argument("--stock", action="store_true", help="also run on Dagster's stock SQLite event log, "
                        "one event at a time (the per-event path this project's local instance replaces)")
    parser.add_argument("--profile", type=Path, help="write a cProfile of each Dagster part here")
    parser.add_argument("--part", choices=("engine", "dagster", "dagster-stock", "dagster-pg", "dagster-pg-stock",
                                           "sensor"))
    parser.add_argument("--folder", type=Path)
    args = parser.parse_args()
    if args.part:
        if args.part == "dagster-stock":  # Dagster's defaults: no event batches, a planned event per partition
            os.environ.update({"DAGSTER_EVENT_BATCH_SIZE": "0", "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "0"})
        with tempfile.TemporaryDirectory() as work:
            profile = cProfile.Profile() if args.profile and args.part.startswith("dagster") else None
            if profile:
                profile.enable()
            figures = part(args.part, args.folder, args.db_dir, Path(work), args.pg_url)
            if profile:
                profile.disable()
                profile.dump_stats(args.profile / f"{args.part}.prof")
            print(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory() as work:
        folder, sensor_folder = Path(work, "cases"), Path(work, "sensor-cases")
        db_dir = args.db_dir
        if args.suite:
            folder.mkdir()
            shutil.copy(args.suite, folder / "suite.jsonl")
        else:
            from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database

            db_dir = Path(work, "db")
            build_sample_database(db_dir / f"{SAMPLE_DB_ID}.sqlite")
            write_suite(folder, args.cases)
        write_suite(sensor_folder, args.sensor_cases)
        sensor_db = Path(work, "sensor-db")
        from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database

        build_sample_database(sensor_db / f"{SAMPLE_DB_ID}.sqlite")
        figures = {}
        names = ["engine", "dagster", *(["dagster-stock"] if args.stock else []),
                 *(["dagster-pg"] if args.pg_url else []), *(["dagster-pg-stock"] if args.pg_url and args.stock else []),
                 "sensor"]
        for name in names:
            where, databases = (sensor_folder, sensor_db) if name == "sensor" else (folder, db_dir)
            command = [sys.executable, __file__, "--part", name, "--folder", str(where), "--db-dir", str(databases)]
            command += ["--pg-url", args.pg_url] if args.pg_url else []
            command += ["--profile", str(args.profile.resolve())] if args.profile else []
            before = os.getloadavg()[0]
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
            figures[name] = {**json.loads(out.stdout.strip().splitlines()[-1]),
                             "load": f"{before:.1f} -> {os.getloadavg()[0]:.1f}"}
    engine = figures["engine"]
    print(f"{engine['cases']} cases, engine alone (one process, 1 thread): {engine['seconds']:.1f} s "
          f"(CPU {engine['cpu_seconds']:.1f} s), "
          f"peak {engine['peak_mib']:.0f} MiB, passed {engine['passed']}; load {engine['load']}")
    for name, label in (("dagster", "local instance (SQLite, batched event log)"),
                        ("dagster-stock", "Dagster's stock SQLite event log"),
                        ("dagster-pg", "PostgreSQL storage (batched event log)"),
                        ("dagster-pg-stock", "PostgreSQL storage, Dagster's stock event log")):
        if name in figures:
            f = figures[name]
            print(f"{f['cases']} cases, all assets + summary in {f['runs']} run, {label}: {f['seconds']:.1f} s "
                  f"(CPU {f['cpu_seconds']:.1f} s), peak {f['peak_mib']:.0f} MiB, passed {f['passed']}; load {f['load']}")
            print(f"    storing {f['event_count']} events {f['event_seconds']:.1f} s (of which {f['event_batched']} "
                  f"per-case materializations in batches {f['event_batch_seconds']:.1f} s, {f['event_checks']} "
                  f"check results {f['event_check_seconds']:.1f} s); case store: writing {f['store_write_seconds']:.1f} s, "
                  f"reading {f['store_read_seconds']:.1f} s")
            print(f"    ratio to the engine: time {f['seconds'] / engine['seconds']:.2f}x, "
                  f"CPU {f['cpu_seconds'] / engine['cpu_seconds']:.2f}x, memory {f['peak_mib'] / engine['peak_mib']:.2f}x; "
                  f"the pipeline's own cost per case: {1000 * (f['seconds'] - engine['seconds']) / f['cases']:.1f} ms "
                  f"wall, {1000 * (f['cpu_seconds'] - engine['cpu_seconds']) / f['cases']:.1f} ms CPU")
    print(f"sensor tick over {args.sensor_cases} unchanged cases: {figures['sensor']['seconds']:.2f} s")

if __name__ == "__main__":
    main()
