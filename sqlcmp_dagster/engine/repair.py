"""The verified minimal fix: the fewest clauses whose transplant from the expected query into the actual one
makes the results match (``diagnostic_scores.suggested_fix``).

Why a search and not a guess: an LLM asked for "the corrected SQL" proposes a query nobody has run. Here every
candidate is the actual query with a set of its differing clauses replaced by the expected query's versions,
executed and compared under the case's own semantics; a fix is reported only when its results matched. Sets
are tried smallest first (every single clause, then every pair, then larger), so the first size with a
passing candidate is the minimal one, and every passing set of that size is kept (two different one-clause
fixes make the attribution ambiguous). The search is bounded by set size (:data:`MAX_FIX_CLAUSES`), by the
number of executions (:data:`MAX_CANDIDATES`) and by a time budget.

Each candidate is derived from the actual query, so it is as hostile as the actual query: the caller's
``run`` must execute it through the same read-only gate, connection and timeouts (this module runs no SQL).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from sqlglot import exp

from sqlcmp_dagster.engine.results import ResultComparison
from sqlcmp_dagster.engine.structure import CLAUSE_ARGS, CLAUSE_WEIGHTS, StructuralComparison

#: Largest set of clauses transplanted together; a fix needing more is reported as not found.
MAX_FIX_CLAUSES = 3
#: Most candidate queries one search executes.
MAX_CANDIDATES = 32
#: How a clause is named in sentences a user reads.
CLAUSE_WORDS: dict[str, str] = {
    "projection": "SELECT list",
    "distinct": "DISTINCT",
    "selection_predicate": "WHERE clause",
    "post_aggregation_predicate": "HAVING clause",
    "join": "FROM/JOIN clause",
    "aggregation_grain": "GROUP BY",
    "ordering": "ORDER BY",
    "top_k": "LIMIT/OFFSET",
    "window": "window functions",
    "set_operators": "set operators (UNION/INTERSECT/EXCEPT)",
}

#: Executes one candidate with at most the given milliseconds; the comparison with the expected result, or
#: None when the candidate did not run (rejected by the gate, an error or a timeout).
Runner = Callable[[exp.Expression, int], ResultComparison | None]


@dataclass(frozen=True)
class Transplant:
    """One candidate: the actual query with ``clauses`` taken from the expected query."""

    clauses: tuple[str, ...]
    sql: str
    passed: bool | None  # None: it did not run

    def record(self) -> dict[str, Any]:
        return {"clauses": list(self.clauses), "passed": self.passed, "sql": self.sql}


@dataclass(frozen=True)
class FixSearch:
    """What the search tried and found."""

    differing: tuple[str, ...]  # the clauses that differ, heaviest first
    transplants: list[Transplant] = field(default_factory=list)  # every candidate executed, in order
    fixes: list[Transplant] = field(default_factory=list)  # the passing candidates of the smallest size
    stopped: str | None = None  # why the search ended before trying every set up to the bound
    unsupported: str | None = None  # why the search could not start

    def suggested_fix(self, chosen: int = 0) -> dict[str, Any]:
        """``diagnostic_scores.suggested_fix``: the repaired SQL, the clauses changed and how it was verified
        (``chosen`` picks among equally small fixes; the others are listed as alternatives), or
        ``found: false`` with the reason in words."""
        tried = len(self.transplants)
        if self.fixes:
            fix = self.fixes[chosen]
            return {"found": True, "sql": fix.sql, "clauses": list(fix.clauses), "size": len(fix.clauses),
                    "verified_by": "execution", "candidates_tried": tried,
                    "alternatives": [list(f.clauses) for f in self.fixes if f is not fix],
                    "explanation": fix_sentence(fix.clauses)}
        return {"found": False, "sql": None, "clauses": [], "size": None, "verified_by": None, "alternatives": [],
                "candidates_tried": tried, "explanation": self.no_fix_reason()}

    def no_fix_reason(self) -> str:
        movable = [c for c in self.differing if c in CLAUSE_ARGS]
        fixed = [c for c in self.differing if c not in CLAUSE_ARGS]
        if self.unsupported is not None:
            return f"no verified fix: {self.unsupported}"
        if not self.differing:
            return ("no verified fix: no top-level clause differs, so there is nothing to transplant (the "
                    "difference is inside an expression the clause comparison treats as equal)")
        if not movable:
            return (f"no verified fix: only {_words(fixed)} differ, which cannot be transplanted on their own")
        if self.stopped is not None:
            return f"no verified fix: {self.stopped} after {len(self.transplants)} candidate queries"
        bound = min(MAX_FIX_CLAUSES, len(movable))
        return (f"no verified fix: no transplant of up to {bound} of the {len(movable)} differing clauses "
                f"({_words(movable)}) from the expected query makes the results match "
                f"({len(self.transplants)} candidate queries run)")


def fix_sentence(clauses: tuple[str, ...]) -> str:
    """The verified fix in words: 'taking the DISTINCT from the expected query makes the results match'."""
    return f"verified fix: taking the {_words(list(clauses))} from the expected query makes the results match"


def search_fix(structure: StructuralComparison, expected: exp.Expression, actual: exp.Expression, run: Runner,
               *, dialect: str, budget_ms: int, max_clauses: int = MAX_FIX_CLAUSES,
               max_candidates: int = MAX_CANDIDATES) -> FixSearch:
    """Smallest sets of differing clauses first; stop at the first size with a passing transplant.

    ``budget_ms`` bounds the whole search's wall time; each candidate runs with at most what is left of it.
    """
    differing = tuple(structure.differing())
    if not (isinstance(expected, exp.Select) and isinstance(actual, exp.Select)):
        return FixSearch(differing, unsupported="a set operation (UNION/INTERSECT/EXCEPT) is not searched: its "
                         "branches have no single set of clauses to transplant")
    # Clauses can also differ in what canonicalization folds away (the case of a double-quoted string,
    # which SQLite reads as a literal): compare the trees being transplanted as well.
    textual = {c for c in CLAUSE_ARGS if _clause_sql(expected, c, dialect) != _clause_sql(actual, c, dialect)}
    differing = tuple(sorted(set(differing) | textual, key=lambda c: -CLAUSE_WEIGHTS[c]))
    movable = [c for c in differing if c in CLAUSE_ARGS]
    deadline = time.perf_counter() + budget_ms / 1000
    seen = {actual.sql(dialect=dialect)}
    transplants: list[Transplant] = []
    for size in range(1, min(max_clauses, len(movable)) + 1):
        fixes: list[Transplant] = []
        for clauses in combinations(movable, size):
            candidate = actual
            for clause in clauses:
                candidate = swap_clause(candidate, expected, clause)
            sql = candidate.sql(dialect=dialect)
            if sql in seen:  # the transplant changes nothing a smaller or earlier set did not
                continue
            seen.add(sql)
            left_ms = int((deadline - time.perf_counter()) * 1000)
            if left_ms <= 0:
                return FixSearch(differing, transplants, fixes, stopped=f"the search's time budget "
                                 f"({budget_ms} ms) ran out")
            if len(transplants) >= max_candidates:
                return FixSearch(differing, transplants, fixes,
                                 stopped=f"the search's bound of {max_candidates} candidate queries was reached")
            outcome = run(candidate, left_ms)
            transplant = Transplant(clauses, sql, None if outcome is None else outcome.mode_pass)
            transplants.append(transplant)
            if transplant.passed:
                fixes.append(transplant)
        if fixes:
            return FixSearch(differing, transplants, fixes)
    return FixSearch(differing, transplants)


def swap_clause(actual: exp.Select, expected: exp.Select, clause: str) -> exp.Select:
    """A copy of ``actual`` with ``clause`` (a :data:`CLAUSE_ARGS` name) taken from ``expected``.

    >>> import sqlglot
    >>> swap_clause(sqlglot.parse_one("SELECT a FROM t WHERE x = 2"),
    ...             sqlglot.parse_one("SELECT a FROM t WHERE x = 1"), "selection_predicate").sql()
    'SELECT a FROM t WHERE x = 1'
    """
    candidate = actual.copy()
    for arg in CLAUSE_ARGS[clause]:
        value = expected.args.get(arg)
        if isinstance(value, list):
            candidate.set(arg, [v.copy() for v in value])
        else:
            candidate.set(arg, value.copy() if value is not None else None)
    return candidate


def _clause_sql(tree: exp.Select, clause: str, dialect: str) -> list[str]:
    values = []
    for arg in CLAUSE_ARGS[clause]:
        value = tree.args.get(arg)
        items = value if isinstance(value, list) else [value]
        values += [v.sql(dialect=dialect) if isinstance(v, exp.Expression) else repr(v) for v in items]
    return values


def _words(clauses: list[str]) -> str:
    names = [CLAUSE_WORDS.get(c, c.replace("_", " ")) for c in clauses]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
