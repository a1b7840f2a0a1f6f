"""1,000 cases through every asset in one run, against the engine alone over the same cases in one process;
and one case-sensor tick over 10,000 unchanged cases.

    python benchmarks/dagster_pipeline.py [--cases 1000] [--sensor-cases 10000]

Wall time and peak RSS of each part run in a child process of its own (Linux /proc), so the figures do not mix.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import peak_mib


def write_suite(folder: Path, count: int) -> None:
    from sqlcmp_dagster.cases.sample import sample_suite_path

    source = [json.loads(line) for line in sample_suite_path().read_text().splitlines()]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "suite.jsonl").open("w") as handle:
        for i in range(count):
            handle.write(json.dumps({**source[i % len(source)], "case_id": f"case{i:05d}"}) + "\n")


def part(name: str, cases: int, work: Path) -> dict[str, float]:
    import dagster as dg

    from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database
    from sqlcmp_dagster.cases.suite import load_suites
    from sqlcmp_dagster.definitions import build_definitions
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.assets.common import cases_partitions
    from sqlcmp_dagster.assets.sensors import case_sensor
    from sqlcmp_dagster.local import sensor_tick

    db_dir = work / "db"
    build_sample_database(db_dir / f"{SAMPLE_DB_ID}.sqlite")
    folder = work / f"cases-{name}"
    write_suite(folder, cases)
    defs = build_definitions(cases_dir=str(folder), db_dir=str(db_dir), storage_dir=str(work / f"store-{name}"))
    started = time.perf_counter()
    if name == "engine":
        evaluator = Evaluator(db_dir=db_dir)
        evaluator.evaluate_all(load_suites(folder).cases)
        return {"seconds": time.perf_counter() - started, "peak_mib": peak_mib()}
    with dg.instance_for_test() as instance:
        if name == "dagster":
            first = sensor_tick(defs, instance, None)
            assert all(run.success for run in first.runs) and len(first.runs) == 1
            return {"seconds": time.perf_counter() - started, "peak_mib": peak_mib(), "runs": len(first.runs)}
        # name == "sensor": register the cases as the first tick would (partitions and cursor, without running
        # them), then time a tick that finds nothing changed.
        with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
            first = case_sensor(context)
        instance.add_dynamic_partitions(cases_partitions.name, list(first.dynamic_partitions_requests[0].partition_keys))
        started = time.perf_counter()
        again = sensor_tick(defs, instance, first.cursor)
        assert not again.runs and not again.added
        return {"seconds": time.perf_counter() - started, "peak_mib": peak_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--sensor-cases", type=int, default=10_000)
    parser.add_argument("--part", choices=("engine", "dagster", "sensor"))
    args = parser.parse_args()
    if args.part:
        with tempfile.TemporaryDirectory() as work:
            count = args.sensor_cases if args.part == "sensor" else args.cases
            print(json.dumps(part(args.part, count, Path(work))))
        return
    figures = {}
    for name in ("engine", "dagster", "sensor"):
        out = subprocess.run([sys.executable, __file__, "--part", name, "--cases", str(args.cases),
                              "--sensor-cases", str(args.sensor_cases)], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
        figures[name] = json.loads(out.stdout.strip().splitlines()[-1])
    engine, dagster = figures["engine"], figures["dagster"]
    print(f"{args.cases} cases, engine alone (one process): {engine['seconds']:.1f} s, peak {engine['peak_mib']:.0f} MiB")
    print(f"{args.cases} cases, all assets in {dagster['runs']} run: {dagster['seconds']:.1f} s, "
          f"peak {dagster['peak_mib']:.0f} MiB")
    print(f"ratio dagster/engine: time {dagster['seconds'] / engine['seconds']:.2f}x, "
          f"peak memory {dagster['peak_mib'] / engine['peak_mib']:.2f}x")
    print(f"sensor tick over {args.sensor_cases} unchanged cases: {figures['sensor']['seconds']:.2f} s")


if __name__ == "__main__":
    main()
