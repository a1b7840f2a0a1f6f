"""Running the pipeline in-process on a local Dagster instance: what ``sqlcmp demo`` and the tests do.

One tick of the case sensor is evaluated and carried out as the daemon would: partitions are added or deleted
and each run request is executed with ``materialize`` (a range request as one run over that range). Each run is
tagged with the process that runs it (:data:`PID_TAG`), so that a run whose process was killed is marked failed
by the next tick (:func:`fail_dead_runs`) instead of staying STARTED. Runs are created and executed with
Dagster's event batches on (:func:`~sqlcmp_dagster.event_log.event_batches`), whatever the instance's storage.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import dagster as dg

from sqlcmp_dagster.assets import LAYERS, evaluation_summary
from sqlcmp_dagster.assets.sensors import case_sensor
from sqlcmp_dagster.engine.atomic import running
from sqlcmp_dagster.event_log import event_batches

#: In-process runs print only warnings and errors to the console; every event still goes to the instance's event
#: log, where the Dagster UI shows it (the DEBUG stream would bury a demo's few lines of summary).
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
#: The tag naming the process that runs an in-process run.
PID_TAG = "sqlcmp/pid"


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
    fail_dead_runs(instance)
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources or {}) as context:
        result = case_sensor(context)
    # case_sensor returns a SensorResult; called through its definition it is typed as any sensor's outcome
    assert isinstance(result, dg.SensorResult), f"case_sensor returned {type(result).__name__}"
    added: list[str] = []
    deleted: list[str] = []
    for change in result.dynamic_partitions_requests or []:
        if isinstance(change, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(change.partitions_def_name, list(change.partition_keys))
            added += change.partition_keys
        else:
            for key in change.partition_keys:
                instance.delete_dynamic_partition(change.partitions_def_name, key)
            deleted += change.partition_keys
    resources = defs.resources or {}
    runs = []
    for request in result.run_requests or []:
        if check is not None:
            check()
        with event_batches():
            runs.append(dg.materialize(LAYERS, instance=instance, resources=resources, tags=_tagged(request.tags),
                                       partition_key=request.partition_key, raise_on_error=False,
                                       run_config=QUIET_CONSOLE))
    if check is not None:
        check()
    return Tick(added, deleted, runs, result.cursor)


def materialize_summary(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """Recompute evaluation_summary over every stored case report."""
    with event_batches():
        return dg.materialize([*LAYERS, evaluation_summary], instance=instance, resources=defs.resources or {},
                              selection=[evaluation_summary], raise_on_error=False, run_config=QUIET_CONSOLE,
                              tags=_tagged({}))


def _tagged(tags: Mapping[str, str]) -> dict[str, str]:
    return {**tags, PID_TAG: str(os.getpid())}


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed every unfinished in-process run whose process (:data:`PID_TAG`) no longer exists, and return
    their ids. Dagster's run monitoring does this for runs a run launcher started and a daemon watches; an
    in-process run killed with its process has neither, and stayed STARTED for good."""
    unfinished = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    failed = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=unfinished)):
        pid = run.tags.get(PID_TAG)
        if pid is not None and pid.isdigit() and not running(int(pid)):
            instance.report_run_failed(run, f"the process that ran it (pid {pid}) ended before the run did")
            failed.append(run.run_id)
    return failed
