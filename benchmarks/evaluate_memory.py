"""Memory at scale: ``sqlcmp evaluate --workers 2`` over Spider dev repeated to N cases (distinct ids), the peak
resident memory of every process of the run (the command, its worker server and each worker) and the throughput,
for each N beside the smallest, so a peak that grows with the number of cases shows in one run.

    python benchmarks/evaluate_memory.py [--spider DIR] [--sizes 1034,10340] [--workers 2]

The issue's figure is 100,000 cases (``--sizes 1034,10340,100000``: about 20 minutes on two free cores). Every
run is a child process; its process tree is read from Linux /proc every 0.2 s and each process's high-water mark
(``VmHWM``, which the kernel keeps between readings) is its peak, printed per process and per role (the command,
the worker server, the largest worker) with its ratio to the first size's. Each size's suite and reports are
deleted after its run (100,000 reports are about 600 MB). The cache folder is a fresh one per size (the
command's default, on), so the repeated gold side is cached as in a user's run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spider_vs_official import DEFAULT_SPIDER, import_suite


def repeated(suite: Path, size: int, out: Path) -> Path:
    """``suite``'s cases repeated to ``size`` cases, each repeat's ids suffixed with its number."""
    cases = [json.loads(line) for line in suite.read_text(encoding="utf-8").splitlines()]
    with out.open("w", encoding="utf-8") as file:
        for index in range(size):
            case = cases[index % len(cases)]
            file.write(json.dumps({**case, "case_id": f"{case['case_id']}-{index // len(cases)}"}) + "\n")
    return out


def descendants(root: int) -> dict[int, int]:
    """``root`` and every process below it, each with its parent (from each process's /proc/<pid>/stat)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = {root: parents.get(root, 0)}, [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found.update((pid, parents[pid]) for pid in children)
        frontier = children
    return found


def high_water_mib(pid: int) -> tuple[str, float] | None:
    """A process's command line and peak resident memory so far in MiB, None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return command, int(line.split()[1]) / 1024
    return None


def run(command: list[str]) -> tuple[float, dict[int, tuple[str, float]]]:
    """Wall time of ``command`` and the peak of each process of its tree, named by its role: ``command`` (the
    ``sqlcmp evaluate`` process), ``server`` (the forkserver), ``worker`` (its children), ``helper`` (the
    resource trackers)."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peaks: dict[int, tuple[str, float]] = {}
    server: set[int] = set()
    while child.poll() is None:
        for pid, parent in descendants(child.pid).items():
            seen = high_water_mib(pid)
            if seen is None:
                continue
            if pid == child.pid:
                role = "command"
            elif "resource_tracker" in seen[0]:
                role = "helper"
            elif "forkserver" in seen[0] and parent == child.pid:
                role = "server"
                server.add(pid)
            else:
                role = "worker" if parent in server else "helper"
            peaks[pid] = role, seen[1]
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    if child.returncode not in (0, 1):
        sys.exit(f"evaluate failed:\n{child.stderr.read().decode()[-3000:] if child.stderr else ''}")
    return seconds, peaks


def by_role(peaks: dict[int, tuple[str, float]]) -> dict[str, float]:
    """The largest peak of each role."""
    largest: dict[str, float] = {}
    for role, mib in peaks.values():
        largest[role] = max(largest.get(role, 0.0), mib)
    return largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--sizes", default="1034,10340", help="numbers of cases, comma-separated (smallest first)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        suite = import_suite(args.spider, work / "spider.jsonl")
        rates, roles = {}, {}
        for size in sizes:
            cases = repeated(suite, size, work / f"suite-{size}.jsonl")
            seconds, peaks = run([sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate", str(cases), "--db-dir",
                                  str(args.spider / "database"), "--out", str(work / f"reports-{size}.jsonl"),
                                  "--quiet", "--workers", str(args.workers), "--cache-dir", str(work / f"cache-{size}")])
            for name in ("reports", "suite"):
                (work / f"{name}-{size}.jsonl").unlink()
            rates[size], roles[size] = size / seconds, by_role(peaks)
            print(f"{size:,} cases, --workers {args.workers}: {seconds:.1f} s, {rates[size]:.1f} cases/s "
                  f"({rates[size] / rates[sizes[0]]:.2f}x the {sizes[0]:,}-case rate; target within 10%)")
            for pid, (role, mib) in sorted(peaks.items()):
                print(f"    pid {pid:>7}  peak {mib:7.1f} MiB  {role}")
            print(f"    largest peak {max(mib for _, mib in peaks.values()):.1f} MiB (target <= 500 MiB, flat in N)")
        print("peak per role (largest of its processes), MiB, and its ratio to the first size's:")
        for role in ("command", "server", "worker"):
            print(f"    {role:8}" + "".join(f"  {size:>7,}: {roles[size].get(role, 0.0):6.1f} "
                                        f"({roles[size].get(role, 0.0) / roles[sizes[0]].get(role, 1.0):.2f}x)"
                                        for size in sizes))

if __name__ == "__main__":
    main()
