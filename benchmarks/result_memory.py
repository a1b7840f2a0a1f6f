"""Peak memory of the comparing process for one large result of many small cells, on each engine, as a ratio to
``max_result_bytes`` (the bound the security docs promise: the process's baseline plus about two caps).

Each engine runs in a fresh process: its baseline is the RSS after the adapter ran a trivial query, its peak the
process's maximum RSS after the large query (one million rows of seven integers) was fetched and made a frame.
PostgreSQL is measured when ``SQLCMP_TEST_PG_URL`` names a server (``.ci/services.sh``).

    python benchmarks/result_memory.py [--rows 1000000] [--max-result-bytes 67108864]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

QUERIES = {
    "sqlite": "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {rows}) "
              "SELECT x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6 FROM g",
    "duckdb": "SELECT range AS x, range + 1, range + 2, range + 3, range + 4, range + 5, range + 6 FROM range({rows})",
    "postgres": "SELECT g AS x, g + 1, g + 2, g + 3, g + 4, g + 5, g + 6 FROM generate_series(1, {rows}) AS g",
}
CHILD = """
import json, resource, sys
from sqlcmp_dagster.engine.execution import ExecutionAdapter
target, sql, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
adapter = ExecutionAdapter(target, timeout_ms=120_000)
assert adapter.execute("SELECT 1 AS a").success
def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))
baseline = rss()
outcome = adapter.execute(sql, max_bytes=cap)
assert outcome.success, outcome.error
rows = outcome.relation.frame.height
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"baseline": baseline, "peak": peak, "rows": rows, "truncated": outcome.relation.truncated}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--max-result-bytes", type=int, default=64 << 20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        sqlite_file = Path(scratch) / "empty.sqlite"
        import sqlite3

        sqlite3.connect(sqlite_file).close()
        duck_file = Path(scratch) / "empty.duckdb"
        import duckdb

        duckdb.connect(str(duck_file)).close()
        targets = {"sqlite": str(sqlite_file), "duckdb": str(duck_file)}
        if os.environ.get("SQLCMP_TEST_PG_URL"):
            targets["postgres"] = os.environ["SQLCMP_TEST_PG_URL"]
        print(f"{'engine':<9} {'rows kept':>10} {'baseline MB':>12} {'peak MB':>8} {'peak - baseline':>16} "
              f"{'x max_result_bytes':>19}")
        for engine, target in targets.items():
            sql = QUERIES[engine].format(rows=args.rows)
            done = subprocess.run([sys.executable, "-c", CHILD, target, sql, str(args.max_result_bytes)],
                                  capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            growth = figures["peak"] - figures["baseline"]
            print(f"{engine:<9} {figures['rows']:>10,} {figures['baseline'] / 2**20:>12.0f} "
                  f"{figures['peak'] / 2**20:>8.0f} {growth / 2**20:>13.0f} MB {growth / args.max_result_bytes:>18.2f}x"
                  + ("  (truncated)" if figures["truncated"] else ""))


if __name__ == "__main__":
    main()
