"""The neighbor classes of natural errors (:mod:`sqlcmp_dagster.engine.neighbors.classes`): each class tells apart
the queries its kind of data tells apart, the counterexample names its class, a suite switches classes off, and
no neighbor leaves the declared constraints (no NULL in a primary-key column)."""

from __future__ import annotations

import random
import re
import time
import sqlite3
from pathlib import Path

import pytest
from conftest import compare_on as compare
from sqlglot import parse_one

from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.neighbor_report import neighborhood_of
from sqlcmp_dagster.engine.neighbors.classes import CLASSES
from sqlcmp_dagster.engine.neighbors.generation import PROFILES, neighbor_numbers, neighbor_rows, seed_of, \
    unreferenced_dropped
from sqlcmp_dagster.engine.neighbors.hints import hints
from sqlcmp_dagster.engine.neighbors.schema import read_schema, sample

SHOP = """
CREATE TABLE kind (code TEXT PRIMARY KEY, label TEXT NOT NULL);
CREATE TABLE owner (id INT PRIMARY KEY, name TEXT NOT NULL);  -- no rowid alias: a scan follows insertion
CREATE TABLE item (
    id INTEGER PRIMARY KEY,
    owner_id INTEGER REFERENCES owner(id),
    kind TEXT REFERENCES kind(code),
    price INTEGER NOT NULL,
    note TEXT
);
"""


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every owner with a distinct name and one item, every kind used, no NULL anywhere, no price on a literal:
    the accidents of the classes."""
    path = tmp_path_factory.mktemp("classes") / "shop.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript(SHOP)
    connection.executemany("INSERT INTO kind VALUES (?, ?)", [("A", "apples"), ("B", "bread")])
    connection.executemany("INSERT INTO owner VALUES (?, ?)", [(1, "ann"), (2, "bob"), (3, "cy")])
    connection.executemany("INSERT INTO item VALUES (?, ?, ?, ?, ?)",
                           [(1, 1, "A", 10, "x"), (2, 2, "B", 20, "y"), (3, 3, "A", 40, "z")])
    connection.commit()
    connection.close()
    return path


@pytest.mark.parametrize(("kind", "expected", "actual", "clause"), [
    # MAX over no row is one NULL row; ORDER BY ... LIMIT 1 is none.
    ("empty", "SELECT max(price) FROM item", "SELECT price FROM item ORDER BY price DESC LIMIT 1", "item is empty"),
    # A NULL in the column the NOT IN subquery returns.
    ("null", "SELECT name FROM owner WHERE id NOT IN (SELECT owner.id FROM owner JOIN item ON item.owner_id = "
             "owner.id)",
     "SELECT name FROM owner WHERE id NOT IN (SELECT owner_id FROM item)", "is NULL"),
    # Kinds read from the lookup table against kinds read from the items: a kind no item has.
    ("partner", "SELECT DISTINCT kind FROM item", "SELECT code FROM kind", "row"),
    # Grouping by the name against grouping by the key: two owners sharing a name.
    ("duplicate", "SELECT owner.name, count(*) FROM item JOIN owner ON item.owner_id = owner.id GROUP BY owner.id",
     "SELECT owner.name, count(*) FROM item JOIN owner ON item.owner_id = owner.id GROUP BY owner.name", "share"),
    # A bound on the literal: price 30 itself.
    ("boundary", "SELECT id FROM item WHERE price > 30", "SELECT id FROM item WHERE price >= 30", "30"),
])
def test_each_class_alone_tells_its_accident_apart_and_is_named(shop: Path, kind: str, expected: str, actual: str,
                                                                clause: str) -> None:
    report = compare(shop, expected, actual, neighbor_classes=[kind])
    example = neighborhood_of(report)["counterexample"]
    assert report.deterministic_verdict == "pass" and example is not None, neighborhood_of(report)
    assert example["class"] == kind
    assert re.match(r"on (this \d+-row database,|a database) where [^,]+, the actual query", example["sentence"])
    assert clause in example["sentence"].split(", the actual query")[0], example["sentence"]
    assert PROFILES[example["neighbor"] % len(PROFILES)].classes <= {kind}


def test_a_class_switched_off_builds_none_of_its_neighbors(shop: Path) -> None:
    """MAX against ORDER BY ... LIMIT 1 differs only on an empty input: without the empty class no neighbor
    tells them apart; with no class at all no neighbor is built."""
    expected, actual = "SELECT max(price) FROM item", "SELECT price FROM item ORDER BY price DESC LIMIT 1"
    without = neighborhood_of(compare(shop, expected, actual, neighbor_classes=[c for c in CLASSES if c != "empty"]))
    assert without["neighbor_search_ran"] and without["neighbors_tried"] > 0 and not without["counterexample_found"]
    none = neighborhood_of(compare(shop, expected, actual, neighbor_classes=[]))
    assert none["neighbors_tried"] == 0 and not none["counterexample_found"]
    assert neighborhood_of(compare(shop, expected, actual))["counterexample"]["class"] == "empty"


def test_an_actual_query_that_picks_one_of_several_rows_is_still_a_counterexample(shop: Path) -> None:
    """A scalar subquery that meets two owners of one name returns one of them, whichever the engine scans
    first; the join keeps both. The actual result changes with the row order, but never matches."""
    report = compare(shop, "SELECT item.id FROM item JOIN owner ON item.owner_id = owner.id WHERE owner.name = 'bob'",
                     "SELECT id FROM item WHERE owner_id = (SELECT id FROM owner WHERE name = 'bob')")
    found = neighborhood_of(report)
    assert found["counterexample_found"], found
    owners = found["counterexample"]["tables"]["owner"]["rows"]
    assert sum(row[1] == "bob" for row in owners) >= 2
    assert any("differs from the expected result either way" in note for note in found["nondeterminism"]), found


TV = """
CREATE TABLE channel (id TEXT PRIMARY KEY, name TEXT);
CREATE TABLE cartoon (id INTEGER PRIMARY KEY, director TEXT, channel TEXT REFERENCES channel(id));
"""


def test_no_neighbor_holds_null_in_a_primary_key_column(tmp_path: Path) -> None:
    """A TEXT primary key may hold NULL in SQLite (a legacy quirk), never in standard SQL: no neighbor puts one
    there, even where a nullable key that references it is NULL, so EXCEPT against a join over the key (equal
    on every such database) gets no counterexample."""
    path = tmp_path / "tv.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript(TV)
    connection.executemany("INSERT INTO channel VALUES (?, ?)", [("700", "a"), ("701", "b"), ("702", "c")])
    connection.executemany("INSERT INTO cartoon VALUES (?, ?, ?)", [(1, "ben", "700"), (2, "ann", "701")])
    connection.commit()
    connection.close()
    expected = "SELECT id FROM channel EXCEPT SELECT channel FROM cartoon WHERE director = 'ben'"
    actual = ("SELECT id FROM channel EXCEPT SELECT channel.id FROM cartoon JOIN channel ON cartoon.channel = "
              "channel.id WHERE cartoon.director = 'ben'")
    database = ExecutionAdapter(str(path))
    try:
        schema = read_schema(database, 40, 5000)
        assert not isinstance(schema, str)
        found = hints([parse_one(expected), parse_one(actual)], schema)
        tables = schema.scope(found.tables)
        assert sample(database, schema, tables, time.monotonic() + 60, 5000) is None
        for number in neighbor_numbers(3 * len(PROFILES), tables, found):
            rows = neighbor_rows(schema, tables, found, number, random.Random(seed_of(0, number)))
            for name in tables:
                keys = [i for i, column in enumerate(schema.tables[name].columns) if column.primary_key]
                assert all(row[i] is not None for row in rows[name] for i in keys), (number, name, rows[name])
    finally:
        database.close()
    report = compare(path, expected, actual, neighbor_count=3 * len(PROFILES), neighbor_skip_proven=False)
    assert report.deterministic_verdict == "pass" and not neighborhood_of(report)["counterexample_found"]


def test_a_parent_no_query_reads_keeps_only_the_rows_the_neighbor_references(shop: Path) -> None:
    """``owner`` is in scope only as ``item``'s parent: a neighbor keeps the owners its items reference (an
    item's key given as text meets its INTEGER owner too) and no other, and the queries still tell the
    accident apart on it."""
    expected, actual = "SELECT id FROM item WHERE price > 30", "SELECT id FROM item WHERE price >= 30"
    database = ExecutionAdapter(str(shop))
    try:
        schema = read_schema(database, 40, 5000)
        assert not isinstance(schema, str)
        found = hints([parse_one(expected), parse_one(actual)], schema)
        tables = schema.scope(found.tables)
        assert "owner" in tables and "owner" not in found.tables
        assert sample(database, schema, tables, time.monotonic() + 60, 5000) is None
        for number in neighbor_numbers(2 * len(PROFILES), tables, found):
            rows = neighbor_rows(schema, tables, found, number, random.Random(seed_of(0, number)))
            referenced = {str(row[1]) for row in rows["item"] if row[1] is not None}
            assert all(str(owner[0]) in referenced for owner in rows["owner"]), (number, rows)
    finally:
        database.close()
    assert unreferenced_dropped(schema, ["owner", "item"], {"owner": [(1, "ann"), (2, "bob"), (3, "cy")],
                                                           "item": [(1, "2", None, 5, None)]}, {"item"}) \
        == {"owner": [(2, "bob")], "item": [(1, "2", None, 5, None)]}
    assert neighborhood_of(compare(shop, expected, actual))["counterexample_found"]


def test_a_counterexample_without_its_profiles_fact_names_another_class_its_rows_hold(shop: Path) -> None:
    """EXCEPT over names against NOT IN over keys: two owners sharing a name tell them apart, whatever profile
    found the difference, and the sentence says so."""
    report = compare(shop, "SELECT name FROM owner WHERE id NOT IN (SELECT owner_id FROM item WHERE price > 30)",
                     "SELECT name FROM owner EXCEPT SELECT owner.name FROM owner JOIN item ON item.owner_id = "
                     "owner.id WHERE price > 30", neighbor_classes=["boundary"])
    example = neighborhood_of(report)["counterexample"]
    assert example is not None and "share name" in example["sentence"], example
    assert example["class"] == "duplicate"
