"""The work budgets and size thresholds of result comparison, in one place for both paths.

The modules of this package read them as ``budgets.NAME`` when they run, not as copies taken at import, so a
test can lower one (``mock.patch.object(budgets, ...)``) to reach on a few rows what happens at the real size.
"""

from __future__ import annotations

#: Results of at most this many cells (both sides' rows times the wider side's columns) take the plain path.
#: Measured with benchmarks/small_results.py (2026-12-05, quiet: rows/frames 0.33-0.38 at 4,000 cells, 0.67-0.76
#: at 10,000, 1.4-1.5 at 20,000), see BENCHMARKS.md.
SMALL_RESULT_CELLS = 8_000
#: The most checks of a pair of cells the plain path's tolerance passes make in one comparison (each pass: the
#: rows left unpaired on each side, multiplied, times the columns compared within tolerance; the column
#: permutation search may run a pass for each candidate mapping): polars makes a pass as one vectorized join,
#: Python pair by pair. Beyond, the plain path stops (:class:`rows.TooManyPairs`) and the comparison is made
#: again on the frame path.
SMALL_RESULT_PAIRS = 40_000
#: Residual pairs examined by the last, greedy tolerance pass; beyond this the numeric-order pass stands alone.
GREEDY_PAIR_BUDGET = 1_000_000
#: The column-permutation search when values cannot tell columns apart: candidates tried at most, the cells one
#: candidate may cost, the cells all candidates together may cost, and the steps spent enumerating candidates.
#: Past any of them the search stops with a warning (ten columns of one value have 10! candidates).
MAX_PERMUTATIONS = 120
PERMUTATION_CELL_BUDGET = 2_000_000
PERMUTATION_TOTAL_CELLS = 20_000_000
PERMUTATION_STEPS = 100_000
#: Below this many rows a frame operation costs its fixed overhead, so fewer operations beat cleverer ones.
SMALL_FRAME = 10_000
#: From this many rows on each side the frame path's exact multiset stage joins on one hash per row
#: (:func:`frames._hashed_join`).
HASHED_JOIN_ROWS = SMALL_FRAME
#: Pairs of that join checked cell by cell per slice (bounds the memory the check holds).
CHECKED_PAIRS = 1 << 16
#: From this many rows on, the frame path's aggregations run on polars' streaming engine (:func:`frames._aggregate`).
STREAMED_ROWS = SMALL_FRAME
