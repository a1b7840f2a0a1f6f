"""What DuckDB's bounded query process costs per query, as a ratio to the in-process path it replaced.

Each query runs ``--repeat`` times through ``ExecutionAdapter`` (the gate's parse, then the query in the adapter's
DuckDB process, rows pickled back) and through an in-process SQLAlchemy connection with the same sandbox settings
and the same bounded fetch (no parse), alternately in the same run, so the ratio does not depend on the load.

    python benchmarks/duckdb_process.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from sqlcmp_dagster.engine.sandbox.bounds import fetch_bounded
from sqlcmp_dagster.engine.sandbox.duckdb_process import DUCKDB_SANDBOX
from sqlcmp_dagster.engine.execution import ExecutionAdapter

QUERIES = ("SELECT * FROM t", "SELECT range, range * 2 FROM range(20000)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.duckdb"
        with duckdb.connect(str(path)) as connection:
            connection.execute("CREATE TABLE t AS SELECT range AS a, 'x' || range AS b FROM range(100)")
        adapter = ExecutionAdapter(str(path))
        adapter.execute("SELECT 1")  # the process starts once per adapter: not what is measured here
        engine = sa.create_engine(f"duckdb:///{path}", poolclass=NullPool,
                                  connect_args={"read_only": True, "config": dict(DUCKDB_SANDBOX)})

        def in_process(sql: str) -> None:
            with engine.connect() as connection:
                cursor = connection.connection.cursor()
                cursor.execute(sql)
                fetch_bounded(cursor, 1_000_000, 64 << 20, 1 << 20)

        for sql in QUERIES:
            process, local = [], []
            for _ in range(args.repeat):
                started = time.perf_counter()
                adapter.execute(sql)
                process.append(time.perf_counter() - started)
                started = time.perf_counter()
                in_process(sql)
                local.append(time.perf_counter() - started)
            a, b = statistics.median(process), statistics.median(local)
            print(f"{sql[:45]:45s} process {a * 1000:7.1f} ms, in-process {b * 1000:7.1f} ms, ratio {a / b:.2f}")
        adapter.close()
        engine.dispose()


if __name__ == "__main__":
    main()
