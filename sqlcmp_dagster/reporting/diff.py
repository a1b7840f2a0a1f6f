"""Two runs over the same cases (two models, or one model before and after a change), case by case.

Pass rates alone hide how much moved: a model can fix 40 cases and break 38. The diff pairs cases by id and
counts both directions; McNemar's exact test (a two-sided binomial test on the discordant pairs) says whether
the paired change is more than noise. Only cases valid in both runs are paired for the rates and the test:
an invalid case says nothing about either model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from math import comb
from typing import Any

from sqlcmp_dagster.engine.hardness import HARDNESS_LEVELS
from sqlcmp_dagster.engine.models import Report
from sqlcmp_dagster.engine.summary import database_label
from sqlcmp_dagster.reporting.cases import outcome


@dataclass(frozen=True)
class CaseChange:
    """One case whose outcome, severity or score differs between the runs."""

    case_id: str
    database: str
    hardness: str | None
    old_outcome: str
    new_outcome: str
    old_severity: str
    new_severity: str
    old_score: float
    new_score: float

    @property
    def kind(self) -> str:
        """``regressed`` (pass to fail), ``fixed`` (fail to pass), ``validity`` (became or stopped being invalid)
        or ``changed`` (same outcome, other severity or score)."""
        if {self.old_outcome, self.new_outcome} == {"pass", "fail"}:
            return "regressed" if self.old_outcome == "pass" else "fixed"
        return "validity" if "invalid" in (self.old_outcome, self.new_outcome) else "changed"


def mcnemar_exact(regressed: int, fixed: int) -> float:
    """Two-sided exact McNemar p-value for ``regressed`` pass-to-fail and ``fixed`` fail-to-pass cases.

    Under no change each discordant case is equally likely to go either way, so the smaller count follows
    Binomial(regressed + fixed, 1/2); the p-value doubles its lower tail (capped at 1).

    >>> mcnemar_exact(1, 6), mcnemar_exact(0, 0), mcnemar_exact(5, 5)
    (0.125, 1.0, 1.0)
    """
    n = regressed + fixed
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(regressed, fixed) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def diff_runs(old: list[Report], new: list[Report]) -> dict[str, Any]:
    """Case-by-case comparison of run ``old`` with run ``new`` (paired by case id)."""
    old_by_id = {r.case_id: r for r in old}
    new_by_id = {r.case_id: r for r in new}
    common = [case_id for case_id in new_by_id if case_id in old_by_id]
    changes = [_change(old_by_id[c], new_by_id[c]) for c in common]
    paired = [c for c in changes if "invalid" not in (c.old_outcome, c.new_outcome)]
    moved = [c for c in changes if (c.old_outcome, c.old_severity, c.old_score)
             != (c.new_outcome, c.new_severity, c.new_score)]
    return {
        "cases_in_both": len(common),
        "only_in_old": [c for c in old_by_id if c not in new_by_id],
        "only_in_new": [c for c in new_by_id if c not in old_by_id],
        **_paired_figures(paired),
        "became_invalid": [c.case_id for c in changes if c.new_outcome == "invalid" != c.old_outcome],
        "became_valid": [c.case_id for c in changes if c.old_outcome == "invalid" != c.new_outcome],
        "severity_changes": _severity_matrix(moved),
        "per_database": _per_group(paired, lambda c: c.database),
        "per_hardness": _per_group(paired, lambda c: c.hardness or "unknown", order=HARDNESS_LEVELS),
        "changes": [{**asdict(c), "kind": c.kind} for c in moved],
    }


def _change(old: Report, new: Report) -> CaseChange:
    return CaseChange(new.case_id, database_label(new.run_metadata.get("database")), new.run_metadata.get("hardness"),
                      outcome(old), outcome(new), old.severity, new.severity, round(old.overall_score, 6),
                      round(new.overall_score, 6))


def _paired_figures(paired: list[CaseChange]) -> dict[str, Any]:
    """Pass rates of both runs over the cases valid in both, what moved, and McNemar's p-value."""
    old_passed = sum(c.old_outcome == "pass" for c in paired)
    new_passed = sum(c.new_outcome == "pass" for c in paired)
    regressed = [c.case_id for c in paired if c.kind == "regressed"]
    fixed = [c.case_id for c in paired if c.kind == "fixed"]
    return {
        "paired_cases": len(paired),
        "old_passed": old_passed,
        "new_passed": new_passed,
        "old_pass_rate": round(old_passed / len(paired), 6) if paired else None,
        "new_pass_rate": round(new_passed / len(paired), 6) if paired else None,
        "regressed": regressed,
        "fixed": fixed,
        "mcnemar_p_value": mcnemar_exact(len(regressed), len(fixed)),
        "mean_score_change": round(sum(c.new_score - c.old_score for c in paired) / len(paired), 6) if paired else None,
    }


def _per_group(paired: list[CaseChange], key: Callable[[CaseChange], str], order: Sequence[str] = ()) \
        -> dict[str, dict[str, Any]]:
    """Paired figures per group (counts of regressed and fixed cases): groups in ``order`` first, then by name."""
    groups: dict[str, list[CaseChange]] = defaultdict(list)
    for change in paired:
        groups[key(change)].append(change)
    return {name: {k: v for k, v in _paired_figures(groups[name]).items() if k not in ("regressed", "fixed")}
            | {"regressed": sum(c.kind == "regressed" for c in groups[name]),
               "fixed": sum(c.kind == "fixed" for c in groups[name])}
            for name in sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g))}


def _severity_matrix(moved: list[CaseChange]) -> dict[str, int]:
    """How many cases went from one severity to another, as ``"old -> new": count``."""
    counts: dict[str, int] = defaultdict(int)
    for change in moved:
        if change.old_severity != change.new_severity:
            counts[f"{change.old_severity} -> {change.new_severity}"] += 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def _cases(count: int) -> str:
    """``count`` cases, with the right plural: ``1 case``, ``3 cases``."""
    return f"{count} case{'' if count == 1 else 's'}"


def render_diff(diff: dict[str, Any], *, limit: int = 20) -> str:
    """The diff as text: headline figures, then the regressed and fixed cases (at most ``limit`` each)."""
    def rate(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    lines = [f"{_cases(diff['paired_cases'])} valid in both runs: pass rate {rate(diff['old_pass_rate'])} -> "
             f"{rate(diff['new_pass_rate'])} ({diff['old_passed']} -> {diff['new_passed']}); "
             f"{len(diff['regressed'])} regressed, {len(diff['fixed'])} fixed; "
             f"McNemar exact p = {diff['mcnemar_p_value']:.4g}"]
    if diff["only_in_old"] or diff["only_in_new"]:
        lines.append(f"not paired: {_cases(len(diff['only_in_old']))} only in the old run, "
                     f"{len(diff['only_in_new'])} only in the new")
    if diff["became_invalid"] or diff["became_valid"]:
        lines.append(f"validity: {len(diff['became_invalid'])} became invalid, {len(diff['became_valid'])} valid again")
    if diff["severity_changes"]:
        lines.append("severity changes: " + ", ".join(f"{k} {v}" for k, v in diff["severity_changes"].items()))
    for kind in ("regressed", "fixed"):
        ids = diff[kind]
        if ids:
            lines.append(f"{kind}: " + ", ".join(ids[:limit]) + (f", ... ({len(ids) - limit} more)" if len(ids) > limit
                                                               else ""))
    for key, title in (("per_hardness", "per Spider hardness"), ("per_database", "per database")):
        groups = diff[key]
        if len(groups) > 1:
            lines.append(f"{title} (old -> new pass rate, regressed/fixed, p):")
            lines.extend(f"  {name:32} {rate(row['old_pass_rate']):>6} -> {rate(row['new_pass_rate']):>6}  "
                         f"-{row['regressed']}/+{row['fixed']}  p={row['mcnemar_p_value']:.3g}"
                         for name, row in groups.items())
    return "\n".join(lines)
