"""Final synthesis and the report builder: every report carries every top-level key (docs/design.md).

The failure precedence is applied here, in this order: parse failure, then execution failure, then the
result gate; structure and diagnostics only refine attribution and severity, and the (advisory) AI judge can
only annotate. Every report carries every top-level key, null where it does not apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlcmp_dagster.engine.diagnostics import SCORES, likely_source_words
from sqlcmp_dagster.engine.relation import shown_rows
from sqlcmp_dagster.engine.hardness import Hardness, spider_hardness
from sqlcmp_dagster.engine.models import CompareRequest, ErrorCategory, Report
from sqlcmp_dagster.engine.neighbor_report import SHOWN_ROWS, apply_neighborhood, failed_by_counterexample, neighborhood_of, \
    row_count
from sqlcmp_dagster.engine.published_metrics import add_case_metrics
from sqlcmp_dagster.engine.scoring import overall_score, result_score, severity, structure_score
from sqlcmp_dagster.engine.comparison import ResultComparison
from sqlcmp_dagster.engine.structure import StructuralComparison
from sqlcmp_dagster.engine.version import ENGINE_VERSION

if TYPE_CHECKING:
    from sqlcmp_dagster.engine.validation import Side, Validation


#: The twelve diagnostic metrics, in the report's order.
DIAGNOSTIC_METRICS = (*SCORES, "ordering_error_flag", "cardinality_explosion_flag", "per_column_mismatch_map",
                      "confidence", "evidence_strength", "ambiguous_case")
#: ``diagnostic_scores``: the six error scores and confidence, both flags, the attribution, and the verified
#: minimal fix (``suggested_fix``, an addition nested here so that the report's top-level keys stay as they are).
DIAGNOSTIC_SCORE_KEYS = (*SCORES, "confidence", "ordering_error_flag", "cardinality_explosion_flag",
                         "likely_source_clause", "evidence_strength", "ambiguous_case", "suggested_fix", "evidence")
PERFORMANCE_METRICS = ("execution_time_ratio", "resource_cost_score", "plan_complexity_score")
#: Most rows of each table and each result of a counterexample that the text report shows (the JSON has them all).
TEXT_COUNTEREXAMPLE_ROWS = 5


@dataclass
class Analysis:
    """Layers 2-4 and performance of a case that was not blocked."""

    index: int  # the expected alternative the verdict is against
    structure: StructuralComparison
    result: ResultComparison
    alternatives: int
    diagnostics: dict[str, Any]
    performance: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def blocked_by(validation: Validation) -> str | None:
    """The precedence rule that blocks the case: parse failure first, then execution failure, else None."""
    actual, expected = validation.actual, validation.expected
    if not actual.parsed.success or not any(s.parsed.success for s in expected):
        return "parse_failure"
    if not actual.executed_ok or not any(s.executed_ok for s in expected):
        return "execution_failure"
    return None


def blocked_report(validation: Validation) -> Report | None:
    """The report of a case stopped by parse or execution failure, or None when neither applies."""
    actual, expected = validation.actual, validation.expected
    reason = blocked_by(validation)
    if reason is None:
        return None
    explanations: list[str] = []
    if validation.database_error is not None:
        explanations.append(f"{validation.database_error}: the case is invalid and this is not the model's error")
    elif not actual.parsed.success:
        explanations.append(f"actual query does not parse: {actual.parsed.error}")
    elif actual.execution is not None and actual.execution.error is not None:
        error = actual.execution.error
        explanations.append(f"actual query failed with {error.category}: {error.message}")
    if validation.database_error is None:
        if invalid_reason(validation) is not None:
            explanations.append("no expected query runs: the case is invalid and this is not the model's error")
        for index, side in enumerate(expected):
            explanations += _expected_failure(index, side, len(expected))
    structure = None
    first_parsed = next((i for i, s in enumerate(expected) if s.parsed.success), None)
    if actual.parsed.success and first_parsed is not None:
        # Layer 2 still runs when execution failed: the clause diff explains many execution errors.
        comparison = validation.structure_against(first_parsed)
        structure = comparison.metrics(), structure_score(comparison)
    evidence = {"blocked_by": reason, "failed_sides": _failed_sides(validation)}
    return _report(
        validation,
        verdict="fail",
        overall=0.0,
        severity_label="critical failure",
        structure=structure,
        result=None,
        diagnostics=None,
        performance=None,
        explanations=explanations,
        mismatch_map=None,
        blocked_reason=reason,
        warnings=list(validation.warnings),
        evidence=evidence,
        chosen_index=None,
    )


def build_report(validation: Validation, analysis: Analysis) -> Report:
    """The report of a case that reached the result gate."""
    result, diagnostics, structure = analysis.result, analysis.diagnostics, analysis.structure
    mode = result.comparison_mode
    passed = result.mode_pass
    s_score, r_score = structure_score(structure), result_score(result)
    label = severity(result, diagnostics["ordering_error_flag"])
    tie = ", tie-ambiguous at the LIMIT" if result.tie_ambiguous else ""
    headline = (f"pass: the results match under {mode} comparison ({row_count(result.matched_rows)}{tie})"
                if passed else
                f"fail ({label}): the results differ under {mode} comparison; likely source "
                f"{diagnostics['likely_source_clause'] or 'unknown'}: {likely_source_words(diagnostics)} "
                f"(confidence {diagnostics['confidence']:.2f}, "
                f"{diagnostics['evidence_strength']} evidence{', ambiguous' if diagnostics['ambiguous_case'] else ''})")
    # The attribution evidence is held once, in diagnostic_scores.evidence; explanation_lines() shows both.
    explanations = [headline]
    if analysis.alternatives > 1:
        explanations.append(f"best of {analysis.alternatives} expected queries: #{analysis.index + 1}")
    warnings = list(validation.warnings) + result.warnings + analysis.warnings
    for index, side in enumerate(validation.expected):
        warnings += _expected_failure(index, side, len(validation.expected))
    # The attribution evidence is in diagnostic_scores.evidence already: not repeated here.
    evidence = {
        # The differing clauses by name: their details are metrics.structure.clause_match, stated once.
        "clauses": sorted(name for name, detail in structure.clause_match.items() if not detail["match"]),
        "probes": diagnostics["probes"],
        "matched_expected_index": analysis.index,
        "column_mapping": result.schema_match["column_mapping"],
    }
    # On an order-only failure every row is in both results: rows unpaired by position are not missing.
    order_only = diagnostics["ordering_error_flag"]
    # The per-column map lives once, in metrics.diagnostics.per_column_mismatch_map (a diagnostic
    # metric under its layer, as every metric is); mismatch_map adds only what no metric holds, the sampled rows.
    mismatch_map = {
        "missing_rows_sample": [] if order_only else shown_rows(result.missing_rows),
        "extra_rows_sample": [] if order_only else shown_rows(result.extra_rows),
    }
    report = _report(
        validation,
        verdict="pass" if passed else "fail",
        overall=overall_score(r_score, s_score, passed),
        severity_label=label,
        structure=(structure.metrics(), s_score),
        result=(result.metrics(), r_score),
        diagnostics=diagnostics,
        performance=analysis.performance,
        explanations=explanations,
        mismatch_map=mismatch_map,
        blocked_reason=None,
        warnings=warnings,
        evidence=evidence,
        chosen_index=analysis.index,
        timings=analysis.timings,
        mode=mode,
    )
    return apply_neighborhood(report, diagnostics.get("neighborhood"), validation.request.config.verdict_scope)


def fault_report(request: CompareRequest, message: str) -> Report:
    """A report for a case the engine itself failed on: critical, blocked at execution, nothing lost."""
    return Report(
        case_id=request.case_id, deterministic_verdict="fail", ai_advisory_verdict=None,
        verdict_consistency_flag=None, overall_score=0.0, structure_score=None, result_score=None,
        diagnostic_scores=None, performance_scores=None, severity="critical failure", explanations=[message],
        mismatch_map=None, error_types=["unknown_error"], blocked_reason="execution_failure", warnings=[message],
        validity={"case_valid": False, "invalid_reason": message}, evidence={"engine_error": message},
        run_metadata=_run_metadata(request, None, None, None, {}, None), metrics=_empty_metrics(),
    )


def per_column_map(report: Report) -> dict[str, Any]:
    """A report's per-column mismatch map (``metrics.diagnostics.per_column_mismatch_map``), empty when the
    diagnostics did not run (a blocked or passing case without one)."""
    return ((report.metrics or {}).get("diagnostics") or {}).get("per_column_mismatch_map") or {}


def explanation_lines(report: Report) -> list[str]:
    """The explanation as a person reads it: the headline, the attribution evidence, then the other sentences.

    A report keeps each fact once: ``explanations`` holds the headline and what no metric holds (the best of several
    expected queries, a neighbor counterexample, why a case was blocked), and the attribution evidence is
    ``diagnostic_scores.evidence``. Everything that shows a report to a person reads it through this function.
    """
    evidence = list((report.diagnostic_scores or {}).get("evidence") or [])
    return report.explanations[:1] + evidence + report.explanations[1:]


def render_text(report: Report) -> str:
    """A report as a person reads it: verdict, scores, explanations, per-column map, warnings.

    An invalid case (no expected query runs) is headed INVALID rather than FAIL: it says nothing about the
    query under test.
    """
    if report.validity.get("case_valid", True):
        headline = f"{report.deterministic_verdict.upper()} ({report.severity}), overall {report.overall_score:.3f}"
    else:
        headline = f"INVALID ({report.validity.get('invalid_reason') or 'no expected query runs'})"
    lines = [f"case {report.case_id}: {headline}"]
    if report.blocked_reason:
        lines.append(f"blocked: {report.blocked_reason}")
    scores = [f"{name} {value:.3f}" for name, value in
              (("structure", report.structure_score), ("result", report.result_score)) if value is not None]
    if scores:
        # A fail made by a counterexample keeps the evaluated database's scores, where the results match.
        where = " (on the evaluated database)" if failed_by_counterexample(report) else ""
        lines.append("scores: " + ", ".join(scores) + where)
    lines += [f"  - {line}" for line in explanation_lines(report)]
    columns = per_column_map(report).get("attributes", {})
    wrong = {name: c for name, c in columns.items() if c["status"] != "match"}
    if wrong:
        lines.append("columns:")
        for name, c in wrong.items():
            detail = "missing" if c["status"] == "missing" else \
                f"{c['mismatched_cells']}/{c['compared_cells']} cells differ ({c['severity']})"
            lines.append(f"  {name}: {detail}")
    for label, key in (("missing rows (sample)", "missing_rows_sample"), ("extra rows (sample)", "extra_rows_sample")):
        rows = (report.mismatch_map or {}).get(key) or []
        if rows:
            lines.append(f"{label}: " + "; ".join(str(tuple(r)) for r in rows))
    lines += neighbor_lines(report)
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines)


def neighbor_lines(report: Report) -> list[str]:
    """What the neighbor search says about a case, as a person reads it: a searched pass (how many neighbors,
    cut by the clock or not), a pass not searched and why, or the counterexample's tables and both results on
    it, a few rows of each. A fail that was not searched (the search is for passes) says nothing."""
    found = neighborhood_of(report)
    if not found:
        return []
    example = found.get("counterexample")
    if example is not None:
        return _counterexample_lines(report, example)
    if not found["neighbor_search_ran"]:
        return [f"neighbor search did not run: {found['reason']}"] if report.deterministic_verdict == "pass" else []
    tried = f"{found['neighbors_tried']} neighbor database{'' if found['neighbors_tried'] == 1 else 's'} tried"
    if found.get("budget_cuts"):
        return [f"neighbor search cut by the time budget: {tried}, no counterexample"
                + (f" ({found['reason']})" if found.get("reason") else " (see the warnings)")]
    return [f"neighbor search: {tried}, no counterexample"]


def _counterexample_lines(report: Report, example: dict[str, Any]) -> list[str]:
    """A counterexample compactly: each table's rows, both results, and the severity of the difference on it
    set apart from the report's own when the verdict is the evaluated database's."""
    lines = [f"counterexample ({row_count(example['rows'])}):"]
    for name, table in example["tables"].items():
        lines += _rows_lines(f"table {name}", table["columns"], table["rows"], complete=True)
    for label, key in (("expected result", "expected_result"), ("actual result", "actual_result")):
        result = example[key]
        lines += _rows_lines(label, result["columns"], result["rows"], complete=len(result["rows"]) < SHOWN_ROWS)
    difference = f"{example['severity']} under {example['comparison_mode']} comparison"
    if failed_by_counterexample(report):
        lines.append(f"  the difference there: {difference}")
    else:
        lines.append(f"  the difference there: {difference} (this case's severity under verdict_scope neighborhood; "
                     f"under database, this report's scope, it is a {report.severity})")
    return lines


def _rows_lines(label: str, columns: list[str], rows: list[list[Any]], *, complete: bool) -> list[str]:
    """``label`` with its row count (at least, when the report kept only the first rows), the column names and
    the first :data:`TEXT_COUNTEREXAMPLE_ROWS` rows, and how many more there are."""
    count = f"{'' if complete else 'at least '}{row_count(len(rows))}"
    lines = [f"  {label}: {count}" + (f" ({', '.join(columns)})" if rows else "")]
    lines += [f"    {tuple(row)}" for row in rows[:TEXT_COUNTEREXAMPLE_ROWS]]
    if len(rows) > TEXT_COUNTEREXAMPLE_ROWS:
        lines.append(f"    ... and {len(rows) - TEXT_COUNTEREXAMPLE_ROWS} more (the JSON report has them)")
    return lines


def _report(validation: Validation, *, verdict: str, overall: float, severity_label: str,
            structure: tuple[dict[str, Any], float] | None, result: tuple[dict[str, Any], float] | None,
            diagnostics: dict[str, Any] | None, performance: dict[str, Any] | None, explanations: list[str],
            mismatch_map: dict[str, Any] | None, blocked_reason: str | None, warnings: list[str],
            evidence: dict[str, Any], chosen_index: int | None, timings: dict[str, float] | None = None,
            mode: str | None = None) -> Report:
    request = validation.request
    metrics = _empty_metrics()
    metrics["validation"] = _validation_metrics(validation, chosen_index)
    if structure is not None:
        metrics["structure"] = structure[0]
    if result is not None:
        metrics["result"] = result[0]
    add_case_metrics(metrics, validation, chosen_index)
    if diagnostics is not None:
        metrics["diagnostics"] = {name: diagnostics[name] for name in DIAGNOSTIC_METRICS}
    if performance is not None:
        metrics["performance"] = {name: performance[name] for name in PERFORMANCE_METRICS}
    all_timings = {**validation.timings, **(timings or {})}
    return Report(
        case_id=request.case_id,
        deterministic_verdict=verdict,
        ai_advisory_verdict=None,
        verdict_consistency_flag=None,
        overall_score=overall,
        structure_score=structure[1] if structure is not None else None,
        result_score=result[1] if result is not None else None,
        diagnostic_scores={k: diagnostics[k] for k in DIAGNOSTIC_SCORE_KEYS} if diagnostics is not None else None,
        performance_scores=performance,
        severity=severity_label,
        explanations=explanations,
        mismatch_map=mismatch_map,
        error_types=_error_types(validation),
        blocked_reason=blocked_reason,
        warnings=_unique(warnings),
        validity=_validity(validation),
        evidence=evidence,
        run_metadata=_run_metadata(request, validation.dialect, validation.database, mode, all_timings,
                                   _hardness(validation, chosen_index)),
        metrics=metrics,
    )


def _validation_metrics(validation: Validation, chosen_index: int | None) -> dict[str, Any]:
    config = validation.request.config
    actual = validation.actual
    expected = validation.expected[chosen_index if chosen_index is not None else _first_expected(validation)]
    metrics: dict[str, Any] = {}
    for name, side in (("actual", actual), ("expected", expected)):
        execution = side.execution
        metrics[f"parse_success_{name}"] = side.parsed.success
        metrics[f"normalized_sql_{name}"] = side.parsed.normalized_sql
        metrics[f"execution_success_{name}"] = bool(execution and execution.success) if side.parsed.success \
            else None
        metrics[f"execution_error_{name}"] = execution.error.model_dump() if execution and execution.error else None
        metrics[f"execution_time_{name}_ms"] = execution.elapsed_ms if execution else None
    for name, side in (("actual", actual), ("expected", expected)):
        if config.include_asts:
            metrics[f"ast_{name}"] = side.parsed.ast.dump() if side.parsed.ast is not None else None
        if config.include_result_tables:
            relation = side.relation
            metrics[f"{name}_result_table"] = relation.to_rows() if relation is not None else None
            metrics[f"{name}_schema"] = relation.schema() if relation is not None else None
    return metrics


def _first_expected(validation: Validation) -> int:
    """The alternative to show when none was chosen: the first that ran, else the first that parsed."""
    predicates: tuple[Callable[[Side], bool], ...] = (lambda s: s.executed_ok, lambda s: s.parsed.success)
    for predicate in predicates:
        for index, side in enumerate(validation.expected):
            if predicate(side):
                return index
    return 0


def invalid_reason(validation: Validation) -> str | None:
    """Why the case says nothing about the query under test, or None when it is valid: its database could not be
    opened (for whichever side needed it), or no expected query parses and executes."""
    if validation.database_error is not None:
        return validation.database_error
    return None if any(s.executed_ok for s in validation.expected) else "no expected query parses and executes"


def _validity(validation: Validation) -> dict[str, Any]:
    actual, expected = validation.actual, validation.expected
    reason = invalid_reason(validation)
    return {
        "parse_success_actual": actual.parsed.success,
        "parse_success_expected": [s.parsed.success for s in expected],
        "execution_success_actual": actual.executed_ok if actual.parsed.success else None,
        "execution_success_expected": [s.executed_ok if s.parsed.success else None for s in expected],
        "case_valid": reason is None,
        "invalid_reason": reason,
    }


def _error_types(validation: Validation) -> list[ErrorCategory]:
    categories: list[ErrorCategory] = []
    for side in [validation.actual, *validation.expected]:
        if side.execution is not None and side.execution.error is not None:
            categories.append(side.execution.error.category)
    return _unique(categories)


def _failed_sides(validation: Validation) -> list[dict[str, Any]]:
    failed = []
    for label, side in [("actual", validation.actual)] + [(f"expected[{i}]", s)
                                                          for i, s in enumerate(validation.expected)]:
        if not side.parsed.success:
            failed.append({"side": label, "stage": "parse", "message": side.parsed.error})
        elif side.execution is not None and side.execution.error is not None:
            failed.append({"side": label, "stage": "execution", **side.execution.error.model_dump()})
    return failed


def _expected_failure(index: int, side: Side, count: int) -> list[str]:
    name = "expected query" if count == 1 else f"expected query #{index + 1}"  # people count from 1
    if not side.parsed.success:
        return [f"{name} does not parse: {side.parsed.error}"]
    if side.execution is not None and side.execution.error is not None:
        return [f"{name} failed with {side.execution.error.category}: {side.execution.error.message}"]
    return []


def _hardness(validation: Validation, chosen_index: int | None) -> Hardness | None:
    """Spider's hardness of the expected query the verdict used (else the first that parsed), or None."""
    order = ([chosen_index] if chosen_index is not None else []) + list(range(len(validation.expected)))
    tree = next((validation.expected[i].parsed.ast for i in order if validation.expected[i].parsed.ast is not None),
                None)
    return spider_hardness(tree) if tree is not None else None


def _run_metadata(request: CompareRequest, dialect: str | None, database: str | None, mode: str | None,
                  timings: dict[str, float], hardness: Hardness | None) -> dict[str, Any]:
    """Where and how the case ran, plus what groups it in breakdowns: the question, Spider's hardness of the
    expected query and the benchmark's own difficulty label (``context.difficulty``, e.g. BIRD's)."""
    own = _own_metadata(request)
    return {
        "user_query": own["user_query"],
        "hardness": hardness,
        "difficulty": own["difficulty"],
        "engine_version": ENGINE_VERSION,
        "dialect": dialect,
        "database": database,
        "config_hash": request.config.config_hash(),
        "comparison_mode": mode,
        "timings": dict(timings),
        "judge": None,
    }


def _own_metadata(request: CompareRequest) -> dict[str, Any]:
    """What a report takes from its case beyond the queries, database and options: the question and the
    benchmark's difficulty label (``context.difficulty``)."""
    context = request.context if isinstance(request.context, dict) else {}
    difficulty = context.get("difficulty")
    return {"user_query": request.user_query, "difficulty": str(difficulty) if difficulty is not None else None}


def for_case(report: Report, request: CompareRequest) -> Report:
    """``report``, the deterministic report of a case with the same queries, database and options as ``request``,
    as ``request``'s own: its case id, question and difficulty label (nothing else in a deterministic report
    comes from them). ``report`` itself is left as it is."""
    return report.model_copy(update={"case_id": request.case_id,
                                      "run_metadata": {**report.run_metadata, **_own_metadata(request)}})


def _empty_metrics() -> dict[str, Any]:
    return {"validation": None, "structure": None, "result": None, "diagnostics": None, "performance": None,
            "ai_judge": None}


def _unique(items: list[Any]) -> list[Any]:
    return list(dict.fromkeys(items))
