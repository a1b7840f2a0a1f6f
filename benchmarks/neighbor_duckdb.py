"""The neighbor search on DuckDB databases, whose neighbors live in the case's bounded DuckDB process, as a ratio to
the same search on the SQLite originals (neighbors in this process), in the same run.

Copies a few Spider dev databases into DuckDB files (column types by SQLite affinity, rows that DuckDB refuses left
out), evaluates SuperSQL's predictions against the gold queries on both copies with every default metric, and prints
per engine: the neighbor searches and their outcome, the searches' summed wall time, the run's wall time and its CPU
time (this process plus its reaped children: DuckDB's query processes do the DuckDB work). CPU time depends less on
the machine's load than wall time; run it twice before believing a ratio.

    python benchmarks/neighbor_duckdb.py [--spider DIR] [--dbs concert_singer,pets_1]

To compare two versions of the code, run it under each (``PYTHONPATH=<checkout>``), alternately.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

from sqlcmp_dagster.engine.models import CompareRequest

DEFAULT_SPIDER = Path(os.environ.get("SQLCMP_SPIDER_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"
                                     / "spider"))


def duckdb_copy(source: Path, target: Path) -> Path:
    """``source`` (SQLite) as a DuckDB file: each table with BIGINT, DOUBLE or VARCHAR columns by affinity."""
    reader = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    reader.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    writer = duckdb.connect(str(target))
    for (name,) in reader.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
        columns = []
        for _, column, declared, *_ in reader.execute(f'PRAGMA table_info("{name}")'):
            declared = (declared or "").upper()
            kind = "BIGINT" if "INT" in declared else "DOUBLE" if any(
                part in declared for part in ("REAL", "FLOA", "DOUB", "NUM", "DEC")) else "VARCHAR"
            columns.append(f'"{column}" {kind}')
        writer.execute(f'CREATE TABLE "{name}" ({", ".join(columns)})')
        for row in reader.execute(f'SELECT * FROM "{name}"'):
            try:
                writer.execute(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(row))})', row)
            except (duckdb.Error, OverflowError):
                pass  # a value DuckDB's column type refuses: the row is left out
    writer.close()
    reader.close()
    return target


def run(cases: list[CompareRequest]) -> dict[str, object]:
    """One engine's figures, measured in a fresh process so that its children's CPU time is its own."""
    script = ("import json, os, sys, time\n"
              "from sqlcmp_dagster.engine.models import CompareRequest\n"
              "from sqlcmp_dagster.engine.pipeline import Evaluator\n"
              "cases = [CompareRequest.model_validate(c) for c in json.loads(sys.stdin.read())]\n"
              "evaluator = Evaluator()\n"
              "started = time.perf_counter()\n"
              "reports = evaluator.evaluate_all(cases, workers=1)\n"
              "wall = time.perf_counter() - started\n"
              "evaluator.close()\n"
              "cpu = os.times()\n"
              "searched = [r for r in reports if (r.metrics.get('diagnostics') or {}).get('neighbor_search_ran')]\n"
              "print(json.dumps({'passed': sum(r.deterministic_verdict == 'pass' for r in reports),\n"
              "  'searches': len(searched),\n"
              "  'neighbors': sum(r.metrics['diagnostics']['neighbors_tried'] for r in searched),\n"
              "  'counterexamples': sum(bool(r.metrics['diagnostics']['counterexample_found']) for r in searched),\n"
              "  'search_s': round(sum(r.evidence['neighborhood']['elapsed_ms'] for r in searched) / 1000, 2),\n"
              "  'wall_s': round(wall, 2),\n"
              "  'cpu_s': round(cpu.user + cpu.system + cpu.children_user + cpu.children_system, 2)}))\n")
    payload = json.dumps([case.model_dump(mode="json") for case in cases])
    done = subprocess.run([sys.executable, "-c", script], input=payload, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--dbs", default="concert_singer,pets_1")
    args = parser.parse_args()
    dbs = args.dbs.split(",")
    dev = json.loads((args.spider / "dev.json").read_text(encoding="utf-8"))
    predictions = (args.spider / "predictions" / "SuperSQL.sql").read_text(encoding="utf-8").splitlines()
    with tempfile.TemporaryDirectory() as folder:
        files = {"sqlite": {db: args.spider / "database" / db / f"{db}.sqlite" for db in dbs}}
        files["duckdb"] = {db: duckdb_copy(path, Path(folder) / f"{db}.duckdb") for db, path in files["sqlite"].items()}
        figures = {}
        for engine in ("sqlite", "duckdb"):
            cases = [CompareRequest(case_id=str(i), db=str(files[engine][item["db_id"]]), expected_sql=item["query"],
                                    actual_sql=predictions[i]) for i, item in enumerate(dev) if item["db_id"] in dbs]
            figures[engine] = run(cases)
            print(engine, json.dumps(figures[engine]), flush=True)
    for figures_of in figures.values():
        figures_of["search_ms_per_neighbor"] = round(1000 * float(figures_of["search_s"])  # type: ignore[arg-type]
                                                     / max(int(figures_of["neighbors"]), 1), 1)  # type: ignore[call-overload]
    for figure in ("search_ms_per_neighbor", "wall_s", "cpu_s"):
        sqlite_value = float(figures["sqlite"][figure])  # type: ignore[arg-type]
        print(f"duckdb / sqlite {figure}: {float(figures['duckdb'][figure]) / max(sqlite_value, 1e-9):.2f}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
