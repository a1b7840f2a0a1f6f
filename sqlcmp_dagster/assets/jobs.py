"""Jobs and the nightly schedule: on-demand evaluation of chosen cases, recurring evaluation of all of them."""

from __future__ import annotations

import dagster as dg

from sqlcmp_dagster.assets.chunked import RECOMPUTE_TAG
from sqlcmp_dagster.assets.common import CASES_PARTITIONS, LAYER_ASSETS, RANGE_END, RANGE_START, per_run

#: On-demand: pick partitions (cases) in the launchpad, or a range of them.
evaluation_job = dg.define_asset_job("evaluation_job", selection=list(LAYER_ASSETS),
                                     description="Evaluate the selected cases through every layer.")
summary_job = dg.define_asset_job("summary_job", selection=["evaluation_summary"],
                                  description="Recompute the summary over all stored case reports.")


@dg.schedule(job=evaluation_job, cron_schedule="0 2 * * *", name="nightly_evaluation",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Every night, all cases through every layer: one run, or runs of SQLCMP_CASES_PER_RUN "
                         "partitions each.")
def nightly_evaluation(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
    """Every partition through every layer, split as the layer assets' backfill policy splits a backfill
    (``SQLCMP_CASES_PER_RUN``): one run over a range of 100,000 cases (or 200 chunks of them) would hold them all
    in one process, where runs of the policy's size spread over the workers as the case sensor's runs do."""
    keys = context.instance.get_dynamic_partitions(CASES_PARTITIONS)
    if not keys:
        return dg.SkipReason("no cases yet: the case sensor adds them")
    # every case evaluated again, as the schedule says: with chunks, a run reuses its unchanged cases otherwise;
    # a run key per range, unique within the tick, so that a retried tick launches each range once
    return [dg.RunRequest(run_key=f"nightly-{index}", tags={RANGE_START: block[0], RANGE_END: block[-1],
                                                             RECOMPUTE_TAG: "nightly"})
            for index, block in enumerate(per_run(keys))]
