"""Golden reports: what the engine says for the bundled suites and a Spider sample, kept under ``tests/golden/``
with the ``REPORT_BEHAVIOUR_VERSION`` they were written at.

A change that changes a report without bumping the version would leave every case's data version, and so
Dagster's idea of what is stale, unchanged: old reports would stand beside new ones as if comparable. These
tests catch it. After a bump (and its CHANGELOG line), regenerate the files with one command::

    SQLCMP_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py -q

Regeneration refuses to write changed reports under an unchanged version, so it cannot hide a missed bump.
The Spider file holds no Spider text (the data stays where it is): per case, the verdict-level fields and a
digest of the whole normalized report.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sqlcmp_dagster.cases.importers import import_spider
from sqlcmp_dagster.cases.sample import INVALID_SUITE, SAMPLE_SUITE, sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.version import REPORT_BEHAVIOUR_VERSION

GOLDEN = Path(__file__).parent / "golden"
CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"
UPDATE = os.environ.get("SQLCMP_UPDATE_GOLDEN") == "1"
REGENERATE = "SQLCMP_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py -q"
#: Every SPIDER_STRIDE-th case of Spider dev (SuperSQL's predictions): 42 cases over most of its databases.
SPIDER_STRIDE = 25
#: The fields of a Spider case's golden entry, beside the digest: a changed one is named in the failure.
HEADLINE = ("deterministic_verdict", "severity", "overall_score", "structure_score", "result_score",
            "blocked_reason", "error_types")


def normalized(report: dict[str, Any], db_dir: Path) -> dict[str, Any]:
    """A dumped report without what differs between two runs of the same case: every duration (a key ending in
    ``_ms`` with a number), the engine version (the golden file's own key) and the folder the databases are in.

    >>> normalized({"run_metadata": {"engine_version": "0.1.0+behaviour.1", "timings": {"total_ms": 3.2},
    ...                              "database": "sqlite:////tmp/x/shop.sqlite"}}, Path("/tmp/x"))
    {'run_metadata': {'database': 'sqlite:///<db_dir>/shop.sqlite', 'timings': {}}}
    """
    text = json.dumps(_without_durations(report), sort_keys=True, ensure_ascii=False)
    value = json.loads(text.replace(str(db_dir.resolve()), "<db_dir>").replace(str(db_dir), "<db_dir>"))
    value["run_metadata"].pop("engine_version", None)
    return value


def _without_durations(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_durations(v) for k, v in value.items()
                if not (k.endswith("_ms") and isinstance(v, (int, float)))}
    if isinstance(value, list):
        return [_without_durations(v) for v in value]
    return value


def digest(entry: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(entry, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def spider_entry(report: dict[str, Any]) -> dict[str, Any]:
    """A Spider case's golden entry: its headline fields and the digest of its whole normalized report."""
    return {**{name: report[name] for name in HEADLINE}, "digest": digest(report)}


def check_golden(name: str, entries: dict[str, dict[str, Any]]) -> None:
    """Compare ``entries`` (by case id) with ``tests/golden/<name>.json``; write them instead under
    ``SQLCMP_UPDATE_GOLDEN=1``, unless they changed while ``REPORT_BEHAVIOUR_VERSION`` did not."""
    path = GOLDEN / f"{name}.json"
    stored = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    version = stored["report_behaviour_version"] if stored else None
    changes = changed_cases(stored["reports"], entries) if stored else ["(no golden file yet)"]
    if changes and version == REPORT_BEHAVIOUR_VERSION:
        pytest.fail(f"the reports of {len(changes)} case(s) of {path.name} changed, but REPORT_BEHAVIOUR_VERSION is "
                    f"still {version}: bump REPORT_BEHAVIOUR_VERSION in sqlcmp_dagster/engine/version.py and add a "
                    f"CHANGELOG line ('## Report behaviour {version + 1}'), then regenerate with `{REGENERATE}`.\n"
                    + "\n".join(changes[:20]))
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        document = {"report_behaviour_version": REPORT_BEHAVIOUR_VERSION, "reports": entries}
        path.write_text(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        return
    if version != REPORT_BEHAVIOUR_VERSION:
        pytest.fail(f"{path.name} was written at report behaviour {version}, the engine is at "
                    f"{REPORT_BEHAVIOUR_VERSION}: regenerate it with `{REGENERATE}`"
                    + (f" ({len(changes)} case(s) changed)" if changes and stored else ""))


def changed_cases(stored: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> list[str]:
    """A line per case whose entry differs (added, removed, or which top-level fields changed)."""
    lines = [f"{case_id}: {'new' if case_id not in stored else 'gone'}"
             for case_id in sorted(stored.keys() ^ current.keys())]
    for case_id in sorted(stored.keys() & current.keys()):
        old, new = stored[case_id], current[case_id]
        fields = [k for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]
        if fields:
            lines.append(f"{case_id}: {', '.join(fields)} changed")
    return lines


def reports_of(cases: list[CompareRequest], evaluator: Evaluator, db_dir: Path,
               entry: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {case.case_id: entry(normalized(evaluator.evaluate(case).model_dump(mode="json"), db_dir)) for case in cases}


@pytest.mark.parametrize("suite", [SAMPLE_SUITE, INVALID_SUITE])
def test_bundled_suite_reports_match_the_golden_ones(suite: str, evaluator: Evaluator, sample_dir: Path) -> None:
    cases = load_suite(sample_suite_path(suite)).cases
    check_golden(f"sample_{Path(suite).stem}", reports_of(cases, evaluator, sample_dir, lambda report: report))


@pytest.mark.spider
def test_spider_sample_reports_match_the_golden_ones(spider_dir: Path) -> None:
    imported = import_spider(spider_dir / "dev.json", spider_dir / "dev_gold.sql",
                             spider_dir / "predictions" / "SuperSQL.sql")
    cases = [CompareRequest(**case.to_json()) for case in imported[::SPIDER_STRIDE]]
    db_dir = spider_dir / "database"
    check_golden("spider_sample", reports_of(cases, Evaluator(db_dir=db_dir), db_dir, spider_entry))


def test_changelog_has_a_section_for_the_current_behaviour_version() -> None:
    """The newest CHANGELOG section is the current version's, with at least one line saying what changed."""
    sections = re.findall(r"^## Report behaviour (\d+)\n((?:(?!^## ).*\n?)*)", CHANGELOG.read_text(encoding="utf-8"),
                          flags=re.MULTILINE)
    assert sections, f"{CHANGELOG.name} has no '## Report behaviour N' section"
    number, body = sections[0]
    assert int(number) == REPORT_BEHAVIOUR_VERSION, (
        f"{CHANGELOG.name}'s newest section is behaviour {number}, the engine is at {REPORT_BEHAVIOUR_VERSION}: "
        "add a '## Report behaviour N' section at the top saying what changed")
    assert re.search(r"^- \S", body, flags=re.MULTILINE), f"behaviour {number}'s section has no line"
    assert [int(n) for n, _ in sections] == sorted((int(n) for n, _ in sections), reverse=True), "newest first"
