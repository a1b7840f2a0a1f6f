"""Memory at scale: ``sqlcmp evaluate --workers 2`` over Spider dev repeated to N cases (distinct ids), the peak
resident memory of every process of the run (the command, its worker server and each worker) and the throughput,
for each N beside the smallest, so a peak that grows with the number of cases shows in one run.

    python benchmarks/evaluate_memory.py [--spider DIR] [--sizes 1034,10340] [--workers 2]

The issue's figure is 100,000 cases (``--sizes 1034,103400``: about 40 minutes on two free cores). Every run is
a child process; its process tree is read from Linux /proc every 0.2 s and each process's high-water mark
(``VmHWM``, which the kernel keeps between readings) is its peak. The cache folder is a fresh one per size (the
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


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from each process's parent in /proc/<pid>/stat)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def high_water_mib(pid: int) -> tuple[str, float] | None:
    """A process's command line (shortened) and peak resident memory so far in MiB, None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return command[:60], int(line.split()[1]) / 1024
    return None


def run(command: list[str]) -> tuple[float, dict[int, tuple[str, float]]]:
    """Wall time of ``command`` and the peak of each process of its tree."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peaks: dict[int, tuple[str, float]] = {}
    while child.poll() is None:
        for pid in descendants(child.pid):
            seen = high_water_mib(pid)
            if seen is not None:
                peaks[pid] = seen
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    if child.returncode not in (0, 1):
        sys.exit(f"evaluate failed:\n{child.stderr.read().decode()[-3000:] if child.stderr else ''}")
    return seconds, peaks


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
        rates = {}
        for size in sizes:
            cases = repeated(suite, size, work / f"suite-{size}.jsonl")
            seconds, peaks = run([sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate", str(cases), "--db-dir",
                                  str(args.spider / "database"), "--out", str(work / f"reports-{size}.jsonl"),
                                  "--quiet", "--workers", str(args.workers), "--cache-dir", str(work / f"cache-{size}")])
            rates[size] = size / seconds
            print(f"{size:,} cases, --workers {args.workers}: {seconds:.1f} s, {rates[size]:.1f} cases/s "
                  f"({rates[size] / rates[sizes[0]]:.2f}x the {sizes[0]:,}-case rate; target within 10%)")
            for pid, (command, mib) in sorted(peaks.items()):
                print(f"    pid {pid:>7}  peak {mib:7.1f} MiB  {command}")
            print(f"    largest peak {max(mib for _, mib in peaks.values()):.1f} MiB (target <= 500 MiB, flat in N)")


if __name__ == "__main__":
    main()
