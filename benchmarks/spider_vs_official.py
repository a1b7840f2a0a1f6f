"""Spider dev through ``sqlcmp evaluate`` (every deterministic metric) against the official execution-accuracy
loop, in one run: both wall times and their ratio; ``--workers`` scaling; engine overhead per case; the
expected-result cache over three models answering the same questions; and how many verdicts and severities
differ from a previous release over Spider dev and the bundled suite.

    python benchmarks/spider_vs_official.py [--spider DIR] [--official DIR]
                                            [--official-python PY] [--baseline-ref REF] [--workers 2]
                                            [--no-cache]

``--official DIR`` is a local checkout of the public test-suite-sql-eval repository (never part of this project):

    git clone https://github.com/taoyds/test-suite-sql-eval /tmp/test-suite-sql-eval
    .venv/bin/pip install sqlparse tqdm      # what its exec_eval.py imports
    # or a venv of its own:  python -m venv /tmp/tsse && /tmp/tsse/bin/pip install sqlparse tqdm nltk
    #                        and --official-python /tmp/tsse/bin/python

``--no-cache`` skips the three-model batch (3,102 cases: the longest part).

Its loop is ``exec_eval.eval_exec_match`` called once per case (no value plugging, DISTINCT removed: its
defaults). Without ``--official`` the loop is ``sqlcmp_dagster.cases.spider_exec.official_match``, this project's
re-implementation of the same rules. Each timed part runs in a child process of its own, from interpreter start
to exit (imports included, for both sides alike); sqlcmp's part is the CLI command itself, reports written.
Both sides' own modules are compiled to bytecode first, as ``pip install`` leaves an installed package: an
editable install under ``PYTHONDONTWRITEBYTECODE`` (this project's machines set it) compiles sqlcmp's 34 modules
from source at every start, about 0.1 s of each run and of each worker server.

``--baseline-ref`` (a git commit of this repository, default: main when the speed work began) is extracted with
``git archive`` and run with this venv's packages, so both releases see the same dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SPIDER = Path(os.environ.get("SQLCMP_SPIDER_DIR", ROOT.parent / "shared" / "data" / "spider"))
#: main before the speed work (issue 13) landed: the release whose verdicts must not change.
BASELINE_REF = "a8737aa"


def import_suite(spider: Path, out: Path, pred: Path | None = None) -> Path:
    from sqlcmp_dagster.cli import main as sqlcmp

    code = sqlcmp(["import", "spider", "--questions", str(spider / "dev.json"), "--gold", str(spider / "dev_gold.sql"),
                   "--pred", str(pred or spider / "predictions" / "SuperSQL.sql"),
                   "--db-dir", str(spider / "database"), "--out", str(out)])
    if code != 0:
        sys.exit("import failed")
    return out


def compile_bytecode(python: str, folder: Path) -> None:
    """The ``.pyc`` files of the modules under ``folder`` for ``python`` (``compileall``, which writes them even
    where ``PYTHONDONTWRITEBYTECODE`` stops imports from doing so)."""
    subprocess.run([python, "-m", "compileall", "-q", str(folder)], check=True, capture_output=True)


def timed(command: list[str], **kwargs: object) -> float:
    """Wall time of ``command`` as a child process; its output is kept only when it fails."""
    started = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    seconds = time.perf_counter() - started
    if out.returncode not in (0, 1):  # sqlcmp evaluate exits 1 when some case fails: that is not an error
        sys.exit(f"{command[:4]} failed:\n{out.stderr[-3000:]}")
    return seconds


def official_loop(suite: Path, db_dir: Path, official: Path | None) -> None:
    """The official per-case loop over the suite (run as a child process by :func:`main`)."""
    cases = [json.loads(line) for line in suite.read_text(encoding="utf-8").splitlines()]
    passed = 0
    if official is not None:
        sys.path.insert(0, str(official))
        os.chdir(official)
        from exec_eval import eval_exec_match  # type: ignore[import-not-found]

        for case in cases:
            db = db_dir / case["db"] / f"{case['db']}.sqlite"
            try:
                passed += eval_exec_match(str(db), case["actual_sql"], case["expected_sql"], plug_value=False,
                                          keep_distinct=False, progress_bar_for_each_datapoint=False)
            except AssertionError:  # its assertion that the gold query runs
                pass
    else:
        from sqlcmp_dagster.cases.spider_exec import official_match
        from sqlcmp_dagster.engine.sandbox.sqlite import sqlite_read_only

        connections = {}
        for case in cases:
            if case["db"] not in connections:
                connections[case["db"]] = sqlite_read_only(db_dir / case["db"] / f"{case['db']}.sqlite")
            passed += official_match(connections[case["db"]], case["expected_sql"], case["actual_sql"])
    print(json.dumps({"passed": passed}))


def official_command(suite: Path, spider: Path, official: Path | None, python: str) -> list[str]:
    """The command that runs :func:`official_loop` over ``suite`` in a child process: with ``official``'s
    ``exec_eval`` under ``python`` (a venv with its imports), else this project's re-implementation under this
    interpreter."""
    return [python if official else sys.executable, __file__, "--part", "official", "--suite", str(suite),
            "--spider", str(spider)] + (["--official", str(official.resolve())] if official else [])


def cache_part(suite: Path, db_dir: Path) -> None:
    """Three models over the same questions in one batch: how often each expected query is executed (every
    expected query goes through the batch cache's lookup; a miss is followed by one execution)."""
    from sqlcmp_dagster.cases.suite import load_suite
    from sqlcmp_dagster.engine import layers, pipeline

    cases = load_suite(suite).cases
    runs: Counter[object] = Counter()
    lookup = layers.ExpectedResults.get

    def counting(self: layers.ExpectedResults, key: str) -> object:
        hit = lookup(self, key)
        runs[json.loads(key)[3]] += hit is None  # the key's fourth part is the SQL text
        return hit

    layers.ExpectedResults.get = counting  # type: ignore[method-assign, assignment]
    started = time.perf_counter()
    reports = pipeline.Evaluator(db_dir=db_dir).evaluate_all(cases)
    print(json.dumps({"cases": len(reports), "seconds": time.perf_counter() - started,
                      "expected_queries": len({sql for case in cases for sql in case.expected_sql}),
                      "executions": sum(runs.values()), "max_per_query": max(runs.values())}))


def three_models(spider: Path, work: Path) -> Path:
    """A suite of three prediction sets of Spider dev: SuperSQL's, the gold queries (a perfect model) and
    SuperSQL's lowercased (a third model that differs in its string literals)."""
    lines = (spider / "predictions" / "SuperSQL.sql").read_text(encoding="utf-8").splitlines()
    gold = [line.split("\t")[0] for line in (spider / "dev_gold.sql").read_text(encoding="utf-8").splitlines()]
    models = {"supersql": lines, "gold": gold, "lower": [line.lower() for line in lines]}
    combined = work / "three-models.jsonl"
    with combined.open("w", encoding="utf-8") as out:
        for name, predictions in models.items():
            pred = work / f"{name}.sql"
            pred.write_text("\n".join(predictions) + "\n", encoding="utf-8")
            for line in import_suite(spider, work / f"{name}.jsonl", pred).read_text(encoding="utf-8").splitlines():
                case = json.loads(line)
                case["case_id"] = f"{name}-{case['case_id']}"
                out.write(json.dumps(case) + "\n")
    return combined


def baseline_reports(ref: str, suites: dict[str, tuple[Path, Path]], work: Path) -> dict[str, Path]:
    """Reports of the release at ``ref`` for each suite (name -> (suite, db dir))."""
    tree = work / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "sqlcmp_dagster"], capture_output=True,
                             check=True).stdout
    archive_path = work / "baseline.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(tree, filter="data")
    out = {}
    for name, (suite, db_dir) in suites.items():
        out[name] = work / f"baseline-{name}.jsonl"
        timed([sys.executable, "-c", "import sys; from sqlcmp_dagster.cli import main; sys.exit(main(sys.argv[1:]))",
               "evaluate", str(suite), "--db-dir", str(db_dir), "--out", str(out[name])],
              env={**os.environ, "PYTHONPATH": str(tree)})
    return out


def differences(before: Path, after: Path) -> tuple[list[str], list[str]]:
    """Case ids whose verdict differs, and whose severity differs, between two report files."""
    def load(path: Path) -> dict[str, dict[str, object]]:
        return {r["case_id"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}

    old, new = load(before), load(after)
    verdicts = [c for c in old if old[c]["deterministic_verdict"] != new[c]["deterministic_verdict"]]
    severities = [c for c in old if old[c]["severity"] != new[c]["severity"]]
    return verdicts, severities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--official", type=Path, help="local checkout of taoyds/test-suite-sql-eval")
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="git commit to diff verdicts against ('' skips)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--official-python", default=sys.executable,
                        help="interpreter for the official loop (a venv with its imports; default: this one)")
    parser.add_argument("--no-cache", action="store_true", help="skip the three-model batch")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time the peer and both sqlcmp runs this many times, in turn, and print the medians "
                             "too (this machine's speed drifts by 5-10%% within minutes)")
    parser.add_argument("--part", choices=("official", "cache"))
    parser.add_argument("--suite", type=Path)
    args = parser.parse_args()
    db_dir = args.spider / "database"
    if args.part == "official":
        return official_loop(args.suite, db_dir, args.official)
    if args.part == "cache":
        return cache_part(args.suite, db_dir)
    if not (args.spider / "dev.json").is_file():
        sys.exit(f"Spider dev set not found at {args.spider} (pass --spider or set SQLCMP_SPIDER_DIR)")
    if args.official is not None and not (args.official / "exec_eval.py").is_file():
        sys.exit(f"{args.official} has no exec_eval.py: pass a checkout of taoyds/test-suite-sql-eval")
    from common import overhead_figures  # here: the official loop's child may run in a venv without sqlcmp

    from sqlcmp_dagster.cases.sample import sample_db_dir, sample_suite_path
    from sqlcmp_dagster.engine.atomic import read_lines
    from sqlcmp_dagster.engine.models import Report

    sqlcmp = [sys.executable, "-m", "sqlcmp_dagster.cli"]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        suite = import_suite(args.spider, work / "spider.jsonl")
        official_cmd = official_command(suite, args.spider, args.official, args.official_python)
        compile_bytecode(sys.executable, ROOT / "sqlcmp_dagster")
        if args.official:
            compile_bytecode(official_cmd[0], args.official.resolve())
        peer = "official exec_eval loop" if args.official else "spider_exec re-implementation of the official loop"
        n = len(read_lines(suite, ValueError))
        reports = {w: work / f"reports-{w}.jsonl" for w in (1, args.workers)}
        rounds = []
        for number in range(1, args.repeat + 1):  # each round times the peer, then one worker, then N workers
            official_s = timed(official_cmd)
            ours = {w: timed([*sqlcmp, "evaluate", str(suite), "--db-dir", str(db_dir), "--out", str(reports[w]),
                              "--workers", str(w), "--no-cache"]) for w in reports}  # cold: benchmarks/warm_cache.py
            figures = overhead_figures(map(Report.model_validate_json, read_lines(reports[1], ValueError)))
            rounds.append({"official": official_s, "ratio": ours[1] / official_s,
                           "speedup": ours[1] / ours[args.workers], **figures})
            which = "one run" if args.repeat == 1 else f"run {number} of {args.repeat}"
            print(f"{n} Spider dev cases (SuperSQL), {which}, wall time from process start to exit:")
            print(f"  {peer:52} {official_s:7.1f} s")
            print(f"  {'sqlcmp evaluate --workers 1 (every deterministic metric)':52} {ours[1]:7.1f} s   "
                  f"ratio to the peer {ours[1] / official_s:.2f}x (target <= 1.0x)")
            if args.workers != 1:
                print(f"  {f'sqlcmp evaluate --workers {args.workers}':52} {ours[args.workers]:7.1f} s   "
                      f"throughput {ours[1] / ours[args.workers]:.2f}x of one worker; reports identical to the "
                      f"serial run: {untimed(reports[1]) == untimed(reports[args.workers])}")
            print(f"  engine overhead per case beyond query execution: median {figures['overhead_median_ms']:.2f} "
                  f"ms, p95 {figures['overhead_p95_ms']:.2f} ms")
        if args.repeat > 1:
            def middle(key: str) -> float:
                return statistics.median(r[key] for r in rounds)

            print(f"median of {args.repeat} runs: ratio to the peer {middle('ratio'):.2f}x, throughput "
                  f"{middle('speedup'):.2f}x of one worker, overhead median {middle('overhead_median_ms'):.2f} ms, "
                  f"p95 {middle('overhead_p95_ms'):.2f} ms (the peer {middle('official'):.1f} s)")
        if not args.no_cache:
            combined = three_models(args.spider, work)
            out = subprocess.run([sys.executable, __file__, "--part", "cache", "--suite", str(combined),
                                  "--spider", str(args.spider)], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"cache part failed:\n{out.stderr[-3000:]}")
            cache = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"three models x Spider dev in one batch ({cache['cases']} cases, {cache['seconds']:.1f} s): "
                  f"{cache['executions']} executions of {cache['expected_queries']} distinct expected queries, at "
                  f"most {cache['max_per_query']} per query")
        if args.baseline_ref:
            bundled = work / "bundled.jsonl"
            timed([*sqlcmp, "evaluate", str(sample_suite_path()), "--db-dir", str(sample_db_dir()),
                   "--out", str(bundled), "--no-cache"])
            before = baseline_reports(args.baseline_ref, {"spider": (suite, db_dir),
                                                          "bundled": (sample_suite_path(), sample_db_dir())}, work)
            for name, now in (("Spider dev", reports[1]), ("bundled suite", bundled)):
                verdicts, severities = differences(before["spider" if name == "Spider dev" else "bundled"], now)
                print(f"  {name}: {len(verdicts)} verdicts and {len(severities)} severities differ from "
                      f"{args.baseline_ref}" + (f": {sorted(set(verdicts) | set(severities))}"
                                                  if verdicts or severities else ""))


def untimed(path: Path) -> list[object]:
    """A report file without run_metadata and timings (what two runs of the same cases may differ in)."""
    from sqlcmp_dagster.engine.atomic import read_lines

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    if k != "run_metadata" and not k.endswith("_ms") and "time" not in k}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return [strip(json.loads(line)) for line in read_lines(path, ValueError)]


if __name__ == "__main__":
    main()
