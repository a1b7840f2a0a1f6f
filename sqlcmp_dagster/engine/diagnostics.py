"""Layer 4: attribute a result mismatch to the SQL clause most likely behind it (architecture.txt component F).

Each candidate clause gets a score from two kinds of signal: the clause differs in the AST (Layer 2), and the
results differ the way that clause would make them differ (Layer 3: extra columns for the projection, one-sided
overlap for a predicate, fan-out for a join, ...). Where they can, *counterfactual probes* settle it: the actual
query is re-run with one clause taken from the expected query, and if the results then match, that clause is
the error. Probes are supplied by the caller as a function, so this module runs no SQL itself.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from sqlcmp_dagster.engine.models import EvidenceStrength, SourceClause
from sqlcmp_dagster.engine.results import ResultComparison
from sqlcmp_dagster.engine.structure import CLAUSE_ARGS, QueryShape, StructuralComparison

#: Score name -> the source clause it stands for, in the order of the glossary.
SCORES: dict[str, SourceClause] = {
    "projection_error_score": "projection",
    "filter_error_score": "selection_predicate",
    "join_error_score": "join",
    "grouping_error_score": "aggregation_grain",
    "aggregate_function_error_score": "aggregate_function",
    "limit_topk_error_score": "top_k",
}
#: The source clause a probe confirms when swapping in the expected version of a structural clause fixes it.
_PROBE_SOURCE: dict[str, SourceClause] = {
    "projection": "projection",
    "distinct": "projection",
    "selection_predicate": "selection_predicate",
    "post_aggregation_predicate": "selection_predicate",
    "join": "join",
    "aggregation_grain": "aggregation_grain",
    "ordering": "ordering",
    "top_k": "top_k",
}
#: A cardinality ratio beyond this factor (either way) is fan-out or compression, not noise.
EXPLOSION_RATIO = 2.0

Probe = Callable[[exp.Expression], ResultComparison | None]


@dataclass(frozen=True)
class ProbeOutcome:
    clause: str
    passed: bool | None  # None: the probe could not run (unsupported shape or an execution error)
    sql: str | None


def diagnose(
    structure: StructuralComparison,
    expected: QueryShape,
    actual: QueryShape,
    result: ResultComparison,
    *,
    expected_tree: exp.Expression,
    actual_tree: exp.Expression,
    probe: Probe | None,
) -> dict[str, Any]:
    """All twelve diagnostic metrics plus ``likely_source_clause``, ``probes`` and the evidence sentences."""
    column_map = per_column_mismatch_map(result)
    if result.mode_pass:
        return {**{name: 0.0 for name in SCORES}, "ordering_error_flag": False,
                "cardinality_explosion_flag": False, "per_column_mismatch_map": column_map,
                "likely_source_clause": None, "confidence": 1.0, "evidence_strength": "high",
                "ambiguous_case": False, "probes": [], "evidence": []}

    signals = _Signals(structure, expected, actual, result)
    scores = signals.scores()
    evidence = signals.evidence()
    ordering_flag = result.bag_pass and not result.mode_pass
    probes = _run_probes(structure, expected_tree, actual_tree, probe) if probe is not None and not ordering_flag \
        else []
    confirmed = [p for p in probes if p.passed]
    confirmed_sources = {_confirmed_source(p.clause, expected, actual) for p in confirmed}
    for outcome in probes:
        if outcome.passed is not None:
            verdict = "makes the results match" if outcome.passed else "does not make the results match"
            evidence.append(f"re-running the actual query with the expected {outcome.clause.replace('_', ' ')} "
                            f"{verdict}")

    ranked: list[tuple[float, SourceClause]] = sorted(
        ((score, SCORES[name]) for name, score in scores.items()), key=lambda item: -item[0])
    strength: EvidenceStrength
    if ordering_flag:
        source: SourceClause | None = "ordering"
        confidence, strength, ambiguous = 0.95, "high", False
        evidence.insert(0, "the results hold the same rows but in a different order")
    elif confirmed_sources:
        for name, clause in SCORES.items():
            if clause in confirmed_sources:
                scores[name] = max(scores[name], 0.9)
        source = max(sorted(confirmed_sources), key=lambda c: scores.get(_score_name(c), 0.9))
        ambiguous = len(confirmed_sources) > 1
        confidence, strength = (0.7 if ambiguous else 0.95), "high"
    else:
        top, source = ranked[0]
        second = ranked[1][0]
        if top <= 0:
            source, confidence, strength, ambiguous = None, 0.0, "low", True
        else:
            confidence = top * (0.5 + 0.5 * (top - second) / top)
            ambiguous = second >= 0.8 * top
            corroborating = signals.corroboration(source)
            strength = "high" if corroborating >= 3 else "medium" if corroborating == 2 else "low"
    return {
        **{name: round(value, 4) for name, value in scores.items()},
        "ordering_error_flag": ordering_flag,
        "cardinality_explosion_flag": signals.explosion(),
        "per_column_mismatch_map": column_map,
        "likely_source_clause": source,
        "confidence": round(confidence, 4),
        "evidence_strength": strength,
        "ambiguous_case": ambiguous,
        "probes": [{"clause": p.clause, "passed": p.passed, "sql": p.sql} for p in probes],
        "evidence": evidence,
    }


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
    return {"attributes": columns, "extra_attributes": result.extra_columns}


class _Signals:
    """The raw signals behind the scores, computed once and shared by scores, evidence and corroboration."""

    def __init__(self, structure: StructuralComparison, expected: QueryShape, actual: QueryShape,
                 result: ResultComparison) -> None:
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

    def scores(self) -> dict[str, float]:
        diff = {name: 1.0 - value for name, value in self.sim.items()}
        projection = 0.5 * self.schema_diff + 0.3 * max(diff["projection"], diff["distinct"], diff["set_operators"])
        projection += 0.2 * (self.partly_wrong and not self.aggregates_differ)
        if not self.card_close and not (diff["distinct"] or diff["set_operators"]):
            projection *= 0.6
        asymmetry = abs(self.precision - self.recall)
        predicate = max(diff["selection_predicate"], diff["post_aggregation_predicate"])
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
        return (ratio >= EXPLOSION_RATIO or ratio <= 1 / EXPLOSION_RATIO) and abs(self.m - self.n) >= 2

    def corroboration(self, source: SourceClause) -> int:
        """How many independent signals point at ``source``."""
        clause_names = [c for c, s in _PROBE_SOURCE.items() if s == source]
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
            count += not self.card_close
        return count

    def evidence(self) -> list[str]:
        """Plain-language sentences, one per signal, in the order a person would check them."""
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
            out.append(f"actual returns {self.m} rows, expected {self.n} ({ratio})")
        if r.bag_matched_rows < max(self.n, self.m):
            out.append(f"{r.bag_matched_rows} of {self.n} expected rows are in the actual result; "
                       f"{self.m - r.bag_matched_rows} actual rows are not expected")
        for stat in self.result.columns:
            if stat.actual_index is not None and stat.mismatched:
                detail = f" (max abs diff {stat.max_abs_diff:g})" if stat.numeric and stat.max_abs_diff else ""
                out.append(f"column {stat.name} differs in {stat.mismatched} of {stat.compared} paired rows{detail}")
        if self.aggregates_differ:
            out.append(f"aggregate functions differ: expected {self.expected.aggregates or 'none'}, "
                       f"actual {self.actual.aggregates or 'none'}")
        for name, detail in self.clause_match.items():
            if not detail["match"]:
                out.append(f"{name.replace('_', ' ')} differs: expected {detail['expected'] or 'none'}, "
                           f"actual {detail['actual'] or 'none'}")
        return out


def _run_probes(structure: StructuralComparison, expected_tree: exp.Expression, actual_tree: exp.Expression,
                probe: Probe) -> list[ProbeOutcome]:
    """Swap each differing clause of the expected query into the actual one, one at a time, and re-run."""
    if not (isinstance(expected_tree, exp.Select) and isinstance(actual_tree, exp.Select)):
        return []
    outcomes: list[ProbeOutcome] = []
    for clause in structure.differing():
        if clause not in CLAUSE_ARGS:
            continue
        candidate = swap_clause(actual_tree, expected_tree, clause)
        result = probe(candidate)
        outcomes.append(ProbeOutcome(clause, None if result is None else result.mode_pass, candidate.sql()))
    return outcomes


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


def _confirmed_source(clause: str, expected: QueryShape, actual: QueryShape) -> SourceClause:
    """A fixed projection whose only difference is the aggregate functions points at the aggregate function."""
    source = _PROBE_SOURCE[clause]
    if source == "projection" and Counter(expected.aggregates) != Counter(actual.aggregates):
        return "aggregate_function"
    return source


def _score_name(source: SourceClause) -> str:
    return next((name for name, clause in SCORES.items() if clause == source), "")

