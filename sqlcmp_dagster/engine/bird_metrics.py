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
import operator
import statistics
from collections.abc import Sequence
from functools import reduce
from typing import Any

import polars as pl

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


#: Column types whose cells polars compares, deduplicates and hashes as Python compares the values ``to_list``
#: gives them, once :func:`_comparable` has made every integer an Int64 and every float a Float64 without NaN.
_FRAME_TYPES = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.Float32,
                pl.Float64, pl.String, pl.Boolean, pl.Binary, pl.Date, pl.Null)
#: The numeric types left after :func:`_comparable`: equal across types in Python (``1 == 1.0 == True``).
_NUMBERS = (pl.Int64, pl.Float64, pl.Boolean)
#: The most pairs of a gold and a predicted column :func:`frame_scores` compares as frames (32 x 32).
FRAME_COLUMN_PAIRS = 1_024
#: Every integer up to this magnitude is a float exactly, so it equals a float in Python exactly when it does
#: as a float.
_EXACT_INTEGERS = 2**53


def frame_scores(gold: pl.DataFrame, predicted: pl.DataFrame) -> tuple[bool, float] | None:
    """:func:`execution_match` and :func:`soft_f1` of the rows two frames hold, computed column by column: the
    same values (Soft-F1's float sums are made in the rules' order), in a fraction of the time on large results.
    None where polars would not tell cells equal exactly as Python does, and the rules are then run on the rows:
    a type outside :data:`_FRAME_TYPES`, a NaN (never equal to another in Python, equal to every NaN in polars),
    an integer past 2**53 where numbers of two types meet, no columns, more than :data:`FRAME_COLUMN_PAIRS` pairs
    of a gold and a predicted column (Soft-F1's frame form is an expression per pair: a model's 2,000 columns
    against 19 made 38,000 of them, 3.3 s and 1.2 GB for 48 rows, a review's finding, where the rules' membership
    tests on tuples take a tenth of a second).

    >>> frame_scores(pl.DataFrame({"a": [1, 2], "b": ["a", "b"]}), pl.DataFrame({"a": [1, 2], "b": ["a", "x"]}))
    (False, 0.75)
    >>> frame_scores(pl.DataFrame({"a": [1, 2]}), pl.DataFrame({"a": [2.0, 1.0]}))
    (True, 0.0)
    """
    if not gold.width or not predicted.width or gold.width * predicted.width > FRAME_COLUMN_PAIRS:
        return None
    kept, given = _comparable(gold), _comparable(predicted)
    if kept is not None and given is not None \
            and len({dtype for frame in (kept, given) for dtype in frame.dtypes if isinstance(dtype, _NUMBERS)}) > 1:
        kept, given = _as_floats(kept), _as_floats(given)
    if kept is None or given is None:
        return None
    if kept.dtypes == given.dtypes and kept.equals(given):  # equals alone tells 1 from 1.0 no more than Python
        return True, 1.0  # the same rows in the same order (the rules' first answer), NaN aside
    # each result's rows once, in the order they first come: Soft-F1's rows, and EX's sets
    kept, given = kept.unique(maintain_order=True, keep="first"), given.unique(maintain_order=True, keep="first")
    same_set = _same_set(kept, given)
    if kept.height == 0 and given.height == 0:
        return same_set, 1.0
    return same_set, _frame_soft_f1(kept, given)


def _same_set(gold: pl.DataFrame, predicted: pl.DataFrame) -> bool:
    """:func:`execution_match` of two frames :func:`frame_scores` made comparable and of unique rows. Where two
    columns in one place hold different types, a row with a value there equals no row of the other result (a value
    of one type never equals one of another, nor NULL), so the sets differ; columns that hold only NULL there are
    left out (the rows stay unique without them)."""
    if gold.width != predicted.width:
        return gold.height == 0 and predicted.height == 0  # rows of other lengths are never equal
    differing = [name for name, one, other in zip(gold.columns, gold.dtypes, predicted.dtypes) if one != other]
    if differing:
        if any(frame.select(pl.col(differing).is_not_null().any()).sum_horizontal().item()
               for frame in (gold, predicted)):
            return False
        if len(differing) == gold.width:  # every cell of both is NULL
            return (gold.height == 0) == (predicted.height == 0)
        gold, predicted = gold.drop(differing), predicted.drop(differing)
    return gold.height == predicted.height and pl.concat([gold, predicted]).n_unique() == gold.height


def _comparable(frame: pl.DataFrame) -> pl.DataFrame | None:
    """``frame`` with its columns named by position (``c0``, ``c1``, ... as a relation's frame has them, so that
    two results' frames line up), Int64 for every integer type and Float64 for every float type, a zero of either
    sign as ``0.0`` (equal in Python, and so they hash alike in polars), or None: a type outside
    :data:`_FRAME_TYPES`, a NaN, an unsigned integer past Int64."""
    if not all(isinstance(dtype, _FRAME_TYPES) for dtype in frame.dtypes):
        return None
    floats = [name for name, dtype in frame.schema.items() if dtype.is_float()]
    if floats and frame.select(pl.any_horizontal(pl.col(floats).is_nan().any())).item():
        return None
    integers = [name for name, dtype in frame.schema.items() if dtype.is_integer()]
    try:
        typed = frame.with_columns(pl.col(integers).cast(pl.Int64), pl.col(floats).cast(pl.Float64) + 0.0)
    except pl.exceptions.InvalidOperationError:  # a UInt64 past Int64
        return None
    return typed.rename({name: f"c{i}" for i, name in enumerate(typed.columns)})


def _as_floats(frame: pl.DataFrame) -> pl.DataFrame | None:
    """``frame`` with its integers and booleans as floats, where numbers of two types meet; None when an integer
    is past :data:`_EXACT_INTEGERS`."""
    integers = [name for name, dtype in frame.schema.items() if dtype == pl.Int64]
    if integers and (frame.select(pl.max_horizontal(pl.col(integers).abs().max())).item() or 0) > _EXACT_INTEGERS:
        return None
    booleans = [name for name, dtype in frame.schema.items() if dtype == pl.Boolean]
    return frame.with_columns(pl.col([*integers, *booleans]).cast(pl.Float64))


def _frame_soft_f1(gold: pl.DataFrame, predicted: pl.DataFrame) -> float:
    """:func:`soft_f1` of rows already made unique, from :func:`frame_scores`."""
    pairs = min(gold.height, predicted.height)
    width, given_width = gold.width, predicted.width
    paired = pl.concat([gold.head(pairs).rename({c: f"g{i}" for i, c in enumerate(gold.columns)}),
                        predicted.head(pairs).rename({c: f"p{i}" for i, c in enumerate(predicted.columns)})],
                       how="horizontal")
    # values of two types (numbers made one by frame_scores) are never equal, but NULL (None) equals NULL
    equal = {(i, j): pl.col(f"p{i}").eq_missing(pl.col(f"g{j}")) if given_type == gold_type
             else pl.col(f"p{i}").is_null() & pl.col(f"g{j}").is_null()
             for i, given_type in enumerate(predicted.dtypes) for j, gold_type in enumerate(gold.dtypes)}
    found = pl.sum_horizontal([pl.any_horizontal([equal[i, j] for j in range(width)]) for i in range(given_width)])
    back = pl.sum_horizontal([pl.any_horizontal([equal[i, j] for i in range(given_width)]) for j in range(width)])
    counts = paired.select(
        (found.cast(pl.Float64) / width).alias("matched"),
        ((given_width - found).cast(pl.Float64) / width).alias("predicted_only"),
        ((width - back).cast(pl.Float64) / width).alias("gold_only"))
    # The rules add row by row; so does reduce (a float sum may pair or compensate its terms)
    matched, predicted_only, gold_only = (reduce(operator.add, counts[name].to_list(), 0.0)
                                          for name in ("matched", "predicted_only", "gold_only"))
    gold_only = reduce(operator.add, [1] * (gold.height - pairs), gold_only)
    predicted_only += max(predicted.height - gold.height, 0)
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
