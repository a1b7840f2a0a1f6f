"""Tests against real servers: the Dagster UI on loopback (GraphQL and a headless browser) and PostgreSQL as
Dagster's run/event storage. ``.ci/services.sh`` installs and starts them and sets the variables read here;
with ``SQLCMP_REQUIRE_SERVICES=1`` (as in CI) a missing service fails these tests instead of skipping them."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from conftest import dagster_webserver, service
from sqlcmp_dagster.assets.common import cases_partitions
from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.local import sensor_tick

LAYER_EDGES = {("parsed_cases", "executions"), ("executions", "structural_diffs"),
               ("executions", "result_comparisons"), ("result_comparisons", "diagnostics"),
               ("diagnostics", "judgments"), ("judgments", "case_reports"), ("case_reports", "evaluation_summary")}


@pytest.fixture(scope="module")
def webserver(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[str]:
    home = tmp_path_factory.mktemp("dagster_home")
    with dagster_webserver(home, SQLCMP_STORAGE_DIR=str(home / "store"), SQLCMP_DB_DIR=str(sample_dir)) as base:
        yield base


def test_graphql_lists_every_asset_with_its_lineage(webserver: str) -> None:
    query = b'{"query": "{ assetNodes { assetKey { path } dependencyKeys { path } } }"}'
    request = urllib.request.Request(webserver + "/graphql", data=query, headers={"Content-Type": "application/json"})
    nodes = json.loads(urllib.request.urlopen(request, timeout=30).read())["data"]["assetNodes"]
    edges = {(dep["path"][-1], node["assetKey"]["path"][-1]) for node in nodes for dep in node["dependencyKeys"]}
    assert {node["assetKey"]["path"][-1] for node in nodes} == {
        "parsed_cases", "executions", "structural_diffs", "result_comparisons", "diagnostics", "judgments",
        "case_reports", "evaluation_summary"}
    assert LAYER_EDGES <= edges


def test_asset_graph_page_shows_the_assets_in_a_browser(webserver: str, tmp_path: Path) -> None:
    chromium = service("SQLCMP_TEST_CHROMIUM")
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000", "--dump-dom",
               webserver + "/asset-groups"]
    page = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    for asset in ("parsed_cases", "executions", "diagnostics", "case_reports", "evaluation_summary"):
        assert asset in page, f"{asset} is not on the asset graph page"


def test_postgres_run_and_event_storage(tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                        postgres_up: None) -> None:
    url = service("SQLCMP_TEST_PG_ADMIN_URL")  # Dagster creates its tables: the owner, not the engine's role
    pytest.importorskip("dagster_postgres")
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(f"storage:\n  postgres:\n    postgres_url: {url}\n", encoding="utf-8")
    defs = build_definitions(cases_dir=str(sample_suite_path().parent), db_dir=str(sample_dir),
                             storage_dir=str(tmp_path / "store"))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        for key in instance.get_dynamic_partitions(cases_partitions.name):
            instance.delete_dynamic_partition(cases_partitions.name, key)
        tick = sensor_tick(defs, instance, None)
        assert len(tick.runs) == 1 and tick.runs[0].success
        run_id = tick.runs[0].run_id
        assert instance.get_run_by_id(run_id) is not None
        records = instance.fetch_materializations(dg.AssetKey("case_reports"), limit=1000).records
        assert {r.asset_materialization.partition for r in records if r.run_id == run_id} == set(tick.added)
