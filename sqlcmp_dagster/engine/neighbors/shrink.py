"""Shrinking a counterexample: runs of its rows removed, whole tables among them, until no single row can go.

The test is expensive (build a database, run two queries), so the search is bounded by a number of tests and
stops early when the caller's ``still_fails`` says the budget is spent; whatever it returns is a row set that
was itself tested and still shows the difference. :func:`one_minimal` says whether its set is 1-minimal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def one_minimal(items: Sequence[T], still_fails: Callable[[list[T]], bool | None], *, max_tests: int,
                kept: Callable[[list[T]], list[T]] | None = None) -> tuple[list[T], bool]:
    """``items`` with runs of consecutive items removed while ``still_fails`` holds, then a closing round of single
    removals until none keeps it (or the set is empty), and whether that was reached: True means the result is
    1-minimal, False that ``max_tests`` tests or the budget (``still_fails`` returning None) stopped it first.

    The runs gallop: a run's length doubles after a removal that kept the difference. A run whose removal lost it
    holds an item that cannot go, found by halving the run (its first half removed or, when that loses the
    difference too, searched in turn), so that each such item costs about the logarithm of the gap before it;
    the item the halving ends on is taken to be needed without a test of its own, for the closing round tests
    every item left anyway (which is what makes the result 1-minimal when removals do not act alone: a row
    removed may let another in). Run lengths that halved and doubled again around every needed item took 1,964
    tests for Spider dev's 86 counterexamples (3,651 rows, 399 kept); these took 1,715. ``kept``, given a set
    that still fails, says which of its items matter (the rows the engine accepted, in their order): the others
    go with it, never to be tested one by one.

    >>> one_minimal(list(range(10)), lambda s: 3 in s and 7 in s, max_tests=100)
    ([3, 7], True)
    >>> one_minimal([1, 2, 3, 4], lambda s: 2 in s, max_tests=2)
    ([2, 3, 4], False)
    """
    current, tests, index, run = list(items), 0, 0, max(1, len(items) // 4)
    suspect = 0  # the length of the run at ``index`` known to hold an item that cannot go (0: none known)
    closing, failed_in_a_row = False, 0
    while current:
        if closing:
            if failed_in_a_row >= len(current):
                return current, True
            index, size = index % len(current), 1
        elif suspect == 1:  # halved down to one item: needed, as far as this pass can tell
            index, suspect = index + 1, 0
            continue
        elif index >= len(current):
            closing, index = True, 0
            continue
        else:
            size = suspect // 2 if suspect else min(run, len(current) - index)
        if tests >= max_tests:
            return current, False
        tests += 1
        candidate = current[:index] + current[index + size:]
        outcome = still_fails(candidate)
        if outcome is None:
            return current, False
        if outcome:
            rest = current[index + size:index + suspect]  # the part of a suspect run that was not removed
            if kept is not None:
                candidate = kept(candidate)
            left = set(candidate)
            index = sum(item in left for item in current[:index])  # the position after the removed run
            if closing:
                failed_in_a_row = 0
            elif suspect:
                suspect = sum(item in left for item in rest)
            else:
                run *= 2
            current = candidate
        elif closing:
            failed_in_a_row, index = failed_in_a_row + 1, index + 1
        elif suspect or size > 1:
            suspect, run = size, max(1, size // 2) if not suspect else run
        else:
            index += 1  # a single item that cannot go
    return current, True
