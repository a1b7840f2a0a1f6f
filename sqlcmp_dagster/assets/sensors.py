"""The case sensor: keeps the partitions in step with the suite folder and re-runs only what changed."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import dagster as dg

from sqlcmp_dagster.assets.common import LAYER_ASSETS, LAYER_BACKFILL_POLICY, RANGE_END, RANGE_START, \
    cases_partitions
from sqlcmp_dagster.assets.jobs import evaluation_job
from sqlcmp_dagster.cases.suite import Suite, case_version
from sqlcmp_dagster.escaping import terminal_text
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource
from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager



def changed_case_runs(cases: CaseSuiteResource, database: DatabaseResource, existing: Sequence[str],
                      cursor: str | None, warn: Callable[[str], None] | None = None,
                      store: PartitionedParquetIOManager | None = None) -> dg.SensorResult:
    """Compare the suite folder with the cursor (case id -> data version) and say what to add, delete and run.

    New and edited cases are materialized through every layer; consecutive ones (in partition order) share one
    run, so a first load of 1,000 cases is a single run, or runs of at most N cases under the layer assets'
    ``BackfillPolicy.multi_run(N)`` (``SQLCMP_CASES_PER_RUN``). An unchanged re-scan requests nothing. What
    the sensor cannot take from the folder (:func:`suite_problems`) goes to ``warn``.

    With ``store``, the case store is checked against the cursor first (:meth:`PartitionedParquetIOManager.heal`):
    cases deleted from the suite leave every layer's objects, and a case the cursor holds as materialized whose
    rows some layer lacks (a removed or unreadable object, a run that failed or died) is materialized again.
    """
    suite = cases.load()
    if warn is not None:
        for problem in suite_problems(suite):
            warn(terminal_text(problem))
    previous: dict[str, str] = json.loads(cursor) if cursor else {}
    versions = {case.case_id: case_version(case, database.fingerprint(database.with_defaults(case)))
                for case in suite.cases if partition_key_problem(case.case_id) is None}
    known = set(existing)
    added = [case_id for case_id in versions if case_id not in known]
    deleted = [case_id for case_id in existing if case_id not in versions]
    stale = {case_id for case_id, version in versions.items() if previous.get(case_id) != version}
    if store is not None:
        lost = store.heal(LAYER_ASSETS, set(versions) - stale, deleted)
        for asset, gone in lost.items():
            if warn is not None:
                warn(terminal_text(f"case store: {asset} holds no readable row of {len(gone)} case(s) "
                                   f"({', '.join(sorted(gone)[:5])}): materializing them again"))
            stale |= gone
    order = [k for k in existing if k in versions] + added
    size = LAYER_BACKFILL_POLICY.max_partitions_per_run or len(order) or 1
    runs = [_run_request(block[start:start + size]) for block in _consecutive(order, stale)
            for start in range(0, len(block), size)]
    requests = []
    if added:
        requests.append(cases_partitions.build_add_request(added))
    if deleted:
        requests.append(cases_partitions.build_delete_request(deleted))
    skip = None if runs or requests else "no case changed"
    return dg.SensorResult(run_requests=runs, dynamic_partitions_requests=requests,
                           cursor=json.dumps(versions, sort_keys=True), skip_reason=skip)


def suite_problems(suite: Suite) -> list[str]:
    """What the case sensor cannot take from ``suite``, a line each: the lines that are not cases (each such
    case's partition is deleted, as a case taken out of the suite is) and the case ids Dagster cannot hold as a
    partition key (those cases are not added). The sensor logs them: before, a case whose line broke lost its
    partition without a word, and one id with a NUL made the PostgreSQL instance refuse every new partition of
    the tick. They are written as a terminal may show them (:func:`~sqlcmp_dagster.escaping.terminal_text`):
    Dagster's console log prints them."""
    return [f"suite line skipped: {error}" for error in suite.errors] + [
        f"case {case.case_id!r} is not evaluated in Dagster: its id {problem}"
        for case in suite.cases if (problem := partition_key_problem(case.case_id)) is not None]


def partition_key_problem(case_id: str) -> str | None:
    """Why ``case_id`` cannot be a partition key of Dagster's, or None: it holds one of the substrings Dagster
    refuses in partition keys (``...``, a line break, a tab, NUL, other control characters), which it does not
    check for dynamic partitions, or it is longer than :data:`MAX_PARTITION_KEY_CHARS`.

    >>> partition_key_problem("spider-0052") is None, partition_key_problem("a...b")
    (True, "holds '...', which Dagster does not allow in a partition key")
    """
    for part in INVALID_PARTITION_SUBSTRINGS:
        if part in case_id:
            return f"holds {part!r}, which Dagster does not allow in a partition key"
    if len(case_id) > MAX_PARTITION_KEY_CHARS:
        return f"is {len(case_id):,} characters long, more than a partition key holds here " \
               f"({MAX_PARTITION_KEY_CHARS:,})"
    return None


#: Dagster's substrings that no partition key may hold (its own list, which it checks for static partitions).
INVALID_PARTITION_SUBSTRINGS = ("...", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")
#: The longest case id taken as a partition key: run tags and the UI's address bar carry it.
MAX_PARTITION_KEY_CHARS = 1024


def _consecutive(order: list[str], wanted: set[str]) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] = []
    for key in order:
        if key in wanted:
            current.append(key)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def _run_request(block: list[str]) -> dg.RunRequest:
    """A run of ``evaluation_job`` (every layer) over one case or a range of consecutive cases."""
    if len(block) == 1:
        return dg.RunRequest(partition_key=block[0], run_key=None)
    return dg.RunRequest(tags={RANGE_START: block[0], RANGE_END: block[-1]})


@dg.sensor(name="case_sensor", minimum_interval_seconds=60, job=evaluation_job,
           default_status=dg.DefaultSensorStatus.STOPPED,
           description="Adds/removes case partitions as suite files change and materializes changed cases.")
def case_sensor(context: dg.SensorEvaluationContext, cases: CaseSuiteResource,
                database: DatabaseResource, case_store: PartitionedParquetIOManager) -> dg.SensorResult:
    existing = context.instance.get_dynamic_partitions(cases_partitions.name)
    return changed_case_runs(cases, database, existing, context.cursor, context.log.warning, case_store)
