"""Properties of the counterexample shrinker (:mod:`sqlcmp_dagster.engine.neighbors.shrink`): what it returns was
tested and still fails, and when it says 1-minimal, removing any single item makes the failure go."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from sqlcmp_dagster.engine.neighbors.shrink import one_minimal

Predicate = Callable[[frozenset[int]], bool]


@st.composite
def _predicates(draw: st.DrawFn) -> tuple[list[int], Predicate, frozenset[int]]:
    """Items 0..n-1, a predicate that holds on all of them, and the items a build would reject (they never matter
    to the predicate). The predicate holds when the set keeps every item of one of a few required sets and, when
    drawn non-monotone, none of a few spoilers: a row removed may let a difference in, as a parent removed lets a
    child's duplicate key in."""
    n = draw(st.integers(1, 40))
    rejected = frozenset(draw(st.sets(st.integers(0, n - 1), max_size=n // 2)))
    usable = [i for i in range(n) if i not in rejected]  # never empty: at most half the items are rejected
    required = draw(st.lists(st.sets(st.sampled_from(usable), max_size=5), min_size=1, max_size=3))
    spoilers = frozenset(draw(st.sets(st.sampled_from(usable), max_size=3))) if draw(st.booleans()) \
        else frozenset()

    def holds(items: frozenset[int]) -> bool:
        return any(need <= items and not (spoilers & items - need) for need in required)

    all_items = frozenset(range(n))
    if not holds(all_items):  # spoilers among all the items: require the first set only, without spoilers
        spoilers = frozenset()
    return list(range(n)), holds, rejected


@settings(max_examples=400, deadline=None)
@given(case=_predicates(), use_kept=st.booleans())
def test_a_one_minimal_result_still_fails_and_loses_it_without_any_single_item(
        case: tuple[list[int], Predicate, frozenset[int]], use_kept: bool) -> None:
    items, holds, rejected = case
    tested: list[list[int]] = []

    def still_fails(candidate: list[int]) -> bool:
        tested.append(candidate)
        return holds(frozenset(candidate))

    def kept(candidate: list[int]) -> list[int]:
        return [item for item in candidate if item not in rejected]

    result, minimal = one_minimal(items, still_fails, max_tests=3 * len(items) + 10,
                                  kept=kept if use_kept else None)
    assert result == sorted(result) and set(result) <= set(items)  # a subsequence of the items, in their order
    assert holds(frozenset(result))
    assert result == items or any(set(result) == set(t) or set(result) == set(kept(t)) for t in tested)
    if minimal:
        assert all(not holds(frozenset(result) - {item}) for item in result)
    if use_kept and result != items:
        assert not rejected & set(result)


@settings(max_examples=200, deadline=None)
@given(case=_predicates(), budget=st.integers(0, 12))
def test_a_shrink_stopped_by_its_budget_returns_a_set_that_still_fails(
        case: tuple[list[int], Predicate, frozenset[int]], budget: int) -> None:
    items, holds, _ = case
    calls = 0

    def still_fails(candidate: list[int]) -> bool:
        nonlocal calls
        calls += 1
        return holds(frozenset(candidate))

    result, _ = one_minimal(items, still_fails, max_tests=budget)
    assert calls <= budget and holds(frozenset(result))


def test_the_budget_running_out_is_told_from_a_confirmed_minimum() -> None:
    calls: list[list[int]] = []

    def spent_after_two(candidate: list[int]) -> bool | None:
        calls.append(candidate)
        return None if len(calls) > 2 else 2 in candidate

    # [1] goes, [2, 3] cannot, and the budget is spent asking about [2] alone.
    assert one_minimal([1, 2, 3, 4], spent_after_two, max_tests=100) == ([2, 3, 4], False)
    assert calls == [[2, 3, 4], [4], [3, 4]]
    assert one_minimal([1, 2, 3, 4], lambda s: 2 in s, max_tests=100) == ([2], True)
