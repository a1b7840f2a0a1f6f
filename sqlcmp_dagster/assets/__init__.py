"""The layer assets, one module each: thin wrappers that call the engine and shape one row per case."""

from sqlcmp_dagster.assets.case_reports import case_reports
from sqlcmp_dagster.assets.diagnostics import diagnostics
from sqlcmp_dagster.assets.evaluation_summary import evaluation_summary
from sqlcmp_dagster.assets.executions import executions
from sqlcmp_dagster.assets.judgments import judgments
from sqlcmp_dagster.assets.parsed_cases import parsed_cases
from sqlcmp_dagster.assets.result_comparisons import result_comparisons
from sqlcmp_dagster.assets.structural_diffs import structural_diffs

LAYERS = [parsed_cases, executions, structural_diffs, result_comparisons, diagnostics, judgments, case_reports]

__all__ = ["LAYERS", "evaluation_summary", *[a.key.path[-1] for a in LAYERS]]
