"""Neighbor generation: row sets of the same schema that a fragile pass is likely to disagree on.

A neighbor is built by a :class:`Profile`: rules over each table's rows (:mod:`.rules`) and over the whole database
(:mod:`.joined`), applied with a seeded :class:`random.Random`, so neighbor ``i`` of seed ``s`` is the same
database on every run. The hints come from both queries (:mod:`.hints`): the literals each column is compared
with (and their boundaries), the ORDER BY keys, the columns that join tables, the features on which they differ.
Rows that break a declared constraint are not filtered here but rejected by the engine when the neighbor is built
(:func:`~.scratch.scratch`).
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlcmp_dagster.engine.neighbors.classes import CLASSES, can_change, emptied, nulled, partnerless, shared_values
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
    classes: frozenset[str] = frozenset()  # the classes of data it builds (:data:`~.classes.CLASSES`)
    whole: bool = False  # starts from the whole sample, not a random subset (its rule needs many rows)


def _profile(rules: tuple[Rule, ...], *, joined: tuple[JoinedRule, ...] = (), may_empty: bool = False,
             needs_join: bool = False, targets: tuple[str, ...] = (), whole: bool = False) -> Profile:
    """A :class:`Profile` whose classes are those of its rules (:data:`RULE_CLASSES`) and, when it may empty a
    table, ``empty``."""
    classes = {kind for rule in (*rules, *joined) for kind in RULE_CLASSES.get(rule, ())}
    return Profile(rules, may_empty, joined, needs_join, frozenset(targets),
                   frozenset(classes | ({"empty"} if may_empty else set())), whole)


#: The classes of data (:data:`~.classes.CLASSES`) each rule builds; a rule not named builds none of them
#: (:func:`literal_rows` only makes rows that satisfy the queries' filters).
RULE_CLASSES: dict[object, tuple[str, ...]] = {
    literal_values: ("boundary",), group_sizes: ("boundary",), ladder: ("boundary",),
    nulls: ("null",), null_columns: ("null",), null_counted: ("null",), null_all_but_one: ("null",),
    ladder_nulls: ("null", "boundary"), duplicates: ("duplicate",), ties: ("duplicate",),
    failed_joins: ("partner",), unmatched: ("partner",), empty_partner: ("partner", "empty"),
    emptied: ("empty",), nulled: ("null",), partnerless: ("partner",), shared_values: ("duplicate",),
}


#: Neighbor ``i`` uses profile ``i % len(PROFILES)``: one rule alone first, so that a difference one rule
#: exposes is not hidden by another (NULLs that tie at a LIMIT, say), then combinations, then the targeted
#: ones (rows without a match, an emptied join partner, groups of the compared size).
PROFILES: list[Profile] = [
    _profile((literal_rows, literal_values), targets=("comparison", "condition", "aggregate")),
    _profile((null_columns,), targets=("count",)),
    _profile((duplicates,), targets=("distinct", "count")),
    _profile((literal_rows, ties), targets=("order", "aggregate", "comparison")),
    _profile((failed_joins,), may_empty=True, needs_join=True, targets=("join",)),
    _profile((literal_rows, literal_values, nulls)),
    _profile((literal_rows, duplicates, ties), targets=("distinct",)),
    _profile((literal_rows, literal_values, duplicates, nulls, ties, failed_joins), may_empty=True),
    _profile((literal_rows, null_columns), targets=("count",)),
    _profile((nulls,)),
    _profile((literal_rows,), joined=(unmatched,), needs_join=True, targets=("join",)),
    _profile((literal_rows, literal_values), joined=(empty_partner,), needs_join=True, targets=("join",)),
    _profile((literal_rows,), joined=(group_sizes,), targets=("comparison",)),
    _profile((literal_rows,), joined=(null_counted,), targets=("count",)),
    _profile((null_all_but_one,), targets=("count",)),
    _profile((literal_rows,), joined=(ladder,), targets=("order", "count", "join")),
    _profile((literal_rows,), joined=(ladder_nulls,), targets=("count",)),
    # One class each (:mod:`.classes`), aimed at the columns on which the queries differ, over the whole sample
    # (rows sharing a value, or without a partner, need rows to share with and partners to miss).
    _profile((literal_rows,), joined=(shared_values,), whole=True,
             targets=("group", "count", "distinct", "comparison", "order", "join", "projection")),
    _profile((literal_rows,), joined=(partnerless,), whole=True,
             targets=("join", "join_key", "comparison", "distinct", "projection")),
    _profile((literal_rows,), joined=(emptied,), targets=("aggregate", "order")),
    _profile((literal_rows,), joined=(nulled,), whole=True, targets=("count", "comparison", "condition", "aggregate")),
]


#: The order profiles are tried in: literals and boundaries, the class profiles, NULLs where counted, rows
#: without a match, duplicates and ties, group sizes, then the rest.
PRIORITY = (0, 17, 18, 19, 20, 8, 10, 13, 16, 6, 15, 12, 14, 11, 1, 3, 2, 5, 7, 4, 9)


def seed_of(seed: int, index: int) -> int:
    """The seed of neighbor ``index`` under the configured ``seed`` (stable across runs and platforms)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "big")


def neighbor_rows(schema: Schema, tables: list[str], found: Hints, index: int, rng: random.Random) -> Rows:
    """Neighbor ``index``: the sample of each table (parents first), cut to a random subset and perturbed by
    the rules of profile ``index % len(PROFILES)`` with random strength; declared foreign keys are repaired to
    point at a surviving parent row (a NULL key is left NULL: the row then fails the join legally)."""
    profile = PROFILES[index % len(PROFILES)]
    rows: Rows = {}
    keep = 1.0 if profile.whole else rng.choice((0.15, 0.3, 0.5, 0.8))
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
    return unreferenced_dropped(schema, tables, admissible(schema, rows), found.tables)


def admissible(schema: Schema, rows: Rows) -> Rows:
    """``rows`` without those holding NULL in a primary-key column: a key is NOT NULL in standard SQL, whatever
    SQLite's legacy quirk lets a table that is no rowid alias store, and a neighbor stays within what any engine
    would accept (the engine rejects the rows that break the other declared constraints when it builds it)."""
    for name, current in rows.items():
        keys = schema.tables[name].primary_positions
        if len(keys) == 1:
            (key,) = keys
            rows[name] = [row for row in current if row[key] is not None]
        elif keys:
            rows[name] = [row for row in current if None not in itemgetter(*keys)(row)]
    return rows


def unreferenced_dropped(schema: Schema, tables: list[str], rows: Rows, read: Collection[str]) -> Rows:
    """``rows`` without the rows of the tables neither query reads (not in ``read``: in scope only as the parents
    a foreign key needs) that no row of the neighbor can reference. Those tables held a third of a Spider dev
    neighbor's rows; what the queries return depends on their rows only through the child rows they let in, and
    a child row is let in by a parent row that holds its key, which is kept: both queries return what they
    returned with every row (unless a row left out had kept a referenced one out by repeating its unique value:
    another neighbor then, as valid), on a database that still satisfies every declared constraint, built and
    shrunk faster. "Can reference" is decided loosely, one column of
    a key at a time (:func:`_loose`: a number meets a text that reads as it, a text meets itself in any case and
    without trailing spaces), so that no row SQLite would match under a column's affinity or collation goes; a
    value of another kind keeps the whole table, and so does a table that references itself."""
    for name in reversed(tables):  # children first: an unread table's rows that go reference nothing in turn
        if name in read or not rows.get(name):
            continue
        wanted = _referenced(schema, tables, rows, name)
        if wanted is not None:
            rows[name] = [row for row in rows[name] if any(all(
                _meets(row[i], exact, loose) for i, exact, loose in key) for key in wanted)]
    return rows


def _meets(value: Any, exact: set[Any], loose: frozenset[tuple[str, Any]]) -> bool:
    """Whether a parent's ``value`` may meet a child's: one of the values ``exact``, or one of their
    :func:`_loose` forms; a value of another kind may meet anything."""
    if value in exact:
        return True
    form = _loose(value)
    return form is None or bool(form & loose)


def _referenced(schema: Schema, tables: list[str], rows: Rows, parent: str) \
        -> list[list[tuple[int, set[Any], frozenset[tuple[str, Any]]]]] | None:
    """Per foreign key of a table in scope that references ``parent``, per column: the parent's column, the
    values the key's rows hold there and their :func:`_loose` forms (a NULL references nothing); None where a
    value cannot be told (not a number, text or binary) or ``parent`` references itself."""
    wanted = []
    for child in tables:
        for key in schema.tables[child].foreign_keys:
            if key.parent != parent:
                continue
            if child == parent:
                return None
            referencing = [row for row in rows.get(child, []) if None not in (row[i] for i in key.columns)]
            columns = []
            for at, parent_at in zip(key.columns, key.parent_columns):
                exact = set(map(itemgetter(at), referencing))
                forms = [form for value in exact if (form := _loose(value)) is not None]
                if len(forms) < len(exact):
                    return None
                columns.append((parent_at, exact, frozenset[tuple[str, Any]]().union(*forms)))
            wanted.append(columns)
    return wanted


@functools.lru_cache(maxsize=1 << 16)
def _loose(value: Any) -> frozenset[tuple[str, Any]] | None:
    """What ``value`` may equal in a foreign-key match, loosely (:func:`unreferenced_dropped`): a number, and a
    text that reads as one, as that number; a text in lower case without trailing spaces; a binary as itself;
    NULL as nothing; None for a value of another kind (anything may meet it). Kept per value: a search meets the
    same sampled values neighbor after neighbor."""
    if value is None:
        return frozenset()
    if isinstance(value, bytes):
        return frozenset({("b", value)})
    if isinstance(value, str):
        try:
            return frozenset({("s", value.lower().rstrip()), ("n", float(value))})
        except (ValueError, OverflowError):
            return frozenset({("s", value.lower().rstrip())})
    if isinstance(value, (int, float)):
        try:
            return frozenset({("n", float(value))})
        except OverflowError:
            return None
    return None


def neighbor_numbers(count: int, tables: list[str], found: Hints, classes: Collection[str] = CLASSES,
                     schema: Schema | None = None) -> list[int]:
    """The numbers of the ``count`` neighbors to build: first the profiles aimed at a feature on which the two
    queries differ (``found.differences``: a COUNT's argument, a join's side, a comparison...), then the others,
    each group in the order of :data:`PRIORITY` (the usual accidents first), those that cannot apply skipped and
    those that build a class not in ``classes`` (the suite's ``neighbor_classes``) left out, round after round
    (number ``p + r * len(PROFILES)`` for profile ``p`` in round ``r``, so neighbor ``n`` is the same database
    whatever the count). With the ``schema``, a class rule that can change nothing there is skipped too
    (:func:`~.classes.can_change`)."""
    allowed = [p for p in PRIORITY if PROFILES[p].classes <= set(classes) and (
        schema is None or all(can_change(rule, schema, tables, found) for rule in PROFILES[p].joined))]
    aimed = [p for p in allowed if PROFILES[p].targets & found.differences]
    order = aimed + [p for p in allowed if p not in aimed]
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
    return bool(found.aggregated) or not (null_counted in profile.joined or null_all_but_one in profile.rules)
