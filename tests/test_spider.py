"""The real Spider dev set (1,034 questions, 20 databases): gold against gold, one published system's predictions
end to end (CLI and Dagster), and the official execution-accuracy comparison. Skipped when the data is absent."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from conftest import schema_of
from sqlcmp_dagster.cases.spider_exec import REASONS
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import main
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.engine.equivalence import proven_equivalent
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.neighbor_report import neighborhood_of
from sqlcmp_dagster.engine.parsing import parse
from sqlcmp_dagster.engine.records import reports_from_frame
from sqlcmp_dagster.engine.comparison import Rules
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.structure import query_shape
from sqlcmp_dagster.engine.validation import resolve_mode
from sqlcmp_dagster.local import materialize_summary, sensor_tick

pytestmark = pytest.mark.spider


def _read_reports(path: Path) -> dict[str, Report]:
    return {r.case_id: r for r in (Report.model_validate_json(line) for line in path.read_text().splitlines())}


def test_import_checks_each_database_against_tables_json(spider_dir: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped databases match tables.json (the fixture's import checks all 20); a copy with one column
    renamed and one table dropped is refused, every difference named, and no suite written."""
    db_dir = tmp_path / "database"
    for db in {entry["db_id"] for entry in json.loads((spider_dir / "dev.json").read_text())}:
        (db_dir / db).mkdir(parents=True)
        shutil.copyfile(spider_dir / "database" / db / f"{db}.sqlite", db_dir / db / f"{db}.sqlite")
    changed = sqlite3.connect(db_dir / "concert_singer" / "concert_singer.sqlite")
    changed.execute("ALTER TABLE singer RENAME COLUMN Age TO Alter_")
    changed.execute("DROP TABLE singer_in_concert")
    changed.commit()
    changed.close()
    out = tmp_path / "suite.jsonl"
    code = main(["import", "spider", "--questions", str(spider_dir / "dev.json"),
                 "--gold", str(spider_dir / "dev_gold.sql"), "--pred", str(spider_dir / "predictions" / "SuperSQL.sql"),
                 "--db-dir", str(db_dir), "--tables", str(spider_dir / "tables.json"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "concert_singer.sqlite does not match tables.json: missing tables singer_in_concert; missing columns " \
           "singer.Age" in err
    assert err.count("does not match") == 1  # the 19 untouched copies pass the same check


def test_gold_against_gold_every_case_passes(spider_suites: dict[str, Path]) -> None:
    suite = load_suite(spider_suites["gold"])
    assert len(suite.cases) == 1034 and not suite.errors
    evaluator = Evaluator(db_dir=spider_suites["db_dir"])
    try:
        reports = evaluator.evaluate_all(suite.cases, workers=2)
    finally:
        evaluator.close()
    failing = [(r.case_id, r.explanations[:1]) for r in reports if r.deterministic_verdict != "pass"]
    assert failing == []
    assert all(r.overall_score == 1.0 and r.validity["case_valid"] for r in reports)
    # A query against itself has equal canonical trees: robust without a neighbor search (the time lever).
    assert all(neighborhood_of(r)["robust_by_structure"] for r in reports)


def test_gold_against_gold_never_has_a_counterexample_on_a_sample(spider_suites: dict[str, Path]) -> None:
    """Precision of the neighbor search, the search forced where equal canonical trees would skip it: a seeded
    sample of 150 gold queries plus every gold query that cuts a GROUP BY with ORDER BY ... LIMIT (where ties make
    a false counterexample likely). ``benchmarks/neighbor_search.py --part precision`` runs all 1,034 and the
    equivalence-preserving rewrites."""
    cases = load_suite(spider_suites["gold"]).cases
    text = {c.case_id: " ".join([c.expected_sql] if isinstance(c.expected_sql, str) else c.expected_sql).lower()
            for c in cases}
    fragile = [c for c in cases if " limit " in f" {text[c.case_id]} " and "group by" in text[c.case_id]]
    chosen = {c.case_id for c in fragile} | {c.case_id for c in random.Random(15).sample(cases, 150)}
    forced = [c.model_copy(update={"config": c.config.model_copy(update={"neighbor_skip_proven": False})})
              for c in cases if c.case_id in chosen]
    evaluator = Evaluator(db_dir=spider_suites["db_dir"])
    try:
        reports = evaluator.evaluate_all(forced, workers=2)
    finally:
        evaluator.close()
    assert len(reports) >= 150 + len(fragile) // 2 and all(r.deterministic_verdict == "pass" for r in reports)
    assert [r.case_id for r in reports if neighborhood_of(r)["counterexample_found"]] == []
    assert sum(neighborhood_of(r)["neighbor_search_ran"] for r in reports) >= 0.9 * len(reports)


def test_passes_proven_by_the_rewrites_never_have_a_counterexample(spider_suites: dict[str, Path]) -> None:
    """Soundness of :mod:`~sqlcmp_dagster.engine.equivalence` on real queries: every SuperSQL case whose queries
    the rewrites prove equal (where the canonical trees alone do not) passes, and the neighbor search, forced,
    finds no database that tells the queries apart."""
    cases = load_suite(spider_suites["supersql"]).cases
    schemas = {db: schema_of(spider_suites["db_dir"] / db / f"{db}.sqlite") for db in {c.db for c in cases}}
    proven = []
    for case in cases:
        gold = [case.expected_sql] if isinstance(case.expected_sql, str) else case.expected_sql
        actual, expected = parse(case.actual_sql, "sqlite"), parse(gold[0], "sqlite")
        if actual.tree is None or expected.tree is None or actual.normalized_sql == expected.normalized_sql \
                or len(gold) > 1:
            continue
        mode = resolve_mode(case.config, query_shape(expected.tree))  # as the search
        unordered, by_value = mode == "order-insensitive", Rules.of(mode, case.config).by_value
        schema = schemas[case.db]
        if proven_equivalent(actual.tree, expected.tree, "sqlite", schema.plain_tables or {},
                             deadline=time.monotonic() + 10, unordered=unordered, columns_by_value=by_value,
                             affine=schema.affine_columns):
            proven.append(case.model_copy(update={"config": case.config.model_copy(
                update={"neighbor_skip_proven": False})}))
    # 217 on SuperSQL's predictions: 64 of them by the join and set-operation rewrites, 34 more by column order,
    # 16 more by whole numbers written as text.
    assert len(proven) >= 180
    evaluator = Evaluator(db_dir=spider_suites["db_dir"])
    try:
        reports = evaluator.evaluate_all(proven, workers=2)
    finally:
        evaluator.close()
    assert [r.case_id for r in reports if r.deterministic_verdict != "pass"] == []
    assert [r.case_id for r in reports if neighborhood_of(r)["counterexample_found"]] == []
    assert all(neighborhood_of(r)["neighbor_search_ran"] for r in reports)


def test_supersql_end_to_end_and_against_official_ex(spider_suites: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    reports_path, summary_path = tmp_path / "reports.jsonl", tmp_path / "summary.json"
    code = main(["evaluate", str(spider_suites["supersql"]), "--db-dir", str(spider_suites["db_dir"]),
                 "--out", str(reports_path), "--summary-out", str(summary_path), "--workers", "2"])
    printed = capsys.readouterr().out
    reports = _read_reports(reports_path)
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    assert len(reports) == summary["cases"] == 1034
    assert code == (0 if summary["failed"] == 0 else 1)
    # The summary agrees with the reports, counted here independently, per database by the suite's db id.
    suite = {c.case_id: c for c in load_suite(spider_suites["supersql"]).cases}
    per_db: dict[str, Counter[str]] = {}
    for case_id, report in reports.items():
        per_db.setdefault(suite[case_id].db or "", Counter())[report.deterministic_verdict] += 1
        per_db[suite[case_id].db or ""]["vacuous"] += any("match is vacuous" in w for w in report.warnings) and (
            report.deterministic_verdict == "pass")
    assert {db: (row["passed"], row["failed"], row["vacuous_passes"]) for db, row in summary["per_database"].items()} == {
        db: (c["pass"], c["fail"], c["vacuous"]) for db, c in per_db.items()}
    # wta_1 is a partial rebuild whose rankings table is empty: queries over it return nothing on both sides,
    # and the summary counts those passes as vacuous
    assert 0 < summary["per_database"]["wta_1"]["vacuous_passes"] <= summary["per_database"]["wta_1"]["passed"]
    assert summary["vacuous_passes"] == sum(c["vacuous"] for c in per_db.values())
    assert len(summary["per_database"]) == 20 and "per database" in printed
    assert sum(summary["severity_counts"].values()) == summary["valid_cases"]
    # A pass with a counterexample on a neighbor database keeps its verdict but is a "minor issue".
    assert summary["severity_counts"]["pass"] + summary["passes_with_counterexample"] == summary["passed"] > 0
    assert summary["failed"] > 0 and summary["robust_passes"] == summary["passed"] - summary["passes_with_counterexample"]
    assert sum(summary["attribution_counts"].values()) == summary["failed"] - sum(summary["blocked_counts"].values())

    table, details = tmp_path / "ex.md", tmp_path / "ex.json"
    assert main(["spider-ex", str(spider_suites["supersql"]), "--reports", str(reports_path),
                 "--db-dir", str(spider_suites["db_dir"]), "--out", str(table), "--json-out", str(details)]) == 0
    result = json.loads(details.read_text())
    totals, disagreements = result["totals"], result["disagreements"]
    assert totals["sqlcmp_pass_rate"] == pytest.approx(summary["pass_rate"], abs=1e-6)
    official_passes = round(totals["official_ex"] * totals["cases"])
    assert official_passes - summary["passed"] == (totals["sqlcmp_fail_official_pass"]
                                                   - totals["sqlcmp_pass_official_fail"])
    assert {d["case_id"] for d in disagreements} == {
        d["case_id"] for d in disagreements if (reports[d["case_id"]].deterministic_verdict == "pass") == d["sqlcmp"]}
    # every disagreement is explained by a named rule, none left as "other"
    assert disagreements and all(d["reason"] in REASONS and d["reason"] != "other" for d in disagreements)
    text = table.read_text()
    assert all(f"| {d['case_id']} | {d['database']} |" in text for d in disagreements)


def test_supersql_through_dagster_matches_the_cli(spider_suites: dict[str, Path], tmp_path: Path) -> None:
    """Three databases' cases (127) through every asset: the same verdicts and scores as the library."""
    chosen = {"concert_singer", "pets_1", "poker_player"}
    cases_dir = tmp_path / "cases"
    cases_dir.mkdir()
    lines = [line for line in spider_suites["supersql"].read_text().splitlines()
             if json.loads(line)["db"] in chosen]
    (cases_dir / "spider.jsonl").write_text("\n".join(lines) + "\n")
    defs = build_definitions(cases_dir=str(cases_dir), db_dir=str(spider_suites["db_dir"]),
                             storage_dir=str(tmp_path / "store"))
    with dg.instance_for_test() as instance:
        tick = sensor_tick(defs, instance, None)
        assert len(tick.added) == len(lines) == 127 and all(run.success for run in tick.runs)
        summary_run = materialize_summary(defs, instance)
        assert summary_run.success
        summary = summary_run.output_for_node("evaluation_summary")
    stored = {r.case_id: r for f in (pl.read_parquet(p) for p in (tmp_path / "store" / "case_reports").glob("*.parquet"))
              for r in reports_from_frame(f)}
    evaluator = Evaluator(db_dir=spider_suites["db_dir"])
    try:
        library = {r.case_id: r for r in evaluator.evaluate_all(load_suite(cases_dir / "spider.jsonl").cases)}
    finally:
        evaluator.close()
    assert stored.keys() == library.keys()
    for case_id, report in library.items():
        got = stored[case_id]
        assert (got.deterministic_verdict, got.severity, got.overall_score, got.diagnostic_scores) == (
            report.deterministic_verdict, report.severity, report.overall_score, report.diagnostic_scores), case_id
    assert set(summary["per_database"]) == chosen
    assert summary["passed"] == sum(r.deterministic_verdict == "pass" for r in library.values())
