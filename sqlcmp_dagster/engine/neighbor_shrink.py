"""Delta debugging (Zeller and Hildebrandt's ddmin) over the rows of a counterexample, then one row at a time.

The test is expensive (build a database, run two queries), so the search is bounded by a number of tests and
stops early when the caller's ``still_fails`` says the budget is spent; whatever it returns is a row set that
was itself tested and still shows the difference. ddmin halves large sets quickly but its test budget can run
out before the set is 1-minimal; :func:`one_at_a_time` finishes the job and says whether it got there.
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


def one_at_a_time(items: Sequence[T], still_fails: Callable[[list[T]], bool | None], *, max_tests: int) \
        -> tuple[list[T], bool]:
    """``items`` with single items removed while ``still_fails`` holds, going round until no single removal
    keeps it (or the set is empty), and whether that was reached: True means the result is 1-minimal, False
    that ``max_tests`` tests or the budget (``still_fails`` returning None) stopped it first.

    >>> one_at_a_time([1, 2, 3, 4], lambda s: 2 in s, max_tests=20)
    ([2], True)
    >>> one_at_a_time([1, 2, 3, 4], lambda s: 2 in s, max_tests=2)
    ([2, 3, 4], False)
    """
    current, tests, index, kept_in_a_row = list(items), 0, 0, 0
    while kept_in_a_row < len(current):
        if tests >= max_tests:
            return current, False
        candidate = current[:index] + current[index + 1:]
        tests += 1
        outcome = still_fails(candidate)
        if outcome is None:
            return current, False
        if outcome:
            current, kept_in_a_row = candidate, 0
            index = index if index < len(current) else 0
        else:
            kept_in_a_row += 1
            index = (index + 1) % len(current)
    return current, True
