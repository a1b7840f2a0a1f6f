"""Spider's official execution rules (``exec_eval.py`` of taoyds/test-suite-sql-eval, with its defaults: no value
plugging, DISTINCT removed): execution accuracy on one database, and test-suite accuracy over a folder of them.

Execution accuracy runs both queries after :func:`postprocess` and :func:`remove_distinct` and compares their
rows by :func:`denotations_equal` (in order when the gold query has ``order by`` anywhere, :func:`order_matters`).
Test-suite accuracy (Zhong et al. 2020) asks the same on every database of a test suite: the official suites
ship as a folder per db id holding several ``.sqlite`` files, and a prediction passes only when it passes on each
of them (:func:`suite_databases`, :func:`passes_test_suite`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot.tokens import TokenType

from sqlcmp_dagster.engine.fingerprint import DigestStore, database_fingerprint

Rows = list[tuple[Any, ...]]
#: Column assignments a test-suite comparison tries on one database before it gives up on the case (no verdict).
MOST_ASSIGNMENTS = 100_000
#: What runs one query on one database of a test suite: its rows, or None when it fails there.
Execute = Callable[[Path, str], Rows | None]
_CURRENT_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def postprocess(sql: str) -> str:
    """Close up the spaced comparison operators some systems emit and fix the current year at 2020, as the
    official evaluation does before it runs a query.

    >>> postprocess("SELECT * FROM t WHERE a > = 1 AND b ! = 2 AND y < YEAR( CURDATE() ) - 1")
    'SELECT * FROM t WHERE a >= 1 AND b != 2 AND y < 2020- 1'
    """
    closed = sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
    return _CURRENT_YEAR.sub("2020", closed)


def remove_distinct(sql: str) -> str:
    """``sql`` without any DISTINCT keyword (string literals untouched); ``sql`` itself if it does not tokenize.

    >>> remove_distinct("SELECT DISTINCT a, count(DISTINCT b) FROM t WHERE c = 'distinct'")
    "SELECT a, count(b) FROM t WHERE c = 'distinct'"
    """
    try:
        tokens = sqlglot.Dialect.get_or_raise("sqlite").tokenize(sql)
    except sqlglot.errors.SqlglotError:
        return sql
    kept, cursor = [], 0
    for token in tokens:
        if token.token_type == TokenType.DISTINCT:
            kept.append(sql[cursor:token.start])
            cursor = token.end + 1
            while cursor < len(sql) and sql[cursor].isspace():
                cursor += 1
    kept.append(sql[cursor:])
    return "".join(kept)


def order_matters(gold_sql: str) -> bool:
    """The official order rule: the text ``order by`` anywhere in the gold query.

    >>> order_matters("SELECT a FROM t WHERE b IN (SELECT b FROM u ORDER BY c LIMIT 1)")
    True
    """
    return "order by" in gold_sql.lower()


def denotations_equal(gold: Sequence[tuple[Any, ...]], predicted: Sequence[tuple[Any, ...]], ordered: bool,
                      close: Any = None, permute_columns: bool = True, most_tried: int | None = None) -> bool:
    """Whether some permutation of ``predicted``'s columns makes it equal to ``gold``: as lists when
    ``ordered``, as multisets otherwise. ``close(a, b)`` replaces exact cell equality when given, and
    ``permute_columns=False`` allows only the columns' own order (both used only to test which rule explains a
    disagreement). With ``most_tried``, :class:`Undecided` is raised past that many column assignments: results
    whose columns repeat each other's values leave up to width-to-the-width of them, and a hostile prediction
    can ask for that.

    >>> denotations_equal([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], ordered=False)
    True
    >>> denotations_equal([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], ordered=True)
    False
    >>> denotations_equal([], [], ordered=True), denotations_equal([(1,)], [(1,), (1,)], ordered=False)
    (True, False)
    """
    if not gold and not predicted:
        return True
    if len(gold) != len(predicted) or len(gold[0]) != len(predicted[0]):
        return False
    width = len(gold[0])
    if close is None:
        gold_values = [{row[i] for row in gold} for i in range(width)]
        # A predicted column can stand for a gold column only if every one of its values occurs there.
        candidates = [[j for j in range(width) if all(row[j] in gold_values[i] for row in predicted)]
                      for i in range(width)]
    else:  # the same constraint, on a sample of rows, with ``close`` for equality
        candidates = [[j for j in range(width)
                       if all(any(close(row[j], other[i]) for other in gold) for row in predicted[:20])]
                      for i in range(width)]
    if not permute_columns:
        candidates = [[i] if i in allowed else [] for i, allowed in enumerate(candidates)]
    # the columns' own order first: most equal results need no other
    own = [tuple(range(width))] if all(i in allowed for i, allowed in enumerate(candidates)) else []
    for tried, permutation in enumerate(itertools.chain(own, itertools.product(*candidates))):
        if most_tried is not None and tried >= most_tried:
            raise Undecided()
        if len(set(permutation)) != width:
            continue
        moved = [tuple(row[j] for j in permutation) for row in predicted]
        if close is not None:
            if _close_rows(gold, moved, ordered, close):
                return True
        elif (list(gold) == moved) if ordered else (Counter(gold) == Counter(moved)):
            return True
    return False


def _close_rows(gold: Sequence[tuple[Any, ...]], predicted: Sequence[tuple[Any, ...]], ordered: bool,
                close: Any) -> bool:
    if ordered:
        return all(all(close(a, b) for a, b in zip(g, p, strict=True)) for g, p in zip(gold, predicted, strict=True))
    remaining = list(predicted)
    for row in sorted(gold, key=_sort_key):
        match = next((i for i, other in enumerate(remaining)
                      if all(close(a, b) for a, b in zip(row, other, strict=True))), None)
        if match is None:
            return False
        remaining.pop(match)
    return True


def _sort_key(value: Any) -> tuple[str, str]:
    return (type(value).__name__, str(value))




class Undecided(Exception):
    """A query of a test suite neither ran nor failed as the official script would see it (cut by a row or size
    cap, or by the case's time budget): the case has no test-suite verdict."""


def suite_databases(database: Path) -> list[Path]:
    """The databases of ``database``'s test suite: every file in its folder whose name holds ``.sqlite`` (the
    official script's rule, the database itself among them), when there are several; none otherwise.

    >>> suite_databases(Path("/nonexistent/db/db.sqlite"))
    []
    """
    return _listed(database.parent)


def _listed(folder: Path) -> list[Path]:
    """The official rule's test suite in ``folder``: its files whose name holds ``.sqlite``, when there are
    several."""
    try:
        names = sorted(name for name in os.listdir(folder) if ".sqlite" in name)
    except OSError:
        return []
    files = [folder / name for name in names if (folder / name).is_file()]
    return files if len(files) > 1 else []


#: The endings of the files SQLite keeps beside a database: its write-ahead log and shared-memory index, and its
#: rollback journal.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def suite_files(database: Path) -> tuple[list[str], list[str]]:
    """What a report on the SQLite database ``database`` reads of its test suite besides the database itself: the
    other databases, whose content decides the test-suite verdict, and apart from them the files SQLite keeps
    beside a database there, which the official rule counts among them and reads none of as one
    (:func:`folder_suite`, the database left out).

    >>> suite_files(Path("/nonexistent/db/db.sqlite"))
    ([], [])
    """
    databases, companions = folder_suite(database.parent)
    return [name for name in databases if Path(name) != database], companions


def folder_suite(folder: Path) -> tuple[list[str], list[str]]:
    """The test suite in ``folder`` (:func:`suite_databases`: one for every database there): its databases, and
    apart from them the files SQLite keeps beside a database, which the official rule counts among them and reads
    none of as one. Their names decide the verdict, not their content, which readers change (the shared-memory
    index's read marks; run as root, their owner at each connection)."""
    listed = [str(file) for file in _listed(folder)]
    return ([name for name in listed if not name.endswith(SQLITE_COMPANIONS)],
            [name for name in listed if name.endswith(SQLITE_COMPANIONS)])


def suite_fingerprint(folder: Path, store: DigestStore | None = None) -> str | None:
    """A digest of the databases of the test suite in ``folder`` (:func:`folder_suite`), by their content, for a
    version that must change when the test-suite verdict may; None when the folder holds no test suite. One value
    for every database of the folder, so that a caller computes it once per folder: a flat folder of 800
    databases, each its own suite's, took 20 s of a sensor's tick when each database's version read all the
    others.

    SQLite's files beside the databases are left out, although the official rule counts them: the engine's own
    read-only connections create a database's ``-wal`` and ``-shm`` in WAL mode, and any read-write connection that
    closes deletes them, so a version holding their names would change with every run and every reader (a review
    found Dagster re-running unchanged cases tick after tick). Whether they are there as a report is computed
    follows from the engine's own reads, not from what the version could see before them."""
    databases, _ = folder_suite(folder)
    if not databases:
        return None
    content = [[name, database_fingerprint(name, store)] for name in databases]
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]


def passes_test_suite(gold_sql: str, predicted_sql: str, files: Sequence[Path], execute: Execute) -> bool | None:
    """Spider's test-suite verdict: the prediction passes on each of ``files`` by the official execution rules.
    As ``evaluation.py`` does before it runs a prediction, ``value`` in it is read as ``1``. None when the gold query
    fails on a database the official script reaches (it stops with an assertion there), a query is
    :class:`Undecided` or its columns leave more than :data:`MOST_ASSIGNMENTS` ways to match them; a prediction
    that fails is wrong, and the first database it is wrong on decides."""
    gold = remove_distinct(postprocess(gold_sql))
    predicted = remove_distinct(postprocess(predicted_sql.replace("value", "1")))
    ordered = order_matters(gold)
    try:
        for file in files:
            gold_rows = execute(file, gold)
            if gold_rows is None:
                return None
            predicted_rows = execute(file, predicted)
            if predicted_rows is None or not denotations_equal(gold_rows, predicted_rows, ordered,
                                                               most_tried=MOST_ASSIGNMENTS):
                return False
    except Undecided:
        return None
    return True
