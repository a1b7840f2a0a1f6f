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


def test_untrusted_suites_cannot_take_the_machine_or_the_other_cases(tmp_path: Path) -> None:
    """A kilobyte of YAML aliases of aliases expanded to a thousand million strings as the case was checked; a
    value nested past the parser's limit ended the whole load in a traceback; a Parquet suite's struct filled
    every case's unset config keys with null, which then overrode the command line's options (a review's
    findings)."""
    import json

    import polars as pl
    import pytest

    from sqlcmp_dagster.cases.suite import load_suite

    levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(["bombs:", *("  " + line for line in levels), "cases:",
                               "  - {case_id: x, expected_sql: SELECT 1, actual_sql: SELECT 1, context: {x: *i}}"]),
                    encoding="utf-8")
    loaded = load_suite(bomb)
    assert not loaded.cases and "an alias (*name)" in str(loaded.errors[0])
    deep = tmp_path / "deep.jsonl"
    deep.write_text(json.dumps({"case_id": "ok", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1"}) + "\n"
                    + '{"case_id": "deep", "expected_sql": "SELECT 1", "context": {"x": ' + "[" * 100_000
                    + "]" * 100_000 + "}}\n", encoding="utf-8")
    loaded = load_suite(deep)
    assert [c.case_id for c in loaded.cases] == ["ok"] and "nested too deep" in str(loaded.errors[0])
    suite = tmp_path / "suite.parquet"
    pl.DataFrame({"case_id": ["a", "b"], "expected_sql": ["SELECT 1.0", "SELECT 1.0"],
                  "actual_sql": ["SELECT 1.3", "SELECT 1.3"],
                  "config": [{"max_result_rows": 5}, {"query_timeout_ms": 1000}]}).write_parquet(suite)
    loaded = load_suite(suite, {"numeric_abs_tolerance": 0.5})
    assert not loaded.errors, loaded.errors
    assert [c.config.numeric_abs_tolerance for c in loaded.cases] == [pytest.approx(0.5)] * 2
    assert [c.config.max_result_rows for c in loaded.cases][0] == 5
