"""BIRD's published metrics of one case: execution accuracy (EX), Soft-F1 and the reward behind R-VES.

BIRD (Li et al. 2023; bird-bench/mini_dev ``evaluation_ex.py``, ``evaluation_f1.py``, ``evaluation_ves.py``)
scores a prediction by its result rows, with rules of its own that differ from sqlcmp's verdict on purpose:

* EX: the two results are equal as *sets* of rows (duplicates and order ignored, columns compared in place, cells
  by Python equality, so ``1 == 1.0``);
* Soft-F1: rows are made unique (first occurrence kept) and paired *by position*; in each pair a cell of one row
  counts as matched when it occurs anywhere in the other row; matched, predicted-only and gold-only cells, each
  divided by the gold row's width, give precision, recall and F1; two empty results score 1;
* R-VES: a correct prediction earns a reward from the time ratio (gold time over predicted time) by buckets: 1.25
  from 2, 1 from 1, 0.75 from 0.5, 0.5 from 0.25, else 0.25; a wrong one earns 0. R-VES is the mean of the
  rewards' square roots (times 100 as BIRD prints it). BIRD times each query 100 times, drops ratios outside three standard
  deviations of their mean and averages the rest (:func:`time_ratio`).

A prediction that fails (or a gold query that fails) scores 0 on all three in BIRD.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

Row = tuple[Any, ...]
#: BIRD's difficulty labels, in rising order.
BIRD_DIFFICULTIES = ("simple", "moderate", "challenging")
#: BIRD's repeat count: each query of a correct prediction is timed this many times.
BIRD_TIMING_REPEATS = 100
#: The reward buckets, from the highest time ratio down: (smallest ratio of the bucket, reward).
REWARD_BUCKETS = ((2.0, 1.25), (1.0, 1.0), (0.5, 0.75), (0.25, 0.5))
LOWEST_REWARD = 0.25


def execution_match(gold: Sequence[Row], predicted: Sequence[Row]) -> bool:
    """BIRD's EX of one case: the results are equal as sets of rows.

    >>> execution_match([(1, "a"), (1, "a")], [(1.0, "a")]), execution_match([(1, "a")], [("a", 1)])
    (True, False)
    """
    # Equal lists are equal sets (equal cells hash alike): the check at C speed first, for the large results
    # where building two sets took most of a case's own time (benchmarks/large_database.py).
    return list(predicted) == list(gold) or set(predicted) == set(gold)


def soft_f1(gold: Sequence[Row], predicted: Sequence[Row]) -> float:
    """BIRD's Soft-F1 of one case.

    >>> soft_f1([(1, "a"), (2, "b")], [(1, "a"), (2, "x")])
    0.75
    >>> soft_f1([], []), soft_f1([(1,)], [])
    (1.0, 0.0)
    """
    if list(predicted) == list(gold):
        # Two empty results score 1, and so do equal ones: every cell of each pair matched (the loop below gives
        # exactly 1.0), found at C speed instead of three sums per row of a million-row result.
        return 1.0
    predicted, gold = list(dict.fromkeys(predicted)), list(dict.fromkeys(gold))
    matched = predicted_only = gold_only = 0.0
    for index, gold_row in enumerate(gold):
        if index >= len(predicted):
            gold_only += 1
            continue
        row, width = predicted[index], len(gold_row)
        if row == gold_row:  # every cell matched: the sums below add width / width = 1.0, 0.0 and 0.0
            matched += 1.0
            continue
        # The counts of the rules' three sums (cells of the row in the gold row, not in it, gold cells not in the
        # row), taken with C-level membership tests: the same integers, so the same floats.
        found = sum(map(gold_row.__contains__, row))
        matched += found / width
        predicted_only += (len(row) - found) / width
        gold_only += (width - sum(map(row.__contains__, gold_row))) / width
    predicted_only += max(len(predicted) - len(gold), 0)
    precision = matched / (matched + predicted_only) if matched + predicted_only > 0 else 0.0
    recall = matched / (matched + gold_only) if matched + gold_only > 0 else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def time_ratio(ratios: Sequence[float]) -> float:
    """BIRD's time ratio of a correct prediction from its repeated timings (each gold time over predicted time):
    the mean of those strictly within three (population) standard deviations of their mean; 0 when none is
    (all equal: BIRD's script then divides by zero and scores the case 0).

    >>> time_ratio([1.0, 1.0, 1.0, 2.0])
    1.25
    """
    mean, spread = statistics.fmean(ratios), statistics.pstdev(ratios)
    kept = [r for r in ratios if mean - 3 * spread < r < mean + 3 * spread]
    return statistics.fmean(kept) if kept else 0.0


def ves_reward(ratio: float) -> float:
    """BIRD's reward of a correct prediction with time ratio ``ratio`` (0 for no ratio: a wrong prediction).

    >>> [ves_reward(r) for r in (0, 0.1, 0.25, 0.7, 1.0, 3.0)]
    [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    """
    if ratio == 0:
        return 0.0
    return next((reward for bound, reward in REWARD_BUCKETS if ratio >= bound), LOWEST_REWARD)


def r_ves(rewards: Sequence[float]) -> float | None:
    """R-VES of the cases with ``rewards`` as a fraction (1 when every prediction is correct and as fast as the gold
    query; BIRD prints it times 100), None for no case.

    >>> round(r_ves([1.0, 0.0, 1.25, 0.25]), 4)
    0.6545
    """
    return sum(r_ves_term(reward) for reward in rewards) / len(rewards) if rewards else None


def r_ves_term(reward: float) -> float:
    """What one case adds to R-VES's mean: its reward's square root."""
    return math.sqrt(reward)
