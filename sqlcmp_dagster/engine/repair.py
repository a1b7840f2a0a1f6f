"""The verified minimal fix: the fewest clauses whose transplant from the expected query into the actual one
makes the results match (``diagnostic_scores.suggested_fix``).

Why a search and not a guess: an LLM asked for "the corrected SQL" proposes a query nobody has run. Here every
candidate is the actual query with a set of its differing clauses replaced by the expected query's versions,
executed and compared under the case's own semantics; a fix is reported only when its results matched. Sets
are tried smallest first (every single clause, then every pair, then larger), so the first size with a
passing candidate is the minimal one, and every passing set of that size is kept (two different one-clause
fixes make the attribution ambiguous). The search is bounded by the number of edits combined
(:data:`MAX_FIX_CLAUSES`), by the number of executions (:data:`MAX_CANDIDATES`) and by a time budget.

A set operation (UNION/INTERSECT/EXCEPT) is searched branch by branch: the branches of the two queries are
paired in order and a clause is transplanted within a pair (``branches`` names where), the set operator itself
is an edit, and so is a whole branch (one edit that takes every differing clause of that branch). When only
one side is a set operation, the plain query is paired with each branch in turn: either it becomes that branch
of the expected set operation, or the actual set operation is reduced to that branch; that change is itself an
edit of every such candidate (``set_operators``).

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

from sqlcmp_dagster.engine.parsing import RewriteCut, canonical_tree, clocked_rewrites, sql_text, tick
from sqlcmp_dagster.engine.structure import (CLAUSE_ARGS, CLAUSE_WEIGHTS, QueryShape, StructuralComparison,
                                             compare_structure, query_shape)

#: Most edits combined in one candidate (a clause, a set operator or a whole branch each count as one); the
#: fix's size is the number of clauses it changes, and candidates are tried smallest size first.
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
    "set_operators": "set operator (UNION/INTERSECT/EXCEPT)",
}
#: The clauses a set operation's own ORDER BY and LIMIT hold (the other clauses live in its branches).
_TOP_CLAUSES = ("ordering", "top_k")

#: One edit's place: a clause and the branch (1-based) of a set operation it is taken in, None for the whole
#: query (a plain query's clauses, a set operation's own ORDER BY/LIMIT, or its only set operator).
Label = tuple[str, int | None]


@dataclass(frozen=True)
class Outcome:
    """What running one candidate showed: ``passed`` None when it did not run (rejected by the gate, an error or
    a timeout); ``note`` says why a candidate whose rows matched does not count (a LIMIT that cuts a tie)."""

    passed: bool | None
    note: str | None = None


#: Why a candidate whose rows matched is not a verified fix.
TIE_LUCK = ("its rows matched only by the order the engine returned tied rows in: its LIMIT cuts inside a tie "
            "of its ORDER BY keys, and another valid choice of the tied rows would not match")

#: Executes one candidate (its tree and its text in the dialect, printed once by the search) with at most the
#: given milliseconds and judges it against the expected result.
Runner = Callable[[exp.Expression, str, int], Outcome]


@dataclass(frozen=True)
class Transplant:
    """One candidate: the actual query with the clauses at ``labels`` taken from the expected query."""

    labels: tuple[Label, ...]
    sql: str
    passed: bool | None  # None: it did not run
    note: str | None = None

    @property
    def clauses(self) -> tuple[str, ...]:
        return tuple(clause for clause, _ in self.labels)

    @property
    def branches(self) -> tuple[int | None, ...]:
        return tuple(branch for _, branch in self.labels)

    def record(self) -> dict[str, Any]:
        return {"clauses": list(self.clauses), "branches": list(self.branches), "passed": self.passed,
                "sql": self.sql, "note": self.note}


@dataclass(frozen=True)
class FixSearch:
    """What the search tried and found."""

    differing: tuple[str, ...]  # the clauses that differ, heaviest first
    transplants: list[Transplant] = field(default_factory=list)  # every candidate executed, in order
    fixes: list[Transplant] = field(default_factory=list)  # the passing candidates of the smallest size
    stopped: str | None = None  # why the search ended before trying every set up to the bound
    unsupported: str | None = None  # why the search could not start
    compound: bool = False  # a set operation was searched branch-wise

    def suggested_fix(self, chosen: int = 0) -> dict[str, Any]:
        """``diagnostic_scores.suggested_fix``: the repaired SQL, the clauses changed and how it was verified
        (``chosen`` picks among equally small fixes; the others are listed as alternatives), or
        ``found: false`` with the reason in words."""
        tried = len(self.transplants)
        if self.fixes:
            fix = self.fixes[chosen]
            return {"found": True, "sql": fix.sql, "clauses": list(fix.clauses), "branches": list(fix.branches),
                    "size": len(fix.labels), "verified_by": "execution", "candidates_tried": tried,
                    "alternatives": [list(f.clauses) for f in self.fixes if f is not fix],
                    "explanation": fix_sentence(fix.labels)}
        return {"found": False, "sql": None, "clauses": [], "branches": [], "size": None, "verified_by": None,
                "alternatives": [], "candidates_tried": tried, "explanation": self.no_fix_reason()}

    def no_fix_reason(self) -> str:
        movable = [c for c in self.differing if c in CLAUSE_ARGS or c == "set_operators"]
        fixed = [c for c in self.differing if c not in movable]
        if self.unsupported is not None:
            return f"no verified fix: {self.unsupported}"
        if not self.differing:
            return ("no verified fix: no top-level clause differs, so there is nothing to transplant (the "
                    "difference is inside an expression the clause comparison treats as equal)")
        if not movable:
            return f"no verified fix: only {_words(fixed)} differ, which cannot be transplanted on their own"
        if self.stopped is not None:
            return f"no verified fix: {self.stopped} after {len(self.transplants)} candidate queries"
        if self.compound:
            return (f"no verified fix: no combination of up to {MAX_FIX_CLAUSES} branch-wise edits (clauses within "
                    f"a branch, the set operator, whole branches) taking the {_words(movable)} from the expected "
                    f"query makes the results match ({len(self.transplants)} candidate queries run)")
        bound = min(MAX_FIX_CLAUSES, len(movable))
        return (f"no verified fix: no transplant of up to {bound} of the {len(movable)} differing clauses "
                f"({_words(movable)}) from the expected query makes the results match "
                f"({len(self.transplants)} candidate queries run)")


def label_words(label: Label) -> str:
    """One edit in words: 'WHERE clause of branch 2', 'set operator (UNION/INTERSECT/EXCEPT) before branch 3'."""
    clause, branch = label
    if branch is None:
        return CLAUSE_WORDS[clause]
    return f"{CLAUSE_WORDS[clause]} {'before' if clause == 'set_operators' else 'of'} branch {branch}"


def fix_sentence(labels: tuple[Label, ...]) -> str:
    """The verified fix in words: 'taking the DISTINCT from the expected query makes the results match'."""
    return (f"verified fix: taking the {_join([label_words(label) for label in labels])} from the expected query "
            "makes the results match")


@dataclass(frozen=True)
class _Pairing:
    """One way to pair the actual query's branches with the expected query's: the tree every candidate starts
    from (its branches in the expected query's positions), the edits every candidate of it includes, and the
    edits it may combine (each a tuple of labels: a whole branch is one edit of several clauses)."""

    start: exp.Expression
    base: tuple[Label, ...]
    edits: list[tuple[Label, ...]]


def search_fix(structure: StructuralComparison, expected: exp.Expression, actual: exp.Expression, run: Runner,
               *, dialect: str, budget_ms: int, max_clauses: int = MAX_FIX_CLAUSES,
               max_candidates: int = MAX_CANDIDATES) -> FixSearch:
    """Smallest fixes first; stop at the first size with a passing candidate.

    ``budget_ms`` bounds the whole search's wall time, the canonical rewrites of the trees it builds included
    (:func:`clocked_rewrites`); each candidate runs with at most what is left of it.
    """
    compound = len(_branches(expected) or []) > 1 or len(_branches(actual) or []) > 1
    deadline = time.monotonic() + budget_ms / 1000
    ran_out = f"the search's time budget ({budget_ms} ms) ran out"
    differing = _differing_summary(structure, [])
    transplants: list[Transplant] = []
    fixes: list[Transplant] = []
    try:
        with clocked_rewrites(deadline):
            pairings, unsupported = _pairings(expected, actual, dialect)
            differing = _differing_summary(structure, pairings)
            if unsupported is not None:
                return FixSearch(differing, unsupported=unsupported, compound=compound)
            stopped = _search(pairings, expected, actual, run, transplants, fixes, dialect=dialect,
                              deadline=deadline, ran_out=ran_out, max_clauses=max_clauses,
                              max_candidates=max_candidates)
    except RewriteCut:
        stopped = ran_out
    return FixSearch(differing, transplants, fixes, stopped=stopped, compound=compound)


def _search(pairings: list[_Pairing], expected: exp.Expression, actual: exp.Expression, run: Runner,
            transplants: list[Transplant], fixes: list[Transplant], *, dialect: str, deadline: float,
            ran_out: str, max_clauses: int, max_candidates: int) -> str | None:
    """Run the candidates of ``pairings``, smallest first, into ``transplants`` and ``fixes`` (the caller keeps
    what ran when the rewrites' clock cuts the search); why the search stopped early (``ran_out`` at the
    deadline, or the candidate bound), or None."""
    candidates: list[tuple[int, _Pairing, tuple[Label, ...]]] = []
    for pairing in pairings:
        for count in range(0 if pairing.base else 1, max_clauses - len(pairing.base) + 1):
            for edits in combinations(pairing.edits, count):
                labels = pairing.base + tuple(dict.fromkeys(label for edit in edits for label in edit))
                candidates.append((len(labels), pairing, labels))
    candidates.sort(key=lambda item: item[0])  # stable: heavier clauses first within a size, as generated
    seen = {sql_text(actual, dialect, copy=True)}
    for size, pairing, labels in candidates:
        if fixes and size > len(fixes[0].labels):
            break
        # The clock before the candidate's copy and print, not only before its run: a candidate that repeats an
        # earlier one costs both too (hundreds of them when a set operation's branches are alike), and the
        # search then ran twice past its budget and called itself exhaustive (a review's finding).
        if time.monotonic() >= deadline:
            return ran_out
        candidate = _apply(pairing, labels, expected)
        sql = sql_text(candidate, dialect, copy=True)
        if sql in seen:  # the transplant changes nothing a smaller or earlier set did not
            continue
        seen.add(sql)
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return ran_out
        if len(transplants) >= max_candidates:
            return f"the search's bound of {max_candidates} candidate queries was reached"
        outcome = run(candidate, sql, left_ms)
        transplant = Transplant(labels, sql, outcome.passed, outcome.note)
        transplants.append(transplant)
        if transplant.passed:
            fixes.append(transplant)
    return None


def _take(target: exp.Expression, source: exp.Expression, clause: str) -> None:
    """Set ``clause`` (a :data:`CLAUSE_ARGS` name) of ``target``, in place, to a copy of ``source``'s.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT a FROM t WHERE x = 2")
    >>> _take(tree, sqlglot.parse_one("SELECT a FROM t WHERE x = 1"), "selection_predicate")
    >>> tree.sql()
    'SELECT a FROM t WHERE x = 1'
    """
    for arg in CLAUSE_ARGS[clause]:
        value = source.args.get(arg)
        if isinstance(value, list):
            target.set(arg, [v.copy() for v in value])
        else:
            target.set(arg, value.copy() if value is not None else None)


def _pairings(expected: exp.Expression, actual: exp.Expression, dialect: str) \
        -> tuple[list[_Pairing], str | None]:
    """Every pairing of the two queries' branches, or why none can be made."""
    e_branches, a_branches = _branches(expected), _branches(actual)
    shapes = _ExpectedShapes(dialect)
    if e_branches is None or a_branches is None:
        return [], ("only a SELECT or a chain of set operations over SELECTs is searched, and one query is "
                    "neither (a parenthesized branch, a set operation nested on the right, VALUES, ...)")
    n, m = len(e_branches), len(a_branches)
    # Each pairing below copies a query (with the set operation's WITH, however long) before its clocked
    # canonicalization: the clock is read before each (tick raises the cut :func:`clocked_rewrites` turns into
    # :class:`RewriteCut`), so that a hundred pairings do not run on past the search's budget.
    if n == m:
        return [_pairing(actual.copy(), expected, (), shapes)], None
    if m == 1:  # the plain actual query as each branch of the expected set operation in turn
        pairings = []
        for position in range(n):
            tick(force=True)
            start = expected.copy()
            _branches(start)[position].replace(_without_top(actual))  # type: ignore[index]
            for clause in _TOP_CLAUSES:
                _take(start, actual, clause)
            pairings.append(_pairing(start, expected, (("set_operators", None),), shapes))
        return pairings, None
    if n == 1:  # the actual set operation reduced to each of its branches in turn
        pairings = []
        for position in range(m):
            tick(force=True)
            start = a_branches[position].copy()
            for clause in _TOP_CLAUSES:
                _take(start, actual, clause)
            if actual.args.get("with_") is not None:  # the set operation's CTEs, which the branch may read
                start.set("with_", actual.args["with_"].copy())
            pairings.append(_pairing(start, expected, (("set_operators", None),), shapes))
        return pairings, None
    return [], f"the set operations have {n} and {m} branches, which cannot be paired in order"


def _pairing(start: exp.Expression, expected: exp.Expression, base: tuple[Label, ...], shapes: _ExpectedShapes) \
        -> _Pairing:
    """The edits that can take ``start`` (branches in the expected query's positions) towards ``expected``."""
    starts, targets = _branches(start) or [], _branches(expected) or []
    compound = len(targets) > 1
    edits: list[tuple[Label, ...]] = []
    whole: list[tuple[Label, ...]] = []
    for position, (mine, theirs) in enumerate(zip(starts, targets), start=1):
        tick(force=True)  # hundreds of branches print their clauses unclocked (:func:`_clause_sql`)
        if not compound:  # a plain query: its ORDER BY and LIMIT are clauses like the others
            clauses = _differing(start, expected, shapes, CLAUSE_ARGS)
        else:
            clauses = _differing(mine, theirs, shapes, [c for c in CLAUSE_ARGS if c not in _TOP_CLAUSES])
        labels = [(clause, position if compound else None) for clause in clauses]
        edits += [(label,) for label in labels]
        if compound and len(labels) > 1:  # a branch as a unit (a plain query is not replaced whole)
            whole.append(tuple(labels))
    if compound:
        edits += [((clause, None),) for clause in _differing(start, expected, shapes, _TOP_CLAUSES)]
        for position, (our_operator, their_operator) in enumerate(zip(_operators(start), _operators(expected)),
                                                                  start=2):
            if _operator_key(our_operator) != _operator_key(their_operator):
                edits.append((("set_operators", position if len(targets) > 2 else None),))
    edits.sort(key=lambda edit: -CLAUSE_WEIGHTS[edit[0][0]])
    return _Pairing(start, base, edits + whole)


def _apply(pairing: _Pairing, labels: tuple[Label, ...], expected: exp.Expression) -> exp.Expression:
    """The pairing's start with every edit of ``labels`` made (its base edits are already in the start)."""
    tree = pairing.start.copy()
    mine, theirs = _branches(tree) or [], _branches(expected) or []
    for clause, branch in labels:
        if (clause, branch) in pairing.base:
            continue
        if clause == "set_operators":
            position = branch or 2
            current, wanted = _operators(tree)[position - 2], _operators(expected)[position - 2]
            replacement = wanted.__class__(**{**current.args, "distinct": wanted.args.get("distinct"),
                                              "by_name": wanted.args.get("by_name")})
            if current is tree:
                tree = replacement
            else:
                current.replace(replacement)
            mine = _branches(tree) or []
        elif branch is None and (clause in _TOP_CLAUSES or len(mine) == 1):
            _take(tree, expected, clause)
        else:
            _take(mine[(branch or 1) - 1], theirs[(branch or 1) - 1], clause)
    return tree


def _branches(tree: exp.Expression) -> list[exp.Select] | None:
    """The branches of a left-deep chain of set operations in order ([tree] for a plain SELECT); None when a
    branch is not a plain SELECT (then clauses cannot be paired)."""
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.SetOperation) and isinstance(tree.expression, exp.Select):
        left = _branches(tree.this) if not tree.this.args.get("order") and not tree.this.args.get("limit") else None
        return None if left is None else [*left, tree.expression]
    return None


def _operators(tree: exp.Expression) -> list[exp.SetOperation]:
    """The set operators of a left-deep chain, left to right."""
    return [*_operators(tree.this), tree] if isinstance(tree, exp.SetOperation) else []


def _operator_key(node: exp.SetOperation) -> tuple[str, bool]:
    return node.key, bool(node.args.get("distinct"))


def _without_top(select: exp.Expression) -> exp.Expression:
    """A copy of a plain query without its ORDER BY and LIMIT/OFFSET (a branch cannot hold them)."""
    branch = select.copy()
    for arg in ("order", "limit", "offset"):
        branch.set(arg, None)
    return branch


def _differing(mine: exp.Expression, theirs: exp.Expression, shapes: _ExpectedShapes, names: Any) -> list[str]:
    """The clauses among ``names`` that differ: canonically (Layer 2's comparison) or in the text being
    transplanted (what canonicalization folds away can still change what a query means). ``theirs`` is (a
    branch of) the expected query, whose shape ``shapes`` keeps."""
    dialect = shapes.dialect
    structural = compare_structure("", "", shapes(theirs), query_shape(canonical_tree(mine, dialect)))
    return [c for c in names if not structural.clause_match[c]["match"]
            or _clause_sql(mine, c, dialect) != _clause_sql(theirs, c, dialect)]


class _ExpectedShapes:
    """The shape of the canonical tree of each part of the expected query (a branch, or the whole) that
    :func:`_differing` compares with, computed once per search: a plain actual query is paired with each branch
    of an expected set operation in turn, and each pairing compares every branch and the whole query again
    (six canonical trees of the same three parts for two branches). Kept by the part's identity, with the part:
    the expected query is never changed while the pairings are made."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self._kept: dict[int, tuple[exp.Expression, QueryShape]] = {}

    def __call__(self, part: exp.Expression) -> QueryShape:
        kept = self._kept.get(id(part))
        if kept is None or kept[0] is not part:
            kept = self._kept[id(part)] = (part, query_shape(canonical_tree(part, self.dialect)))
        return kept[1]


def _differing_summary(structure: StructuralComparison, pairings: list[_Pairing]) -> tuple[str, ...]:
    """The clauses Layer 2 finds different and every clause some edit would change, heaviest first (what the
    no-fix sentence lists)."""
    clauses = set(structure.differing())
    clauses |= {label[0] for pairing in pairings for edit in [pairing.base, *pairing.edits] for label in edit}
    return tuple(sorted(clauses, key=lambda c: -CLAUSE_WEIGHTS[c]))


def _clause_sql(tree: exp.Expression, clause: str, dialect: str) -> list[str]:
    values = []
    for arg in CLAUSE_ARGS[clause]:
        value = tree.args.get(arg)
        items = value if isinstance(value, list) else [value]
        values += [sql_text(v, dialect, copy=True) if isinstance(v, exp.Expression) else repr(v) for v in items]
    return values


def _words(clauses: list[str]) -> str:
    return _join([CLAUSE_WORDS.get(c, c.replace("_", " ")) for c in clauses])


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
