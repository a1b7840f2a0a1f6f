"""Layer 2's equivalence form over Spider dev (``SQLCMP_SPIDER_DIR``): how many spellings of one gold query reach
one form, how many changes of meaning are kept apart, and what changes for SuperSQL's passes.

(a) gold against the same query with its single-quoted word literals double-quoted (SQLite reads them back as
    strings: no column has such a name), identical before (canonical text) and after (equivalence form);
(b) gold against rewrites that keep its meaning (generated here, several per query; each checked to return the
    same bag of rows on the Spider database, a rewrite that does not is counted as the generator's error), the
    share reaching gold's form; and against mutations that change its meaning, the number reported identical
    (must be 0);
(c) SuperSQL's predictions through the whole pipeline (neighbors and probes off) on this checkout and on the
    one given by ``--before`` (run in a subprocess with that checkout first on the path): passes with
    structure_score 1.0 on each, and verdicts that differ between them.

    PYTHONPATH=$PWD python benchmarks/structure_rewrites.py --before /work/main
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp


def spider() -> Path:
    return Path(os.environ.get("SQLCMP_SPIDER_DIR", "/work/shared/data/spider"))


def gold() -> list[tuple[str, str]]:
    """(query, database id) of every Spider dev gold line."""
    return [tuple(line.split("\t")) for line in  # type: ignore[misc]
            (spider() / "dev_gold.sql").read_text(encoding="utf-8").splitlines() if line.strip()]


def database_path(db_id: str) -> Path:
    return spider() / "database" / db_id / f"{db_id}.sqlite"


def scores() -> list[tuple[str, float | None]]:
    """(verdict, structure_score) of each SuperSQL prediction against its gold query, through the pipeline of
    whichever checkout is first on the path."""
    from sqlcmp_dagster.engine.execution import ExecutionAdapter
    from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig
    from sqlcmp_dagster.engine.pipeline import compare

    predictions = (spider() / "predictions" / "SuperSQL.sql").read_text(encoding="utf-8").splitlines()
    config = EvalConfig(neighbor_count=0, enable_counterfactual_probes=False)
    adapters: dict[str, Any] = {}
    found = []
    for (expected, db_id), actual in zip(gold(), predictions, strict=True):
        adapter = adapters.get(db_id) or adapters.setdefault(db_id, ExecutionAdapter(str(database_path(db_id))))
        report = compare(CompareRequest(expected_sql=[expected], actual_sql=actual or "SELECT", config=config),
                         adapter)
        found.append((report.deterministic_verdict, report.structure_score))
    for adapter in adapters.values():
        adapter.close()
    return found


# --- (b) the generators: each yields variants of a gold tree (a copy each), or nothing where it does not apply ---

def _variants(tree: exp.Expression, kinds: tuple[type[exp.Expression], ...],
              change: Callable[[exp.Expression], exp.Expression | None]) -> Iterator[exp.Expression]:
    """One variant per node of ``kinds`` that ``change`` rewrites (a copy of the tree with that node replaced)."""
    for index, node in enumerate(tree.find_all(*kinds)):
        copy = tree.copy()
        target = list(copy.find_all(*kinds))[index]
        replacement = change(target)
        if replacement is not None:
            if target is copy:
                yield replacement
            else:
                target.replace(replacement)
                yield copy


_FLIP = {exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}
_NOT = {exp.GT: exp.LTE, exp.LT: exp.GTE, exp.GTE: exp.LT, exp.LTE: exp.GT, exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}


def _in_where(node: exp.Expression) -> bool:
    parent = node.parent
    while isinstance(parent, (exp.And, exp.Or, exp.Paren)):
        parent = parent.parent
    return isinstance(parent, (exp.Where, exp.Having))


EQUIVALENT: dict[str, Callable[[exp.Expression], Iterator[exp.Expression]]] = {
    "explicit ASC": lambda t: _variants(t, (exp.Ordered,), lambda o: o.set("desc", False) or o
                                        if not o.args.get("desc") else None),
    "comparison flipped": lambda t: _variants(t, tuple(_FLIP), lambda c: _FLIP[type(c)](
        this=c.expression.copy(), expression=c.this.copy())),
    "NOT of the negation": lambda t: _variants(t, tuple(_NOT), lambda c: exp.Not(this=exp.Paren(
        this=_NOT[type(c)](this=c.this.copy(), expression=c.expression.copy()))) if _in_where(c) else None),
    "= as IN list of one": lambda t: _variants(t, (exp.EQ,), lambda c: exp.In(
        this=c.this.copy(), expressions=[c.expression.copy()])
        if isinstance(c.expression, exp.Literal) and isinstance(c.this, exp.Column) and _in_where(c) else None),
    "BETWEEN as bounds": lambda t: _variants(t, (exp.Between,), lambda b: exp.Paren(this=exp.and_(
        exp.GTE(this=b.this.copy(), expression=b.args["low"].copy()),
        exp.LTE(this=b.this.copy(), expression=b.args["high"].copy())))),
    "OFFSET 0": lambda t: _offset_zero(t),
    "ORDER BY position": lambda t: _order_position(t),
    "inner joins reversed": lambda t: _joins_reversed(t),
    "DISTINCT as GROUP BY": lambda t: _distinct_grouped(t),
    "conjunction regrouped": lambda t: _and_regrouped(t),
    "IN list as ORs": lambda t: _variants(t, (exp.In,), lambda i: exp.Paren(this=exp.or_(*[
        exp.EQ(this=i.this.copy(), expression=v.copy()) for v in i.expressions]))
        if i.expressions and not isinstance(i.parent, exp.Not) and _in_where(i) else None),
}


def _offset_zero(tree: exp.Expression) -> Iterator[exp.Expression]:
    if isinstance(tree, exp.Select) and tree.args.get("limit") and not tree.args.get("offset"):
        copy = tree.copy()
        copy.set("offset", exp.Offset(expression=exp.Literal.number(0)))
        yield copy


def _order_position(tree: exp.Expression) -> Iterator[exp.Expression]:
    if not isinstance(tree, exp.Select) or not tree.args.get("order"):
        return
    copy = tree.copy()
    projected = [e.unalias().sql() for e in copy.expressions]
    changed = False
    for ordered in copy.args["order"].expressions:
        if ordered.this.sql() in projected and not isinstance(ordered.this, exp.Literal):
            ordered.set("this", exp.Literal.number(projected.index(ordered.this.sql()) + 1))
            changed = True
    if changed:
        yield copy


def _joins_reversed(tree: exp.Expression) -> Iterator[exp.Expression]:
    """The FROM list of a SELECT of inner joins written backwards as a comma join, its ONs moved to WHERE."""
    if not isinstance(tree, exp.Select) or not tree.args.get("joins") or tree.find(exp.Star) is not None \
            and tree.find(exp.Count) is None:
        return
    joins = tree.args["joins"]
    if any(j.side or j.args.get("using") or j.kind not in ("", None, "INNER") for j in joins):
        return
    copy = tree.copy()
    sources = [copy.args["from_"].this, *(j.this for j in copy.args["joins"])]
    conditions = [j.args["on"] for j in copy.args["joins"] if j.args.get("on") is not None]
    if copy.args.get("where"):
        conditions.append(copy.args["where"].this)
    sources.reverse()
    copy.set("from_", exp.From(this=sources[0]))
    copy.set("joins", [exp.Join(this=s) for s in sources[1:]])
    copy.set("where", exp.Where(this=exp.and_(*conditions)) if conditions else None)
    yield copy


def _distinct_grouped(tree: exp.Expression) -> Iterator[exp.Expression]:
    if isinstance(tree, exp.Select) and tree.args.get("distinct") and not tree.args.get("group") \
            and tree.find(exp.AggFunc) is None and not any(e.is_star for e in tree.expressions):
        copy = tree.copy()
        copy.set("distinct", None)
        copy.set("group", exp.Group(expressions=[e.unalias().copy() for e in copy.expressions]))
        yield copy


def _and_regrouped(tree: exp.Expression) -> Iterator[exp.Expression]:
    where = tree.args.get("where") if isinstance(tree, exp.Select) else None
    if where is not None and isinstance(where.this, exp.And):
        parts = list(where.this.flatten())
        copy = tree.copy()
        copy.set("where", exp.Where(this=exp.and_(*[p.copy() for p in reversed(parts[1:])], exp.Paren(
            this=parts[0].copy()))))
        yield copy


MEANING_CHANGES: dict[str, Callable[[exp.Expression], Iterator[exp.Expression]]] = {
    ">= as >": lambda t: _variants(t, (exp.GTE, exp.GT), lambda c: (exp.GT if isinstance(c, exp.GTE) else exp.GTE)(
        this=c.this.copy(), expression=c.expression.copy())),
    "= as LIKE": lambda t: _variants(t, (exp.EQ,), lambda c: exp.Like(this=c.this.copy(), expression=c.expression.copy())
                                     if isinstance(c.expression, exp.Literal) and c.expression.is_string else None),
    "INNER as LEFT": lambda t: _variants(t, (exp.Join,), lambda j: j.set("side", "LEFT") or j
                                         if j.args.get("on") is not None and not j.side else None),
    "UNION as UNION ALL": lambda t: _variants(t, (exp.Union,), lambda u: u.set("distinct", not u.args.get("distinct"))
                                              or u),
    "INTERSECT as EXCEPT": lambda t: _variants(t, (exp.Intersect,), lambda i: exp.Except(
        this=i.this.copy(), expression=i.expression.copy(), distinct=True)),
    "DESC as ASC": lambda t: _variants(t, (exp.Ordered,), lambda o: o.set("desc", not o.args.get("desc")) or o),
    "literal changed": lambda t: _variants(t, (exp.Literal,), lambda lit: exp.Literal.string(lit.this + "x")
                                           if lit.is_string else None),
    "LIMIT changed": lambda t: _variants(t, (exp.Limit,), lambda lim: exp.Limit(expression=exp.Literal.number(
        int(lim.expression.this) + 1)) if isinstance(lim.expression, exp.Literal) else None),
    "DISTINCT dropped": lambda t: _variants(t, (exp.Distinct,), lambda d: d.pop() or None),  # type: ignore[func-returns-value]
    "AND as OR": lambda t: _variants(t, (exp.And,), lambda a: exp.Or(this=a.this.copy(), expression=a.expression.copy())),
    "NOT IN as IN": lambda t: _variants(t, (exp.Not,), lambda n: n.this.copy() if isinstance(n.this, exp.In) else None),
    "MAX as MIN": lambda t: _variants(t, (exp.Max,), lambda m: exp.Min(this=m.this.copy())),
}


def rows(connection: sqlite3.Connection, sql: str) -> Counter[tuple[Any, ...]] | None:
    try:
        return Counter(connection.execute(sql).fetchmany(100_000))
    except sqlite3.Error:
        return None


def run(before: str | None) -> None:
    from sqlcmp_dagster.engine.parsing import canonical_text, parse
    from sqlcmp_dagster.engine.rewrites import equivalence_form

    catalogs: dict[str, dict[str, list[str]]] = {}
    connections: dict[str, sqlite3.Connection] = {}

    def catalog(db_id: str) -> dict[str, list[str]]:
        if db_id not in catalogs:
            connection = sqlite3.connect(f"file:{database_path(db_id)}?mode=ro", uri=True)
            connections[db_id] = connection
            names = [n for (n,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            catalogs[db_id] = {n.lower(): [c[1].lower() for c in connection.execute(f'PRAGMA table_info("{n}")')]
                               for n in names}
        return catalogs[db_id]

    def form(sql: str, db_id: str) -> str | None:
        outcome = parse(sql, "sqlite")
        if outcome.tree is None:
            return None
        return canonical_text(equivalence_form(outcome.tree, "sqlite", catalog(db_id)), "sqlite")

    # (a)
    word = re.compile(r"'([A-Za-z][A-Za-z ]*)'")
    quoted = [(sql, db_id) for sql, db_id in gold() if word.search(sql)]
    before_same = after_same = 0
    for sql, db_id in quoted:
        double = word.sub(r'"\1"', sql)
        before_same += parse(sql, "sqlite").normalized_sql == parse(double, "sqlite").normalized_sql
        after_same += form(sql, db_id) == form(double, db_id)
    print(f"(a) gold vs its word literals double-quoted: {len(quoted)} queries; identical before "
          f"{before_same}/{len(quoted)}, after {after_same}/{len(quoted)}")

    # (b)
    reached: Counter[str] = Counter()
    tried: Counter[str] = Counter()
    generator_errors: Counter[str] = Counter()
    kept_apart: Counter[str] = Counter()
    mutated: Counter[str] = Counter()
    missed: list[str] = []
    for sql, db_id in gold():
        tree = sqlglot.parse_one(sql, read="sqlite")
        target = form(sql, db_id)
        catalog(db_id)
        expected_rows = rows(connections[db_id], sql)
        for name, generate in EQUIVALENT.items():
            for variant in generate(tree):
                text = variant.sql("sqlite")
                if rows(connections[db_id], text) != expected_rows:
                    generator_errors[name] += 1
                    continue
                tried[name] += 1
                if form(text, db_id) == target:
                    reached[name] += 1
                elif len(missed) < 8:
                    missed.append(f"{name}: {sql}  ||  {text}")
        for name, generate in MEANING_CHANGES.items():
            for variant in generate(tree):
                mutated[name] += 1
                kept_apart[name] += form(variant.sql("sqlite"), db_id) != target
    total, hits = sum(tried.values()), sum(reached.values())
    print(f"(b) equivalent rewrites reaching gold's form: {hits}/{total} = {hits / max(total, 1):.1%} "
          f"(generator's variants that changed the rows, not counted: {sum(generator_errors.values())})")
    for name in EQUIVALENT:
        print(f"      {name:26s} {reached[name]:5d}/{tried[name]:<5d}")
    for line in missed:
        print(f"      missed: {line}")
    identical = sum(mutated.values()) - sum(kept_apart.values())
    print(f"    meaning-changing mutations reported identical: {identical}/{sum(mutated.values())}")
    for name in MEANING_CHANGES:
        print(f"      {name:26s} {mutated[name] - kept_apart[name]:5d}/{mutated[name]:<5d}")

    # (c)
    if before is None:
        return
    after_scores = scores()
    environment = {**os.environ, "PYTHONPATH": before}
    output = subprocess.run([sys.executable, __file__, "--scores"], env=environment, capture_output=True, text=True,
                            check=True).stdout
    before_scores = [tuple(pair) for pair in json.loads(output)]
    passes = [i for i, (verdict, _) in enumerate(after_scores) if verdict == "pass"]
    changed = sum(before_scores[i][0] != after_scores[i][0] for i in range(len(after_scores)))
    full_before = sum(before_scores[i][1] == 1.0 for i in passes)
    full_after = sum(after_scores[i][1] == 1.0 for i in passes)
    print(f"(c) SuperSQL: {len(passes)} passes; structure_score 1.0 before {full_before}, after {full_after}; "
          f"verdicts changed {changed}/{len(after_scores)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the checkout to compare SuperSQL's scores with (c)")
    parser.add_argument("--scores", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.scores:
        print(json.dumps(scores()))
    else:
        run(arguments.before)
