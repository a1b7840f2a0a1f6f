"""Jobs and the nightly schedule: on-demand evaluation of chosen cases, recurring evaluation of all of them."""

from __future__ import annotations

import dagster as dg

from sqlcmp_dagster.assets.chunked import RECOMPUTE_TAG
from sqlcmp_dagster.assets.common import CASES_PARTITIONS, LAYER_ASSETS, RANGE_END, RANGE_START

#: On-demand: pick partitions (cases) in the launchpad, or a range of them.
evaluation_job = dg.define_asset_job("evaluation_job", selection=list(LAYER_ASSETS),
                                     description="Evaluate the selected cases through every layer.")
summary_job = dg.define_asset_job("summary_job", selection=["evaluation_summary"],
                                  description="Recompute the summary over all stored case reports.")


@dg.schedule(job=evaluation_job, cron_schedule="0 2 * * *", name="nightly_evaluation",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Every night, all cases through every layer in one run.")
def nightly_evaluation(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    keys = context.instance.get_dynamic_partitions(CASES_PARTITIONS)
    if not keys:
        return dg.SkipReason("no cases yet: the case sensor adds them")
    # every case evaluated again, as the schedule says: with chunks, a run reuses its unchanged cases otherwise
    return dg.RunRequest(run_key=None, tags={RANGE_START: keys[0], RANGE_END: keys[-1], RECOMPUTE_TAG: "nightly"})
