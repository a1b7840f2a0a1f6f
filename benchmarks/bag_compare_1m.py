"""Bag comparison of two 1,000,000-row x 5-column results with one mismatching cell, beside datacompy.

Each tool runs in a child process of its own. The child builds both frames, resets the kernel's peak-RSS mark
(/proc/self/clear_refs), runs the comparison, and reports wall time and the peak RSS reached during it above
the RSS after building (Linux only). sqlcmp compares as a multiset with no key; datacompy needs a join key, so it
is given the unique ``id`` column: it does less work (a key join) than a bag comparison must.

The frames are written to Parquet once and both children read the same files, so datacompy may run in a venv
of its own (``--datacompy-python``): datacompy pins an older polars than this project uses.

    pip install -e '.[bench]'    # datacompy, when its polars bound fits this venv; otherwise:
    python -m venv /tmp/dc && /tmp/dc/bin/pip install datacompy pyarrow
    python benchmarks/bag_compare_1m.py [--rows 1000000] [--datacompy-python /tmp/dc/bin/python]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
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


def child(tool: str, folder: Path) -> dict[str, object]:
    expected, actual = pl.read_parquet(folder / "expected.parquet"), pl.read_parquet(folder / "actual.parquet")
    rows = expected.height
    if tool == "sqlcmp":
        from sqlcmp_dagster.engine.relation import Relation
        from sqlcmp_dagster.engine.models import EvalConfig
        from sqlcmp_dagster.engine.comparison import compare_results

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
    inputs = (expected.estimated_size() + actual.estimated_size()) / 2**20
    return {"tool": tool, "rows": rows, "match": verdict, "seconds": round(seconds, 3),
            "peak_rss_above_inputs_mib": round((peak - base) / 1024, 1), "inputs_mib": round(inputs, 1),
            "polars": pl.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--datacompy-python", default=sys.executable,
                        help="interpreter of a venv with datacompy (default: this one)")
    parser.add_argument("--child", choices=("sqlcmp", "datacompy"))
    parser.add_argument("--frames", type=Path, help="folder of the Parquet frames (children only)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.frames)))
        return
    if args.datacompy_python == sys.executable and importlib.util.find_spec("datacompy") is None:
        sys.exit("datacompy is not installed: pip install -e '.[bench]' or pass --datacompy-python")
    print(f"{'tool':10} {'polars':>7} {'rows':>9} {'match':>6} {'seconds':>8} {'inputs MiB':>11} "
          f"{'peak MiB':>9} {'peak/inputs':>12}")
    with tempfile.TemporaryDirectory() as folder:
        expected, actual = frames(args.rows)
        expected.write_parquet(Path(folder) / "expected.parquet")
        actual.write_parquet(Path(folder) / "actual.parquet")
        del expected, actual
        times = {}
        for tool, python in (("sqlcmp", sys.executable), ("datacompy", args.datacompy_python)):
            out = subprocess.run([python, __file__, "--child", tool, "--frames", folder], capture_output=True,
                                 text=True, check=True)
            f = json.loads(out.stdout.strip().splitlines()[-1])
            times[tool] = f["seconds"]
            print(f"{tool:10} {f['polars']:>7} {f['rows']:>9} {str(f['match']):>6} {f['seconds']:>8} "
                  f"{f['inputs_mib']:>11} {f['peak_rss_above_inputs_mib']:>9} "
                  f"{f['peak_rss_above_inputs_mib'] / f['inputs_mib']:>12.2f}")
    print(f"sqlcmp / datacompy time: {times['sqlcmp'] / times['datacompy']:.2f} (target <= 1)")


if __name__ == "__main__":
    main()
