"""Layer 3's two paths on results of growing size: where plain Python stops beating polars.

``compare_results`` compares results of at most ``comparison.budgets.SMALL_RESULT_CELLS`` cells in plain Python and the
rest with polars. This script times both paths, in the same run, on pairs of results of ``rows`` x 5 columns
(an int, a float, two texts, a float with one value off by more than the tolerance, rows shuffled) and prints
the ratio rows/frames per size: the threshold belongs where the ratio crosses 1.

    python benchmarks/small_results.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import random
import time

from sqlcmp_dagster.engine.relation import Relation, relation_from_rows
from sqlcmp_dagster.engine.models import EvalConfig
from sqlcmp_dagster.engine.comparison import ComparisonPath, compare_results
from sqlcmp_dagster.engine.comparison.budgets import SMALL_RESULT_CELLS

SIZES = (1, 5, 20, 50, 100, 200, 400, 1000, 2000)
NAMES = ["id", "qty", "price", "name", "ratio"]


def pair(rows: int, *, equal: bool) -> tuple[Relation, Relation]:
    expected = [(i, (i * 7919) % 1000, i / 7.0, f"n{i:06d}", (i % 97) / 3.0) for i in range(rows)]
    actual = list(expected)
    random.Random(rows).shuffle(actual)
    if not equal:
        i, row = rows // 2, actual[rows // 2]
        actual[i] = (*row[:2], row[2] + 1.0, *row[3:])
    return relation_from_rows(NAMES, expected), relation_from_rows(NAMES, actual)


def best_ms(expected: Relation, actual: Relation, path: ComparisonPath, repeat: int) -> float:
    """The fastest of ``repeat`` comparisons (the least disturbed by other load on the machine)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        compare_results(expected, actual, mode="order-insensitive", config=EvalConfig(), path=path)
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"threshold in force: {SMALL_RESULT_CELLS} cells (both sides' rows x columns)")
    print(f"{'rows':>6} {'cells':>7} {'result':>9} {'frames ms':>10} {'rows ms':>8} {'rows/frames':>12}")
    for rows in SIZES:
        for equal in (True, False):
            expected, actual = pair(rows, equal=equal)
            frames = best_ms(expected, actual, "frames", args.repeat)
            plain = best_ms(expected, actual, "rows", args.repeat)
            print(f"{rows:>6} {2 * rows * 5:>7} {'equal' if equal else 'one off':>9} {frames:>10.2f} "
                  f"{plain:>8.2f} {plain / frames:>12.2f}")


if __name__ == "__main__":
    main()
