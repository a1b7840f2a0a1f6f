"""Delta debugging (Zeller and Hildebrandt's ddmin) over the tables of a counterexample, then its rows removed in
runs until no single row can go.

The test is expensive (build a database, run two queries), so the search is bounded by a number of tests and
stops early when the caller's ``still_fails`` says the budget is spent; whatever it returns is a row set that
was itself tested and still shows the difference. :func:`one_minimal` says whether its set is 1-minimal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def ddmin(items: Sequence[T], still_fails: Callable[[list[T]], bool | None], *, max_tests: int) -> list[T]:
    """A 1-minimal subset of ``items`` on which ``still_fails`` holds (removing any one item makes the
    difference vanish), or the smallest one found within ``max_tests`` tests. ``still_fails`` returns None
    when the budget is spent: the search then stops with the smallest failing set so far.

    >>> ddmin(list(range(10)), lambda s: 3 in s and 7 in s, max_tests=100)
    [3, 7]
    """
    current, chunks, tests = list(items), 2, 0
    while len(current) >= 2:
        size = max(1, len(current) // chunks)
        parts = [current[i:i + size] for i in range(0, len(current), size)]
        reduced = False
        for candidate in [*parts, *([[x for p in parts if p is not part for x in p] for part in parts]
                                    if len(parts) > 2 else [])]:
            if tests >= max_tests:
                return current
            tests += 1
            outcome = still_fails(candidate)
            if outcome is None:
                return current
            if outcome:
                shrunk_to_part = any(candidate is part for part in parts)
                current, chunks = candidate, (2 if shrunk_to_part else max(chunks - 1, 2))
                reduced = True
                break
        if not reduced:
            if chunks >= len(current):
                break
            chunks = min(len(current), chunks * 2)
    return current


def one_minimal(items: Sequence[T], still_fails: Callable[[list[T]], bool | None], *, max_tests: int,
                kept: Callable[[list[T]], list[T]] | None = None) -> tuple[list[T], bool]:
    """``items`` with runs of consecutive items removed while ``still_fails`` holds, going round until no single
    removal keeps it (or the set is empty), and whether that was reached: True means the result is 1-minimal,
    False that ``max_tests`` tests or the budget (``still_fails`` returning None) stopped it first.

    The run's length adapts: it doubles after a removal that kept the difference and halves after one that lost
    it, and an item whose own removal loses it is kept. Removing one row at a time costs at least a test a row
    and one more per row kept: 2,019 tests for Spider dev's 64 counterexamples (1,732 rows, 287 kept, a fifth
    at the median), where runs took 1,129. ``kept``, given a set that still fails, says which of its items matter
    (the rows the engine accepted, in their order): the others go with it, never to be tested one by one.

    >>> one_minimal(list(range(10)), lambda s: 3 in s and 7 in s, max_tests=100)
    ([3, 7], True)
    >>> one_minimal([1, 2, 3, 4], lambda s: 2 in s, max_tests=2)
    ([2, 3, 4], False)
    """
    current, tests, index, run, kept_in_a_row = list(items), 0, 0, 1, 0
    while current and kept_in_a_row < len(current):
        if tests >= max_tests:
            return current, False
        size = min(run, len(current) - index)
        candidate = current[:index] + current[index + size:]
        tests += 1
        outcome = still_fails(candidate)
        if outcome is None:
            return current, False
        if outcome:
            if kept is not None:  # the position after the removed run: the items kept before it
                before = set(current[:index])
                candidate = kept(candidate)
                index = sum(item in before for item in candidate)
            current, kept_in_a_row, run = candidate, 0, run * 2
            if index >= len(current):
                index, run = 0, 1
        elif size > 1:
            run = size // 2
        else:
            kept_in_a_row += 1
            index, run = (index + 1) % len(current), 1
    return current, True
