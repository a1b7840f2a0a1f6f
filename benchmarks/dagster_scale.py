"""A large suite through the case sensor and one run, against the engine alone on the same cases: the figures
of the 100,000-case target (sensor tick <= 5 s, launching the run <= 10 s, the run <= 2x the engine's time,
every process <= 2 GiB).

    python benchmarks/dagster_scale.py --cases 100000 --suite suite.jsonl --db-dir $S/database
    python benchmarks/dagster_scale.py --cases 10000      # the bundled suite cycled, on its sample database
    python benchmarks/dagster_scale.py --cases 100000 --suite suite.jsonl --db-dir $S/database \
        --chunks 200 --cases-per-run 20 --max-runs 1 --keep /tmp/scale   # chunks; the first of ten runs only

``--chunks N`` runs the Dagster part with ``SQLCMP_CASE_CHUNKS=N`` (partitions of chunks of cases) and
``--cases-per-run N`` with ``SQLCMP_CASES_PER_RUN=N`` (partitions per run). ``--max-runs N`` carries out only the
first N runs of the first tick (the others stay pending, as while the daemon works through them) and skips the
engine part: the sensor's, the launch's and the memory figures at a size whose whole run takes hours.
``--keep DIR`` keeps the suite, the Dagster home and the store for ``dagster_pages.py`` (the UI pages' figures).

``--suite`` is repeated with distinct ids (``<id>~<n>``) up to ``--cases`` (Spider dev: import it first with
``sqlcmp import spider ... --out suite.jsonl``). Two parts, each in a child process of its own (peak RSS from
Linux /proc): ``engine``, every case through ``Evaluator.evaluate_stream`` in one process (the peer, as the CLI
runs them with one worker), and ``dagster``, on the local instance ``sqlcmp demo`` configures (its ``dagster.yaml`` in the Dagster home):

- ``first tick``: the case sensor's evaluation over a suite Dagster has never seen (it hashes every case; over
  several ticks when that takes more than ``SCAN_SECONDS``: the longest of them, and how many);
- ``add partitions``: storing the new dynamic partitions, as the daemon does after that tick;
- ``launch``: from ``materialize`` over every case to the first step's start (planning a run over N partitions);
- ``run``: the whole run (or runs), every layer, in-process as ``sqlcmp demo`` runs them (the summary after it,
  separately);
- ``unchanged tick``: the sensor again with nothing changed (what it costs every minute);
- ``one case edited``: one evaluated case's SQL edited, the sensor's tick, the run it requests (its partition
  only) and how many cases that run evaluated again (1: the others of its chunk are reused).

Both parts use the gold side's cache as the CLI does by default, each from a cold cache folder of its own
(``SQLCMP_CACHE_DIR``). The load average is printed beside each part: the figures of a loaded machine are not comparable.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import peak_mib
from dagster_pipeline import write_suite

#: The targets, in seconds and MiB (the run's is a ratio to the engine's time).
TARGETS = {"first tick": 5.0, "unchanged tick": 5.0, "launch": 10.0, "run / engine": 2.0, "peak_mib": 2048.0}


def repeat_suite(source: Path, folder: Path, count: int) -> None:
    """``count`` cases cycling over ``source``'s, the n-th repetition of a case as ``<id>~<n>``."""
    cases = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "suite.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(count):
            case = cases[i % len(cases)]
            handle.write(json.dumps({**case, "case_id": f"{case['case_id']}~{i // len(cases)}"}) + "\n")


def engine_part(folder: Path, db_dir: Path) -> dict[str, float]:
    """Every case through the engine in one process, streamed as ``sqlcmp evaluate --workers 1`` runs them (a
    window of cases in memory at a time, each report dropped once counted)."""
    from sqlcmp_dagster.cases.suite import load_suites
    from sqlcmp_dagster.engine.cache import default_cache_dir
    from sqlcmp_dagster.engine.pipeline import Evaluator

    cases = load_suites(folder).cases
    started = time.perf_counter()
    evaluator = Evaluator(db_dir=db_dir, cache_dir=default_cache_dir())  # the CLI's default, as the Dagster part's
    count = sum(1 for _ in evaluator.evaluate_stream(cases))
    return {"seconds": time.perf_counter() - started, "cases": count, "peak_mib": peak_mib()}


def dagster_part(folder: Path, db_dir: Path, work: Path, max_runs: int | None = None) -> dict[str, float]:
    import dagster as dg

    from sqlcmp_dagster.assets import LAYERS
    from sqlcmp_dagster.assets.common import cases_partitions
    from sqlcmp_dagster.assets.sensors import case_sensor
    from sqlcmp_dagster.definitions import build_definitions
    from sqlcmp_dagster.event_log import event_batches, local_instance
    from sqlcmp_dagster.local import QUIET_CONSOLE, materialize_summary
    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    home = work / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(json.dumps(local_instance(str(home / "history" / "runs"))), encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(db_dir), storage_dir=str(work / "store"))
    figures: dict[str, float] = {}
    parsed_module = importlib.import_module("sqlcmp_dagster.assets.parsed_cases")  # the package exports the asset
    parse = parsed_module.parse_layer
    parsed: list[str] = []

    def counted(request, *rest):  # noqa: ANN001, ANN202 - the engine's Layer 1a, counted per case
        parsed.append(request.case_id)
        return parse(request, *rest)

    parsed_module.parse_layer = counted

    def tick(cursor: str | None, name: str) -> dg.SensorResult:
        started = time.perf_counter()
        with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=cursor) as context:
            result = case_sensor(context)
        figures[name] = time.perf_counter() - started
        assert isinstance(result, dg.SensorResult)
        return result

    def run_all(result: dg.SensorResult, name: str, limit: int | None = None) -> None:
        started = time.time()
        for request in (result.run_requests or [])[:limit]:
            with event_batches():  # as sqlcmp demo runs them (sqlcmp_dagster.local.sensor_tick)
                run = dg.materialize(LAYERS, instance=instance, resources=defs.resources or {},
                                     partition_key=request.partition_key, tags=request.tags,
                                     run_config=QUIET_CONSOLE)
            assert run.success
            if f"{name} launch" not in figures:
                step_starts = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_START,
                                                           limit=1).records
                figures[f"{name} launch"] = step_starts[0].timestamp - started
        figures[name] = time.time() - started

    with dg.DagsterInstance.from_config(str(home)) as instance:  # the dagster.yaml above: the UI opens it too
        first = tick(None, "first tick")
        reading = [figures["first tick"]]
        while not first.dynamic_partitions_requests:  # the suite read over several ticks (SCAN_SECONDS each)
            first = tick(first.cursor, "first tick")
            reading.append(figures["first tick"])
        figures["first tick"], figures["ticks to read the suite"] = max(reading), len(reading)
        figures["reading the suite"] = sum(reading)
        (added,) = first.dynamic_partitions_requests or []
        started = time.perf_counter()
        instance.add_dynamic_partitions(cases_partitions.name, list(added.partition_keys or []))
        figures["add partitions"] = time.perf_counter() - started
        figures["partitions"] = len(added.partition_keys or [])
        figures["run requests"] = len(first.run_requests or [])
        run_all(first, "run", max_runs)
        figures["peak_mib after the runs"] = peak_mib()
        figures["runs done"] = min(len(first.run_requests or []), max_runs or len(first.run_requests or []))
        figures["launch"] = figures.pop("run launch")
        figures["cases parsed"] = len(parsed)
        started = time.perf_counter()
        assert materialize_summary(defs, instance).success
        figures["summary"] = time.perf_counter() - started
        figures["peak_mib after the summary"] = peak_mib()
        again = tick(first.cursor, "unchanged tick")
        assert not again.run_requests, "the unchanged tick requested runs"
        # one case edited: its partition alone is requested, and only that case is evaluated again
        suite = folder / "suite.jsonl"
        lines = suite.read_text(encoding="utf-8").splitlines(keepends=True)
        reported = set(PartitionedParquetIOManager(base_path=str(work / "store")).case_ids("case_reports"))
        line = next(n for n, text in enumerate(lines) if json.loads(text)["case_id"] in reported)
        case = json.loads(lines[line])
        lines[line] = json.dumps({**case, "actual_sql": case["actual_sql"] + " -- edited"}) + "\n"
        suite.write_text("".join(lines), encoding="utf-8")
        parsed.clear()
        edited = tick(again.cursor, "edited tick")
        run_all(edited, "edited run")
        figures["edited cases parsed"] = len(parsed)
        figures["edited run requests"] = len(edited.run_requests or [])
    return {**figures, "cases": figures["cases parsed"], "peak_mib": peak_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--suite", type=Path, help="a suite file to repeat (default: the bundled suite)")
    parser.add_argument("--db-dir", type=Path, help="the suite's databases")
    parser.add_argument("--chunks", type=int, default=0,
                        help="SQLCMP_CASE_CHUNKS for the Dagster part (0: one partition per case)")
    parser.add_argument("--cases-per-run", type=int, help="SQLCMP_CASES_PER_RUN (partitions per run) likewise")
    parser.add_argument("--keep", type=Path, help="work in this (new) folder and keep it: the suite, the "
                                                  "Dagster home and the store, for the pages' figures (--part ui)")
    parser.add_argument("--max-runs", type=int, help="carry out only the first N of the first tick's runs (the "
                        "others stay pending, as while the daemon works through them): the sensor's, launch and "
                        "memory figures at a size whose whole run would take hours; no engine part then")
    parser.add_argument("--part", choices=("engine", "dagster"))
    parser.add_argument("--folder", type=Path)
    args = parser.parse_args()
    if args.part:
        with tempfile.TemporaryDirectory() as temporary:
            work = Path(temporary) if args.keep is None else args.keep
            figures = engine_part(args.folder, args.db_dir) if args.part == "engine" else \
                dagster_part(args.folder, args.db_dir, work, args.max_runs)
        print(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        folder, db_dir = work / "cases", args.db_dir
        if args.suite:
            repeat_suite(args.suite, folder, args.cases)
        else:
            from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database

            db_dir = work / "db"
            build_sample_database(db_dir / f"{SAMPLE_DB_ID}.sqlite")
            write_suite(folder, args.cases)
        # each part starts from a cold gold-side cache of its own, in the CLI's default place for it
        env = {**os.environ, "SQLCMP_CASE_CHUNKS": str(args.chunks)}
        if args.cases_per_run:
            env["SQLCMP_CASES_PER_RUN"] = str(args.cases_per_run)
        figures = {}
        for name in ("dagster",) if args.max_runs else ("engine", "dagster"):
            before = os.getloadavg()[0]
            command = [sys.executable, __file__, "--part", name, "--folder", str(folder), "--db-dir", str(db_dir),
                       *(["--keep", str(work)] if args.keep else []),
                       *(["--max-runs", str(args.max_runs)] if args.max_runs else [])]
            out = subprocess.run(command, capture_output=True, text=True,
                                 env={**env, "SQLCMP_CACHE_DIR": str(work / f"cache-{name}")})
            if out.returncode != 0:
                sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
            figures[name] = {**json.loads(out.stdout.strip().splitlines()[-1]),
                             "load": f"{before:.1f} -> {os.getloadavg()[0]:.1f}"}
            print(name, json.dumps(figures[name]), flush=True)
    engine, dagster = figures.get("engine"), figures["dagster"]
    if engine:
        print(f"{engine['cases']:,} cases; engine alone (one process): {engine['seconds']:.1f} s, "
              f"peak {engine['peak_mib']:.0f} MiB; load {engine['load']}")
    print(f"dagster, {args.cases:,} cases, SQLCMP_CASE_CHUNKS={args.chunks} ({dagster['partitions']:.0f} "
          f"partitions, {dagster['run requests']:.0f} run(s), {dagster['runs done']:.0f} carried out, "
          f"{dagster['cases parsed']:,.0f} cases evaluated; load {dagster['load']}):")
    measured = {"first tick": dagster["first tick"], "unchanged tick": dagster["unchanged tick"],
                "launch": dagster["launch"], "peak_mib": dagster["peak_mib"],
                **({"run / engine": dagster["run"] / engine["seconds"]} if engine else {})}
    for name, value in measured.items():
        verdict = "meets" if value <= TARGETS[name] else "MISSES"
        print(f"  {name:15} {value:10.2f}  (target <= {TARGETS[name]:g}: {verdict})")
    print(f"  the suite read in {dagster['ticks to read the suite']:.0f} tick(s), {dagster['reading the suite']:.2f} s "
          "in all")
    print(f"  add partitions  {dagster['add partitions']:10.2f} s; run {dagster['run']:.1f} s; "
          f"summary {dagster['summary']:.1f} s")
    print(f"  one case edited: tick {dagster['edited tick']:.2f} s, {dagster['edited run requests']:.0f} run(s) "
          f"of {dagster['edited run']:.1f} s (launch {dagster['edited run launch']:.2f} s), "
          f"{dagster['edited cases parsed']:.0f} case(s) evaluated again")


if __name__ == "__main__":
    main()
