"""The comparison engine as a plain library: no Dagster import anywhere below this package."""

from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report, ResultTable
from sqlcmp_dagster.engine.pipeline import Evaluator, compare

__all__ = ["CompareRequest", "EvalConfig", "Evaluator", "Report", "ResultTable", "compare"]
