"""Importers from the formats text-to-SQL researchers already have: Spider and BIRD, into a suite (JSONL).

Cases are paired by question id, never by position alone: Spider's gold file must agree with its question file
on every line (same database, same query), and a BIRD prediction is looked up by its question id. Any
disagreement, missing id or length mismatch is an :class:`BenchmarkFormatError` that names the file and the line or id.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from sqlcmp_dagster.engine.atomic import atomic_path, decode_utf8, read_bytes, read_utf8, text_lines
from sqlcmp_dagster.engine.sandbox.sqlite import sqlite_read_only


class BenchmarkFormatError(ValueError):
    """The benchmark files do not line up; the message says where."""


@dataclass(frozen=True)
class ImportedCase:
    case_id: str
    user_query: str
    expected_sql: str
    actual_sql: str
    db: str
    context: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"case_id": self.case_id, "user_query": self.user_query,
                                  "expected_sql": self.expected_sql, "actual_sql": self.actual_sql, "db": self.db}
        if self.context:
            record["context"] = self.context
        return record


def import_spider(questions: Path, gold: Path, predictions: Path, db_dir: Path | None = None) -> list[ImportedCase]:
    """Spider: ``questions`` (dev.json), ``gold`` (``SQL<TAB>db_id`` per line) and ``predictions`` (one SQL per
    line, or ``SQL<TAB>db_id`` like the gold file) pair by question index, which the gold file must confirm line
    by line, and a prediction that names its database too.

    A blank line in ``predictions`` is an empty prediction for that question (it fails to parse, as the
    model's output did); only blank lines at the end of the file are ignored.
    """
    items = _json(questions)
    if not isinstance(items, list):
        raise BenchmarkFormatError(f"{questions}: expected a JSON list of questions")
    gold_lines = _lines(gold)
    predicted = _lines(predictions, keep_blank=True)
    if not (len(items) == len(gold_lines) == len(predicted)):
        blank = sum(not line.strip() for line in predicted)
        raise BenchmarkFormatError(f"length mismatch: {questions} has {len(items)} questions, {gold} {len(gold_lines)} "
                                   f"gold lines, {predictions} {len(predicted)} predictions"
                                   + (f" ({blank} of them blank lines, each an empty prediction)" if blank else ""))
    databases = {str(item.get("db_id")) for item in items}
    cases = []
    for index, (item, gold_line, prediction) in enumerate(zip(items, gold_lines, predicted, strict=True)):
        sql, _, db = gold_line.rpartition("\t")
        if not sql or not db:
            raise BenchmarkFormatError(f"{gold}:{index + 1}: expected 'SQL<TAB>db_id'")
        if db != item.get("db_id"):
            raise BenchmarkFormatError(f"{gold}:{index + 1}: database {db!r} but question {index} of {questions} is on "
                                       f"{item.get('db_id')!r}: the files are not aligned")
        if _squash(sql) != _squash(str(item.get("query", sql))):
            raise BenchmarkFormatError(f"{gold}:{index + 1}: gold SQL differs from question {index}'s query in "
                                       f"{questions}: the files are not aligned")
        predicted_sql, _, named = prediction.rpartition("\t")
        if named.strip() in databases:  # 'SQL<TAB>db_id': the prediction names its database, which must agree
            if named.strip() != db:
                raise BenchmarkFormatError(f"{predictions}:{index + 1}: prediction is on database {named.strip()!r} "
                                           f"but question {index} is on {db!r}: the files are not aligned")
            prediction = predicted_sql
        _check_db(db_dir, db, f"{gold}:{index + 1}")
        cases.append(ImportedCase(f"spider-{index:04d}", str(item.get("question", "")), sql.strip(),
                                  prediction.strip(), db))
    return cases


def import_bird(questions: Path, predictions: Path, db_dir: Path | None = None) -> list[ImportedCase]:
    """BIRD: ``questions`` (a JSON list with ``question_id``, ``db_id``, ``question``, ``SQL``, ``evidence``)
    and ``predictions`` (a JSON object keyed by question id: ``"SQL\\t----- bird -----\\tdb_id"``)."""
    items = _json(questions)
    predicted = _json(predictions)
    if not isinstance(items, list) or not isinstance(predicted, dict):
        raise BenchmarkFormatError(f"{questions} must be a JSON list and {predictions} a JSON object keyed by question id")
    by_id: dict[str, dict[str, Any]] = {}
    for position, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("db_id"), str) or "SQL" not in item:
            raise BenchmarkFormatError(f"{questions}: question {position} is not an object with 'db_id' and 'SQL'")
        qid = str(item.get("question_id", position))
        if qid in by_id:
            raise BenchmarkFormatError(f"{questions}: question id {qid} appears twice")
        by_id[qid] = item
    missing = sorted(set(by_id) - set(map(str, predicted)), key=_id_order)
    extra = sorted(set(map(str, predicted)) - set(by_id), key=_id_order)
    if missing or extra:
        raise BenchmarkFormatError(f"question ids do not match: {len(missing)} without a prediction (e.g. {missing[:5]}), "
                           f"{len(extra)} predictions for unknown questions (e.g. {extra[:5]})")
    cases = []
    for qid, item in by_id.items():
        raw = str(predicted[qid])  # JSON object keys are strings
        sql, _, db = raw.partition("\t----- bird -----\t")
        if db and db.strip() != item["db_id"]:
            raise BenchmarkFormatError(f"{predictions}: prediction {qid} names database {db.strip()!r}, the question "
                               f"{item['db_id']!r}")
        _check_db(db_dir, item["db_id"], f"{questions}: question {qid}")
        # BIRD's difficulty (simple/moderate/challenging) is kept so that reports break down by it
        context = {key: item[key] for key in ("evidence", "difficulty") if item.get(key)}
        cases.append(ImportedCase(f"bird-{qid}", str(item.get("question", "")), str(item["SQL"]).strip(),
                                  sql.strip(), item["db_id"], context or None))
    return cases


def check_spider_schemas(db_dir: Path, tables: Path, db_ids: list[str]) -> None:
    """Check every database of ``db_ids`` under ``db_dir`` against its entry of ``tables`` (Spider's
    ``tables.json``): each published table must exist with each of its published columns (letter case ignored,
    as SQLite ignores it). Extra tables and columns are allowed.

    A copy of Spider whose identifiers were changed (renamed, translated, rebuilt from another source) makes the
    gold queries fail or, worse, run against other data; this finds it before an evaluation does. Every
    difference of every database is named in one :class:`BenchmarkFormatError`.
    """
    entries = _json(tables)
    if not isinstance(entries, list):
        raise BenchmarkFormatError(f"{tables}: expected a JSON list of database schemas")
    schemas = {str(entry.get("db_id")): entry for entry in entries if isinstance(entry, dict)}
    problems = []
    for db in dict.fromkeys(db_ids):
        if db not in schemas:
            problems.append(f"{tables}: no schema for database {db!r}")
            continue
        _check_db(db_dir, db, str(tables))
        try:
            published = _published_columns(schemas[db])
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise BenchmarkFormatError(f"{tables}: schema of {db!r} is malformed ({error!r})") from error
        present = _database_columns(db_dir / db / f"{db}.sqlite")
        missing_tables = [name for name in published if name.lower() not in present]
        missing_columns = [f"{name}.{column}" for name, columns in published.items() if name.lower() in present
                           for column in columns if column.lower() not in present[name.lower()]]
        if missing_tables or missing_columns:
            problems.append(f"{db_dir / db / (db + '.sqlite')} does not match {tables.name}: "
                            + "; ".join(part for part in (_listing("missing tables", missing_tables),
                                                          _listing("missing columns", missing_columns)) if part))
    if problems:
        raise BenchmarkFormatError("\n".join(problems))


def unknown_tables(cases: list[ImportedCase], db_dir: Path) -> dict[str, list[str]]:
    """Per database, the tables its gold queries read that the database does not have (letter case ignored).

    A benchmark copy whose identifiers were changed (translated, renamed) makes every gold query fail; this
    finds that at import time, before an evaluation reports every case invalid. It needs no schema file, only
    the gold queries (``--tables`` checks columns too). Gold queries that do not parse are left to the
    evaluation, which reports them.
    """
    wanted: dict[str, set[str]] = {}
    for case in cases:
        try:
            tree = sqlglot.parse_one(case.expected_sql, read="sqlite")
        except sqlglot.errors.SqlglotError:
            continue
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        wanted.setdefault(case.db, set()).update(
            t.name.lower() for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes)
    missing = {}
    for db, tables in wanted.items():
        present = set(_database_columns(db_dir / db / f"{db}.sqlite"))
        if tables - present:
            missing[db] = sorted(tables - present)
    return missing


def write_suite(cases: list[ImportedCase], out: Path) -> None:
    """Write ``cases`` as a JSONL suite, atomically."""
    with atomic_path(out) as partial, partial.open("w", encoding="utf-8") as handle:
        for case in cases:
            handle.write(json.dumps(case.to_json(), ensure_ascii=False) + "\n")


def _json(path: Path) -> Any:
    text = read_utf8(path, BenchmarkFormatError)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise BenchmarkFormatError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from error


def _lines(path: Path, *, keep_blank: bool = False) -> list[str]:
    """The lines of ``path``: without blank ones, or with them (``keep_blank``) up to the last non-blank line.

    A carriage return that ends no line (one not before a line feed, in a file that has line feeds) is refused:
    read as a line break, as text files are read, it split one prediction in two and, with an empty last
    prediction dropped, paired every later prediction with the question before its own, the counts still
    equal."""
    raw = read_bytes(path, BenchmarkFormatError)  # once: a pipe has nothing left to read a second time
    if b"\n" in raw and (stray := re.search(rb"\r(?!\n)", raw)) is not None:
        line = raw.count(b"\n", 0, stray.start()) + 1
        raise BenchmarkFormatError(f"{path}:{line}: a carriage return inside the line (a query over several lines?): "
                                   "each line is one query")
    lines = text_lines(decode_utf8(raw, path, BenchmarkFormatError))
    if not keep_blank:
        return [line for line in lines if line.strip()]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _check_db(db_dir: Path | None, db: str, where: str) -> None:
    if db_dir is not None and not (db_dir / db / f"{db}.sqlite").is_file():
        raise BenchmarkFormatError(f"{where}: database {db!r} not found as {db_dir / db / (db + '.sqlite')}")


def _published_columns(entry: dict[str, Any]) -> dict[str, list[str]]:
    """Table name -> column names of one ``tables.json`` entry, by its ``*_original`` (real) identifiers.

    >>> _published_columns({"table_names_original": ["a", "b"],
    ...                     "column_names_original": [[-1, "*"], [0, "id"], [1, "a_id"]]})
    {'a': ['id'], 'b': ['a_id']}
    """
    names: list[str] = entry["table_names_original"]
    columns: dict[str, list[str]] = {name: [] for name in names}
    for table, column in entry["column_names_original"]:
        if table >= 0:
            columns[names[table]].append(column)
    return columns


def _database_columns(path: Path) -> dict[str, set[str]]:
    """Lower-cased table name -> lower-cased column names of the SQLite database at ``path``, opened read-only."""
    connection = sqlite_read_only(path)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table.lower(): {row[1].lower() for row in connection.execute(
                    "SELECT * FROM pragma_table_info(?)", (table,))} for table in tables}
    except sqlite3.DatabaseError as error:
        raise BenchmarkFormatError(f"{path}: not a readable SQLite database ({error})") from error
    finally:
        connection.close()


def _listing(label: str, names: list[str], most: int = 8) -> str:
    if not names:
        return ""
    return f"{label} {', '.join(names[:most])}" + (f" and {len(names) - most} more" if len(names) > most else "")


def _squash(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").lower()


def _id_order(qid: str) -> tuple[int, str]:
    return (int(qid), qid) if qid.isdigit() else (1 << 62, qid)
