"""Shared fixtures: the bundled sample database, built once per test session into a temporary folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID, build_sample_database
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report
from sqlcmp_dagster.engine.pipeline import Evaluator


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sample")
    build_sample_database(folder / f"{SAMPLE_DB_ID}.sqlite")
    return folder


@pytest.fixture(scope="session")
def sample_db(sample_dir: Path) -> Path:
    return sample_dir / f"{SAMPLE_DB_ID}.sqlite"


@pytest.fixture(scope="session")
def evaluator(sample_dir: Path) -> Evaluator:
    return Evaluator(db_dir=sample_dir, default_db=SAMPLE_DB_ID)


@pytest.fixture
def run(evaluator: Evaluator) -> Callable[..., Report]:
    """Compare ``actual`` with ``expected`` on the sample database under the given config options."""

    def _run(expected: str | list[str], actual: str, **config: Any) -> Report:
        request = CompareRequest(expected_sql=expected, actual_sql=actual, config=EvalConfig(**config))
        return evaluator.evaluate(request)

    return _run
