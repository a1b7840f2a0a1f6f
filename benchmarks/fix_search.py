"""The verified-minimal-fix search on Spider dev's failing cases (SuperSQL's predictions): how many failures get
a verified fix, the distribution of fix sizes and candidates executed, and what the search costs.

    python benchmarks/fix_search.py [--spider DIR] [--rounds 2]

The peer measured in the same run is the same engine with ``enable_counterfactual_probes`` off (no search):
the cost is reported as the ratio of the two wall times over the failing cases, and as the search's share of
each failing case's own time. Cases are evaluated one at a time (no threads) so that the times are per case;
each round runs both configurations, alternating, because the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter
from pathlib import Path

import sqlglot
from sqlglot import exp

from sqlcmp_dagster.cases.importers import import_spider
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report
from sqlcmp_dagster.engine.pipeline import Evaluator

DEFAULT_SPIDER = Path(os.environ.get("SQLCMP_SPIDER_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"
                                     / "spider"))


def _is_set_operation(case: CompareRequest) -> bool:
    """Whether the actual or the expected query is a set operation at its top level."""
    expected = case.expected_sql if isinstance(case.expected_sql, str) else case.expected_sql[0]
    return any(isinstance(sqlglot.parse_one(sql, read="sqlite"), exp.SetOperation)
               for sql in (expected, case.actual_sql))


def timed(evaluator: Evaluator, cases: list[CompareRequest]) -> tuple[float, list[Report]]:
    started = time.perf_counter()
    reports = [evaluator.evaluate(case) for case in cases]
    return time.perf_counter() - started, reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cases = [CompareRequest(**c.to_json()) for c in import_spider(
        args.spider / "dev.json", args.spider / "dev_gold.sql", args.spider / "predictions" / "SuperSQL.sql")]
    evaluator = Evaluator(db_dir=args.spider / "database")
    reports = evaluator.evaluate_all(cases)
    failing = [c for c, r in zip(cases, reports) if r.deterministic_verdict == "fail" and r.blocked_reason is None]
    without = [c.model_copy(update={"config": EvalConfig(enable_counterfactual_probes=False)}) for c in failing]

    searched: list[Report] = []
    for round_ in range(1, args.rounds + 1):
        with_s, searched = timed(evaluator, failing)
        without_s, _ = timed(evaluator, without)
        print(f"round {round_}: {len(failing)} failing cases, with search {with_s:.2f} s, without {without_s:.2f} s, "
              f"ratio {with_s / without_s:.2f}x")

    fixes = [r.diagnostic_scores["suggested_fix"] for r in searched]
    found = [f for f in fixes if f["found"]]
    print(f"\nfailing cases (parsed and executed, results differ): {len(failing)} of {len(cases)}")
    print(f"verified fix found: {len(found)} ({len(found) / len(failing):.1%})")
    compound = [f for c, f in zip(failing, fixes) if _is_set_operation(c)]
    print(f"  of which set operations (UNION/INTERSECT/EXCEPT on either side): {sum(f['found'] for f in compound)} "
          f"of {len(compound)}")
    print("fix size (clauses): " + ", ".join(f"{size}: {n}" for size, n in sorted(Counter(f["size"] for f in found)
                                                                                  .items())))
    print("clauses in fixes: " + ", ".join(f"{c} {n}" for c, n in
                                           Counter(c for f in found for c in f["clauses"]).most_common()))
    reasons = Counter(f["explanation"].removeprefix("no verified fix: ").split(":")[0].split("(")[0].strip()
                      for f in fixes if not f["found"])
    print("no fix: " + "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common()))
    lucky = sum(bool(p.get("note")) for r in searched for p in r.evidence["probes"])
    print(f"candidates whose rows matched only by a tie at their LIMIT (not counted as fixes): {lucky}")
    tried = [f["candidates_tried"] for f in fixes]
    print(f"candidates executed per failing case: median {statistics.median(tried):g}, max {max(tried)}, "
          f"total {sum(tried)}")
    search_ms = [r.run_metadata["timings"]["diagnostics_ms"] for r in searched]
    share = [r.run_metadata["timings"]["diagnostics_ms"] / r.run_metadata["timings"]["total_ms"] for r in searched]
    print(f"Layer 4 time per failing case (search included): median {statistics.median(search_ms):.1f} ms, "
          f"p95 {statistics.quantiles(search_ms, n=20)[-1]:.1f} ms, max {max(search_ms):.1f} ms; "
          f"median share of the case's total time {statistics.median(share):.0%}")
    evaluator.close()


if __name__ == "__main__":
    main()
