"""Natural accidental passes: recall and false alarms of the neighbor search on hand-labelled SuperSQL passes.

    python benchmarks/natural_passes.py [--spider ../shared/data/spider] [--workers 1] [--check-only]

``natural_passes.yaml`` labels SuperSQL's passes on Spider dev whose SQL differs from gold beyond formatting (the
search runs on them: their canonical trees differ, and no rewrite proves them equal). Each is ``equivalent``
(with a one-sentence argument) or ``different``, with the class of data that tells the queries apart and the
SQL statements that build a counterexample from the case's own database.

The script first checks every label: each case must pass on its own database; for a ``different`` one the
statements are applied to a copy made here (in a temporary directory, with foreign keys enforced), the copy
must keep every declared constraint (no foreign-key violation that the original lacks, checked after the
statements; ``integrity_check`` ok;
NOT NULL, UNIQUE, PRIMARY KEY and CHECK are enforced by SQLite on the statements themselves), and the case must
fail on the copy under sqlcmp's own comparison. A label that does not hold is printed and the script exits 1.

It then evaluates every labelled case on its own database with ``verdict_scope: neighborhood`` and the default
search, and prints recall per class (``different`` cases that got a counterexample) and false alarms
(``equivalent`` cases that got one), with the class the counterexample names.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report
from sqlcmp_dagster.engine.neighbor_report import neighborhood_of
from sqlcmp_dagster.engine.pipeline import Evaluator

DEFAULT_SPIDER = Path(os.environ.get("SQLCMP_SPIDER_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"
                                     / "spider"))
LABELS = Path(__file__).with_name("natural_passes.yaml")
CLASSES = ("empty", "null", "boundary", "partner", "duplicate", "other")
#: Differences that only a tie of the ORDER BY key under LIMIT makes: which tied row comes back is the engine's
#: choice, reported as non-determinism rather than as a counterexample, so they are counted apart from recall.
TIE = "tie"


def cases(spider: Path, labels: list[dict[str, Any]], config: EvalConfig) -> list[CompareRequest]:
    """One case per label: the gold query of Spider dev line ``case`` (0-based) and SuperSQL's prediction."""
    gold = [line.rstrip("\n").split("\t") for line in (spider / "dev_gold.sql").open() if line.strip()]
    predicted = [line.rstrip("\n") for line in (spider / "predictions" / "SuperSQL.sql").open()]
    out = []
    for label in labels:
        sql, db = gold[label["case"]]
        if db != label["db"]:
            sys.exit(f"case {label['case']}: the label names {label['db']}, Spider dev line names {db}")
        out.append(CompareRequest(case_id=str(label["case"]), expected_sql=sql, actual_sql=predicted[label["case"]],
                                  db=db, config=config))
    return out


def evaluate(db_dir: Path, requests: list[CompareRequest], workers: int) -> list[Report]:
    evaluator = Evaluator(db_dir=db_dir)
    try:
        return evaluator.evaluate_all(requests, workers=workers)
    finally:
        evaluator.close()


def violations(connection: sqlite3.Connection) -> set[tuple[Any, ...]]:
    """The rows that break a foreign key, table by table: a key that references no unique column (a malformed
    declaration, ``foreign key mismatch``) constrains nothing and is left out."""
    found: set[tuple[Any, ...]] = set()
    for (table,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        try:
            found |= set(connection.execute(f'PRAGMA foreign_key_check("{table}")').fetchall())
        except sqlite3.OperationalError as error:
            if "mismatch" not in str(error):
                raise
    return found


def build_copy(spider: Path, label: dict[str, Any], root: Path) -> str | None:
    """The label's counterexample: its statements applied to a copy of its database under ``root`` (laid out as a
    db_dir); why it breaks a declared constraint, or None."""
    db = label["db"]
    target = root / db / f"{db}.sqlite"
    target.parent.mkdir(parents=True)
    shutil.copyfile(spider / "database" / db / f"{db}.sqlite", target)
    connection = sqlite3.connect(target, isolation_level=None)
    try:
        before = violations(connection)  # the statements run unchecked; the keys are checked after them
        for statement in label["statements"]:
            try:
                connection.execute(statement)
            except sqlite3.Error as error:
                return f"{statement!r}: {error}"
        added = violations(connection) - before
        if added:
            return f"foreign keys broken: {sorted(added)[:3]}"
        integrity = connection.execute("PRAGMA integrity_check").fetchone()[0]
        return None if integrity == "ok" else f"integrity_check: {integrity}"
    finally:
        connection.close()


def check(spider: Path, labels: list[dict[str, Any]], workers: int) -> list[str]:
    """What does not hold of the labels: a case that does not pass on its own database, a counterexample that
    breaks a constraint or on which the case still passes."""
    plain = EvalConfig(neighbor_count=0)
    problems = [f"case {r.case_id}: {r.deterministic_verdict} on its own database, not a pass"
                for r in evaluate(spider / "database", cases(spider, labels, plain), workers)
                if r.deterministic_verdict != "pass"]
    different = [label for label in labels if label["label"] == "different"]
    with tempfile.TemporaryDirectory(prefix="sqlcmp-natural-") as work:
        for n, label in enumerate(different):
            root = Path(work) / str(n)
            broken = build_copy(spider, label, root)
            if broken is not None:
                problems.append(f"case {label['case']}: the counterexample {broken}")
                continue
            (report,) = evaluate(root, cases(spider, [label], plain), 1)
            if report.deterministic_verdict == "pass":
                problems.append(f"case {label['case']}: still passes on its counterexample")
    return problems


def measure(spider: Path, labels: list[dict[str, Any]], workers: int) -> None:
    reports = evaluate(spider / "database", cases(spider, labels, EvalConfig(verdict_scope="neighborhood")), workers)
    found: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    named: collections.Counter[str] = collections.Counter()
    missed, alarms = [], []
    for label, report in zip(labels, reports):
        search = neighborhood_of(report)
        example = search.get("counterexample")
        if label["label"] == "equivalent":
            found["equivalent"]["cases"] += 1
            if example is not None:
                found["equivalent"]["alarms"] += 1
                alarms.append(f"  FALSE ALARM case {label['case']} ({label['db']}): {example['sentence']}")
            continue
        counts = found[label["class"]]
        counts["cases"] += 1
        if example is not None:
            counts["found"] += 1
            named[example.get("class", "unnamed")] += 1
        else:
            missed.append(f"  missed case {label['case']} ({label['db']}, {label['class']}): {label['why']}")
    print(f"natural passes: {len(labels)} labelled, {sum(found[c]['cases'] for c in (*CLASSES, TIE))} different "
          f"({found[TIE]['cases']} of them by a tie only), {found['equivalent']['cases']} equivalent")
    print("| class | different | counterexample | recall |")
    print("|---|---:|---:|---:|")
    total = collections.Counter[str]()
    for name in CLASSES:
        counts = found[name]
        total.update(counts)
        rate = f"{counts['found'] / counts['cases']:.1%}" if counts["cases"] else "n/a"
        print(f"| {name} | {counts['cases']} | {counts['found']} | {rate} |")
    print(f"| **all** | {total['cases']} | {total['found']} | {total['found'] / max(total['cases'], 1):.1%} |")
    print(f"ties of an ORDER BY key under LIMIT (counted apart, as non-determinism): {found[TIE]['found']} of "
          f"{found[TIE]['cases']} got a counterexample")
    print(f"false alarms: {found['equivalent']['alarms']} of {found['equivalent']['cases']} equivalent")
    print(f"classes the counterexamples name: {dict(named.most_common())}")
    print("\n".join(missed + alarms))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider", type=Path, default=DEFAULT_SPIDER)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--check-only", action="store_true", help="check the labels, measure nothing")
    args = parser.parse_args()
    if not (args.spider / "dev_gold.sql").is_file():
        sys.exit(f"the Spider dev set is not at {args.spider} (set SQLCMP_SPIDER_DIR or pass --spider)")
    labels = yaml.safe_load(LABELS.read_text())
    unknown = [label["case"] for label in labels
               if label["label"] == "different" and label["class"] not in (*CLASSES, TIE)]
    if unknown:
        sys.exit(f"labels with an unknown class: {unknown}")
    problems = check(args.spider, labels, args.workers)
    for problem in problems:
        print(f"LABEL DOES NOT HOLD: {problem}")
    if problems:
        sys.exit(1)
    print(f"all {len(labels)} labels hold")
    if not args.check_only:
        measure(args.spider, labels, args.workers)


if __name__ == "__main__":
    main()
