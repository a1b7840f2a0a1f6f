"""Adding up a stream of reports one at a time, to the very figure a sum over the whole list gives.

A run's summary is built as its reports arrive (``sqlcmp evaluate`` keeps none of them: 100,000 reports held
until the end took gigabytes), yet it must be the summary that :func:`~sqlcmp_dagster.engine.summary.summarize`
computes from a list, byte for byte. Counts are the same either way; a float sum is not: ``sum()`` adds
floats with a compensation term since Python 3.12 (Neumaier's algorithm) and left to right before, and the
last bit of a mean can decide its sixth decimal. :class:`RunningSum` is ``sum()`` as this interpreter computes
it, one value at a time.
"""

from __future__ import annotations

import math
import sys

#: Whether this interpreter's ``sum()`` compensates float rounding (Python 3.12 and later).
COMPENSATED = sys.version_info >= (3, 12)


class RunningSum:
    """The running ``sum()`` of floats added in order with :meth:`add`; :attr:`value` is what ``sum()`` of the
    same values returns (``0`` for none), and :attr:`count` how many were added.

    >>> values = [0.1, 1e16, 0.3, -1e16, 0.7]
    >>> total = RunningSum()
    >>> for value in values:
    ...     total.add(value)
    >>> total.value == sum(values), total.count
    (True, 5)
    """

    __slots__ = ("compensation", "count", "total")

    def __init__(self) -> None:
        self.total: float = 0
        self.compensation = 0.0
        self.count = 0

    def add(self, value: float) -> None:
        """Add ``value`` (a float: ``sum()`` adds other numbers another way)."""
        if not COMPENSATED or self.count == 0:  # the first value is added to sum()'s start, 0, as it is
            self.total = self.total + value
        else:  # CPython's builtin_sum_impl for floats, step by step
            total = self.total + value
            if abs(self.total) >= abs(value):
                self.compensation += (self.total - total) + value
            else:
                self.compensation += (value - total) + self.total
            self.total = total
        self.count += 1

    @property
    def value(self) -> float:
        if COMPENSATED and self.compensation and math.isfinite(self.compensation):
            return self.total + self.compensation
        return self.total
