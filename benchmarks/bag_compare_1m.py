"""Bag comparison of two 1,000,000-row x 5-column results with one mismatching cell, beside datacompy.

Each tool runs in a child process of its own. The child builds both frames, resets the kernel's peak-RSS mark
(/proc/self/clear_refs), runs the comparison, and reports wall time and the peak RSS reached during it above
the RSS after building (Linux only). sqlcmp compares as a multiset with no key; datacompy needs a join key, so it
is given the unique ``id`` column: it does less work (a key join) than a bag comparison must.

    pip install -e '.[bench]'    # datacompy
    python benchmarks/bag_compare_1m.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import polars as pl


def frames(rows: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    expected = pl.DataFrame({
        "id": pl.int_range(0, rows, eager=True),
        "qty": (pl.int_range(0, rows, eager=True) * 7919) % 1000,
        "price": pl.int_range(0, rows, eager=True).cast(pl.Float64) / 7.0,
        "name": pl.int_range(0, rows, eager=True).cast(pl.Utf8).str.pad_start(8, "x"),
        "ratio": (pl.int_range(0, rows, eager=True) % 97).cast(pl.Float64) / 3.0,
    })
    actual = expected.sample(fraction=1.0, shuffle=True, seed=7)
    actual = actual.with_columns(
        pl.when(pl.col("id") == rows // 2).then(pl.col("price") + 1.0).otherwise(pl.col("price")).alias("price"))
    return expected, actual


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def child(tool: str, rows: int) -> dict[str, object]:
    expected, actual = frames(rows)
    if tool == "sqlcmp":
        from sqlcmp_dagster.engine.execution import Relation
        from sqlcmp_dagster.engine.models import EvalConfig
        from sqlcmp_dagster.engine.results import compare_results

        def run() -> bool:
            left = Relation(expected.rename(lambda c: f"c{expected.columns.index(c)}"), expected.columns)
            right = Relation(actual.rename(lambda c: f"c{actual.columns.index(c)}"), actual.columns)
            result = compare_results(left, right, mode="order-insensitive", config=EvalConfig())
            return result.mode_pass
    else:
        from datacompy import PolarsCompare

        def run() -> bool:
            return PolarsCompare(expected, actual, join_columns="id", abs_tol=1e-9, rel_tol=1e-9).matches()
    base = _rss_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    started = time.perf_counter()
    verdict = run()
    seconds = time.perf_counter() - started
    peak = _rss_kib("VmHWM")
    return {"tool": tool, "rows": rows, "match": verdict, "seconds": round(seconds, 3),
            "peak_rss_above_inputs_mib": round((peak - base) / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--child", choices=("sqlcmp", "datacompy"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rows)))
        return
    if importlib.util.find_spec("datacompy") is None:
        sys.exit("datacompy is not installed: pip install -e '.[bench]'")
    print(f"{'tool':10} {'rows':>9} {'match':>6} {'seconds':>8} {'peak MiB':>9}")
    for tool in ("sqlcmp", "datacompy"):
        out = subprocess.run([sys.executable, __file__, "--child", tool, "--rows", str(args.rows)],
                             capture_output=True, text=True, check=True)
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{tool:10} {figures['rows']:>9} {str(figures['match']):>6} {figures['seconds']:>8} "
              f"{figures['peak_rss_above_inputs_mib']:>9}")


if __name__ == "__main__":
    main()
