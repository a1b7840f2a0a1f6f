"""Spider dev (1,034 cases, SuperSQL's predictions) through the engine and through every Dagster asset: cases
per second, engine overhead per case beyond query execution, peak memory; and the Dagster summary checked
against the engine's.

    python benchmarks/spider_throughput.py [--spider DIR] [--workers 2]

Each part runs in a child process of its own (wall time and peak RSS from Linux /proc do not mix). The suite is
imported first with ``sqlcmp import spider --tables`` into a temporary folder (the cases run on the databases
where they are, read-only); import time is not counted.
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

from common import overhead_figures, peak_mib

DEFAULT_SPIDER = Path(os.environ.get("SQLCMP_SPIDER_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"
                                     / "spider"))


def import_suite(spider: Path, work: Path) -> tuple[Path, Path]:
    from sqlcmp_dagster.cli import main as sqlcmp

    suite, db_dir = work / "cases" / "spider.jsonl", spider / "database"
    code = sqlcmp(["import", "spider", "--questions", str(spider / "dev.json"), "--gold", str(spider / "dev_gold.sql"),
                   "--pred", str(spider / "predictions" / "SuperSQL.sql"), "--db-dir", str(db_dir),
                   "--tables", str(spider / "tables.json"), "--out", str(suite)])
    if code != 0:
        sys.exit("import failed")
    return suite, db_dir


def part(name: str, suite: Path, db_dir: Path, workers: int, work: Path) -> dict[str, object]:
    from sqlcmp_dagster.cases.suite import load_suite
    from sqlcmp_dagster.engine.pipeline import Evaluator
    from sqlcmp_dagster.engine.summary import summarize

    cases = load_suite(suite).cases
    if name.startswith("engine"):
        evaluator = Evaluator(db_dir=db_dir)
        started = time.perf_counter()
        reports = evaluator.evaluate_all(cases, workers=workers if name == "engine-parallel" else 1)
        seconds = time.perf_counter() - started
        evaluator.close()
        return {"cases": len(cases), "seconds": seconds, "peak_mib": peak_mib(), **overhead_figures(reports),
                "passed": summarize(reports)["passed"]}
    import dagster as dg

    from sqlcmp_dagster.definitions import build_definitions
    from sqlcmp_dagster.local import materialize_summary, sensor_tick

    defs = build_definitions(cases_dir=str(suite.parent), db_dir=str(db_dir), storage_dir=str(work / "store"))
    with dg.instance_for_test() as instance:
        started = time.perf_counter()
        tick = sensor_tick(defs, instance, None)
        summary_run = materialize_summary(defs, instance)
        seconds = time.perf_counter() - started
        if not (all(run.success for run in tick.runs) and summary_run.success):
            sys.exit("a Dagster run failed")
        summary = summary_run.output_for_node("evaluation_summary")
    return {"cases": summary["cases"], "seconds": seconds, "peak_mib": peak_mib(), "runs": len(tick.runs),
            "passed": summary["passed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--part", choices=("engine", "engine-parallel", "dagster"))
    parser.add_argument("--suite", type=Path)
    parser.add_argument("--db-dir", type=Path)
    args = parser.parse_args()
    if args.part:
        with tempfile.TemporaryDirectory() as work:
            print(json.dumps(part(args.part, args.suite, args.db_dir, args.workers, Path(work))))
        return
    if not (args.spider / "dev.json").is_file():
        sys.exit(f"Spider dev set not found at {args.spider} (pass --spider or set SQLCMP_SPIDER_DIR)")
    with tempfile.TemporaryDirectory() as work:
        suite, db_dir = import_suite(args.spider, Path(work))
        figures = {}
        for name in ("engine", "engine-parallel", "dagster"):
            out = subprocess.run([sys.executable, __file__, "--part", name, "--suite", str(suite),
                                  "--db-dir", str(db_dir), "--workers", str(args.workers)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
            figures[name] = json.loads(out.stdout.strip().splitlines()[-1])
    engine, parallel, dagster = figures["engine"], figures["engine-parallel"], figures["dagster"]
    for label, f in (("engine, 1 thread", engine), (f"engine, {args.workers} threads", parallel),
                     (f"Dagster, all assets + summary, {dagster['runs']} run", dagster)):
        print(f"{label:40} {f['cases']} cases in {f['seconds']:6.1f} s = {f['cases'] / f['seconds']:6.1f} cases/s, "
              f"peak RSS {f['peak_mib']:4.0f} MiB, passed {f['passed']}")
    print(f"engine overhead per case beyond query execution: median {engine['overhead_median_ms']:.2f} ms, "
          f"p95 {engine['overhead_p95_ms']:.2f} ms (query execution per case: median "
          f"{engine['execution_median_ms']:.2f} ms)")
    print(f"Dagster / engine (1 thread): time {dagster['seconds'] / engine['seconds']:.2f}x, peak memory "
          f"{dagster['peak_mib'] / engine['peak_mib']:.2f}x; same passes: {dagster['passed'] == engine['passed']}")


if __name__ == "__main__":
    main()
