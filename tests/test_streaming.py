"""A run of any length in bounded memory: the suite read as the workers take it, a worker's death confined to
its cases mid-stream, reports handed to the outputs in suite order, and a summary that adds up counts instead
of keeping reports, equal to the one a list gives. Sizes are checked by structure (what is held, how far the
reading runs ahead), never by timing or by the process's memory."""

from __future__ import annotations

import gc
import json
import os
import random
import types
from pathlib import Path
from typing import Any

import pytest

from conftest import untimed
from sqlcmp_dagster.cases.sample import INVALID_SUITE, SAMPLE_DB_ID, SAMPLE_SUITE, sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.cli import main
from sqlcmp_dagster.engine import batch
from sqlcmp_dagster.engine.batch import Done
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.summary import Summary, case_facts, summarize
from sqlcmp_dagster.engine.tally import RunningSum


def _held(value: object) -> int:
    """How many objects ``value`` holds through its attributes and containers: a container once, a number or a
    string once per place it is held (so that equal counts kept as one cached small int or as two ints count
    alike). Classes, modules and functions are not what it holds."""
    seen: set[int] = set()
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
            continue
        count += 1
        if isinstance(item, (int, float, str, bytes)) or item is None or id(item) in seen:
            continue
        seen.add(id(item))
        stack.extend(gc.get_referents(item))
    return count


@pytest.fixture(scope="module")
def sample_reports(sample_dir: Path) -> list[Report]:
    """The bundled suites' reports: both files, so that one case is invalid."""
    cases = [case for name in (SAMPLE_SUITE, INVALID_SUITE) for case in load_suite(sample_suite_path(name)).cases]
    return Evaluator(db_dir=sample_dir).evaluate_all(cases)


def test_running_sum_is_sum_one_value_at_a_time() -> None:
    """Python 3.12's sum() compensates float rounding; the summary's means must be the ones a list gives."""
    rng = random.Random(7)
    for _ in range(2000):
        values = [rng.choice((rng.random(), rng.uniform(-1e16, 1e16), rng.random() * 1e-9, -0.0, 1.0, 0.25))
                  for _ in range(rng.randint(0, 40))]
        total = RunningSum()
        for value in values:
            total.add(value)
        assert repr(total.value) == repr(sum(values)) and total.count == len(values)


def test_a_summary_holds_counts_not_reports(sample_reports: list[Report]) -> None:
    """Fed 20 times the sample's cases, a summary holds what it held after one pass, but for the ids of the
    invalid cases, which it lists; its figures are those of the list of every report."""
    def copies(count: int) -> list[Report]:
        return [report.model_copy(update={"case_id": f"{report.case_id}-{copy}"})
                for copy in range(count) for report in sample_reports]

    invalid = sum(not r.validity.get("case_valid", True) for r in sample_reports)
    assert 0 < invalid < len(sample_reports)
    sizes = []
    for count in (1, 20):
        summary = Summary()
        for report in copies(count):
            summary.add(case_facts(report))
        assert summary.figures(load_errors=2) == summarize(copies(count), load_errors=2)
        sizes.append(_held(summary) - len(summary.invalid_case_ids))
    assert sizes[0] == sizes[1]


def test_a_stream_is_read_as_the_workers_take_it(sample_dir: Path) -> None:
    """With workers, the cases are read a window at a time, at most two windows (in the workers' hands) and one
    case (to know whether a window is the last) ahead of the reports handed back; the reports are the serial
    run's."""
    cases = [case.model_copy(update={"case_id": f"{case.case_id}-{copy}"})
             for copy in range(2) for case in load_suite(sample_suite_path()).cases]
    read = 0

    def stream() -> Any:
        nonlocal read
        for case in cases:
            read += 1
            yield case

    evaluator = Evaluator(db_dir=sample_dir)
    ahead, reports = [], {}
    for index, report in evaluator.evaluate_stream(stream(), workers=2, window=4):
        reports[index] = report
        ahead.append(read - len(reports))
    assert sorted(reports) == list(range(len(cases)))
    assert max(ahead) <= 2 * 4 + 1 and read == len(cases)
    serial = evaluator.evaluate_all(cases)
    assert [untimed(reports[i].model_dump(mode="json")) for i in range(len(cases))] == \
        [untimed(r.model_dump(mode="json")) for r in serial]


class _Killing(Evaluator):
    """An evaluator whose worker process dies on the cases named ``kill...``, as one the out-of-memory killer
    ends does."""

    def deterministic(self, request: CompareRequest) -> Done:
        if request.case_id.startswith("kill"):
            os._exit(1)
        return super().deterministic(request)


def test_a_case_that_kills_its_worker_mid_stream_costs_only_its_own_report(sample_dir: Path) -> None:
    cases = [CompareRequest(case_id="kill" if i == 9 else f"c{i}", db=SAMPLE_DB_ID, expected_sql="SELECT 1",
                            actual_sql="SELECT 1") for i in range(24)]
    reports = dict(_Killing(db_dir=sample_dir).evaluate_stream(iter(cases), workers=2, window=4))
    assert sorted(reports) == list(range(len(cases)))
    assert "the worker process evaluating this case died" in json.dumps(reports[9].evidence)
    assert all(reports[i].deterministic_verdict == "pass" for i in range(len(cases)) if i != 9)


@pytest.mark.parametrize("only_failed", [False, True])
def test_evaluate_hands_its_reports_on_in_suite_order_whatever_order_they_finish(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch, only_failed: bool) -> None:
    """Windows of 8 cases over 66, two workers: --out is in suite order, its reports are a one-worker run's, and
    the summary, CSV and HTML report made as the reports came are byte for byte those ``report`` makes from the
    finished --out."""
    monkeypatch.setattr(batch, "WINDOW", 8)
    suite = tmp_path / "suite.jsonl"
    cases = [json.loads(case.model_dump_json(exclude_unset=True)) for case in load_suite(sample_suite_path()).cases]
    suite.write_text("".join(json.dumps({**case, "case_id": f"{case['case_id']}-{copy}"}) + "\n"
                             for copy in range(2) for case in cases), encoding="utf-8")
    flags = ["--only-failed"] if only_failed else []
    runs = {}
    for workers in ("1", "2"):
        folder = tmp_path / workers
        main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(folder / "reports.jsonl"),
              "--summary-out", str(folder / "summary.json"), "--csv", str(folder / "cases.csv"), "--html",
              str(folder / "report.html"), "--workers", workers, "--quiet", "--no-cache", *flags])
        lines = (folder / "reports.jsonl").read_text(encoding="utf-8").splitlines()
        runs[workers] = [untimed(json.loads(line)) for line in lines]
    assert [r["case_id"] for r in runs["2"]] == [json.loads(line)["case_id"] for line in suite.read_text().splitlines()]
    assert runs["2"] == runs["1"]
    again = tmp_path / "again"
    assert main(["report", str(tmp_path / "2" / "reports.jsonl"), "--summary-out", str(again / "summary.json"),
                 "--csv", str(again / "cases.csv"), "--html", str(again / "report.html"), *flags]) == 0
    for name in ("summary.json", "cases.csv", "report.html"):
        assert (again / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name
