"""The comparison engine as a plain library: no Dagster import anywhere below this package.

Its names are resolved on first use (PEP 562), so that importing a light module of the package (``models``,
``atomic``) does not import the pipeline with polars, sqlglot and SQLAlchemy: the CLI starts its worker
processes' server before it pays for those imports (:mod:`sqlcmp_dagster.engine.workers`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report, ResultTable
    from sqlcmp_dagster.engine.pipeline import Evaluator, compare

__all__ = ["CompareRequest", "EvalConfig", "Evaluator", "Report", "ResultTable", "compare"]
_HOMES = {"CompareRequest": "models", "EvalConfig": "models", "Report": "models", "ResultTable": "models",
          "Evaluator": "pipeline", "compare": "pipeline"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
