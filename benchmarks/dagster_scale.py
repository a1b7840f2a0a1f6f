"""A large suite through the case sensor and one run, against the engine alone on the same cases: the figures
of the 100,000-case target (sensor tick <= 5 s, launching the run <= 10 s, the run <= 2x the engine's time,
every process <= 2 GiB).

    python benchmarks/dagster_scale.py --cases 100000 --suite suite.jsonl --db-dir $S/database
    python benchmarks/dagster_scale.py --cases 10000      # the bundled suite cycled, on its sample database

``--suite`` is repeated with distinct ids (``<id>~<n>``) up to ``--cases`` (Spider dev: import it first with
``sqlcmp import spider ... --out suite.jsonl``). Two parts, each in a child process of its own (peak RSS from
Linux /proc): ``engine``, every case through ``Evaluator.evaluate_all`` in one process (the peer, as the CLI
runs them with one worker), and ``dagster``, on the local instance ``sqlcmp demo`` configures:

- ``first tick``: the case sensor's evaluation over a suite Dagster has never seen (it hashes every case);
- ``add partitions``: storing the new dynamic partitions, as the daemon does after that tick;
- ``launch``: from ``materialize`` over every case to the first step's start (planning a run over N partitions);
- ``run``: the whole run, every layer, in-process (the summary after it, separately);
- ``unchanged tick``: the sensor again with nothing changed (what it costs every minute).

The load average is printed beside each part: the figures of a loaded machine are not comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import peak_mib
from dagster_pipeline import write_suite

#: The targets, in seconds and MiB (the run's is a ratio to the engine's time).
TARGETS = {"first tick": 5.0, "unchanged tick": 5.0, "launch": 10.0, "run / engine": 2.0, "peak_mib": 2048.0}


def repeat_suite(source: Path, folder: Path, count: int) -> None:
    """``count`` cases cycling over ``source``'s, the n-th repetition of a case as ``<id>~<n>``."""
    cases = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "suite.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(count):
            case = cases[i % len(cases)]
            handle.write(json.dumps({**case, "case_id": f"{case['case_id']}~{i // len(cases)}"}) + "\n")


def engine_part(folder: Path, db_dir: Path) -> dict[str, float]:
    from sqlcmp_dagster.cases.suite import load_suites
    from sqlcmp_dagster.engine.pipeline import Evaluator

    cases = load_suites(folder).cases
    started = time.perf_counter()
    reports = Evaluator(db_dir=db_dir).evaluate_all(cases)
    return {"seconds": time.perf_counter() - started, "cases": len(reports), "peak_mib": peak_mib()}


def dagster_part(folder: Path, db_dir: Path, work: Path) -> dict[str, float]:
    import dagster as dg

    from sqlcmp_dagster.assets import LAYERS
    from sqlcmp_dagster.assets.common import cases_partitions
    from sqlcmp_dagster.assets.sensors import case_sensor
    from sqlcmp_dagster.definitions import build_definitions
    from sqlcmp_dagster.event_log import local_instance
    from sqlcmp_dagster.local import QUIET_CONSOLE, materialize_summary

    home = work / "dagster_home"
    home.mkdir()
    defs = build_definitions(cases_dir=str(folder), db_dir=str(db_dir), storage_dir=str(work / "store"))
    figures: dict[str, float] = {}
    with dg.instance_for_test(temp_dir=str(home), overrides=local_instance(str(home / "history" / "runs"))) \
            as instance:
        started = time.perf_counter()
        with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
            first = case_sensor(context)
        figures["first tick"] = time.perf_counter() - started
        (added,) = first.dynamic_partitions_requests or []
        started = time.perf_counter()
        instance.add_dynamic_partitions(cases_partitions.name, list(added.partition_keys or []))
        figures["add partitions"] = time.perf_counter() - started
        figures["run requests"] = len(first.run_requests or [])
        started = time.time()
        for request in first.run_requests or []:
            run = dg.materialize(LAYERS, instance=instance, resources=defs.resources or {},
                                 partition_key=request.partition_key, tags=request.tags, run_config=QUIET_CONSOLE)
            assert run.success
            if "launch" not in figures:
                step_starts = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_START,
                                                           limit=1).records
                figures["launch"] = step_starts[0].timestamp - started
        figures["run"] = time.time() - started
        started = time.perf_counter()
        assert materialize_summary(defs, instance).success
        figures["summary"] = time.perf_counter() - started
        started = time.perf_counter()
        with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=first.cursor) as context:
            again = case_sensor(context)
        figures["unchanged tick"] = time.perf_counter() - started
        assert not again.run_requests, "the unchanged tick requested runs"
    return {**figures, "cases": len(added.partition_keys or []), "peak_mib": peak_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--suite", type=Path, help="a suite file to repeat (default: the bundled suite)")
    parser.add_argument("--db-dir", type=Path, help="the suite's databases")
    parser.add_argument("--part", choices=("engine", "dagster"))
    parser.add_argument("--folder", type=Path)
    args = parser.parse_args()
    if args.part:
        with tempfile.TemporaryDirectory() as work:
            figures = engine_part(args.folder, args.db_dir) if args.part == "engine" else \
                dagster_part(args.folder, args.db_dir, Path(work))
        print(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory() as work:
        folder, db_dir = Path(work, "cases"), args.db_dir
        if args.suite:
            repeat_suite(args.suite, folder, args.cases)
        else:
            from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database

            db_dir = Path(work, "db")
            build_sample_database(db_dir / f"{SAMPLE_DB_ID}.sqlite")
            write_suite(folder, args.cases)
        figures = {}
        for name in ("engine", "dagster"):
            before = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--part", name, "--folder", str(folder),
                                  "--db-dir", str(db_dir)], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
            figures[name] = {**json.loads(out.stdout.strip().splitlines()[-1]),
                             "load": f"{before:.1f} -> {os.getloadavg()[0]:.1f}"}
    engine, dagster = figures["engine"], figures["dagster"]
    print(f"{engine['cases']:,} cases; engine alone (one process): {engine['seconds']:.1f} s, "
          f"peak {engine['peak_mib']:.0f} MiB; load {engine['load']}")
    print(f"dagster ({dagster['run requests']:.0f} run(s), load {dagster['load']}):")
    measured = {"first tick": dagster["first tick"], "unchanged tick": dagster["unchanged tick"],
                "launch": dagster["launch"], "run / engine": dagster["run"] / engine["seconds"],
                "peak_mib": max(dagster["peak_mib"], engine["peak_mib"])}
    for name, value in measured.items():
        verdict = "meets" if value <= TARGETS[name] else "MISSES"
        print(f"  {name:15} {value:10.2f}  (target <= {TARGETS[name]:g}: {verdict})")
    print(f"  add partitions  {dagster['add partitions']:10.2f} s; run {dagster['run']:.1f} s; "
          f"summary {dagster['summary']:.1f} s")


if __name__ == "__main__":
    main()
