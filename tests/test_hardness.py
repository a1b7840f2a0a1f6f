"""Spider hardness by the official evaluator's rules, and the breakdowns built on it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlglot

from sqlcmp_dagster.engine.hardness import spider_hardness
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.summary import render_summary, summarize


@pytest.mark.spider
def test_spider_dev_gold_has_the_official_hardness_counts(spider_dir: Path) -> None:
    gold = [line.rpartition("\t")[0] for line in (spider_dir / "dev_gold.sql").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    counts = Counter(spider_hardness(sqlglot.parse_one(sql, read="sqlite")) for sql in gold)
    # The counts Spider's official evaluation.py reports for dev (easy, medium, hard, extra).
    assert (counts["easy"], counts["medium"], counts["hard"], counts["extra"]) == (248, 446, 174, 166)


@pytest.mark.parametrize(("sql", "level"), [
    ("SELECT name FROM t", "easy"),
    ("SELECT name FROM t WHERE a NOT IN (SELECT a FROM u)", "hard"),  # one nested query, nothing else
    ("SELECT a FROM t JOIN u ON t.i = u.i JOIN v ON u.j = v.j WHERE x LIKE '%a%' OR y = 2", "extra"),
    # HAVING's connector counts as an aggregate (as in the original), with count(*) in SELECT: two aggregates
    ("SELECT count(*) FROM t GROUP BY a HAVING count(*) > 1 AND sum(b) > 2", "medium"),
])
def test_hardness_levels_follow_the_rules(sql: str, level: str) -> None:
    assert spider_hardness(sqlglot.parse_one(sql)) == level


def test_reports_carry_hardness_and_difficulty_into_the_summary(evaluator: Evaluator) -> None:
    cases = [CompareRequest(case_id="e", expected_sql="SELECT name FROM products", actual_sql="SELECT name FROM products",
                            context={"difficulty": "simple"}),
             CompareRequest(case_id="m", expected_sql="SELECT name, price FROM products ORDER BY price",
                            actual_sql="SELECT name, price FROM products", context={"difficulty": "challenging"}),
             CompareRequest(case_id="x", expected_sql="SELECT nope FROM nowhere", actual_sql="SELECT 1")]
    reports = evaluator.evaluate_all(cases)
    assert [r.run_metadata["hardness"] for r in reports] == ["easy", "medium", "easy"]
    summary = summarize(reports)
    assert list(summary["per_hardness"]) == ["easy", "medium"]
    assert summary["per_hardness"]["easy"] == {"cases": 2, "passed": 1, "failed": 0, "vacuous_passes": 0,
                                                    "invalid": 1, "pass_rate": 1.0}
    assert list(summary["per_difficulty"]) == ["simple", "challenging"]  # BIRD's order, not the alphabet's
    assert summary["per_difficulty"]["challenging"]["failed"] == 1
    text = render_summary(summary)
    assert "per Spider hardness (passed/valid):" in text and "per difficulty (passed/valid):" in text
