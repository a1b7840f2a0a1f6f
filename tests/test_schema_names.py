"""Renaming a benchmark database back to its published identifiers (tables.json), paired by structure."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sqlcmp_dagster.cases.importers import BenchmarkFormatError, restore_spider_databases
from sqlcmp_dagster.cases.schema_names import (SchemaMismatchError, Table, database_tables, pair_tables,
                                               published_tables, restore_names)

# The published schema: English names. Two tables share a shape (two columns) and differ only by their keys.
SCHEMA: dict[str, Any] = {
    "db_id": "zoo",
    "table_names_original": ["Keeper", "Animal", "Pen", "sqlite_sequence"],
    "column_names_original": [[-1, "*"], [0, "keeper_id"], [0, "Name"], [1, "animal_id"], [1, "pen_id"],
                              [1, "keeper_id"], [2, "pen_id"], [2, "size"], [3, "name"], [3, "seq"]],
    "column_types": ["text", "number", "text", "number", "number", "number", "number", "number", "text", "text"],
    "foreign_keys": [[4, 6], [5, 1]],
}


def _translated_zoo(path: Path) -> None:
    """The same database with every identifier translated and the tables in another order."""
    connection = sqlite3.connect(path)
    connection.executescript("""
        CREATE TABLE gehege (gehege_id INTEGER PRIMARY KEY, größe INTEGER);
        CREATE TABLE tier (tier_id INTEGER, gehege_id INTEGER REFERENCES gehege(gehege_id),
                           wärter_id INTEGER REFERENCES wärter(wärter_id));
        CREATE TABLE wärter (wärter_id INTEGER PRIMARY KEY, name TEXT);
        INSERT INTO gehege VALUES (1, 50), (2, 80);
        INSERT INTO wärter VALUES (1, 'Ada'), (2, 'Bo');
        INSERT INTO tier VALUES (10, 1, 2), (11, 2, 2), (12, 2, 1);
    """)
    connection.commit()
    connection.close()


def test_pairs_tables_by_shape_and_keys_and_renames_a_copy(tmp_path: Path) -> None:
    source = tmp_path / "zoo.sqlite"
    _translated_zoo(source)
    before = source.read_bytes()
    renames = pair_tables(database_tables(source), published_tables(SCHEMA), "zoo")
    # gehege and wärter both have two columns: only the foreign keys from tier tell them apart.
    assert {r.table: r.published_table for r in renames} == {"gehege": "Pen", "tier": "Animal", "wärter": "Keeper"}
    target = tmp_path / "out" / "zoo.sqlite"
    restore_names(source, target, renames)
    assert source.read_bytes() == before  # the original is never touched
    connection = sqlite3.connect(target)
    rows = connection.execute("SELECT k.Name, count(*) FROM Animal AS a JOIN Keeper AS k ON a.keeper_id = k.keeper_id "
                              "JOIN Pen AS p ON p.pen_id = a.pen_id GROUP BY k.Name ORDER BY k.Name").fetchall()
    keys = connection.execute("PRAGMA foreign_key_list(Animal)").fetchall()
    connection.close()
    assert rows == [("Ada", 1), ("Bo", 2)]
    assert sorted((k[2], k[3], k[4]) for k in keys) == [("Keeper", "keeper_id", "keeper_id"),
                                                         ("Pen", "pen_id", "pen_id")]
    names = json.loads((target.parent / "names.json").read_text(encoding="utf-8"))
    assert names["Pen"] == {"database_table": "gehege", "columns": {"pen_id": "gehege_id", "size": "größe"}}


def test_same_shape_without_keys_is_ambiguous_and_named() -> None:
    database = [Table("gehege", ("gehege_id", "größe"), ("number", "number")),
                Table("wärter", ("wärter_id", "alter"), ("number", "number"))]
    published = [Table("Pen", ("pen_id", "size"), ("number", "number")),
                 Table("Keeper", ("keeper_id", "age"), ("number", "number"))]
    with pytest.raises(SchemaMismatchError, match=r"zoo: tables \['gehege', 'wärter'\] could each be more than one"):
        pair_tables(database, published, "zoo")


def test_a_table_of_no_matching_shape_is_named(tmp_path: Path) -> None:
    source = tmp_path / "zoo.sqlite"
    _translated_zoo(source)
    schema = json.loads(json.dumps(SCHEMA))
    schema["column_names_original"].append([2, "colour"])
    schema["column_types"].append("text")
    with pytest.raises(SchemaMismatchError, match=r"tables with 2 columns do not pair: database \['gehege', 'wärter'\]"):
        pair_tables(database_tables(source), published_tables(schema), "zoo")


def test_restore_spider_databases_copies_agreeing_and_renames_differing(tmp_path: Path) -> None:
    db_dir = tmp_path / "database"
    (db_dir / "zoo").mkdir(parents=True)
    _translated_zoo(db_dir / "zoo" / "zoo.sqlite")
    (db_dir / "plain").mkdir()
    connection = sqlite3.connect(db_dir / "plain" / "plain.sqlite")
    connection.execute("CREATE TABLE t (ID INTEGER)")
    connection.commit()
    connection.close()
    plain = {"db_id": "plain", "table_names_original": ["T"], "column_names_original": [[-1, "*"], [0, "id"]],
             "column_types": ["text", "number"], "foreign_keys": []}
    tables = tmp_path / "tables.json"
    tables.write_text(json.dumps([SCHEMA, plain]), encoding="utf-8")
    renamed = restore_spider_databases(db_dir, tables, ["zoo", "plain", "zoo"], tmp_path / "out")
    assert renamed["plain"] == 0 and renamed["zoo"] > 0  # case differences alone need no renaming in SQLite
    assert (tmp_path / "out" / "plain" / "plain.sqlite").read_bytes() == (db_dir / "plain" / "plain.sqlite").read_bytes()
    assert not (tmp_path / "out" / "plain" / "names.json").exists()
    with pytest.raises(BenchmarkFormatError, match="no schema for database 'ghost'"):
        restore_spider_databases(db_dir, tables, ["ghost"], tmp_path / "out")
