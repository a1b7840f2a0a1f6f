"""Helpers shared by the benchmark scripts: peak memory of this process, and the overhead figures of reports."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path

from sqlcmp_dagster.engine.models import Report


def peak_mib() -> float:
    """Peak resident set size of this process so far (Linux ``VmHWM``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def overhead_figures(reports: Iterable[Report]) -> dict[str, float]:
    """Median and p95 of the engine overhead per case (``total_ms`` minus query and probe execution), and the
    median of query execution per case, in milliseconds."""
    overhead, executing = [], []
    for report in reports:
        timings = report.run_metadata["timings"]
        overhead.append(timings["engine_overhead_ms"])
        executing.append(timings.get("execution_ms", 0.0) + timings.get("probe_execution_ms", 0.0))
    return {"overhead_median_ms": statistics.median(overhead),
            "overhead_p95_ms": statistics.quantiles(overhead, n=20)[-1],
            "execution_median_ms": statistics.median(executing)}
