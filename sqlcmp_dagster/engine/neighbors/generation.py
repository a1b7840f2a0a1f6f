"""Neighbor generation: row sets of the same schema that a fragile pass is likely to disagree on.

A neighbor is built by a :class:`Profile`: rules over each table's rows (:mod:`.rules`) and over the whole database
(:mod:`.joined`), applied with a seeded :class:`random.Random`, so neighbor ``i`` of seed ``s`` is the same
database on every run. The hints come from both queries (:mod:`.hints`): the literals each column is compared
with (and their boundaries), the ORDER BY keys, the columns that join tables, the features on which they differ.
Rows that break a declared constraint are not filtered here but rejected by the engine when the neighbor is built
(:func:`~.scratch.scratch`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlcmp_dagster.engine.neighbors.hints import Hints
from sqlcmp_dagster.engine.neighbors.joined import empty_partner, group_sizes, ladder, ladder_nulls, null_counted, \
    reach_joins, repair_keys, unmatched
from sqlcmp_dagster.engine.neighbors.rules import duplicates, failed_joins, literal_rows, literal_values, \
    null_all_but_one, null_columns, nulls, subset, synthesized, ties
from sqlcmp_dagster.engine.neighbors.schema import Rows, Schema, Table


Rule = Callable[[Table, list[tuple[Any, ...]], Hints, random.Random], list[tuple[Any, ...]]]
JoinedRule = Callable[[Schema, list[str], Rows, Hints, random.Random], Rows]


@dataclass(frozen=True)
class Profile:
    """The rules one neighbor applies to each table, in turn; whether it may empty a table; the rules over
    the whole database applied after the rows reach the joins; whether it needs a join to change anything;
    the :func:`features` it aims at (built first where the two queries differ on one of them)."""

    rules: tuple[Rule, ...]
    may_empty: bool = False
    joined: tuple[JoinedRule, ...] = ()
    needs_join: bool = False
    targets: frozenset[str] = frozenset()


#: Neighbor ``i`` uses profile ``i % len(PROFILES)``: one rule alone first, so that a difference one rule
#: exposes is not hidden by another (NULLs that tie at a LIMIT, say), then combinations, then the targeted
#: ones (rows without a match, an emptied join partner, groups of the compared size).
PROFILES: list[Profile] = [
    Profile((literal_rows, literal_values), targets=frozenset({"comparison", "condition", "aggregate"})),
    Profile((null_columns,), targets=frozenset({"count"})),
    Profile((duplicates,), targets=frozenset({"distinct", "count"})),
    Profile((literal_rows, ties), targets=frozenset({"order", "aggregate", "comparison"})),
    Profile((failed_joins,), may_empty=True, needs_join=True, targets=frozenset({"join"})),
    Profile((literal_rows, literal_values, nulls)),
    Profile((literal_rows, duplicates, ties), targets=frozenset({"distinct"})),
    Profile((literal_rows, literal_values, duplicates, nulls, ties, failed_joins), may_empty=True),
    Profile((literal_rows, null_columns), targets=frozenset({"count"})),
    Profile((nulls,)),
    Profile((literal_rows,), joined=(unmatched,), needs_join=True, targets=frozenset({"join"})),
    Profile((literal_rows, literal_values), joined=(empty_partner,), needs_join=True, targets=frozenset({"join"})),
    Profile((literal_rows,), joined=(group_sizes,), targets=frozenset({"comparison"})),
    Profile((literal_rows,), joined=(null_counted,), targets=frozenset({"count"})),
    Profile((null_all_but_one,), targets=frozenset({"count"})),
    Profile((literal_rows,), joined=(ladder,), targets=frozenset({"order", "count", "join"})),
    Profile((literal_rows,), joined=(ladder_nulls,), targets=frozenset({"count"})),
]


#: The order profiles are tried in: literals and boundaries, NULLs where counted, rows without a match,
#: duplicates and ties, group sizes, then the rest.
PRIORITY = (0, 8, 10, 13, 16, 6, 15, 12, 14, 11, 1, 3, 2, 5, 7, 4, 9)


def seed_of(seed: int, index: int) -> int:
    """The seed of neighbor ``index`` under the configured ``seed`` (stable across runs and platforms)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "big")


def neighbor_rows(schema: Schema, tables: list[str], found: Hints, index: int, rng: random.Random) -> Rows:
    """Neighbor ``index``: the sample of each table (parents first), cut to a random subset and perturbed by
    the rules of profile ``index % len(PROFILES)`` with random strength; declared foreign keys are repaired to
    point at a surviving parent row (a NULL key is left NULL: the row then fails the join legally)."""
    profile = PROFILES[index % len(PROFILES)]
    rows: Rows = {}
    keep = rng.choice((0.15, 0.3, 0.5, 0.8))
    for name in tables:
        table = schema.tables[name]
        current = subset(schema.sample.get(name, []), rng, keep) or synthesized(table, found)
        if profile.may_empty and rng.random() < 0.3 and len(tables) > 1:
            rows[name] = []  # emptied table
            continue
        for rule in profile.rules:
            current = rule(table, current, found, rng)
        rows[name] = repair_keys(schema, table, current, rows, found, rng)
    rows = reach_joins(schema, tables, rows, found, rng)
    for joined in profile.joined:
        rows = joined(schema, tables, rows, found, rng)
    return rows


def neighbor_numbers(count: int, tables: list[str], found: Hints) -> list[int]:
    """The numbers of the ``count`` neighbors to build: first the profiles aimed at a feature on which the two
    queries differ (``found.differences``: a COUNT's argument, a join's side, a comparison...), then the others,
    each group in the order of :data:`PRIORITY` (the usual accidents first), those that cannot apply skipped,
    round after round (number ``p + r * len(PROFILES)`` for profile ``p`` in round ``r``, so neighbor ``n`` is
    the same database whatever the count)."""
    aimed = [p for p in PRIORITY if PROFILES[p].targets & found.differences]
    order = aimed + [p for p in PRIORITY if p not in aimed]
    numbers: list[int] = []
    for round_ in range(count):
        if len(numbers) >= count:
            break
        for profile in order:
            number = profile + round_ * len(PROFILES)
            if len(numbers) < count and applies(number, tables, found):
                numbers.append(number)
    return numbers


def applies(index: int, tables: list[str], found: Hints) -> bool:
    """Whether neighbor ``index``'s profile can change anything for these queries: a profile of joins needs a
    join, one of group sizes a COUNT compared with a number, one of NULLs in counted rows an aggregate. A
    profile that cannot is not built (time)."""
    profile = PROFILES[index % len(PROFILES)]
    if profile.needs_join and (len(tables) == 1 or not found.join_columns):
        return False
    if group_sizes in profile.joined and not found.group_sizes:
        return False
    if ladder in profile.joined and not (found.group_columns or found.order_columns):
        return False
    if ladder_nulls in profile.joined and not (found.group_columns and found.aggregated):
        return False
    return found.aggregated or not (null_counted in profile.joined or null_all_but_one in profile.rules)
