"""Layer 4: attribute a result mismatch to the SQL clause most likely behind it.

Each candidate clause gets a score from two kinds of signal: the clause differs in the AST (Layer 2), and the
results differ the way that clause would make them differ (Layer 3: extra columns for the projection, one-sided
overlap for a predicate, fan-out for a join, ...). Where a database is at hand, execution settles it: the
verified-minimal-fix search (:mod:`repair`) finds the fewest clauses whose transplant from the expected query
makes the results match, and the attribution then comes from that fix, not from the heuristics (a one-clause fix
is strong evidence; a fix needing several clauses names them all and is ambiguous). The caller supplies the
function that runs a candidate, so this module runs no SQL itself.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from sqlcmp_dagster.engine.models import EvidenceStrength, SourceClause
from sqlcmp_dagster.engine.repair import FixSearch, Runner, Transplant, label_words, search_fix
from sqlcmp_dagster.engine.comparison import ResultComparison
from sqlcmp_dagster.engine.structure import QueryShape, StructuralComparison

#: Score name -> the source clause it stands for, in the report's order.
SCORES: dict[str, SourceClause] = {
    "projection_error_score": "projection",
    "filter_error_score": "selection_predicate",
    "join_error_score": "join",
    "grouping_error_score": "aggregation_grain",
    "aggregate_function_error_score": "aggregate_function",
    "limit_topk_error_score": "top_k",
}
#: The source clause a structural clause belongs to when transplanting it fixes the results.
_CLAUSE_SOURCE: dict[str, SourceClause] = {
    "projection": "projection",
    "distinct": "projection",
    "selection_predicate": "selection_predicate",
    "post_aggregation_predicate": "selection_predicate",
    "join": "join",
    "aggregation_grain": "aggregation_grain",
    "ordering": "ordering",
    "top_k": "top_k",
    "set_operators": "selection_predicate",  # which rows a branch adds or removes; only UNION ALL -> projection
}
#: How a source clause is named in the headline when no verified fix names the exact clause.
SOURCE_WORDS: dict[str, str] = {
    "projection": "SELECT list",
    "selection_predicate": "WHERE/HAVING predicate",
    "join": "FROM/JOIN clause",
    "aggregation_grain": "GROUP BY",
    "aggregate_function": "aggregate function",
    "ordering": "ORDER BY",
    "top_k": "LIMIT/OFFSET and the ORDER BY it cuts",
}
#: A cardinality ratio beyond this factor (either way) is fan-out or compression, not noise.
EXPLOSION_RATIO = 2.0
#: Confidence of an attribution proven by a fix of 1, 2 or 3 clauses (fewer clauses, stronger proof).
FIX_CONFIDENCE = {1: 0.95, 2: 0.75, 3: 0.6}
FIX_STRENGTH: dict[int, EvidenceStrength] = {1: "high", 2: "medium", 3: "low"}
#: Error scores of the fix's primary clause, of its other clauses, and the cap on clauses the fix proves unneeded.
PRIMARY_SCORE, SECONDARY_SCORE, UNNEEDED_CAP = 0.9, 0.6, 0.25


@dataclass(frozen=True)
class Duplicates:
    """Rows that repeat an earlier row of the same result: extra rows that are copies point at a join's
    fan-out (or a missing DISTINCT), not at a predicate that lets other rows through."""

    expected: int = 0
    actual: int = 0


def diagnose(
    structure: StructuralComparison,
    expected: QueryShape,
    actual: QueryShape,
    result: ResultComparison,
    *,
    expected_tree: exp.Expression,
    actual_tree: exp.Expression,
    run: Runner | None,
    dialect: str,
    budget_ms: int,
    duplicates: Duplicates = Duplicates(),
) -> dict[str, Any]:
    """All twelve diagnostic metrics plus ``likely_source_clause``, ``suggested_fix``, ``probes`` (every
    transplant executed) and the evidence sentences (for a pass: :func:`diagnose_pass`)."""
    if result.mode_pass:
        return diagnose_pass(result)
    column_map = per_column_mismatch_map(result)
    ordering_flag = result.bag_pass and not result.mode_pass
    signals = _Signals(structure, expected, actual, result, duplicates)
    raw = signals.scores()
    evidence = signals.evidence(ordering_flag)
    search = search_fix(structure, expected_tree, actual_tree, run, dialect=dialect, budget_ms=budget_ms) \
        if run is not None else None

    scores = dict(raw)
    strength: EvidenceStrength
    fix_sources = [_fix_sources(f, ordering_flag, expected, actual) for f in search.fixes] if search is not None else []
    chosen = 0
    if fix_sources:
        # The primary clause: among the clauses of every minimal fix, the one the result signals point at most.
        candidates = [(s, i) for i, sources in enumerate(fix_sources) for s in sources]
        source, chosen = max(candidates, key=lambda item: (_raw_score(raw, item[0], ordering_flag), -item[1]))
        proven = {s for sources in fix_sources for s in sources}
        size = len(search.fixes[chosen].clauses) if search is not None else 1
        ambiguous = len(proven) > 1
        confidence = FIX_CONFIDENCE.get(size, 0.5) - (0.2 if ambiguous and size == 1 else 0.0)
        strength = FIX_STRENGTH.get(size, "low")
        for name, clause in SCORES.items():
            if clause == source:
                scores[name] = max(raw[name], PRIMARY_SCORE)
            elif clause in proven:
                scores[name] = min(max(raw[name], SECONDARY_SCORE), scores.get(_score_name(source), 1.0))
            else:
                scores[name] = min(raw[name], UNNEEDED_CAP)
    elif ordering_flag:
        source, confidence, strength, ambiguous = "ordering", 0.95, "high", False
    else:
        ranked = sorted(((score, SCORES[name]) for name, score in raw.items()), key=lambda item: -item[0])
        top, heuristic = ranked[0]
        second = ranked[1][0]
        if top <= 0:
            source, confidence, strength, ambiguous = None, 0.0, "low", True
        else:
            source = heuristic
            confidence = top * (0.5 + 0.5 * (top - second) / top)
            ambiguous = second >= 0.8 * top
            corroborating = signals.corroboration(heuristic)
            strength = "high" if corroborating >= 3 else "medium" if corroborating == 2 else "low"
            if search is not None:  # execution looked for a fix and found none: the heuristics stay unproven
                strength = "low" if strength == "low" else "medium"
    if ordering_flag:
        evidence.insert(0, "the results hold the same rows but in a different order")
    suggested = search.suggested_fix(chosen) if search is not None else None
    if search is not None:
        # the verified fix's own probe is its sentence already (inserted first, below): said once
        evidence += _probe_sentences(search, search.fixes[chosen] if search.fixes else None)
    if suggested is not None:
        evidence.insert(0, suggested["explanation"])
    return {
        **{name: round(value, 4) for name, value in scores.items()},
        "ordering_error_flag": ordering_flag,
        "cardinality_explosion_flag": signals.explosion(),
        "per_column_mismatch_map": column_map,
        "likely_source_clause": source,
        "confidence": round(confidence, 4),
        "evidence_strength": strength,
        "ambiguous_case": ambiguous,
        "suggested_fix": suggested,
        "probes": [t.record() for t in search.transplants] if search is not None else [],
        "evidence": evidence,
    }


def diagnose_pass(result: ResultComparison) -> dict[str, Any]:
    """:func:`diagnose` of a passing result: no error to locate, so nothing but the comparison is read (no
    trees, duplicate counts or fix search)."""
    return {**{name: 0.0 for name in SCORES}, "ordering_error_flag": False, "cardinality_explosion_flag": False,
            "per_column_mismatch_map": per_column_mismatch_map(result), "likely_source_clause": None,
            "confidence": 1.0, "evidence_strength": "high", "ambiguous_case": False, "suggested_fix": None,
            "probes": [], "evidence": []}


def likely_source_words(diagnostics: dict[str, Any]) -> str:
    """What the headline names: the clauses of the verified fix when there is one, else the source clause."""
    fix = diagnostics.get("suggested_fix") or {}
    source = diagnostics.get("likely_source_clause")
    if fix.get("found"):  # the clauses of the likely source first
        labels = sorted(zip(fix["clauses"], fix["branches"]), key=lambda label: _CLAUSE_SOURCE[label[0]] != source)
        return _join_words([label_words(label) for label in labels])
    return SOURCE_WORDS.get(source, "unknown") if source else "unknown"


def per_column_mismatch_map(result: ResultComparison) -> dict[str, Any]:
    """Per expected attribute: paired cells compared, how many differ, the rate and a severity label."""
    columns: dict[str, Any] = {}
    for stat in result.columns:
        if stat.actual_index is None:
            columns[stat.name] = {"actual_attribute": None, "status": "missing", "mismatch_rate": 1.0,
                                  "severity": "high"}
            continue
        rate = stat.mismatched / stat.compared if stat.compared else 0.0
        columns[stat.name] = {
            "actual_attribute": stat.actual_name,
            "status": "match" if stat.mismatched == 0 else "mismatch",
            "compared_cells": stat.compared,
            "mismatched_cells": stat.mismatched,
            "null_mismatches": stat.null_mismatched,
            "mismatch_rate": round(rate, 6),
            "severity": "none" if rate == 0 else "low" if rate < 0.1 else "medium" if rate < 0.5 else "high",
            **({"within_tolerance_cells": stat.within_tolerance, "max_abs_diff": stat.max_abs_diff}
               if stat.numeric else {}),
        }
    # Which rows the cells were compared in: in order-sensitive and exact modes rows pair by position (within
    # ties), so an order-only failure shows cells that differ although every row is in both results.
    pairing = "multiset" if result.comparison_mode == "order-insensitive" else "in order"
    return {"attributes": columns, "extra_attributes": result.extra_columns, "pairing": pairing}


class _Signals:
    """The raw signals behind the scores, computed once and shared by scores, evidence and corroboration."""

    def __init__(self, structure: StructuralComparison, expected: QueryShape, actual: QueryShape,
                 result: ResultComparison, duplicates: Duplicates) -> None:
        self.result = result
        self.expected = expected
        self.actual = actual
        self.sim = {name: detail["similarity"] for name, detail in structure.clause_match.items()}
        self.clause_match = structure.clause_match
        card = result.cardinality_match
        self.n, self.m = card["expected_rows"], card["actual_rows"]
        matched = result.bag_matched_rows
        self.precision = matched / self.m if self.m else (1.0 if not self.n else 0.0)
        self.recall = matched / self.n if self.n else (1.0 if not self.m else 0.0)
        schema = result.schema_match
        self.schema_diff = bool(schema["missing_attributes"] or schema["extra_attributes"])
        self.card_close = abs(self.m - self.n) <= max(1, 0.1 * max(self.n, 1))
        self.log_ratio = abs(math.log2((self.m + 1) / (self.n + 1)))
        mapped = [s for s in result.columns if s.actual_index is not None and s.compared]
        self.wrong_columns = [s for s in mapped if s.mismatched / s.compared >= 0.5]
        self.partly_wrong = bool(self.wrong_columns) and len(self.wrong_columns) < len(mapped)
        self.aggregates_differ = Counter(expected.aggregates) != Counter(actual.aggregates)
        unexpected = self.m - matched
        # Every unexpected actual row can be a copy of a row the actual result already has: fan-out.
        self.copies = 0 < unexpected <= duplicates.actual - duplicates.expected
        self.limited = any(v is not None for v in (expected.limit, actual.limit, expected.offset, actual.offset))

    def scores(self) -> dict[str, float]:
        diff = {name: 1.0 - value for name, value in self.sim.items()}
        projection = 0.5 * self.schema_diff + 0.3 * max(diff["projection"], diff["distinct"], diff["set_operators"])
        projection += 0.2 * (self.partly_wrong and not self.aggregates_differ)
        if not self.card_close and not (diff["distinct"] or diff["set_operators"]):
            projection *= 0.6
        asymmetry = abs(self.precision - self.recall)
        predicate = max(diff["selection_predicate"], diff["post_aggregation_predicate"])
        if self.copies:  # the extra rows are copies: a predicate lets other rows through, it does not copy them
            asymmetry = 0.0
        filter_score = 0.6 * predicate + 0.4 * asymmetry * (1.0 if predicate else 0.5)
        card_shift = min(1.0, self.log_ratio)
        join = 0.6 * diff["join"] + 0.4 * card_shift if diff["join"] else 0.2 * card_shift
        grouping = 0.6 * diff["aggregation_grain"] + 0.4 * (not self.card_close) if diff["aggregation_grain"] \
            else 0.0
        numeric_wrong = any(s.numeric for s in self.wrong_columns)
        aggregate = 0.7 * self.aggregates_differ + 0.3 * (numeric_wrong and self.card_close and
                                                          (self.aggregates_differ or diff["projection"] > 0))
        at_limit = self.m in (self.expected.limit, self.actual.limit) or self.n in (self.expected.limit,
                                                                                    self.actual.limit)
        topk = 0.7 * diff["top_k"] + 0.3 * (at_limit and not self.card_close) if diff["top_k"] else 0.0
        if self.limited and diff["ordering"] and not self.result.bag_pass:
            # An ORDER BY that differs before a LIMIT changes which rows survive the cut: a top-k error.
            topk = max(topk, 0.7 * diff["ordering"] + 0.3 * (self.result.bag_matched_rows < max(self.n, self.m)))
        return {
            "projection_error_score": min(1.0, projection),
            "filter_error_score": min(1.0, filter_score),
            "join_error_score": min(1.0, join),
            "grouping_error_score": min(1.0, grouping),
            "aggregate_function_error_score": min(1.0, aggregate),
            "limit_topk_error_score": min(1.0, topk),
        }

    def explosion(self) -> bool:
        ratio = (self.m + 1) / (self.n + 1)
        return bool((ratio >= EXPLOSION_RATIO or ratio <= 1 / EXPLOSION_RATIO) and abs(self.m - self.n) >= 2)

    def corroboration(self, source: SourceClause) -> int:
        """How many independent signals point at ``source``."""
        clause_names = [c for c, s in _CLAUSE_SOURCE.items() if s == source]
        count = sum(not self.clause_match[c]["match"] for c in clause_names if c in self.clause_match)
        if source == "projection":
            count += self.schema_diff + self.partly_wrong
        elif source == "selection_predicate":
            count += abs(self.precision - self.recall) > 0.2
        elif source in ("join", "aggregation_grain"):
            count += not self.card_close
        elif source == "aggregate_function":
            count += self.aggregates_differ + bool(self.wrong_columns)
        elif source == "top_k":
            count += (not self.card_close) + (self.limited and not self.clause_match["ordering"]["match"])
        return count

    def evidence(self, ordering_flag: bool) -> list[str]:
        """Plain-language sentences, one per signal, in the order a person would check them.

        Each sentence restates a metric of the report (the property tests hold them to it). On an order-only
        failure the per-column counts describe rows paired by position, so they are told as misplaced rows.
        """
        r, out = self.result, []
        schema = r.schema_match
        if schema["extra_attributes"]:
            extra = schema["extra_attributes"]
            out.append(f"actual returns {len(extra)} extra column{'s' * (len(extra) != 1)} ({', '.join(extra)})")
        if schema["missing_attributes"]:
            missing = schema["missing_attributes"]
            out.append(f"actual is missing {len(missing)} expected column{'s' * (len(missing) != 1)} "
                       f"({', '.join(missing)})")
        if self.n != self.m:
            ratio = f"{self.m / self.n:.2f}x" if self.n else "expected none"
            out.append(f"actual returns {_rows(self.m)}, expected {self.n} ({ratio})")
        if r.bag_matched_rows < max(self.n, self.m):
            unexpected = self.m - r.bag_matched_rows
            out.append(f"{r.bag_matched_rows} of {_rows(self.n, 'expected')} {_are(self.n)} in the actual result; "
                       f"{_rows(unexpected, 'actual')} {_are(unexpected)} not expected")
        if ordering_flag:
            out.append(f"{self.n - r.matched_rows} of {_rows(self.n)} {_are(self.n)} at a different position")
        paired = "paired rows" if r.comparison_mode == "order-insensitive" else "rows paired in order"
        for stat in self.result.columns if not ordering_flag else []:
            if stat.actual_index is not None and stat.mismatched:
                detail = f" (max abs diff {stat.max_abs_diff:g})" if stat.numeric and stat.max_abs_diff else ""
                out.append(f"column {stat.name} differs in {stat.mismatched} of {stat.compared} {paired}{detail}")
        if self.copies:
            copies = self.m - r.bag_matched_rows
            out.append(f"the {_rows(copies, 'unexpected actual')} {_are(copies)} "
                       f"{'a copy of a row' if copies == 1 else 'copies of rows'} already in the actual result "
                       "(a join's fan-out or a missing DISTINCT)")
        if self.limited and not self.clause_match["ordering"]["match"] and not r.bag_pass:
            out.append("ORDER BY differs before a LIMIT/OFFSET: it changes which rows are kept")
        if self.aggregates_differ:
            out.append(f"aggregate functions differ: expected {self.expected.aggregates or 'none'}, "
                       f"actual {self.actual.aggregates or 'none'}")
        for name, clause in self.clause_match.items():
            if not clause["match"]:
                out.append(f"{name.replace('_', ' ')} differs: expected {clause['expected'] or 'none'}, "
                           f"actual {clause['actual'] or 'none'}")
        return out


def _rows(count: int, kind: str = "") -> str:
    """``count`` rows, of ``kind``: ``1 expected row``, ``3 expected rows``.

    >>> _rows(1, "actual"), _rows(2)
    ('1 actual row', '2 rows')
    """
    return " ".join(filter(None, (str(count), kind, "row" if count == 1 else "rows")))


def _are(count: int) -> str:
    return "is" if count == 1 else "are"


def _probe_sentences(search: FixSearch, fix: Transplant | None) -> list[str]:
    """One sentence per single-clause transplant that ran, but ``fix`` (the verified fix, which has its own
    sentence): what re-running with that clause showed."""
    out = []
    for transplant in search.transplants:
        if len(transplant.labels) == 1 and transplant.passed is not None and transplant is not fix:
            verdict = "makes the results match" if transplant.passed else "does not make the results match"
            out.append(f"re-running the actual query with the expected {label_words(transplant.labels[0])} "
                       f"{verdict}")
        if transplant.note is not None:
            out.append(f"not counted as a fix: taking the {_join_words([label_words(l) for l in transplant.labels])}"
                       f" from the expected query: {transplant.note}")
    return out


def _fix_sources(fix: Transplant, ordering_flag: bool, expected: QueryShape, actual: QueryShape) \
        -> list[SourceClause]:
    """The source clauses a verified fix proves, in the fix's order.

    An ORDER BY whose transplant fixes results that hold different rows changed which rows a LIMIT keeps: a
    top-k error. A fixed projection whose only difference is the aggregate functions is an aggregate error. A
    set operator decides which rows a branch adds or removes (a predicate), unless only UNION ALL against
    UNION differs, which keeps or removes copies like DISTINCT (the projection).
    """
    sources: list[SourceClause] = []
    for clause in fix.clauses:
        source = _CLAUSE_SOURCE[clause]
        if clause == "set_operators" and _distinct_only(expected.clauses["set_operators"],
                                                        actual.clauses["set_operators"]):
            source = "projection"
        elif source == "ordering" and not ordering_flag:
            source = "top_k"
        elif source == "projection" and Counter(expected.aggregates) != Counter(actual.aggregates):
            source = "aggregate_function"
        if source not in sources:
            sources.append(source)
    return sources


def _distinct_only(expected: list[str], actual: list[str]) -> bool:
    """Whether two lists of set operators differ only in ALL (``union`` against ``union all``)."""
    return expected != actual and [o.removesuffix(" all") for o in expected] == [o.removesuffix(" all")
                                                                              for o in actual]


def _raw_score(scores: dict[str, float], source: SourceClause, ordering_flag: bool) -> float:
    if source == "ordering":
        return 1.0 if ordering_flag else 0.0
    return scores[_score_name(source)]


def _score_name(source: SourceClause) -> str:
    return next((name for name, clause in SCORES.items() if clause == source), "")


def _join_words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
