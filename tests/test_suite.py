"""A suite folder: which files are suites, and what is reported about the others."""

from __future__ import annotations

from pathlib import Path

from sqlcmp_dagster.cases.suite import load_suites


def test_a_suite_folder_loads_only_suites(tmp_path: Path) -> None:
    (tmp_path / "spider.jsonl").write_text('{"case_id": "a", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1"}\n',
                                           encoding="utf-8")
    (tmp_path / "spider-reports.jsonl").write_text('{"case_id": "a", "deterministic_verdict": "pass"}\n',
                                                   encoding="utf-8")
    (tmp_path / "workspace.yaml").write_text("load_from:\n  - python_module: x\n", encoding="utf-8")
    (tmp_path / "more.yaml").write_text("cases:\n  - {case_id: b, expected_sql: SELECT 2, actual_sql: SELECT 2}\n",
                                        encoding="utf-8")
    suite = load_suites(tmp_path)
    assert [c.case_id for c in suite.cases] == ["b", "a"] and suite.errors == []
    assert suite.skipped == [f"{tmp_path / name}: not a suite (its first record has no expected_sql)"
                             for name in ("spider-reports.jsonl", "workspace.yaml")]
