"""The local instance's event log: Dagster's SQLite storage, writing a batch of asset events in one transaction.

A backfill over N cases records one materialization per case per layer asset (seven per case), and Dagster's
SQLite storage commits each event twice (its run's shard, then the cross-run index), one fsync each: about
20 ms per event on an ordinary disk, which made a 1,000-case run spend minutes in the event log while the
engine needs seconds. Dagster already hands the storage a whole batch of a step's partition materializations
when ``DAGSTER_EVENT_BATCH_SIZE`` is set (building a batched storage sets it, :func:`enable_event_batches`), and
its PostgreSQL storage writes such a batch at once; its SQLite storage stores them one by one.
``BatchedSqliteEventLogStorage`` writes the batch as PostgreSQL does: one insert into the run's shard, one
transaction on the index (the events, their indexed tags, and the asset's latest-event row from the last of
them). Every event is still stored, so the Partitions tab, per-partition
metadata and the case sensor see exactly what the per-event path would write.

Dagster stores a check result per event, three transactions each (the run's shard, the index, the check's
row), and ``case_reports`` records one ``case_verdict`` result per case. ``BatchedSqliteEventLogStorage``
holds a run's per-partition check results until the next event of any kind arrives (the step's next event:
its success or failure) and stores them as one batch: one insert per shard and one transaction updating
their check rows. Their order in the log is unchanged; they become visible at the end of their step rather
than one by one.

Events Dagster does not batch (step events) and every read (the
dynamic partitions a step checks its range against, asset records) still go one at a time, and the stock
storage builds a new SQLAlchemy engine and SQLite connection for each of them (and for each of its
"does this table exist" probes), then closes it, which on a WAL database also checkpoints the log. About
sixteen such connections per case made the event log the pipeline's largest cost after the engine.
``BatchedSqliteEventLogStorage`` keeps one engine, with its connection open, per shard and process (the
index and the most recent run shards), remembers which tables exist, and commits the WAL with
``synchronous=NORMAL``: a committed event survives a crash of the process; a power cut may lose the last
few, never the database's consistency (SQLite's guarantee for WAL mode), which is the right trade for a
local instance's history.

The same batching runs on PostgreSQL in :mod:`sqlcmp_dagster.event_log_postgres` (:class:`BatchedEvents` is
what the two share).

Both storages lean on Dagster's private storage internals (methods they override or call, its tables, two
environment variables), which may change in any release. They are tested with the releases in
:data:`TESTED_DAGSTER`, the range ``pyproject.toml`` installs; under any other release, building one gives
Dagster's stock storage instead, with one warning per process (:func:`tested_dagster`): slower, never wrong.

Use it in ``$DAGSTER_HOME/dagster.yaml`` (``sqlcmp demo`` writes this; ``LOCAL_INSTANCE`` is the same as
overrides for ``dg.instance_for_test``)::

    event_log_storage:
      module: sqlcmp_dagster.event_log
      class: BatchedSqliteEventLogStorage
      config:
        base_dir: <DAGSTER_HOME>/history/runs
"""

from __future__ import annotations

import os
import warnings
from datetime import datetime, timezone
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg
import sqlalchemy as sa
from dagster import DagsterEventType, EventLogEntry, serialize_value
# No public names: the storage internals this module builds on (fenced by TESTED_DAGSTER).
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable, SqlEventLogStorageTable
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from sqlalchemy.engine import Connection, Engine

#: The Dagster releases the batched storages are tested with: ``pyproject.toml`` requires the same range of
#: dagster and dagster-webserver (and the matching 0.x range of dagster-postgres and dagster-celery).
TESTED_DAGSTER = SpecifierSet(">=1.13.27,<1.14")

#: Event types written as one batch: the ones Dagster batches (a step's partition materializations or
#: observations); any other batch goes through the per-event path.
_BATCHED = ({DagsterEventType.ASSET_MATERIALIZATION}, {DagsterEventType.ASSET_OBSERVATION})
#: Dagster buffers a step's partition events up to this many before handing them over as one batch.
EVENT_BATCH_SIZE = "1000"
#: Dagster's switches, read from the environment: the size of a step's event batches (0, Dagster's default, is
#: none), and whether a run plans its partitions in one event per asset (its storages' answer by default: no).
BATCH_SIZE_VARIABLE = "DAGSTER_EVENT_BATCH_SIZE"
PLANNED_SUBSET_VARIABLE = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"
#: Open engines kept per process: the index shard and the shards of the runs most recently written.
_OPEN_SHARDS = 4


class BatchedEvents:
    """What both batched storages do: a step's asset events and a run's per-partition check results stored as
    batches (the module docstring says how). A storage class puts it before Dagster's storage among its bases
    and implements :meth:`_insert_events`; ``super()`` here is that Dagster storage."""

    def _init_batches(self) -> None:
        """Called as the storage is built, in every process whose instance has one (the run's and its steps',
        the webserver's and the daemon's): turns Dagster's event batches on there (:func:`enable_event_batches`)."""
        enable_event_batches()
        #: Per-partition check results not yet stored (see the module docstring).
        self._held_checks: list[EventLogEntry] = []
        self._held_pid = os.getpid()

    @property
    def supports_partition_subset_in_asset_materialization_planned_events(self) -> bool:
        """Whether a run plans each asset in one event naming its partitions, rather than one event per
        partition: yes, unless ``DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS`` says otherwise (Dagster's own
        storages read only that variable, which is unset by default). Dagster asks the storage of the process
        that creates the run (the webserver's, the daemon's, an in-process run's). The cost: a run that fails
        does not mark its planned partitions as failed (the failed step's own event still says which run and
        step failed)."""
        if os.environ.get(PLANNED_SUBSET_VARIABLE) is None:
            return True
        return bool(super().supports_partition_subset_in_asset_materialization_planned_events)  # type: ignore[misc]

    def _insert_events(self, events: Sequence[EventLogEntry]) -> list[int]:
        """Insert ``events`` (one run's) as one batch; return their ids, in their order."""
        raise NotImplementedError

    def wipe(self) -> None:
        self._held_checks.clear()
        super().wipe()  # type: ignore[misc]

    def dispose(self) -> None:
        self._store_held_checks()
        super().dispose()  # type: ignore[misc]

    def store_event(self, event: EventLogEntry) -> None:
        """Store ``event``; a per-partition check result is held and stored with the run's next event."""
        if _per_partition_check_result(event):
            if self._held_checks and self._held_checks[0].run_id != event.run_id:
                self._store_held_checks()
            self._held_checks.append(event)
            if len(self._held_checks) >= int(EVENT_BATCH_SIZE):
                self._store_held_checks()
            return
        self._store_held_checks()
        super().store_event(event)  # type: ignore[misc]

    def _store_held_checks(self) -> None:
        """Store the held check results of one run as a batch: one insert, then one transaction on the index
        that updates each result's planned row, as Dagster's per-event path does (which also inserts a row
        where none was planned: those few go through it)."""
        events, self._held_checks = self._held_checks, []
        if not events or self._held_pid != os.getpid():  # a forked child does not store its parent's results
            self._held_pid = os.getpid()
            return
        ids = self._insert_events(events)
        table = AssetCheckExecutionsTable.c
        with self.index_transaction() as conn:  # type: ignore[attr-defined]
            planned = {(row.asset_key, row.check_name, row.partition) for row in conn.execute(
                sa.select(table.asset_key, table.check_name, table.partition).where(
                    table.run_id == events[0].run_id,
                    table.partition.in_(sorted({_check_of(event).partition for event in events}))))}
            rows = [_check_row(event, event_id) for event, event_id in zip(events, ids, strict=True)]
            found = [(row["b_asset_key"], row["b_check_name"], row["b_partition"]) in planned for row in rows]
            if any(found):
                conn.execute(AssetCheckExecutionsTable.update().where(
                    table.asset_key == sa.bindparam("b_asset_key"), table.check_name == sa.bindparam("b_check_name"),
                    table.run_id == sa.bindparam("b_run_id"), table.partition == sa.bindparam("b_partition"),
                ).values(execution_status=sa.bindparam("b_status"), evaluation_event=sa.bindparam("b_event"),
                         evaluation_event_timestamp=sa.bindparam("b_timestamp"),
                         evaluation_event_storage_id=sa.bindparam("b_event_id"),
                         materialization_event_storage_id=sa.bindparam("b_materialization_id")),
                    [row for row, planned_row in zip(rows, found) if planned_row])
        for planned_row, event, event_id in zip(found, events, ids, strict=True):
            if not planned_row:
                self.store_asset_check_event(event, event_id)  # type: ignore[attr-defined]

    def _store_asset_check_evaluation_planned(self, event: EventLogEntry, event_id: int | None) -> None:
        """One planned row per partition of a check's planned event, as Dagster writes them, with the event
        serialized once: Dagster serializes it again for every row, and the event holds the run's partition
        keys, so a run over N cases spent time in N^2 (0.8 s at 1,034 cases, 100 times that at 10,000)."""
        planned = _check_of(event)
        keys = planned.partitions_subset.get_partition_keys() if planned.partitions_subset else [None]
        common = {"asset_key": planned.asset_key.to_string(), "check_name": planned.check_name,
                  "run_id": event.run_id, "execution_status": AssetCheckExecutionRecordStatus.PLANNED.value,
                  "evaluation_event": serialize_value(event),
                  "evaluation_event_timestamp": self._event_insert_timestamp(event),  # type: ignore[attr-defined]
                  "evaluation_event_storage_id": event_id}
        with self.index_connection() as conn:  # type: ignore[attr-defined]
            conn.execute(AssetCheckExecutionsTable.insert(), [{**common, "partition": key} for key in keys])

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        self._store_held_checks()
        events = [event for event in events if not event.get_dagster_event().is_asset_failed_to_materialize]
        kinds = {event.get_dagster_event().event_type for event in events}
        if not events or kinds not in _BATCHED or len({event.run_id for event in events}) != 1:
            super().store_event_batch(events)  # type: ignore[misc]
            return
        ids = self._insert_events(events)
        with self.index_transaction() as conn:  # type: ignore[attr-defined]
            self._store_asset_event_tags(conn, events, ids)  # type: ignore[attr-defined]
            # the asset's row keeps its latest event, which is the batch's last
            self._store_asset_event(conn, events[-1], ids[-1])  # type: ignore[attr-defined]


class BatchedSqliteEventLogStorage(BatchedEvents, SqliteEventLogStorage):
    """SQLite event log storage that writes a batch of asset events in one transaction per shard."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_pid = os.getpid()
        self._tables: set[str] = set()
        self._init_batches()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def from_config_value(  # type: ignore[override]  # Dagster's own class under an untested release
            cls, inst_data: Any, config_value: Any) -> SqliteEventLogStorage:
        """The batched storage, or Dagster's stock one under a Dagster release it was not tested with."""
        if not tested_dagster():
            return SqliteEventLogStorage(inst_data=inst_data, **config_value)
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        """A transaction on ``shard`` over the shard's open connection (the stock storage's ``_connect``
        builds and disposes an engine each time). Serialized by the storage's lock, as the stock one is."""
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _engine(self, shard: str) -> Engine:
        if self._engines_pid != os.getpid():  # a forked child must not use (nor close) its parent's connections
            for kept in self._engines.values():
                kept.dispose(close=False)
            self._engines.clear()
            self._engines_pid = os.getpid()
        engine: Engine | None = self._engines.pop(shard, None)
        if engine is None:
            engine = sa.create_engine(self.conn_string_for_shard(shard), pool_size=1, max_overflow=2,
                                      connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
            sa.event.listen(engine, "connect", _wal_normal_sync)
            while len(self._engines) >= _OPEN_SHARDS:
                self._engines.popitem(last=False)[1].dispose()
        self._engines[shard] = engine  # most recently used last
        return engine

    def has_table(self, table_name: str) -> bool:
        """Whether the index shard has ``table_name``; Dagster asks before every partition or check query,
        and a table, once created, stays."""
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables

    def wipe(self) -> None:
        self._close_engines()  # the run shards' files are deleted
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._close_engines()

    def _close_engines(self) -> None:
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()

    def _insert_events(self, events: Sequence[EventLogEntry]) -> list[int]:
        """Insert ``events`` into their run's shard, then into the index; their ids are the index's.

        One prepared statement executed over the rows (``executemany``) in each database, where Dagster's
        ``prepare_insert_event_batch`` builds one multi-row ``VALUES`` statement that SQLAlchemy compiles with
        seven bind parameters per event (about a second of a 1,000-case run, twice). The ids are read back in
        the inserting transaction: ``event_logs.id`` is SQLite's rowid, each new row takes the largest id plus
        one, and the transaction holds the write lock from its first insert, so the rows just inserted hold the
        largest ids, in order.
        """
        rows = [self._event_to_row(event) for event in events]
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
        column = SqlEventLogStorageTable.c.id
        with self.index_transaction() as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
            return sorted(row[0] for row in conn.execute(sa.select(column).order_by(column.desc()).limit(len(rows))))


def _per_partition_check_result(event: EventLogEntry) -> bool:
    """A check result about one partition, recorded by a run (``case_verdict``'s)."""
    return (event.is_dagster_event and event.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION
            and bool(event.run_id) and _check_of(event).partition is not None)


def _check_of(event: EventLogEntry) -> Any:
    return event.get_dagster_event().event_specific_data


def _check_row(event: EventLogEntry, event_id: int) -> dict[str, Any]:
    """The values Dagster's per-event path writes into a check result's planned row."""
    evaluation = _check_of(event)
    target = evaluation.target_materialization_data
    status = AssetCheckExecutionRecordStatus.SUCCEEDED if evaluation.passed else AssetCheckExecutionRecordStatus.FAILED
    return {"b_asset_key": evaluation.asset_key.to_string(), "b_check_name": evaluation.check_name,
            "b_run_id": event.run_id, "b_partition": evaluation.partition, "b_status": status.value,
            "b_event": serialize_value(event),
            "b_timestamp": datetime.fromtimestamp(event.timestamp, timezone.utc).replace(tzinfo=None),
            "b_event_id": event_id, "b_materialization_id": target.storage_id if target else None}


def _wal_normal_sync(connection: Any, _record: Any) -> None:
    """Commit without an fsync of the WAL (see the module docstring for what that risks)."""
    connection.execute("PRAGMA synchronous=NORMAL")


#: The daemon settings every instance of sqlcmp's gets: run monitoring, which fails a run past its
#: ``dagster/max_runtime`` (the case sensor sets it from ``SQLCMP_RUN_MAX_SECONDS``; a lost worker's run stays
#: STARTED otherwise), and run retries for the runs that ask for them by their ``dagster/max_retries`` tag (the
#: summary's: the case sensor requests failed runs' cases again itself).
DAEMON_SETTINGS: dict[str, Any] = {"run_monitoring": {"enabled": True}, "run_retries": {"enabled": True}}


def local_instance(base_dir: str) -> dict[str, Any]:
    """The ``dagster.yaml`` settings of a local instance whose event log lives under ``base_dir``: a throwaway
    instance (the demo's), so no telemetry and no community modal (Dagster's ``nux``) over the first page."""
    return {"telemetry": {"enabled": False}, "nux": {"enabled": False}, **DAEMON_SETTINGS,
            "event_log_storage": {"module": __name__, "class": BatchedSqliteEventLogStorage.__name__,
                                  "config": {"base_dir": base_dir}}}


def enable_event_batches() -> None:
    """Let Dagster hand the event log a step's partition events as batches of up to :data:`EVENT_BATCH_SIZE`,
    unless the environment already chose a size.

    Dagster reads the size from the environment of the process that emits a step's events, at each event, and
    asks the storage nothing, so it is set there, in the environment: by a batched storage as it is built
    (:meth:`BatchedEvents._init_batches`), which every such process does before its first step. Not when a module
    is imported (loading the definitions sets nothing), and not under a Dagster release outside
    :data:`TESTED_DAGSTER` (it is Dagster's private switch; such a release gets the stock storages anyway).
    """
    if not tested_dagster():
        return
    os.environ.setdefault(BATCH_SIZE_VARIABLE, EVENT_BATCH_SIZE)


@contextmanager
def event_batches() -> Iterator[None]:
    """Dagster's event switches on for the block, whatever the instance's storage: a step's partition events
    handed over as batches (as :func:`enable_event_batches`), and each asset planned in one event per run rather
    than one per partition (what :class:`BatchedEvents` answers by itself). For an in-process run, which is
    created and executed in this process (:mod:`sqlcmp_dagster.local`): Dagster's own storages gain from both
    too (its PostgreSQL storage inserts a batch at once, and a run over N cases plans 7 events, not 7N).

    Each switch is set only where the environment does not set it, and removed when the block ends, so nothing
    outlives the run. Nothing is set under a Dagster release outside :data:`TESTED_DAGSTER`."""
    switches = ((BATCH_SIZE_VARIABLE, EVENT_BATCH_SIZE), (PLANNED_SUBSET_VARIABLE, "1")) if tested_dagster() else ()
    added = {name: value for name, value in switches if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name, value in added.items():
            if os.environ.get(name) == value:
                del os.environ[name]


#: The untested Dagster releases this process has warned about (once each).
_WARNED: set[str] = set()


def tested_dagster() -> bool:
    """Whether the running Dagster release is in :data:`TESTED_DAGSTER`; warns once per process when not.

    Read at each call (not at import) from ``dagster.__version__``: the storages are built when an instance is,
    and a test fakes the release there."""
    running = dg.__version__
    try:
        tested = TESTED_DAGSTER.contains(Version(running), prereleases=True)
    except InvalidVersion:
        tested = False
    if not tested and running not in _WARNED:
        _WARNED.add(running)
        warnings.warn(f"Dagster {running} is not a release sqlcmp's batched event log storages were tested with "
                      f"({TESTED_DAGSTER}): using Dagster's stock event log storage instead (the same events, "
                      "written one at a time)", RuntimeWarning, stacklevel=2)
    return tested
