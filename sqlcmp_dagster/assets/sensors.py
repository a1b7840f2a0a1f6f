"""The case sensor: keeps the partitions in step with the suite folder and re-runs only what changed."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from sqlcmp_dagster.assets.common import CASES_PARTITIONS, LAYER_ASSETS, RANGE_END, RANGE_START, cases_partitions, \
    per_run
from sqlcmp_dagster.assets.jobs import evaluation_job
from sqlcmp_dagster.cases import chunks
from sqlcmp_dagster.cases.chunks import partition_of, partition_versions
from sqlcmp_dagster.assets.suite_scan import SCAN_OBJECT, scan_suite
from sqlcmp_dagster.engine.collector import batch_collector
from sqlcmp_dagster.escaping import terminal_text
from sqlcmp_dagster.resources import CaseSuiteResource, DatabaseResource
from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager



#: Run tag naming the sensor request a run carries out (a hash of its cases and their data versions).
REQUEST_TAG = "sqlcmp/case_request"
#: Failed runs of one request after which its cases are no longer requested until they change.
MAX_ATTEMPTS = 3
#: How long a request may have no run before it counts as lost and its cases are requested again.
LAUNCH_GRACE_SECONDS = 600
#: The longest a sensor's run may take (``SQLCMP_RUN_MAX_SECONDS``): Dagster's run monitoring fails a run past
#: it (a worker lost mid-step leaves its run STARTED otherwise), and the sensor requests its cases again.
RUN_MAX_SECONDS = "SQLCMP_RUN_MAX_SECONDS"
#: The statuses of a run that has ended.
ENDED = frozenset({dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED})

#: Statuses of the runs of each request id asked about.
Outcomes = Callable[[Sequence[str]], dict[str, list[dg.DagsterRunStatus]]]


def changed_case_runs(cases: CaseSuiteResource, database: DatabaseResource, existing: Sequence[str],
                      cursor: str | None, outcomes: Outcomes, warn: Callable[[str], None] | None = None,
                      store: PartitionedParquetIOManager | None = None, now: float | None = None) -> dg.SensorResult:
    """Compare the suite folder with the cursor and say what to add, delete and run (``now``: the time, for
    tests).

    New and edited cases are materialized through every layer; consecutive ones (in partition order) share one
    run, so a first load of 1,000 cases is a single run, or runs of at most N partitions under the layer assets'
    ``BackfillPolicy.multi_run(N)`` (``SQLCMP_CASES_PER_RUN``). An unchanged re-scan requests nothing. With
    ``SQLCMP_CASE_CHUNKS`` the partitions are chunks of cases (:mod:`sqlcmp_dagster.cases.chunks`): everything
    here is said of chunks and their versions (derived from their cases'), and a chunk's run re-evaluates only
    its cases whose version changed (:mod:`sqlcmp_dagster.assets.chunked`).

    The cursor follows what the runs did, not what was asked (:class:`CursorState`): a case counts as done at a
    version once a run of it at that version succeeded (``outcomes`` gives each request's runs). A request whose
    runs all failed (a lost worker's run, failed by Dagster's run monitoring, or a run that crashed) is requested
    again, up to :data:`MAX_ATTEMPTS` failed runs; one with no run after :data:`LAUNCH_GRACE_SECONDS` too. What
    the sensor cannot take from the folder (:attr:`~sqlcmp_dagster.assets.suite_scan.SuiteScan.problems`) and
    the requests it gives up go to ``warn``.

    The suite folder is read through :func:`~sqlcmp_dagster.assets.suite_scan.scan_suite`: with ``store``, the
    scan of the last tick is kept there and only the files that changed are read again.

    With ``store``, the case store is checked against the cursor first (:meth:`PartitionedParquetIOManager.heal`):
    cases deleted from the suite leave every layer's objects, and a case the cursor holds as done whose rows some
    layer lacks (a removed or unreadable object) is materialized again.
    """
    kept = store.read_note(SCAN_OBJECT) if store is not None else None
    scan, scanned = scan_suite(Path(cases.folder), database, kept, timed=store is not None)
    if store is not None and scanned != kept:
        store.write_note(SCAN_OBJECT, scanned)
    if not scan.complete:  # the rest next tick: a partial view would delete the partitions of cases not read yet
        return dg.SensorResult(cursor=cursor, skip_reason=f"reading the suite folder: {len(scan.versions):,} "
                                                          "case(s) read so far, the rest at the next tick")
    if warn is not None:
        for problem in scan.problems:
            warn(terminal_text(problem))
    clock = time.time() if now is None else now
    state = CursorState.read(cursor)
    case_versions = scan.versions
    versions = partition_versions(case_versions)  # by partition: the cases' own, or their chunks'
    retried = state.settle(outcomes(sorted(state.pending)) if state.pending else {}, versions, clock, warn)
    known = set(existing)
    added = [case_id for case_id in versions if case_id not in known]
    deleted = [case_id for case_id in existing if case_id not in versions]
    order = [k for k in existing if k in versions] + added
    runs: list[dg.RunRequest] = []
    for request_id in retried:  # a retry covers its request's cases again, as one range in partition order
        blocks = _consecutive(order, set(state.pending[request_id]["cases"]))
        if len(blocks) == 1:
            runs.append(_run_request(blocks[0], request_id))
        else:  # no longer one range: its cases are requested anew below
            del state.pending[request_id]
    in_flight = {case_id: version for request in state.pending.values() for case_id, version in
                 request["cases"].items()}
    stale = {case_id for case_id, version in versions.items()
             if state.done.get(case_id) != version and in_flight.get(case_id) != version}
    if store is not None:
        done = {key for key, version in versions.items() if state.done.get(key) == version} - set(in_flight)
        if chunks.chunked():  # the cases of done chunks; every case no longer in the suite leaves the store
            lost = store.heal(LAYER_ASSETS, [case for case in case_versions if partition_of(case) in done], (),
                              keep=set(case_versions))
            store.drop_case_marks(deleted)  # a chunk that comes back starts with no marks
        else:  # with keep: a case's rows that came back (a merge of objects healed meanwhile) go again
            lost = store.heal(LAYER_ASSETS, done, deleted, keep=set(case_versions))
        for asset, gone in lost.items():
            if warn is not None:
                warn(terminal_text(f"case store: {asset} holds no readable row of {len(gone)} case(s) "
                                   f"({', '.join(sorted(gone)[:5])}): materializing them again"))
            stale |= {partition_of(case) for case in gone}
    for block in _consecutive(order, stale):
        for part in per_run(block):
            chunk = {case_id: versions[case_id] for case_id in part}
            request_id = state.request(chunk, clock)
            runs.append(_run_request(list(chunk), request_id))
    state.forget(set(versions))
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if added:
        requests.append(cases_partitions.build_add_request(added))
    if deleted:
        requests.append(cases_partitions.build_delete_request(deleted))
    skip = None if runs or requests else "no case changed" + (
        f" ({len(state.pending)} request(s) of cases still running)" if state.pending else "")
    return dg.SensorResult(run_requests=runs, dynamic_partitions_requests=requests, cursor=state.write(),
                           skip_reason=skip)


class CursorState:
    """The case sensor's cursor: ``done``, each case's data version that a run finished, and ``pending``, the
    requests whose runs have not all ended, each with its cases' versions and when it was made (its failed runs
    are counted from the runs that carry its id). A cursor written before requests were followed (case id ->
    version) reads as all done."""

    def __init__(self, done: dict[str, str], pending: dict[str, dict[str, Any]]) -> None:
        self.done = done
        self.pending = pending

    @classmethod
    def read(cls, cursor: str | None) -> CursorState:
        value = json.loads(cursor) if cursor else {}
        if value.get("format") == CURSOR_FORMAT:
            return cls(value["done"], value["pending"])
        return cls(value, {})

    def write(self) -> str:
        return json.dumps({"format": CURSOR_FORMAT, "done": self.done, "pending": self.pending}, sort_keys=True)

    def request(self, cases: dict[str, str], now: float) -> str:
        """Record a request of ``cases`` (id -> version) and return its id, which its runs carry as a tag (and
        its retries too, so that they count its failed runs): a request of its own, never an earlier one's."""
        request_id = hashlib.sha256(json.dumps([cases, now, len(self.pending)]).encode()).hexdigest()[:16]
        self.pending[request_id] = {"cases": cases, "at": now}
        return request_id

    def settle(self, outcomes: dict[str, list[dg.DagsterRunStatus]], versions: dict[str, str], now: float,
               warn: Callable[[str], None] | None) -> list[str]:
        """Move each request whose runs have ended out of ``pending``: its cases into ``done`` when one run
        succeeded; when it failed :data:`MAX_ATTEMPTS` times, its cases count as done at their versions
        (requested again once they change) with a warning. A request whose runs all failed fewer times, or that
        has had no run for :data:`LAUNCH_GRACE_SECONDS`, is retried under its id (returned) while its cases are
        still in the suite at their versions (``versions``), else dropped; one with a run going stays."""
        retried = []
        for request_id, request in list(self.pending.items()):
            statuses = outcomes.get(request_id, [])
            failed = sum(status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED) for status in statuses)
            if dg.DagsterRunStatus.SUCCESS in statuses:
                self.done.update(request["cases"])
            elif any(status not in ENDED for status in statuses) or (
                    not statuses and now - request["at"] < LAUNCH_GRACE_SECONDS):
                continue
            elif failed >= MAX_ATTEMPTS:
                self.done.update(request["cases"])
                if warn is not None:
                    cases = sorted(request["cases"])
                    warn(terminal_text(f"{failed} runs of {len(cases)} case(s) ({', '.join(cases[:5])}"
                                       f"{', ...' if len(cases) > 5 else ''}) failed: they are not requested again "
                                       "until they change (see the failed runs' logs)"))
            elif all(versions.get(case_id) == version for case_id, version in request["cases"].items()):
                request["at"] = now
                retried.append(request_id)
                continue
            del self.pending[request_id]
        return retried

    def forget(self, cases: set[str]) -> None:
        """Drop the cases no longer in the suite from ``done``."""
        self.done = {case_id: version for case_id, version in self.done.items() if case_id in cases}


#: The cursor's layout, written in it: a cursor without it is the older case id -> version map.
CURSOR_FORMAT = 2


def request_outcomes(instance: dg.DagsterInstance, request_ids: Sequence[str]) -> dict[str, list[dg.DagsterRunStatus]]:
    """The statuses of the runs of each request (by :data:`REQUEST_TAG`), in one query."""
    found: dict[str, list[dg.DagsterRunStatus]] = {}
    for record in instance.get_run_records(dg.RunsFilter(tags={REQUEST_TAG: list(request_ids)})):
        found.setdefault(record.dagster_run.tags[REQUEST_TAG], []).append(record.dagster_run.status)
    return found


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


def _run_request(block: list[str], request_id: str) -> dg.RunRequest:
    """A run of ``evaluation_job`` (every layer) over one case or a range of consecutive cases, tagged with its
    request, and with Dagster's run time limit when ``SQLCMP_RUN_MAX_SECONDS`` sets one."""
    tags = {REQUEST_TAG: request_id}
    limit = os.environ.get(RUN_MAX_SECONDS, "").strip()
    if limit:
        if not limit.isdigit() or int(limit) < 1:
            raise ValueError(f"{RUN_MAX_SECONDS} must be a whole number of seconds >= 1, not {limit!r}")
        tags["dagster/max_runtime"] = limit
    if len(block) == 1:
        return dg.RunRequest(partition_key=block[0], run_key=None, tags=tags)
    return dg.RunRequest(tags={**tags, RANGE_START: block[0], RANGE_END: block[-1]})


@dg.sensor(name="case_sensor", minimum_interval_seconds=60, job=evaluation_job,
           default_status=dg.DefaultSensorStatus.STOPPED,
           description="Adds/removes case partitions as suite files change and materializes changed cases.")
def case_sensor(context: dg.SensorEvaluationContext, cases: CaseSuiteResource,
                database: DatabaseResource, case_store: PartitionedParquetIOManager) -> dg.SensorResult:
    instance = context.instance
    existing = instance.get_dynamic_partitions(CASES_PARTITIONS)
    # a tick over 100,000 cases makes millions of objects (the scan, the versions), and each full collection the
    # default thresholds start walks the whole process: 0-5 of them made an edited case's tick 1.4-2.9 s in a
    # fresh process, and 5.0 s in one holding a 1 GB heap (benchmarks/dagster_scale.py)
    with batch_collector():
        return changed_case_runs(cases, database, existing, context.cursor,
                                 lambda ids: request_outcomes(instance, ids), context.log.warning, case_store)
