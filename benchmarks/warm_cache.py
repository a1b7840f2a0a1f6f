"""A second model over the same gold suite (a warm run): ``sqlcmp evaluate`` with the gold side's cache filled by
an earlier run, against the official execution-accuracy loop over the same cases, in one run.

    python benchmarks/warm_cache.py [--spider DIR] [--official DIR] [--official-python PY] [--workers 2]

The first model is SuperSQL's Spider dev predictions; it fills a fresh cache folder. The second is the same
predictions lowercased (a model that differs in its string literals, as ``spider_vs_official.py``'s third model),
evaluated three ways: without the cache (cold), with the filled cache (warm), and warm with ``--workers``. Two more
runs over the filled cache show what a model evaluated again gets from the reports kept for cases whose every
input is unchanged: SuperSQL's predictions again (a CI run of the same model), and SuperSQL's with every fifth one
lowercased (another prompt that changed a fifth of the answers), each from a copy of the filled cache. The
peer is the official loop over the second model's cases (``--official``: a checkout of taoyds/test-suite-sql-eval,
never part of this project; without it, this project's re-implementation of its rules; see
``spider_vs_official.py`` for both). Every timed part is a child process from interpreter start to exit. The
script also checks that the warm reports are the cold ones, timings aside, and prints the cache folder's size.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from spider_vs_official import DEFAULT_SPIDER, ROOT, compile_bytecode, import_suite, official_command, timed, \
    untimed


def processor_seconds() -> float:
    """User and system time of every child process that ended so far (workers included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(command: list[str]) -> tuple[float, float]:
    """Wall time and processor time of ``command`` run as a child process. On a machine other work shares, the
    processor time is the steadier figure: the wall time also counts the waits for a core."""
    before = processor_seconds()
    wall = timed(command)
    return wall, processor_seconds() - before


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
        fifth = work / "fifth.sql"
        fifth.write_text("".join(line.lower() if i % 5 == 4 else line for i, line in enumerate(
            (args.spider / "predictions" / "SuperSQL.sql").read_text(encoding="utf-8").splitlines(keepends=True))),
            encoding="utf-8")
        third = import_suite(args.spider, work / "fifth.jsonl", fifth)
        official_cmd = official_command(second, args.spider, args.official, args.official_python)
        compile_bytecode(sys.executable, ROOT / "sqlcmp_dagster")
        if args.official:
            compile_bytecode(official_cmd[0], args.official.resolve())

        def evaluate(suite: Path, out: str, *options: str) -> tuple[float, float]:
            return measured([*sqlcmp, str(suite), "--db-dir", str(db_dir), "--out", str(work / out), "--quiet",
                             *options])

        official = measured(official_cmd)
        cold = evaluate(second, "cold.jsonl", "--no-cache")
        fill = evaluate(first, "fill.jsonl", "--cache-dir", str(cache))
        first_cold = evaluate(first, "first.jsonl", "--no-cache")
        for copy in ("parallel", "again", "fifth"):  # each later run from the cache as SuperSQL's run left it
            shutil.copytree(cache, work / copy)
        warm = evaluate(second, "warm.jsonl", "--cache-dir", str(cache))
        parallel = evaluate(second, "warm-parallel.jsonl", "--cache-dir", str(work / "parallel"), "--workers",
                            str(args.workers))
        again = evaluate(first, "again.jsonl", "--cache-dir", str(work / "again"))
        changed = evaluate(third, "fifth-warm.jsonl", "--cache-dir", str(work / "fifth"))
        changed_cold = evaluate(third, "fifth-cold.jsonl", "--no-cache")
        info = subprocess.run([sys.executable, "-m", "sqlcmp_dagster.cli", "cache", "info", "--cache-dir", str(cache)],
                              capture_output=True, text=True, check=True).stdout.strip().replace("\n", "; ")
        same = untimed(work / "cold.jsonl") == untimed(work / "warm.jsonl") == untimed(work / "warm-parallel.jsonl") \
            and untimed(work / "first.jsonl") == untimed(work / "again.jsonl") \
            and untimed(work / "fifth-cold.jsonl") == untimed(work / "fifth-warm.jsonl")
        peer = "official exec_eval loop" if args.official else "spider_exec re-implementation of the official loop"
        cases = len(second.read_text(encoding="utf-8").splitlines())
        print(f"{cases} Spider dev cases of a second model (SuperSQL lowercased), the cache filled by SuperSQL's own "
              "run; wall time from process start to exit, and processor time (children included):")

        def line(label: str, figures: tuple[float, float], note: str = "") -> None:
            ratios = "" if figures is official else \
                f"ratio to the peer {figures[0] / official[0]:.2f}x wall, {figures[1] / official[1]:.2f}x processor"
            print(f"  {label:44} {figures[0]:6.1f} s {figures[1]:6.1f} s cpu   {ratios}{note}")

        line(peer, official)
        line("sqlcmp evaluate --no-cache (cold)", cold)
        line("sqlcmp evaluate, cache filled (warm)", warm, f" (target <= 0.5x); warm/cold {warm[0] / cold[0]:.2f} "
             f"wall, {warm[1] / cold[1]:.2f} processor")
        # the workers' processor time is not all counted (the forkserver that reaps them may outlive the command)
        print(f"  {f'sqlcmp evaluate, warm, --workers {args.workers}':44} {parallel[0]:6.1f} s   ratio to the peer "
              f"{parallel[0] / official[0]:.2f}x wall")
        for label, figures, cold_run, suite in (
                ("SuperSQL's predictions again (warm)", again, first_cold, first),
                ("one answer in five changed (warm)", changed, changed_cold, third)):
            peer_run = measured(official_command(suite, args.spider, args.official, args.official_python))
            print(f"  {label:44} {figures[0]:6.1f} s {figures[1]:6.1f} s cpu   ratio to the peer on these cases "
                  f"({peer_run[0]:.1f} s) {figures[0] / peer_run[0]:.2f}x wall, {figures[1] / peer_run[1]:.2f}x "
                  f"processor; to their cold run {figures[0] / cold_run[0]:.2f}x wall")
        print(f"  filling the cache (SuperSQL's run): {fill[1] / first_cold[1]:.2f}x the processor time of the same "
              f"run without it; {info}")
        print(f"  reports of the warm runs identical to the cold runs', timings aside: {same}")


if __name__ == "__main__":
    main()
