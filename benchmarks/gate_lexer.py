"""What the gate's lexer check (``sandbox.gate.lexical_hazard``) refuses and costs on real queries: Spider dev's
gold queries and a published system's predictions, read as each of the three engines would read them. A plain
text-to-SQL query never needs what it refuses, so the goal is 0 refused.

    SQLCMP_SPIDER_DIR=$S python benchmarks/gate_lexer.py
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqlcmp_dagster.engine.sandbox.gate import lexical_hazard


def main() -> None:
    spider = Path(os.environ.get("SQLCMP_SPIDER_DIR", "../shared/data/spider"))
    queries = [line.split("\t")[0] for line in (spider / "dev_gold.sql").read_text("utf-8").splitlines() if line]
    queries += [line for line in (spider / "predictions" / "SuperSQL.sql").read_text("utf-8").splitlines() if line]
    for dialect in ("sqlite", "postgres", "duckdb"):
        started = time.perf_counter()
        refused = [(query, reason) for query in queries if (reason := lexical_hazard(query, dialect)) is not None]
        took = time.perf_counter() - started
        print(f"{dialect:<9} {len(queries):,} queries, {len(refused)} refused, {took / len(queries) * 1e6:.0f} µs a query")
        for query, reason in refused[:5]:
            print(f"  {reason}: {query[:100]}")


if __name__ == "__main__":
    main()
