"""The local instance's event log: Dagster's SQLite storage, writing a batch of asset events in one transaction.

A backfill over N cases records one materialization per case per layer asset (seven per case), and Dagster's
SQLite storage commits each event twice (its run's shard, then the cross-run index), one fsync each: about
20 ms per event on an ordinary disk, which made a 1,000-case run spend minutes in the event log while the
engine needs seconds. Dagster already hands the storage a whole batch of a step's partition materializations
when ``DAGSTER_EVENT_BATCH_SIZE`` is set, and its PostgreSQL storage writes such a batch at once; its SQLite
storage stores them one by one. ``BatchedSqliteEventLogStorage`` writes the batch as PostgreSQL does: one
insert into the run's shard, one transaction on the index (the events, their indexed tags, and the asset's
latest-event row from the last of them). Every event is still stored, so the Partitions tab, per-partition
metadata and the case sensor see exactly what the per-event path would write.

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
from collections.abc import Sequence
from typing import Any

from dagster import DagsterEventType
from dagster._core.event_api import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable

#: Event types written as one batch: the ones Dagster batches (a step's partition materializations or
#: observations); any other batch goes through the per-event path.
_BATCHED = ({DagsterEventType.ASSET_MATERIALIZATION}, {DagsterEventType.ASSET_OBSERVATION})
#: Dagster buffers a step's partition events up to this many before handing them over as one batch.
EVENT_BATCH_SIZE = "1000"


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """SQLite event log storage that writes a batch of asset events in one transaction per shard."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> BatchedSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        events = [event for event in events if not event.get_dagster_event().is_asset_failed_to_materialize]
        kinds = {event.get_dagster_event().event_type for event in events}
        if not events or kinds not in _BATCHED or len({event.run_id for event in events}) != 1:
            super().store_event_batch(events)
            return
        statement = self.prepare_insert_event_batch(events)
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(statement)
        with self.index_transaction() as conn:
            # One multi-row insert assigns consecutive row ids in the order of its rows.
            ids = sorted(row[0] for row in conn.execute(statement.returning(SqlEventLogStorageTable.c.id)))
            self._store_asset_event_tags(conn, events, ids)
            # the asset's row keeps its latest event, which is the batch's last
            self._store_asset_event(conn, events[-1], ids[-1])


def local_instance(base_dir: str) -> dict[str, Any]:
    """The ``dagster.yaml`` settings of a local instance whose event log lives under ``base_dir``."""
    return {"event_log_storage": {"module": __name__, "class": BatchedSqliteEventLogStorage.__name__,
                                  "config": {"base_dir": base_dir}}}


def enable_event_batches() -> None:
    """Let Dagster hand the event log a step's partition events as batches (unless the environment already
    chose a size), and record one planned event per asset per run instead of one per partition.

    Both are read by Dagster from the environment of the process that runs the steps. The second has a
    cost: a run that fails does not mark its planned partitions as failed (the failed step's own event
    still says which run and step failed).
    """
    os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", EVENT_BATCH_SIZE)
    os.environ.setdefault("DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", "1")
