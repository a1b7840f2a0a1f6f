"""Neighbor databases over Spider dev: precision, recall on semantic mutants, and the cost on SuperSQL.

    python benchmarks/neighbor_search.py [--spider DIR] [--part precision|recall|supersql|all]
                                         [--workers 2] [--neighbors N] [--rounds 3]

* precision: every gold query against itself and against its equivalence-preserving rewrites (sqlglot's
  optimizer, IN -> EXISTS and back, BETWEEN -> two comparisons and back, commuted join), the search forced where
  equal canonical trees would skip it; a counterexample there is a false alarm.
* recall: the semantic mutants of ``neighbor_mutants.py``; among those that still pass on the original
  database, the share that gets a counterexample, per kind and overall; provably equivalent mutants must get
  none.
* supersql: SuperSQL's predictions with the search off (``neighbor_count`` 0) and with the defaults, each run
  ``--rounds`` times (3), alternating (the machine is shared): wall-clock and process CPU time ratios (per round,
  and the least time with the search over the least without), passes with a counterexample, vacuous passes
  resolved.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path
from typing import Any

from neighbor_mutants import MUTATIONS, REWRITES, variants

from sqlcmp_dagster.engine.context import reset
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report
from sqlcmp_dagster.engine.neighbor_report import neighborhood_of
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.summary import is_vacuous_pass

DEFAULT_SPIDER = Path(os.environ.get("SQLCMP_SPIDER_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"
                                     / "spider"))


def evaluate(spider: Path, cases: list[CompareRequest], workers: int) -> tuple[list[Report], float, float]:
    """The reports, the wall-clock seconds and this process's CPU seconds (the whole work at one worker, which
    runs in this process; at more, only the parent's share). Each run starts from a fresh engine context, as a
    new ``sqlcmp evaluate`` does: the schemas, samples and search outcomes an earlier run kept would make the
    next one cheaper than any real run."""
    reset()
    evaluator = Evaluator(db_dir=spider / "database")
    started, cpu = time.perf_counter(), time.process_time()
    try:
        reports = evaluator.evaluate_all(cases, workers=workers)
    finally:
        evaluator.close()
    return reports, time.perf_counter() - started, time.process_time() - cpu


def neighborhood(report: Report) -> dict[str, Any]:
    return neighborhood_of(report)


def variant_cases(rows: list[tuple[int, str, str, str, str, str | None]], *, forced: bool = False,
                  neighbors: int | None = None) -> list[CompareRequest]:
    """One case per variant; ``forced``: searched even where equal canonical trees would skip the search;
    ``neighbors``: ``neighbor_count`` (the default when None)."""
    config = EvalConfig(neighbor_skip_proven=not forced,
                        **({"neighbor_count": neighbors} if neighbors is not None else {}))
    return [CompareRequest(case_id=f"{index}:{kind}:{n}", expected_sql=gold, actual_sql=sql, db=db, config=config)
            for n, (index, kind, db, gold, sql, _) in enumerate(rows)]


def precision(spider: Path, workers: int, neighbors: int | None) -> None:
    rows = variants(spider, REWRITES)
    reports, seconds, _ = evaluate(spider, variant_cases(rows, forced=True, neighbors=neighbors), workers)
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    alarms = []
    for row, report in zip(rows, reports):
        counts = by_kind[row[1]]
        counts["cases"] += 1
        counts["pass"] += report.deterministic_verdict == "pass"
        counts["searched"] += bool(neighborhood(report).get("neighbor_search_ran"))
        if neighborhood(report).get("counterexample_found"):
            counts["counterexample"] += 1
            alarms.append((row, neighborhood(report)["counterexample"]["sentence"]))
    print(f"precision: {len(rows)} gold/rewrite pairs in {seconds:.0f} s")
    print("| rewrite | pairs | pass on the database | searched | counterexamples |")
    print("|---|---:|---:|---:|---:|")
    for kind, counts in by_kind.items():
        print(f"| {kind} | {counts['cases']} | {counts['pass']} | {counts['searched']} | {counts['counterexample']} |")
    for (index, kind, db, gold, sql, _), sentence in alarms:
        print(f"  FALSE ALARM #{index} {kind} {db}: {gold}  ->  {sql}: {sentence}")


def recall(spider: Path, workers: int, neighbors: int | None) -> None:
    rows = variants(spider, MUTATIONS)
    reports, seconds, _ = evaluate(spider, variant_cases(rows, neighbors=neighbors), workers)
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    equivalent_alarms = []
    reasons: collections.Counter[tuple[str, str]] = collections.Counter()
    for row, report in zip(rows, reports):
        kind, proven = row[1], row[5]
        if proven:
            reasons[(kind, proven)] += 1
        counts = by_kind[kind + (" (provably equivalent)" if proven else "")]
        counts["mutants"] += 1
        if report.deterministic_verdict != "pass":
            continue
        found = neighborhood(report)
        counts["pass"] += 1
        counts["counterexample"] += bool(found.get("counterexample_found"))
        counts["nondeterministic"] += bool(found.get("nondeterminism")) and not found.get("counterexample_found")
        if proven and found.get("counterexample_found"):
            equivalent_alarms.append((row, found["counterexample"]["sentence"]))
    print(f"recall: {len(rows)} mutants in {seconds:.0f} s")
    print("| mutation | mutants | still pass on the database | counterexample | recall |")
    print("|---|---:|---:|---:|---:|")
    total = collections.Counter()
    for kind in sorted(by_kind):
        counts = by_kind[kind]
        if "equivalent" not in kind:
            total.update(counts)
        rate = f"{counts['counterexample'] / counts['pass']:.1%}" if counts["pass"] else "n/a"
        print(f"| {kind} | {counts['mutants']} | {counts['pass']} | {counts['counterexample']} | {rate} |")
    print(f"| **all semantic mutants** | {total['mutants']} | {total['pass']} | {total['counterexample']} | "
          f"{total['counterexample'] / max(total['pass'], 1):.1%} |")
    print("excluded from the denominator, provably equivalent under the schema's declared constraints "
          "(neighbor_mutants.equivalent):")
    for (kind, reason), count in sorted(reasons.items()):
        print(f"  {kind}: {count} — {reason}")
    for (index, kind, db, gold, sql, _), sentence in equivalent_alarms:
        print(f"  EQUIVALENT MUTANT WITH A COUNTEREXAMPLE #{index} {kind} {db}: {sql}: {sentence}")


def supersql(spider: Path, workers: int, neighbors: int | None, rounds: int) -> None:
    from sqlcmp_dagster.cli import main as sqlcmp
    from sqlcmp_dagster.cases.suite import load_suite
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        suite = Path(work) / "spider.jsonl"
        if sqlcmp(["import", "spider", "--questions", str(spider / "dev.json"), "--gold", str(spider / "dev_gold.sql"),
                   "--pred", str(spider / "predictions" / "SuperSQL.sql"), "--db-dir", str(spider / "database"),
                   "--out", str(suite)]) != 0:
            sys.exit("import failed")
        cases = load_suite(suite).cases
    if neighbors is not None:
        cases = [c.model_copy(update={"config": c.config.model_copy(update={"neighbor_count": neighbors})})
                 for c in cases]
    off = [c.model_copy(update={"config": c.config.model_copy(update={"neighbor_count": 0})}) for c in cases]
    times: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    reports: list[Report] = []
    for _ in range(rounds):
        _, seconds, used = evaluate(spider, off, workers)
        times["off"].append(seconds)
        cpu["off"].append(used)
        reports, seconds, used = evaluate(spider, cases, workers)
        times["on"].append(seconds)
        cpu["on"].append(used)
    passes = [r for r in reports if r.deterministic_verdict == "pass"]
    found = [r for r in passes if neighborhood(r).get("counterexample_found")]
    vacuous = [r for r in passes if is_vacuous_pass(r)]
    resolved = [r for r in vacuous if neighborhood(r).get("neighbors_nonempty")]
    exposed = [r for r in vacuous if neighborhood(r).get("counterexample_found")]
    nondeterministic = [r for r in passes if neighborhood(r).get("nondeterminism")]
    ratios = [on / off for on, off in zip(times["on"], times["off"])]
    cpu_ratios = [on / off for on, off in zip(cpu["on"], cpu["off"])]
    print(f"supersql: {len(cases)} cases, {len(passes)} passes, workers={workers}")
    print(f"  time off {', '.join(f'{t:.1f}' for t in times['off'])} s; on {', '.join(f'{t:.1f}' for t in times['on'])}"
          f" s; ratio on/off {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"  process CPU off {', '.join(f'{t:.2f}' for t in cpu['off'])} s; on "
          f"{', '.join(f'{t:.2f}' for t in cpu['on'])} s; ratio on/off per round {', '.join(f'{r:.2f}' for r in cpu_ratios)}"
          f"; min on / min off {min(cpu['on']) / min(cpu['off']):.2f}")
    print(f"  passes with a counterexample: {len(found)} of {len(passes)} "
          f"(robust pass rate {(len(passes) - len(found)) / len(cases):.1%} vs pass rate {len(passes) / len(cases):.1%})")
    print(f"  vacuous passes: {len(vacuous)}; compared on non-empty neighbor results: {len(resolved)}; "
          f"of those with a counterexample: {len(exposed)}")
    print(f"  passes with non-determinism noted (not counterexamples): {len(nondeterministic)}")
    cut = [r for r in passes if neighborhood(r).get("budget_cuts")]
    print(f"  searches the clock cut (a named budget cut, else the outcome is the counted work's): {len(cut)}")
    stopped = collections.Counter(neighborhood(r).get("reason") for r in passes if neighborhood(r).get("reason"))
    print(f"  searches stopped or not run: {dict(stopped)}")
    print(f"  defaults: {EvalConfig().model_dump(include={'neighbor_count', 'neighbor_time_budget_ms', 'neighbor_sample_rows', 'neighbor_seed', 'neighbor_skip_proven'})}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--part", choices=("precision", "recall", "supersql", "all"), default="all")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--neighbors", type=int, default=None, help="neighbor_count (default: EvalConfig's)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="supersql: alternating runs without and with the search (the machine is shared)")
    args = parser.parse_args()
    if not (args.spider / "dev_gold.sql").is_file():
        sys.exit(f"the Spider dev set is not at {args.spider} (set SQLCMP_SPIDER_DIR or pass --spider)")
    if args.part in ("precision", "all"):
        precision(args.spider, args.workers, args.neighbors)
    if args.part in ("recall", "all"):
        recall(args.spider, args.workers, args.neighbors)
    if args.part in ("supersql", "all"):
        supersql(args.spider, args.workers, args.neighbors, args.rounds)


if __name__ == "__main__":
    main()
