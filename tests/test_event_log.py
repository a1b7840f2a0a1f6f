"""The batched event logs (the local instance's on SQLite, and the one on PostgreSQL) store exactly what
Dagster's per-event path stores, with a step's partition materializations and a run's per-partition check results
written as batches instead of one event at a time. PostgreSQL is the CI's real server on loopback."""

import os
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from sqlcmp_dagster.event_log import (
    BATCH_SIZE_VARIABLE,
    EVENT_BATCH_SIZE,
    PLANNED_SUBSET_VARIABLE,
    BatchedSqliteEventLogStorage,
    event_batches,
    local_instance,
)

#: How a test's instance is configured: ``(home, batched)`` -> ``instance_for_test`` overrides.
Overrides = Callable[[Path, bool], dict[str, Any] | None]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> tuple[Overrides, type]:
    """The instance settings of each storage, stock or batched, and the batched storage's class."""
    if request.param == "sqlite":
        return (lambda home, batched: local_instance(str(home / "history" / "runs")) if batched else None,
                BatchedSqliteEventLogStorage)
    pytest.importorskip("dagster_postgres")
    from sqlcmp_dagster.event_log_postgres import (
        BatchedPostgresEventLogStorage,
        postgres_instance,
    )

    create = request.getfixturevalue("fresh_pg_database")
    return (lambda home, batched: postgres_instance(create()) if batched else
            {"storage": {"postgres": {"postgres_url": create()}}}, BatchedPostgresEventLogStorage)


@pytest.fixture
def unswitched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither of Dagster's event switches set, as in a fresh process; what a storage sets during the test is
    undone after it (each variable is remembered as it was before it is removed)."""
    for variable in (BATCH_SIZE_VARIABLE, PLANNED_SUBSET_VARIABLE):
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)


KEYS = [f"case{i:03d}" for i in range(20)]
parts = dg.DynamicPartitionsDefinition(name="cases")


@dg.asset(partitions_def=parts, backfill_policy=dg.BackfillPolicy.single_run(), io_manager_key="mem")
def layer(context: dg.AssetExecutionContext) -> int:
    for key in context.partition_keys:
        context.add_asset_metadata({"verdict": "pass" if key.endswith("0") else "fail"}, partition_key=key)
    return len(context.partition_keys)


def _materialize(home: Path, overrides: dict[str, Any] | None) -> dict[str, object]:
    """Materialize every partition in one run and read back what the instance recorded."""
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        calls = {"event": 0, "batch": 0}
        storage = instance.event_log_storage
        store_event, store_event_batch = storage.store_event, storage.store_event_batch

        def count_event(event):  # noqa: ANN001, ANN202
            calls["event"] += event.is_dagster_event and event.dagster_event_type == "ASSET_MATERIALIZATION"
            return store_event(event)

        def count_batch(events):  # noqa: ANN001, ANN202
            calls["batch"] += 1
            return store_event_batch(events)

        storage.store_event, storage.store_event_batch = count_event, count_batch
        instance.add_dynamic_partitions(parts.name, KEYS)
        result = dg.materialize([layer], instance=instance, resources={"mem": dg.InMemoryIOManager()},
                                tags={"dagster/asset_partition_range_start": KEYS[0],
                                      "dagster/asset_partition_range_end": KEYS[-1]})
        assert result.success
        records = instance.fetch_materializations(dg.AssetKey("layer"), limit=1000).records
        latest = instance.get_latest_materialization_event(dg.AssetKey("layer"))
        return {"storage": type(storage), "calls": calls,
                "verdicts": {r.partition_key: r.asset_materialization.metadata["verdict"].value for r in records},
                "materialized": instance.get_materialized_partitions(dg.AssetKey("layer")),
                "latest_is_last_stored": latest.asset_materialization.partition == records[0].partition_key,
                "run_records": len(instance.get_records_for_run(result.run_id).records)}


def test_batched_event_log_stores_what_the_per_event_path_stores(tmp_path: Path, unswitched: None,
                                                                 backend: tuple[Overrides, type]) -> None:
    """The batched storage turns Dagster's event batches on itself, as it is built (nothing else sets them)."""
    overrides, storage_class = backend
    stock = _materialize(tmp_path / "stock", overrides(tmp_path / "stock", False))
    assert BATCH_SIZE_VARIABLE not in os.environ
    batched = _materialize(tmp_path / "batched", overrides(tmp_path / "batched", True))
    assert batched["storage"] is storage_class
    # the same facts: one materialization per case with its own metadata, every partition materialized
    assert batched["verdicts"] == stock["verdicts"] and len(batched["verdicts"]) == len(KEYS)
    assert batched["materialized"] == stock["materialized"] == set(KEYS)
    assert batched["latest_is_last_stored"] and stock["latest_is_last_stored"]
    # ... written as one batch rather than one event (two SQLite transactions) at a time
    assert stock["calls"] == {"event": len(KEYS), "batch": 0}
    assert batched["calls"] == {"event": 0, "batch": 1}
    # one planned event per run instead of one per partition
    assert stock["run_records"] - batched["run_records"] == len(KEYS) - 1


verdict = dg.AssetCheckSpec(name="verdict", asset="checked", partitions_def=parts, blocking=False)


@dg.multi_asset(outs={"checked": dg.AssetOut(io_manager_key="mem")}, check_specs=[verdict], can_subset=True,
                partitions_def=parts, backfill_policy=dg.BackfillPolicy.single_run())
def checked(context: dg.AssetExecutionContext):  # noqa: ANN201 (a generator of Dagster events)
    """One check result per partition, as case_reports' case_verdict (the check's one per-step output is
    optional because the asset is subsettable)."""
    yield dg.Output(len(context.partition_keys), output_name="checked")
    for key in context.partition_keys:
        yield dg.AssetCheckEvaluation(asset_key=dg.AssetKey("checked"), check_name="verdict", partition=key,
                                      passed=not key.endswith("3"), severity=dg.AssetCheckSeverity.WARN,
                                      metadata={"case": key})


def _check_results(home: Path, overrides: dict[str, Any] | None) -> dict[str, object]:
    """Run ``checked`` over every partition and read back the check's per-partition state and history."""
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        storage = instance.event_log_storage
        writes = {"check": 0}
        store_asset_check_event = storage.store_asset_check_event

        def count(event, event_id):  # noqa: ANN001, ANN202
            writes["check"] += 1
            return store_asset_check_event(event, event_id)

        storage.store_asset_check_event = count
        instance.add_dynamic_partitions(parts.name, KEYS)
        result = dg.materialize([checked], instance=instance, resources={"mem": dg.InMemoryIOManager()},
                                tags={"dagster/asset_partition_range_start": KEYS[0],
                                      "dagster/asset_partition_range_end": KEYS[-1]})
        assert result.success
        key = verdict.key
        infos = storage.get_asset_check_partition_info([key])
        history = storage.get_asset_check_execution_history(key, limit=100)
        logged = [e.dagster_event.event_specific_data.partition
                  for e in instance.all_logs(result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)]
        return {"status": {i.partition_key: i.latest_execution_status.value for i in infos},
                "history": sorted((r.event.dagster_event.event_specific_data.partition, r.status.value,
                                   r.event.dagster_event.event_specific_data.metadata["case"].value)
                                  for r in history),
                "logged": logged, "writes": writes["check"], "storage": type(storage)}


def test_per_partition_check_results_are_stored_as_one_batch(tmp_path: Path, unswitched: None,
                                                              backend: tuple[Overrides, type]) -> None:
    overrides, storage_class = backend
    stock = _check_results(tmp_path / "stock", overrides(tmp_path / "stock", False))
    batched = _check_results(tmp_path / "batched", overrides(tmp_path / "batched", True))
    assert batched["storage"] is storage_class
    # the same facts: each partition's latest result, the history with its metadata, the log in the same order
    assert batched["status"] == stock["status"]
    assert sorted(stock["status"].values()).count("FAILED") == 2  # case003 and case013
    assert batched["history"] == stock["history"] and len(stock["history"]) == len(KEYS)
    assert batched["logged"] == stock["logged"] == KEYS
    # ... written in one transaction, not one per result (each also planned in a row of its own, updated)
    assert stock["writes"] == len(KEYS) + 1 and batched["writes"] == 1  # + the planned results' one event


def test_postgres_event_log_keeps_one_connection_per_process(fresh_pg_database: Callable[[], str]) -> None:
    """Statements share one server connection, and a forked child (a Celery worker's) opens its own instead of
    using, or closing, its parent's."""
    import os

    import sqlalchemy as sa

    pytest.importorskip("dagster_postgres")
    from sqlcmp_dagster.event_log_postgres import BatchedPostgresEventLogStorage

    storage = BatchedPostgresEventLogStorage(fresh_pg_database())

    def backend() -> int:
        with storage._connect() as conn:
            return conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()

    first = backend()
    assert backend() == first
    child = os.fork()
    if child == 0:  # the child: a connection of its own, or exit code 1
        try:
            os._exit(0 if backend() != first else 1)
        except BaseException:
            os._exit(2)
    assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    assert backend() == first
    storage.dispose()


def test_postgres_connections_do_not_grow_with_storages_never_disposed(fresh_pg_database: Callable[[], str]) -> None:
    """dagster-celery builds an instance, and so an event log storage, for every task and never disposes it: more
    such storages in one process than the server has connection slots still hold one connection between them."""
    import sqlalchemy as sa

    pytest.importorskip("dagster_postgres")
    from sqlcmp_dagster.event_log_postgres import BatchedPostgresEventLogStorage

    url = fresh_pg_database()
    admin = sa.create_engine(url, poolclass=sa.pool.NullPool)

    def connections() -> int:
        with admin.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND pid <> pg_backend_pid()")).scalar_one()

    with admin.connect() as conn:
        slots = int(conn.execute(sa.text("SHOW max_connections")).scalar_one())
    storages = []
    for task in range(slots + 5):
        storage = BatchedPostgresEventLogStorage(url, should_autocreate_tables=task == 0)
        assert storage.get_logs_for_run(f"task-{task}") == []  # a statement, as a task's events are
        storages.append(storage)
    assert connections() <= 1
    storages[0].dispose()
    deadline = time.monotonic() + 10  # a closed connection's server process takes a moment to leave the view
    while connections() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert connections() == 0
    assert storages[-1].get_logs_for_run("after") == []  # the others reopen it when they need it
    storages[-1].dispose()
    admin.dispose()


def test_an_untested_dagster_release_gets_the_stock_storage_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unswitched: None, backend: tuple[Overrides, type]) -> None:
    """Under a Dagster release outside TESTED_DAGSTER the instance builds Dagster's own event log storage (which
    stores the same events), warning once however many instances the process builds, and the private switches
    of the event batches are left alone."""
    from sqlcmp_dagster.event_log import BatchedEvents

    overrides, storage_class = backend
    monkeypatch.setattr(dg, "__version__", f"1.14.0rc{len(storage_class.__name__)}")  # one of its own per backend
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _materialize(tmp_path / "first", overrides(tmp_path / "first", True))
        second = _materialize(tmp_path / "second", overrides(tmp_path / "second", True))
    ours = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(ours) == 1 and re.match(r"Dagster 1\.14\.0rc\d+ is not a release .* tested with", ours[0]), ours
    for result in (first, second):
        stock = result["storage"]
        assert stock in storage_class.__bases__ and not issubclass(stock, BatchedEvents)  # Dagster's own
        assert result["materialized"] == set(KEYS)
    assert BATCH_SIZE_VARIABLE not in os.environ


def test_an_in_process_run_s_event_switches_end_with_it_and_a_set_one_is_kept(
        unswitched: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``event_batches`` (around each of sqlcmp_dagster.local's in-process runs) turns both switches on for its
    block, whatever the storage, but one the environment already set stays as it is."""
    monkeypatch.setenv(PLANNED_SUBSET_VARIABLE, "0")
    with event_batches():
        assert os.environ[BATCH_SIZE_VARIABLE] == EVENT_BATCH_SIZE and os.environ[PLANNED_SUBSET_VARIABLE] == "0"
    assert BATCH_SIZE_VARIABLE not in os.environ and os.environ[PLANNED_SUBSET_VARIABLE] == "0"
    monkeypatch.delenv(PLANNED_SUBSET_VARIABLE)
    with event_batches():
        assert os.environ[PLANNED_SUBSET_VARIABLE] == "1"
    assert PLANNED_SUBSET_VARIABLE not in os.environ


def test_the_tested_release_gets_the_batched_storage_without_a_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert _materialize(tmp_path / "home", local_instance(str(tmp_path / "runs")))["storage"] is \
            BatchedSqliteEventLogStorage


#: What the batched storages expect of Dagster's private storage internals: per class, each method they
#: override or call with its parameters (as ``inspect.signature`` lists them). A Dagster release that changes
#: one fails here, before a deployment meets it.
DAGSTER_METHODS = {
    "sqlite": {
        "__init__": ["self", "base_dir", "inst_data"], "from_config_value": ["inst_data", "config_value"],
        "_connect": ["self", "shard"], "has_table": ["self", "table_name"], "_initdb": ["self", "engine",
                                                                                      "for_index_shard"],
        "conn_string_for_shard": ["self", "shard_name"], "run_connection": ["self", "run_id"],
    },
    "postgres": {
        "__init__": ["self", "postgres_url", "should_autocreate_tables", "inst_data", "token_provider"],
        "from_config_value": ["inst_data", "config_value"], "_connect": ["self"],
    },
    "both": {
        "wipe": ["self"], "dispose": ["self"], "store_event": ["self", "event"],
        "store_event_batch": ["self", "events"], "store_asset_check_event": ["self", "event", "event_id"],
        "_store_asset_check_evaluation_planned": ["self", "event", "event_id"],
        "index_transaction": ["self"], "index_connection": ["self"], "_event_to_row": ["self", "event"],
        "_event_insert_timestamp": ["self", "event"], "_store_asset_event_tags": ["self", "conn", "events",
                                                                                   "event_ids"],
        "_store_asset_event": ["self", "conn", "event", "event_id"],
    },
}
#: The columns of Dagster's tables the batched storages read or write.
DAGSTER_COLUMNS = {
    "event_logs": {"id", "run_id", "event", "dagster_event_type", "timestamp", "step_key", "asset_key",
                   "partition"},
    "asset_check_executions": {"asset_key", "check_name", "partition", "run_id", "execution_status",
                               "evaluation_event", "evaluation_event_timestamp", "evaluation_event_storage_id",
                               "materialization_event_storage_id"},
}


def test_the_dagster_internals_the_storages_build_on_still_exist(tmp_path: Path) -> None:
    import inspect
    from importlib.util import find_spec

    from dagster._core.storage.asset_check_execution_record import (
        AssetCheckExecutionRecordStatus,
    )
    from dagster._core.storage.event_log import EventLogStorage, SqliteEventLogStorage
    from dagster._core.storage.event_log.schema import (
        AssetCheckExecutionsTable,
        SqlEventLogStorageTable,
    )

    pytest.importorskip("dagster_postgres")
    from dagster_postgres.event_log import PostgresEventLogStorage
    from dagster_postgres.utils import create_pg_engine

    stock = {"sqlite": [SqliteEventLogStorage], "postgres": [PostgresEventLogStorage],
             "both": [SqliteEventLogStorage, PostgresEventLogStorage]}
    for group, methods in DAGSTER_METHODS.items():
        for cls in stock[group]:
            for name, parameters in methods.items():
                assert callable(getattr(cls, name, None)), f"{cls.__name__}.{name} is gone"
                assert list(inspect.signature(getattr(cls, name)).parameters) == parameters, f"{cls.__name__}.{name}"
    assert list(inspect.signature(create_pg_engine).parameters) == ["postgres_url", "token_provider",
                                                                    "engine_kwargs"]
    for table, columns in ((SqlEventLogStorageTable, DAGSTER_COLUMNS["event_logs"]),
                           (AssetCheckExecutionsTable, DAGSTER_COLUMNS["asset_check_executions"])):
        assert columns <= set(table.c.keys()), table.name
    assert {"PLANNED", "SUCCEEDED", "FAILED"} <= {status.value for status in AssetCheckExecutionRecordStatus}
    # the engine the PostgreSQL storage's statements go through, which the batched one replaces
    assert "self._engine" in inspect.getsource(PostgresEventLogStorage._connect)
    storage = SqliteEventLogStorage(str(tmp_path / "runs"))  # the attributes the SQLite storage's _connect uses
    assert hasattr(storage, "_db_lock") and isinstance(storage._initialized_dbs, set)
    storage.dispose()
    # the environment switches the storages set or honour are still read by Dagster, and the storage's answer on
    # planned events is still asked of it
    source = "".join(path.read_text(encoding="utf-8", errors="replace")
                     for path in Path(find_spec("dagster").origin).parent.rglob("*.py"))  # type: ignore[arg-type]
    for variable in (BATCH_SIZE_VARIABLE, PLANNED_SUBSET_VARIABLE):
        assert f'"{variable}"' in source, variable
    assert isinstance(inspect.getattr_static(
        EventLogStorage, "supports_partition_subset_in_asset_materialization_planned_events"), property)
    assert "event_log_storage.supports_partition_subset_in_asset_materialization_planned_events" in source


def test_pyproject_requires_the_tested_dagster_range() -> None:
    """pyproject.toml's base dependencies hold dagster, dagster-webserver and dagster-dg-cli to TESTED_DAGSTER, and
    dagster-postgres and dagster-celery to the matching 0.x releases (Dagster numbers them 1.x minus 1 in the
    major, plus 16 in the minor: :func:`library_release`)."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from sqlcmp_dagster.event_log import TESTED_DAGSTER

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    base = {requirement.name: requirement.specifier
            for requirement in map(Requirement, project["project"]["dependencies"])}
    libraries = SpecifierSet(",".join(f"{spec.operator}{library_release(spec.version)}" for spec in TESTED_DAGSTER))
    assert (base["dagster"], base["dagster-webserver"], base["dagster-dg-cli"]) == (TESTED_DAGSTER,) * 3
    assert (base["dagster-postgres"], base["dagster-celery"]) == (libraries, libraries)
    extras = [Requirement(r).name for group in project["project"]["optional-dependencies"].values() for r in group]
    assert not {"dagster", "dagster-webserver", "dagster-postgres", "dagster-celery"} & set(extras)


def library_release(version: str) -> str:
    """The release of Dagster's libraries (dagster-postgres, dagster-celery) made with Dagster ``version``.

    >>> library_release("1.13.27"), library_release("1.14")
    ('0.29.27', '0.30')
    """
    major, minor, *rest = version.split(".")
    assert major == "1", version
    return ".".join(["0", str(int(minor) + 16), *rest])
