"""The published metrics of one ``sqlcmp evaluate`` run against the official scripts, case by case, on Spider dev
(SuperSQL's predictions): Spider's exact set match against test-suite-sql-eval's ``evaluation.py``, BIRD's EX
and Soft-F1 against mini_dev's ``evaluation_ex.py`` and ``evaluation_f1.py`` on Spider dev converted to BIRD's
file formats, and R-VES by BIRD's own script beside ours (timings: never equal, the noise is printed).

    python benchmarks/official_metrics.py --test-suite-eval DIR --bird-eval DIR --official-python PY
                                          [--spider $SQLCMP_SPIDER_DIR] [--ves-cases 100]

Both official repositories are public checkouts kept outside this project (never part of it), run with a Python
of their own that has what they import:

    git clone https://github.com/taoyds/test-suite-sql-eval /tmp/test-suite-sql-eval
    git clone https://github.com/bird-bench/mini_dev /tmp/mini_dev
    python -m venv /tmp/official && /tmp/official/bin/pip install nltk sqlparse tqdm func_timeout numpy \\
        psycopg2-binary pymysql

NLTK's punkt model cannot be fetched on every machine, so ``word_tokenize`` runs with ``preserve_line=True``
in the official script too (patched in before it is imported): that is the split sqlcmp re-implements.
Spider dev has no BIRD difficulty: each case gets one from its Spider hardness (easy: simple, medium: moderate,
hard and extra: challenging), in the questions file BIRD's scripts read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sqlcmp_dagster.engine.bird_metrics import (
    BIRD_TIMING_REPEATS,
    time_ratio,
    ves_reward,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SPIDER = Path(os.environ.get("SQLCMP_SPIDER_DIR", ROOT.parent / "shared" / "data" / "spider"))
DIFFICULTY = {"easy": "simple", "medium": "moderate", "hard": "challenging", "extra": "challenging"}

#: Runs in the official Python, in the test-suite-sql-eval checkout: each case's exact match and hardness, by
#: evaluation.py's own functions in the order its evaluate() calls them.
SPIDER_DRIVER = """
import functools, json, os, sys
import nltk
nltk.word_tokenize = functools.partial(nltk.word_tokenize, preserve_line=True)
sys.path.insert(0, os.getcwd())
import evaluation as ev
from process_sql import Schema, get_schema, get_sql
cases, tables = json.load(open(sys.argv[1])), sys.argv[2]
kmaps = ev.build_foreign_key_map_from_json(tables)
empty = {"except": None, "from": {"conds": [], "table_units": []}, "groupBy": [], "having": [], "intersect": None,
         "limit": None, "orderBy": [], "select": [False, []], "union": None, "where": []}
out = []
for case in cases:
    schema = Schema(get_schema(case["db_path"]))
    g_sql = get_sql(schema, case["gold"])
    hardness = ev.Evaluator().eval_hardness(g_sql)
    try:
        p_sql = get_sql(schema, case["pred"].replace("value", "1"))
    except Exception:
        p_sql = json.loads(json.dumps(empty))
    kmap = kmaps[case["db"]]
    g_valid = ev.build_valid_col_units(g_sql["from"]["table_units"], schema)
    g_sql = ev.rebuild_sql_col(g_valid, ev.rebuild_sql_val(g_sql), kmap)
    p_valid = ev.build_valid_col_units(p_sql["from"]["table_units"], schema)
    p_sql = ev.rebuild_sql_col(p_valid, ev.rebuild_sql_val(p_sql), kmap)
    out.append({"exact": bool(ev.Evaluator().eval_exact_match(p_sql, g_sql)), "hardness": hardness})
json.dump(out, sys.stdout)
"""
#: evaluation.py itself (its command line), NLTK patched as above.
SPIDER_MAIN = """
import functools, runpy, sys
import nltk
nltk.word_tokenize = functools.partial(nltk.word_tokenize, preserve_line=True)
sys.argv = ["evaluation.py"] + sys.argv[1:]
runpy.run_path("evaluation.py", run_name="__main__")
"""
#: Runs in the official Python, in the test-suite-sql-eval checkout: each case's test-suite verdict by
#: exec_eval.eval_exec_match over every .sqlite file of the case's folder (evaluation.py's ``value`` read as 1
#: first), None where the gold query fails (the script's assertion).
TEST_SUITE_DRIVER = """
import json, os, sys
sys.path.insert(0, os.getcwd())
from exec_eval import eval_exec_match
out = []
for case in json.load(open(sys.argv[1])):
    try:
        out.append(bool(eval_exec_match(db=case["db_path"], p_str=case["pred"].replace("value", "1"),
                                        g_str=case["gold"], plug_value=False, keep_distinct=False,
                                        progress_bar_for_each_datapoint=False)))
    except AssertionError:
        out.append(None)
json.dump(out, sys.stdout)
"""
#: Runs in the official Python, in mini_dev's evaluation folder: each case's EX and Soft-F1 by its own functions.
BIRD_DRIVER = """
import json, os, sys
sys.path.insert(0, os.getcwd())
from evaluation_utils import execute_sql
from evaluation_ex import calculate_ex
from evaluation_f1 import calculate_f1_score
out = []
for case in json.load(open(sys.argv[1])):
    row = {}
    for name, score in (("ex", calculate_ex), ("f1", calculate_f1_score)):
        try:
            row[name] = execute_sql(case["pred"], case["gold"], case["db_path"], "SQLite", score)
        except Exception:  # as execute_model: a query that fails scores 0
            row[name] = 0
    out.append(row)
json.dump(out, sys.stdout)
"""


def sqlcmp_reports(spider: Path, folder: Path, *, db_dir: Path | None = None, neighbors: int = 0,
                   limit: int | None = None) -> list[dict[str, Any]]:
    """SuperSQL's suite (its first ``limit`` cases) imported and evaluated by the CLI on ``db_dir`` (Spider's
    databases by default), with at most ``neighbors`` neighbor databases per pass (none by default: the search
    touches no published metric)."""
    from sqlcmp_dagster.cli import main as sqlcmp

    suite, reports = folder / "supersql.jsonl", folder / f"reports-{neighbors}-{(db_dir or spider).name}.jsonl"
    if not suite.exists():
        if sqlcmp(["import", "spider", "--questions", str(spider / "dev.json"), "--gold",
                   str(spider / "dev_gold.sql"), "--pred", str(spider / "predictions" / "SuperSQL.sql"),
                   "--db-dir", str(spider / "database"), "--out", str(suite)]) != 0:
            sys.exit("import failed")
        lines = suite.read_text(encoding="utf-8").splitlines()[:limit]
        suite.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    if sqlcmp(["evaluate", str(suite), "--db-dir", str(db_dir or spider / "database"), "--out", str(reports),
               "--quiet", "--neighbors", str(neighbors), "--workers", "2"]) not in (0, 1):
        sys.exit("evaluate failed")
    cases = [json.loads(line) for line in suite.read_text(encoding="utf-8").splitlines()]
    by_id = {r["case_id"]: r for r in map(json.loads, reports.read_text(encoding="utf-8").splitlines())}
    return [{"case": case, "report": by_id[case["case_id"]]} for case in cases]


def official_cases(rows: list[dict[str, Any]], database: Path) -> list[dict[str, str]]:
    """Each case as the official scripts read it (gold, prediction, database under ``database``)."""
    return [{"gold": r["case"]["expected_sql"], "pred": r["case"]["actual_sql"], "db": r["case"]["db"],
             "db_path": str(database / r["case"]["db"] / f"{r['case']['db']}.sqlite")} for r in rows]


def run_driver(python: str, folder: Path, driver: str, *args: str) -> Any:
    out = subprocess.run([python, "-c", driver, *args], cwd=folder, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"official driver failed in {folder}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def disagreements(rows: list[dict[str, Any]], spider_official: list[dict[str, Any]],
                  bird_official: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The case ids where sqlcmp's per-case metric differs from the official one, per metric."""
    from sqlcmp_dagster.engine.models import Report
    from sqlcmp_dagster.engine.published_metrics import case_values

    found: dict[str, list[str]] = {"spider_exact_set_match": [], "hardness": [], "bird_execution_match": [],
                                   "bird_soft_f1": []}
    for row, spider_row, bird_row in zip(rows, spider_official, bird_official, strict=True):
        report = Report.model_validate(row["report"])
        ours, case_id = case_values(report), report.case_id
        if ours["spider_exact_set_match"] is not spider_row["exact"]:
            found["spider_exact_set_match"].append(case_id)
        if report.run_metadata.get("hardness") != spider_row["hardness"]:
            found["hardness"].append(case_id)
        if ours["bird_execution_match"] is not bool(bird_row["ex"]):
            found["bird_execution_match"].append(case_id)
        if abs(ours["bird_soft_f1"] - bird_row["f1"]) > 1e-6:
            found["bird_soft_f1"].append(case_id)
    return found


def test_suite_comparison(spider: Path, folder: Path, python: str, test_suite_eval: Path,
                          limit: int | None = None) -> dict[str, Any]:
    """Test-suite accuracy on a folder built by the export: SuperSQL evaluated with the neighbor search, its
    counterexamples exported (``sqlcmp report --export-test-suite``), the suite evaluated again on the exported
    folder, and exec_eval's verdict on the same folder, case by case (on db ids with several databases)."""
    from sqlcmp_dagster.cli import main as sqlcmp
    from sqlcmp_dagster.engine.models import Report
    from sqlcmp_dagster.engine.published_metrics import case_values

    searched = sqlcmp_reports(spider, folder, neighbors=8, limit=limit)
    searched_file = folder / "searched.jsonl"
    searched_file.write_text("".join(json.dumps(r["report"]) + "\n" for r in searched), encoding="utf-8")
    exported = folder / "test-suite"
    if sqlcmp(["report", str(searched_file), "--export-test-suite", str(exported)]) != 0:
        sys.exit("export failed")
    rows = sqlcmp_reports(spider, folder, db_dir=exported, limit=limit)
    cases_file = folder / "test-suite-cases.json"
    cases_file.write_text(json.dumps(official_cases(rows, exported)), encoding="utf-8")
    official = run_driver(python, test_suite_eval, TEST_SUITE_DRIVER, str(cases_file))
    ours = [case_values(Report.model_validate(r["report"]))["spider_test_suite_match"] for r in rows]
    suites = {path.name for path in exported.iterdir() if len(list(path.glob("*.sqlite*"))) > 1}
    compared = [(r["case"]["case_id"], mine, theirs) for r, mine, theirs in zip(rows, ours, official, strict=True)
                if r["case"]["db"] in suites]
    return {"databases": sum(len(list(exported.glob(f"{name}/*.sqlite"))) - 1 for name in suites),
            "compared": len(compared), "official_passes": sum(bool(t) for _, _, t in compared),
            "sqlcmp_passes": sum(bool(m) for _, m, _ in compared),
            "differ": [case_id for case_id, mine, theirs in compared if mine != theirs]}


def repeated_reward(row: dict[str, Any], database: Path) -> float:
    """BIRD's reward of a case by its whole rule on sqlcmp's own timings: a correct prediction's two queries run
    :data:`BIRD_TIMING_REPEATS` times each in sqlcmp's sandbox, their time ratios cleaned and averaged as BIRD's
    script does (:func:`~sqlcmp_dagster.engine.bird_metrics.time_ratio`)."""
    from sqlcmp_dagster.engine.execution import ExecutionAdapter
    from sqlcmp_dagster.engine.models import Report
    from sqlcmp_dagster.engine.published_metrics import case_values

    if not case_values(Report.model_validate(row["report"]))["bird_execution_match"]:
        return 0.0
    case = row["case"]
    adapter = ExecutionAdapter(str(database / case["db"] / f"{case['db']}.sqlite"))
    ratios = []
    try:
        for _ in range(BIRD_TIMING_REPEATS):  # the prediction first in each round, as BIRD's script times them
            predicted = adapter.execute(case["actual_sql"]).elapsed_ms
            ratios.append(adapter.execute(case["expected_sql"]).elapsed_ms / max(predicted, 1e-6))
    finally:
        adapter.close()
    return ves_reward(time_ratio(ratios))


def write_bird_files(rows: list[dict[str, Any]], folder: Path) -> dict[str, Path]:
    """Spider dev in BIRD's formats: questions (JSON list and JSONL with ``difficulty``), gold SQL file and the
    predictions JSON (``SQL\\t----- bird -----\\tdb_id``)."""
    questions = [{"question_id": index, "db_id": r["case"]["db"], "question": r["case"]["user_query"],
                  "SQL": r["case"]["expected_sql"], "evidence": "",
                  "difficulty": DIFFICULTY[r["report"]["run_metadata"]["hardness"]]} for index, r in enumerate(rows)]
    paths = {name: folder / name for name in ("dev.json", "dev.jsonl", "dev_gold.sql", "predict_dev.json")}
    paths["dev.json"].write_text(json.dumps(questions), encoding="utf-8")
    paths["dev.jsonl"].write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    paths["dev_gold.sql"].write_text("".join(f"{q['SQL']}\t{q['db_id']}\n" for q in questions), encoding="utf-8")
    paths["predict_dev.json"].write_text(json.dumps(
        {str(i): f"{r['case']['actual_sql']}\t----- bird -----\t{r['case']['db']}" for i, r in enumerate(rows)}),
        encoding="utf-8")
    return paths


def bird_script(python: str, evaluation: Path, script: str, paths: dict[str, Path], db_root: Path) -> list[float]:
    """One of mini_dev's scripts on the converted files: its printed row (simple, moderate, challenging, total)."""
    out = subprocess.run([python, script, "--db_root_path", f"{db_root}/", "--predicted_sql_path",
                          str(paths["predict_dev.json"]), "--ground_truth_path", str(paths["dev_gold.sql"]),
                          "--diff_json_path", str(paths["dev.jsonl"]), "--num_cpus", "1",
                          "--output_log_path", os.devnull], cwd=evaluation, capture_output=True, text=True, check=False)
    numbers = re.findall(r"^(?:EX|Soft-F1|R-VES)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", out.stdout, re.MULTILINE)
    if out.returncode != 0 or not numbers:
        sys.exit(f"{script} failed:\n{out.stderr[-3000:]}")
    return [float(x) for x in numbers[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--test-suite-eval", type=Path, required=True, help="checkout of taoyds/test-suite-sql-eval")
    parser.add_argument("--bird-eval", type=Path, required=True, help="checkout of bird-bench/mini_dev")
    parser.add_argument("--official-python", default=sys.executable, help="a Python with the official scripts' imports")
    parser.add_argument("--ves-cases", type=int, default=100,
                        help="R-VES over the first N cases (BIRD times each correct one 100 times; 0: skip)")
    args = parser.parse_args()
    from sqlcmp_dagster.engine.bird_metrics import r_ves
    from sqlcmp_dagster.engine.models import Report
    from sqlcmp_dagster.engine.published_metrics import case_values, summarize_published

    with tempfile.TemporaryDirectory(prefix="sqlcmp-official-") as temp:
        folder = Path(temp)
        rows = sqlcmp_reports(args.spider, folder)
        cases_file = folder / "cases.json"
        cases_file.write_text(json.dumps(official_cases(rows, args.spider / "database")), encoding="utf-8")
        spider_official = run_driver(args.official_python, args.test_suite_eval, SPIDER_DRIVER, str(cases_file),
                                     str(args.spider / "tables.json"))
        bird_official = run_driver(args.official_python, args.bird_eval / "evaluation", BIRD_DRIVER, str(cases_file))
        differ = disagreements(rows, spider_official, bird_official)
        reports = [Report.model_validate(r["report"]) for r in rows]
        ours = summarize_published(reports)["overall"]
        print(f"cases: {len(rows)}")
        print(f"Spider EM: official {sum(r['exact'] for r in spider_official)}, sqlcmp "
              f"{round(ours['spider_exact_set_match_accuracy'] * len(rows))}; per case differ on "
              f"{len(differ['spider_exact_set_match'])} (hardness on {len(differ['hardness'])})")
        main_run = subprocess.run([args.official_python, "-c", SPIDER_MAIN, "--gold", str(args.spider / "dev_gold.sql"),
                                   "--pred", str(args.spider / "predictions" / "SuperSQL.sql"), "--db",
                                   str(args.spider / "database"), "--table", str(args.spider / "tables.json"),
                                   "--etype", "match"], cwd=args.test_suite_eval, capture_output=True, text=True,
                                  check=False)
        exact_line = re.findall(r"^exact match\s+(.*)$", main_run.stdout, re.MULTILINE)
        print(f"  evaluation.py --etype match (easy medium hard extra all): {exact_line[-1] if exact_line else '?'}")
        print(f"BIRD EX: official {sum(r['ex'] for r in bird_official)}, sqlcmp "
              f"{round(ours['bird_execution_accuracy'] * len(rows))}; per case differ on "
              f"{len(differ['bird_execution_match'])}")
        print(f"Soft-F1: official {sum(r['f1'] for r in bird_official) / len(rows):.6f}, sqlcmp "
              f"{ours['bird_soft_f1']:.6f}; per case differ on {len(differ['bird_soft_f1'])}")
        paths = write_bird_files(rows, folder)
        db_root = args.spider / "database"
        for script in ("evaluation_ex.py", "evaluation_f1.py"):
            print(f"  {script} (simple moderate challenging total): "
                  f"{bird_script(args.official_python, args.bird_eval / 'evaluation', script, paths, db_root)}")
        if args.ves_cases:
            subset = folder / "ves"
            subset.mkdir()
            sub_paths = write_bird_files(rows[:args.ves_cases], subset)
            runs = [bird_script(args.official_python, args.bird_eval / "evaluation", "evaluation_ves.py", sub_paths,
                                db_root)[-1] for _ in range(2)]
            rewards = [case_values(r)["bird_ves_reward"] for r in reports[:args.ves_cases]]
            repeated = [repeated_reward(r, args.spider / "database") for r in rows[:args.ves_cases]]
            print(f"R-VES over the first {args.ves_cases} cases: official {runs[0]:.2f} and {runs[1]:.2f} in two runs "
                  f"(100 timings per query each), sqlcmp {100 * (r_ves(rewards) or 0):.2f} (the reports' one timing "
                  f"per query), {100 * (r_ves(repeated) or 0):.2f} (BIRD's rule on {BIRD_TIMING_REPEATS} of sqlcmp's "
                  "timings per query)")
        suite = test_suite_comparison(args.spider, folder, args.official_python, args.test_suite_eval)
        print(f"Spider test suite (exported: {suite['databases']} neighbor databases): on {suite['compared']} cases "
              f"of db ids with several databases, official {suite['official_passes']}, sqlcmp "
              f"{suite['sqlcmp_passes']}; per case differ on {len(suite['differ'])}")
        differ["spider_test_suite_match"] = suite["differ"]
        for metric, ids in differ.items():
            if ids:
                print(f"{metric} differs on: {', '.join(ids[:20])}")


if __name__ == "__main__":
    main()
