"""Layer 3: result comparison (docs/design.md, "How the engine decides"), one interface over two paths.

:func:`compare_results` compares two materialized results under a mode and returns a :class:`ResultComparison`;
it chooses the path by size. :mod:`rows` compares small results in plain Python (where polars' fixed cost per
operation would be most of the time), :mod:`frames` the rest as polars operations; both answer identically. They
share :mod:`shared` (the rules, dtype families and what a path hands back), :mod:`mapping` (the
column-permutation search) and :mod:`budgets` (every work budget and size threshold).

Callers import from this package, not from its modules.
"""

from sqlcmp_dagster.engine.comparison.compare import ResultComparison, can_pass, compare_results, cut_inside_tie, \
    tied_at_cut
from sqlcmp_dagster.engine.comparison.rows import suits
from sqlcmp_dagster.engine.comparison.shared import ColumnStats, ComparisonPath, Rules, Tolerance

__all__ = ["ColumnStats", "ComparisonPath", "ResultComparison", "Rules", "Tolerance", "can_pass", "compare_results",
           "cut_inside_tie", "suits", "tied_at_cut"]
