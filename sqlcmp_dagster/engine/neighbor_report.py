"""A report's neighbor search: how its outcome is written into a report (:func:`apply_neighborhood`, with the
case's ``verdict_scope``) and read back from one (:func:`neighborhood_of`, :func:`failed_by_counterexample`,
:class:`Robustness`). Kept apart from the search (:mod:`~sqlcmp_dagster.engine.neighbors`), so that what reads
reports (the text and HTML reports, the summary, the judge) does not import the search and its engines.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.scoring import overall_score

#: Names of the Layer 4 neighbor metrics (docs/neighbor-databases.md), in ``metrics.diagnostics``.
NEIGHBOR_METRICS = ("neighbor_search_ran", "neighbors_tried", "counterexample_found", "counterexample")
#: Most rows of each result shown in a counterexample.
SHOWN_ROWS = 20
#: The label (summaries, the per-case table) of a fail under ``verdict_scope: "neighborhood"`` that only a
#: counterexample fails: the report's ``likely_source_clause`` names a clause, and no clause is attributed there.
NEIGHBOR_COUNTEREXAMPLE = "neighbor_counterexample"


def row_count(rows: int) -> str:
    """``rows`` as a sentence counts them: ``1 row``, ``3 rows`` (neighbor sentences and the text report)."""
    return f"{rows} row{'' if rows == 1 else 's'}"


def apply_neighborhood(report: Report, neighborhood: dict[str, Any] | None, scope: str) -> Report:
    """Put the search's outcome into the report (``metrics.diagnostics``, ``evidence.neighborhood``,
    explanations, warnings) and apply the case's ``verdict_scope``; a report without a search is returned unchanged.

    The counterexample's own ``severity`` is Layer 3's on the counterexample whatever the scope (the counterexample
    is a fact about a database, the scope only decides what it does to the verdict): it is the report's severity
    under ``"neighborhood"``, while under ``"database"`` the report's is ``minor issue``, the case's on the
    evaluated database, and what shows a report says which is which."""
    if neighborhood is None or report.metrics.get("diagnostics") is None:
        return report
    report.metrics["diagnostics"].update({name: neighborhood[name] for name in NEIGHBOR_METRICS})
    # The four metrics live in metrics.diagnostics; evidence keeps the search's other details (each fact once).
    report.evidence["neighborhood"] = {k: v for k, v in neighborhood.items() if k not in NEIGHBOR_METRICS}
    report.run_metadata.setdefault("timings", {})["neighbor_search_ms"] = neighborhood["elapsed_ms"]
    found = neighborhood["counterexample"]
    if neighborhood["nondeterminism"]:
        report.warnings += [f"neighbor databases: {note}" for note in neighborhood["nondeterminism"]]
    report.warnings += [f"neighbor databases: {failure}" for failure in neighborhood.get("query_failures", [])]
    report.warnings += neighborhood.get("budget_cuts", [])
    if found is None:
        if scope == "neighborhood" and not neighborhood["neighbor_search_ran"] and report.deterministic_verdict \
                == "pass":
            report.warnings.append("verdict_scope is neighborhood but the neighbor search did not run, so the "
                                   f"verdict is the evaluated database's: {neighborhood['reason']}")
        return report
    # No replay handle exists beyond the configuration: the same case and configuration rebuild the same search.
    shrunk = "shrunk until no single row can go" if found.get("minimal") else \
        "shrunk as far as its test budget allowed (not 1-minimal)"
    line = (f"neighbor databases: a counterexample, {shrunk}: {found['sentence']} (rerunning the same case with "
            f"the same configuration, neighbor_seed {found['seed']}, rebuilds it)")
    if scope == "neighborhood":
        report.deterministic_verdict = "fail"
        report.severity = found["severity"]
        report.overall_score = overall_score(report.result_score or 0.0, report.structure_score or 0.0, False)
        _unattributed(report)
        report.explanations = [f"fail ({found['severity']}): the results match on the evaluated database but "
                               f"not on a neighbor database of the same schema (verdict_scope neighborhood)",
                               line, *report.explanations[1:]]
    else:
        report.severity = "minor issue"
        report.explanations.append(line)
        report.warnings.append("passes on the evaluated database only: a neighbor database of the same schema "
                               "tells the two queries apart (metrics.diagnostics.counterexample)")
    return report


def _unattributed(report: Report) -> None:
    """Diagnostics of a fail that only a counterexample makes: the attribution ran on the evaluated database,
    where the results match, so no clause is attributed (``likely_source_clause`` null, confidence 0, low
    evidence, ambiguous when several clauses differ), in place of a pass's (confidence 1)."""
    clauses = report.evidence.get("clauses") or []
    update = {"confidence": 0.0, "evidence_strength": "low", "ambiguous_case": len(clauses) > 1}
    report.metrics["diagnostics"].update(update)
    if report.diagnostic_scores is not None:
        report.diagnostic_scores.update(update)
        report.diagnostic_scores["evidence"] = [
            "no clause is attributed: the results match on the evaluated database, where the attribution and the "
            "fix search work; the counterexample shows the difference"
            + (f" (differing clauses: {', '.join(clauses)})" if clauses else ""),
            *report.diagnostic_scores.get("evidence", [])]


def failed_by_counterexample(report: Report) -> bool:
    """Whether ``report`` is a fail that only a neighbor counterexample makes (``verdict_scope: "neighborhood"``;
    the search runs only for a case that passes on the evaluated database)."""
    return report.deterministic_verdict == "fail" and bool(
        (report.metrics.get("diagnostics") or {}).get("counterexample_found"))


def neighborhood_of(report: Report) -> dict[str, Any]:
    """A report's neighbor search as one dict: its four metrics (``metrics.diagnostics``) with its other details
    (``evidence.neighborhood``); empty when the case had no search to consider (a fail or a blocked case)."""
    details = report.evidence.get("neighborhood")
    if not details:
        return {}
    metrics = report.metrics.get("diagnostics") or {}
    return {**details, **{name: metrics[name] for name in NEIGHBOR_METRICS if name in metrics}}


class NeighborFacts(NamedTuple):
    """What a summary reads of one pass's neighbor search (:func:`neighbor_facts`)."""

    searched: bool
    #: Robust without a search: the canonical trees prove the two queries equal (``robust_by_structure``).
    proven: bool
    counterexample: bool
    #: Why the pass was neither searched nor proven robust (None when it was one of them).
    unsearched_reason: str | None
    #: A search the clock cut (``budget_cuts``).
    cut: bool
    #: A search that compared non-empty results on some neighbor (``neighbors_nonempty``).
    nonempty: bool


def neighbor_facts(report: Report) -> NeighborFacts:
    """The neighbor search of ``report`` as :class:`NeighborFacts` (from :func:`neighborhood_of`)."""
    found = neighborhood_of(report)
    searched, proven = bool(found.get("neighbor_search_ran")), bool(found.get("robust_by_structure"))
    reason = None if searched or proven else found.get("reason") or "the report holds no neighbor search"
    return NeighborFacts(searched, proven, bool(found.get("counterexample_found")), reason,
                         bool(found.get("budget_cuts")), bool(found.get("neighbors_nonempty")))


class Robustness:
    """The summary's figures of the neighbor search, added up one valid case at a time (:meth:`add`), so that a
    run keeps counts instead of its reports. :meth:`figures`: ``robust_passes`` (passes whose search ran and
    found no counterexample, and passes whose canonical trees are equal, robust without a search),
    ``robust_pass_rate`` beside the pass rate (None when no pass was searched or proven),
    ``passes_with_counterexample``, ``neighbor_searches`` (passes searched), ``neighbor_searches_cut`` (of them,
    searches the clock cut), ``passes_not_searched`` (passes neither searched nor robust by structure: not
    robust as far as the rate knows) with ``passes_not_searched_reasons`` (reason: passes, the most frequent
    first, ties in the order the cases came), and ``vacuous_passes_resolved`` (passes on two empty results whose
    search compared non-empty results on some neighbor)."""

    def __init__(self) -> None:
        self.searched = self.proven = self.robust = self.counterexamples = self.cut = self.resolved = 0
        self.unsearched: Counter[str] = Counter()

    def add(self, passed: bool, facts: NeighborFacts | None, vacuous: bool) -> None:
        """Count one valid case: whether it passed, its search's facts (None for a case that did not pass) and
        whether it passed on two empty results."""
        if not passed or facts is None:
            return
        self.proven += facts.proven
        self.counterexamples += facts.counterexample
        if facts.searched:
            self.searched += 1
            self.robust += not facts.counterexample
            self.cut += facts.cut
            self.resolved += vacuous and facts.nonempty
        if facts.unsearched_reason is not None:
            self.unsearched[facts.unsearched_reason] += 1

    def figures(self, valid: int) -> dict[str, Any]:
        """The figures over ``valid`` valid cases."""
        robust = self.robust + self.proven
        return {"robust_passes": robust,
                "robust_pass_rate": round(robust / valid, 6) if valid and (self.searched or self.proven) else None,
                "passes_with_counterexample": self.counterexamples,
                "neighbor_searches": self.searched,
                "neighbor_searches_cut": self.cut,
                "passes_not_searched": sum(self.unsearched.values()),
                "passes_not_searched_reasons": dict(self.unsearched.most_common()),
                "vacuous_passes_resolved": self.resolved}
