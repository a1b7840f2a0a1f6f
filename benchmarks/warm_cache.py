"""A second model over the same gold suite (a warm run): ``sqlcmp evaluate`` with the gold side's cache filled by
an earlier run, against the official execution-accuracy loop over the same cases, in one run.

    python benchmarks/warm_cache.py [--spider DIR] [--official DIR] [--official-python PY] [--workers 2]

The first model is SuperSQL's Spider dev predictions; it fills a fresh cache folder. The second is the same
predictions lowercased (a model that differs in its string literals, as ``spider_vs_official.py``'s third model),
evaluated three ways: without the cache (cold), with the filled cache (warm), and warm with ``--workers``. The
peer is the official loop over the second model's cases (``--official``: a checkout of taoyds/test-suite-sql-eval,
never part of this project; without it, this project's re-implementation of its rules; see
``spider_vs_official.py`` for both). Every timed part is a child process from interpreter start to exit. The
script also checks that the warm reports are the cold ones, timings aside, and prints the cache folder's size.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from spider_vs_official import DEFAULT_SPIDER, ROOT, compile_bytecode, import_suite, official_command, timed, \
    untimed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--official", type=Path, help="local checkout of taoyds/test-suite-sql-eval")
    parser.add_argument("--official-python", default=sys.executable,
                        help="interpreter for the official loop (a venv with its imports; default: this one)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    db_dir = args.spider / "database"
    sqlcmp = [sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate"]
    with tempfile.TemporaryDirectory() as folder:
        work, cache = Path(folder), Path(folder) / "cache"
        first = import_suite(args.spider, work / "supersql.jsonl")
        lowered = work / "lower.sql"
        lowered.write_text((args.spider / "predictions" / "SuperSQL.sql").read_text(encoding="utf-8").lower(),
                           encoding="utf-8")
        second = import_suite(args.spider, work / "lower.jsonl", lowered)
        official_cmd = official_command(second, args.spider, args.official, args.official_python)
        compile_bytecode(sys.executable, ROOT / "sqlcmp_dagster")
        if args.official:
            compile_bytecode(official_cmd[0], args.official.resolve())

        def evaluate(suite: Path, out: str, *options: str) -> float:
            return timed([*sqlcmp, str(suite), "--db-dir", str(db_dir), "--out", str(work / out), "--quiet",
                          *options])

        official_s = timed(official_cmd)
        cold_s = evaluate(second, "cold.jsonl", "--no-cache")
        fill_s = evaluate(first, "fill.jsonl", "--cache-dir", str(cache))
        first_cold_s = evaluate(first, "first.jsonl", "--no-cache")
        warm_s = evaluate(second, "warm.jsonl", "--cache-dir", str(cache))
        parallel_s = evaluate(second, "warm-parallel.jsonl", "--cache-dir", str(cache), "--workers", str(args.workers))
        info = subprocess.run([sys.executable, "-m", "sqlcmp_dagster.cli", "cache", "info", "--cache-dir", str(cache)],
                              capture_output=True, text=True, check=True).stdout.strip().replace("\n", "; ")
        same = untimed(work / "cold.jsonl") == untimed(work / "warm.jsonl") == untimed(work / "warm-parallel.jsonl")
        peer = "official exec_eval loop" if args.official else "spider_exec re-implementation of the official loop"
        cases = len(second.read_text(encoding="utf-8").splitlines())
        print(f"{cases} Spider dev cases of a second model (SuperSQL lowercased), wall time from process start to "
              f"exit; the cache filled by SuperSQL's own run:")
        print(f"  {peer:50} {official_s:7.1f} s")
        print(f"  {'sqlcmp evaluate --no-cache (cold)':50} {cold_s:7.1f} s   ratio to the peer {cold_s / official_s:.2f}x")
        print(f"  {'sqlcmp evaluate, cache filled (warm)':50} {warm_s:7.1f} s   ratio to the peer "
              f"{warm_s / official_s:.2f}x (target <= 0.5x); warm/cold {warm_s / cold_s:.2f}")
        print(f"  {f'sqlcmp evaluate, warm, --workers {args.workers}':50} {parallel_s:7.1f} s   ratio to the peer "
              f"{parallel_s / official_s:.2f}x")
        print(f"  filling the cache (SuperSQL's run) {fill_s:.1f} s against {first_cold_s:.1f} s without it "
              f"({fill_s / first_cold_s:.2f}x); {info}")
        print(f"  reports of the warm runs identical to the cold run's, timings aside: {same}")


if __name__ == "__main__":
    main()
