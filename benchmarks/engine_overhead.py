"""Per-case engine overhead beyond query execution on the bundled suite: median and p95 in milliseconds.

Overhead is a report's ``total_ms`` minus the time spent executing queries (both sides and any counterfactual
probes), i.e. parsing, canonicalization, structural and result comparison, diagnostics and report building.

    python benchmarks/engine_overhead.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database, sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.engine.pipeline import Evaluator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        build_sample_database(Path(folder) / f"{SAMPLE_DB_ID}.sqlite")
        cases = load_suite(sample_suite_path()).cases
        evaluator = Evaluator(db_dir=Path(folder))
        evaluator.evaluate_all(cases)  # warm-up: imports, connection set-up, sqlglot caches
        overhead, total, executing = [], [], []
        for _ in range(args.repeat):
            for report in evaluator.evaluate_all(cases):
                timings = report.run_metadata["timings"]
                overhead.append(timings["engine_overhead_ms"])
                total.append(timings["total_ms"])
                executing.append(timings.get("execution_ms", 0.0) + timings.get("probe_execution_ms", 0.0))
        evaluator.close()
    quantiles = statistics.quantiles(overhead, n=20)
    print(f"cases: {len(cases)} x {args.repeat} runs = {len(overhead)} reports")
    print(f"engine overhead per case: median {statistics.median(overhead):.2f} ms, p95 {quantiles[-1]:.2f} ms")
    print(f"total per case: median {statistics.median(total):.2f} ms; query execution per case: median "
          f"{statistics.median(executing):.2f} ms")


if __name__ == "__main__":
    main()
