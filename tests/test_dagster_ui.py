"""What the Dagster UI shows: each case's verdict on its own partition, numeric summary metadata for the Plots
tab, a summary that follows the case reports without a hidden switch, and (in Chromium) the failing cases one
click from the summary's page, each a link to its partition."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from conftest import dagster_webserver, service
from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.event_log import local_instance
from sqlcmp_dagster.local import materialize_summary, sensor_tick


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance


def test_partitions_carry_their_own_verdicts_and_the_summary_numbers(tmp_path: Path, sample_dir: Path,
                                                                      instance: dg.DagsterInstance) -> None:
    defs = build_definitions(cases_dir=str(sample_suite_path().parent), db_dir=str(sample_dir),
                             storage_dir=str(tmp_path / "store"))
    before = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert before.get_num_requested(dg.AssetKey("evaluation_summary")) == 0  # no case report yet
    tick = sensor_tick(defs, instance, None)
    assert len(tick.runs) == 1 and tick.runs[0].success  # 34 partitions in one run
    records = instance.fetch_materializations(dg.AssetKey("case_reports"), limit=1000).records
    metadata = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
    assert len(metadata) == 34
    assert metadata["fail_filter"]["outcome"].value == "fail"
    assert metadata["fail_filter"]["likely_source_clause"].value == "selection_predicate"
    assert metadata["fail_filter"]["severity"].value == "moderate issue"
    assert isinstance(metadata["fail_filter"]["overall_score"], dg.FloatMetadataValue)
    assert metadata["pass_identical"]["outcome"].value == "pass"
    outcomes = {key: m["outcome"].value for key, m in metadata.items()}
    assert sorted(set(outcomes.values())) == ["fail", "invalid", "pass"]  # not one value for every partition

    # the summary follows without a switch: its automation sensor runs by default and requests it now
    sensor = next(s for s in defs.sensors if s.name == "evaluation_summary_follows_cases")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=before.cursor)
    assert after.get_num_requested(dg.AssetKey("evaluation_summary")) == 1

    summary_run = materialize_summary(defs, instance)
    assert summary_run.success
    event = instance.fetch_materializations(dg.AssetKey("evaluation_summary"), limit=1).records[0]
    numbers = event.asset_materialization.metadata
    assert isinstance(numbers["pass_rate_%"], dg.FloatMetadataValue)
    assert numbers["pass_rate_%"].value == 33.33  # 11 of 33 valid cases, as a percentage
    assert isinstance(numbers["pass_rate_easy_%"], dg.FloatMetadataValue) and numbers["passed"].value == 11
    # the failing and invalid cases, each a row linking to its partition; no passing case
    listed = re.findall(r"^\| \[([^\]]+)\]\(/assets/case_reports\?view=partitions&partition=(\S+)\) \| (\w+) \|",
                        numbers["failing_cases"].value, flags=re.MULTILINE)
    assert {case: verdict for case, _, verdict in listed} == {k: v for k, v in outcomes.items() if v != "pass"}
    assert all(case == key for case, key, _ in listed)
    assert [verdict for _, _, verdict in listed][-1] == "invalid"  # after the failures, the most severe first


def test_benchmark_difficulty_reaches_the_summary_metadata(tmp_path: Path, sample_dir: Path,
                                                           instance: dg.DagsterInstance) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "bird.jsonl").write_text(
        '{"case_id": "s", "expected_sql": "SELECT 1", "actual_sql": "SELECT 1", "db": "shop", '
        '"context": {"difficulty": "simple"}}\n'
        '{"case_id": "c", "expected_sql": "SELECT 1", "actual_sql": "SELECT 2", "db": "shop", '
        '"context": {"difficulty": "challenging"}}\n', encoding="utf-8")
    defs = build_definitions(cases_dir=str(cases), db_dir=str(sample_dir), storage_dir=str(tmp_path / "store"))
    assert all(run.success for run in sensor_tick(defs, instance, None).runs)
    assert materialize_summary(defs, instance).success
    numbers = instance.fetch_materializations(dg.AssetKey("evaluation_summary"), limit=1).records[0] \
        .asset_materialization.metadata
    assert (numbers["pass_rate_simple_%"].value, numbers["pass_rate_challenging_%"].value) == (100.0, 0.0)
    assert "| challenging | 1 | 0 |" in numbers["per_difficulty"].value


class Page:
    """One tab of a headless Chromium, driven over the DevTools protocol: open an address, run JavaScript,
    wait until an expression holds."""

    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self._socket = connect(url, max_size=None)
        self._calls = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._calls += 1
        self._socket.send(json.dumps({"id": self._calls, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv())
            if message.get("id") == self._calls:
                assert "error" not in message, message
                return message["result"]

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"]
        return result.get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait(self, expression: str, seconds: float = 60) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.3)
        raise AssertionError(f"not within {seconds} s: {expression}\n{self.js('document.body.innerText')}")


@contextmanager
def chromium_page(profile: Path) -> Iterator[Page]:
    chromium = service("SQLCMP_TEST_CHROMIUM")
    process = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-sync", "--disable-background-networking", "--disable-component-update",
                                f"--user-data-dir={profile}", "--remote-debugging-port=0", "--window-size=1400,1000",
                                "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert time.monotonic() < deadline and process.poll() is None, "Chromium did not start"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        yield Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
    finally:
        process.terminate()
        process.wait(timeout=20)


#: Clicks the "[Show Markdown]" of the summary's failing_cases entry (the newest, when the page lists several).
SHOW_FAILURES = """(() => {
  const rows = [...document.querySelectorAll('tr')].filter(row => row.innerText.includes('failing_cases'));
  const buttons = rows.length ? [...rows[rows.length - 1].querySelectorAll('a, button')]
      .filter(e => e.innerText.trim() === '[Show Markdown]') : [];
  if (buttons.length) buttons[0].click();
  return buttons.length > 0;
})()"""
LINKS = """[...document.querySelectorAll('[role=dialog] a[href*="view=partitions&partition="]')]
  .map(a => [a.innerText, a.getAttribute('href'), a.closest('tr').innerText])"""


def test_failing_cases_are_one_click_from_the_summary_in_chromium(tmp_path: Path, sample_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's instance (telemetry and the community modal off) after a run of the bundled sample: the
    summary's page lists every failing and invalid case behind one click, each row a link, and the link opens
    that case's partition with its verdict."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(local_instance(str(home / "history" / "runs"))),
                                       encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    defs = build_definitions(cases_dir=str(sample_suite_path().parent), db_dir=str(sample_dir),
                             storage_dir=str(home / "store"))
    with dg.DagsterInstance.get() as instance:
        assert not instance.telemetry_enabled and not instance.nux_enabled
        assert [run.success for run in sensor_tick(defs, instance, None).runs] == [True]
        assert materialize_summary(defs, instance).success
        reports = {r.asset_materialization.partition: r.asset_materialization.metadata for r in
                   instance.fetch_materializations(dg.AssetKey("case_reports"), limit=1000).records}
    not_passed = {key for key, metadata in reports.items() if metadata["outcome"].value != "pass"}

    with dagster_webserver(home, SQLCMP_STORAGE_DIR=str(home / "store"), SQLCMP_DB_DIR=str(sample_dir)) as base, \
            chromium_page(tmp_path / "profile") as page:
        request = urllib.request.Request(base + "/graphql", data=b'{"query": "{ shouldShowNux }"}',
                                         headers={"Content-Type": "application/json"})
        assert json.loads(urllib.request.urlopen(request, timeout=30).read())["data"] == {"shouldShowNux": False}
        page.open(base + "/assets/evaluation_summary")
        page.wait("document.body && document.body.innerText.includes('pass_rate_%')")
        assert page.js("document.body.innerText").count("33.33") >= 1  # the pass rate as a percentage
        assert page.wait(SHOW_FAILURES)  # the one click
        links = page.wait(f"(() => {{ const links = {LINKS}; return links.length ? links : null; }})()")
        assert {text for text, _, _ in links} == not_passed and len(links) == len(not_passed)
        rows = {text: row for text, _, row in links}
        assert "fail_filter" in rows and "selection_predicate" in rows["fail_filter"]  # its likely source
        assert "moderate issue" in rows["fail_filter"]
        time.sleep(1.5)  # Dagster opens its community modal a second after the page
        assert "Join the Dagster community" not in page.js("document.body.innerText")

        href = next(href for text, href, _ in links if text == "fail_filter")
        page.open(base + href)
        shown = page.wait("document.body && document.body.innerText.includes('headline') && "
                          "document.body.innerText")
        assert "fail_filter" in shown and reports["fail_filter"]["headline"].value in shown
