"""Layer outputs survive storage exactly: what a downstream asset reads back is what the layer computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.engine.pipeline import Evaluator, choose, result_layer, structural_layer, validate
from sqlcmp_dagster.engine.records import (result_from_record, result_record, structure_from_record,
                                           structure_record, validation_from_record, validation_record)


@pytest.mark.parametrize("case_id", ["fail_filter", "pass_pre_materialized", "exec_missing_column", "parse_failure",
                                     "pass_multiple_expected"])
def test_round_trip_of_every_layer(sample_dir: Path, case_id: str) -> None:
    case = next(c for c in load_suite(sample_suite_path()).cases if c.case_id == case_id)
    evaluator = Evaluator(db_dir=sample_dir)
    database, error = evaluator.open(case)
    validation = validate(case, database, error)
    text, frames = validation_record(validation)
    restored = validation_from_record(text, frames)
    assert validation_record(restored) == (text, frames)
    for before, after in zip([validation.actual, *validation.expected], [restored.actual, *restored.expected]):
        assert before.parsed.normalized_sql == after.parsed.normalized_sql
        assert (before.parsed.ast is None) == (after.parsed.ast is None)
        if before.parsed.ast is not None:
            assert before.parsed.ast == after.parsed.ast
        if before.relation is not None:
            assert before.relation.frame.equals(after.relation.frame) and before.relation.names == after.relation.names
    if not restored.runnable() or not validation.actual.executed_ok:
        return
    for structure in structural_layer(restored).values():
        assert structure_from_record(structure_record(structure)) == structure
    results = result_layer(restored)
    assert choose(results) == choose(result_layer(validation))
    for result in results.values():
        assert result_from_record(result_record(result)) == result
