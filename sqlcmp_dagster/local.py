"""Running the pipeline in-process on a local Dagster instance: what ``sqlcmp demo`` and the tests do.

One tick of the case sensor is evaluated and carried out as the daemon would: partitions are added or deleted
and each run request is executed with ``materialize`` (a range request as one run over that range).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from sqlcmp_dagster.assets import LAYERS, evaluation_summary
from sqlcmp_dagster.assets.common import cases_partitions
from sqlcmp_dagster.assets.sensors import case_sensor

#: In-process runs print only warnings and errors to the console; every event still goes to the instance's event
#: log, where the Dagster UI shows it (the DEBUG stream would bury a demo's few lines of summary).
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass(frozen=True)
class Tick:
    """What one sensor tick did: partitions added and deleted, runs executed (and whether they succeeded)."""

    added: list[str]
    deleted: list[str]
    runs: list[dg.ExecuteInProcessResult]
    cursor: str | None


def sensor_tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None,
                check: Callable[[], None] | None = None) -> Tick:
    """Evaluate the case sensor once against ``instance`` and carry out its requests in-process.

    ``check`` is called before each run and after the last; what it raises ends the whole tick. Dagster takes a
    ``KeyboardInterrupt`` inside a run for that run's failure and would go on with the next: the CLI passes
    :meth:`~sqlcmp_dagster.stopping.StopSignals.check`, so a stop signal stops the tick, not one run."""
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources or {}) as context:
        result = case_sensor(context)
    added: list[str] = []
    deleted: list[str] = []
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(cases_partitions.name, list(request.partition_keys))
            added += request.partition_keys
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(cases_partitions.name, key)
            deleted += request.partition_keys
    resources = defs.resources or {}
    runs = []
    for request in result.run_requests or []:
        if check is not None:
            check()
        runs.append(dg.materialize(LAYERS, instance=instance, resources=resources, tags=request.tags,
                                   partition_key=request.partition_key, raise_on_error=False,
                                   run_config=QUIET_CONSOLE))
    if check is not None:
        check()
    return Tick(added, deleted, runs, result.cursor)


def materialize_summary(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """Recompute evaluation_summary over every stored case report."""
    return dg.materialize([*LAYERS, evaluation_summary], instance=instance, resources=defs.resources or {},
                          selection=[evaluation_summary], raise_on_error=False, run_config=QUIET_CONSOLE)
