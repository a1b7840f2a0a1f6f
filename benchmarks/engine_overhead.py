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

from common import overhead_figures

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
        reports = [report for _ in range(args.repeat) for report in evaluator.evaluate_all(cases)]
        evaluator.close()
    figures = overhead_figures(reports)
    total = statistics.median(r.run_metadata["timings"]["total_ms"] for r in reports)
    print(f"cases: {len(cases)} x {args.repeat} runs = {len(reports)} reports")
    print(f"engine overhead per case: median {figures['overhead_median_ms']:.2f} ms, "
          f"p95 {figures['overhead_p95_ms']:.2f} ms")
    print(f"total per case: median {total:.2f} ms; query execution per case: median "
          f"{figures['execution_median_ms']:.2f} ms")


if __name__ == "__main__":
    main()
