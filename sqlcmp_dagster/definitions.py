"""The Dagster code location: ``dagster dev`` in the project root loads ``defs`` from here (workspace.yaml).

Defaults evaluate the bundled sample (its suite folder and SQLite database); environment variables point it
elsewhere: ``SQLCMP_CASES_DIR`` (suite folder), ``SQLCMP_DB_DIR`` (SQLite folder), ``SQLCMP_DB_URL``
(a SQLAlchemy URL for cases that name no database), ``SQLCMP_STORAGE_DIR`` (the Parquet store: a
local folder or an fsspec URL such as ``s3://bucket/prefix``). Each of these that is set becomes the resource's
``dg.EnvVar`` (:func:`from_environment`): Dagster reads it when a run or sensor builds the resource, and the UI
shows the variable's name rather than a value copied when the definitions loaded.

``SQLCMP_EXECUTOR`` and ``SQLCMP_CASES_PER_RUN`` choose how runs scale out (docs/dagster.md, "Scale-out"); the
same jobs run under every executor. ``SQLCMP_CASE_CHUNKS=N`` makes the partitions N chunks of cases instead of one
per case (docs/dagster.md, "100,000 cases"; :mod:`sqlcmp_dagster.cases.chunks`). They shape the definitions
themselves (the executor, the layers' backfill policy, what a partition key is), which Dagster's config cannot, so
they are read from the environment as the definitions load. Loading
the definitions sets nothing: Dagster's event batches are turned on by this project's event log storages when
an instance builds one (:mod:`sqlcmp_dagster.event_log`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import dagster as dg

from sqlcmp_dagster.assets import LAYERS, evaluation_summary
from sqlcmp_dagster.assets.common import CASE_STORE
from sqlcmp_dagster.assets.jobs import evaluation_job, nightly_evaluation, summary_job
from sqlcmp_dagster.assets.sensors import case_sensor
from sqlcmp_dagster.cases.sample import sample_db_dir, sample_suite_path
from sqlcmp_dagster.resources import (
    CaseSuiteResource,
    DatabaseResource,
    LLMJudgeResource,
    PartitionedParquetIOManager,
)
from sqlcmp_dagster.resources.storage import load_filesystem

Default = TypeVar("Default", str, None)


def from_environment(variable: str, default: Default) -> str | Default:
    """``dg.EnvVar(variable)`` when the variable is set (and not empty), else ``default``. Dagster resolves an
    ``EnvVar`` when it builds the resource, in the process that uses it, and fails a run whose variable is unset
    there: it has no default of its own, so an unset variable means ``default``, fixed as the definitions load."""
    return dg.EnvVar(variable) if os.environ.get(variable) else default


def default_storage_dir() -> str:
    """The Parquet store when ``SQLCMP_STORAGE_DIR`` is unset: ``$DAGSTER_HOME/sqlcmp_storage`` (else in the
    working folder)."""
    return str(Path(os.environ.get("DAGSTER_HOME") or ".", "sqlcmp_storage"))


#: evaluation_summary follows the case reports without a switch to find: its eager automation condition is
#: evaluated by this sensor, which runs from the start (Dagster's default automation sensor would be off).
#: A failed summary run is retried this many times by Dagster's run retries (the instance enables them:
#: ``sqlcmp_dagster.event_log.DAEMON_SETTINGS``); eager automation alone would wait for the next case change.
SUMMARY_RETRIES = 2
summary_sensor = dg.AutomationConditionSensorDefinition(
    "evaluation_summary_follows_cases", target=[evaluation_summary],
    run_tags={"dagster/max_retries": str(SUMMARY_RETRIES)},
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Recomputes evaluation_summary after case reports change (its eager automation condition).")


def executor_from_environment() -> dg.ExecutorDefinition | None:
    """The executor of launched runs, chosen by ``SQLCMP_EXECUTOR``:

    - unset or ``multiprocess``: Dagster's default, each step of a launched run in its own process
      (``materialize()`` and ``sqlcmp demo`` stay in-process);
    - ``in_process``: every step in the run's own process, one after another: for runs that a run launcher
      starts in a process that has the code loaded already, as dagster-celery's ``CeleryRunLauncher`` does on a
      worker (docs/dagster.md's deployment: a step's own process or Celery task would cost more than most steps);
    - ``celery``: ``dagster_celery.celery_executor``, each step a task on the broker ``SQLCMP_CELERY_BROKER``
      (e.g. ``redis://host:6379/0``) with results on ``SQLCMP_CELERY_BACKEND`` (default: the broker's URL),
      executed by ``dagster-celery`` workers that import this module with the same environment.

    The broker's URL is read from the environment by Dagster (not fixed here), so the workers' ``-y`` file can
    name the same variables.
    """
    choice = os.environ.get("SQLCMP_EXECUTOR", "multiprocess").strip()
    if choice == "multiprocess":
        return None
    if choice == "in_process":
        return dg.in_process_executor
    if choice != "celery":
        raise ValueError(f"SQLCMP_EXECUTOR must be 'multiprocess', 'in_process' or 'celery', not {choice!r}")
    from dagster_celery import (
        celery_executor,  # the 'celery' extra: pip install 'sqlcmp-dagster[celery]'
    )

    backend = "SQLCMP_CELERY_BACKEND" if os.environ.get("SQLCMP_CELERY_BACKEND") else "SQLCMP_CELERY_BROKER"
    return celery_executor.configured({"broker": {"env": "SQLCMP_CELERY_BROKER"}, "backend": {"env": backend}},
                                      name="celery")


def build_definitions(*, cases_dir: str | None = None, db_dir: str | None = None, db_url: str | None = None,
                      storage_dir: str | None = None) -> dg.Definitions:
    """The definitions with explicit locations (tests and the demo) or the environment's (see the module's
    docstring). The store's filesystem is imported here (:func:`load_filesystem`)."""
    store = storage_dir or from_environment("SQLCMP_STORAGE_DIR", default_storage_dir())
    load_filesystem((store.get_value() or "") if isinstance(store, dg.EnvVar) else store)
    return dg.Definitions(
        assets=[*LAYERS, evaluation_summary],
        jobs=[evaluation_job, summary_job],
        schedules=[nightly_evaluation],
        sensors=[case_sensor, summary_sensor],
        executor=executor_from_environment(),
        resources={
            "cases": CaseSuiteResource(
                folder=cases_dir or from_environment("SQLCMP_CASES_DIR", str(sample_suite_path().parent))),
            "database": DatabaseResource(db_dir=db_dir or from_environment("SQLCMP_DB_DIR", str(sample_db_dir())),
                                         url=db_url or from_environment("SQLCMP_DB_URL", None)),
            "judge": LLMJudgeResource(),
            CASE_STORE: PartitionedParquetIOManager(base_path=store),
        },
    )


defs = build_definitions()
