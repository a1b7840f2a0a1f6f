"""Layer outputs survive storage exactly: what a downstream asset reads back is what the layer computed."""

from __future__ import annotations

import decimal
import io
from pathlib import Path

import pytest

from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.cases.suite import load_suite
from sqlcmp_dagster.engine.layers import choose, diagnostic_layer, result_layer, structural_layer, validate
from sqlcmp_dagster.engine.pipeline import Evaluator
import polars as pl

from sqlcmp_dagster.engine.records import (DIAGNOSTICS, RESULT, STRUCTURE, diagnostics_from_row, diagnostics_row,
                                           result_from_row, result_row, structure_from_row, structure_row, typed_frame,
                                           validation_from_record, validation_record)


@pytest.mark.parametrize("case_id", ["fail_filter", "pass_pre_materialized", "exec_missing_column", "parse_failure",
                                     "pass_multiple_expected", "fail_missing_column", "fail_rounding",
                                     "fail_date_filter"])
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
        if before.execution is not None:
            assert after.execution is not None and after.execution.steps == before.execution.steps
    if not restored.runnable() or not validation.actual.executed_ok:
        return
    structures = structural_layer(restored)
    for index, structure in structures.items():
        assert structure_from_row(_stored(structure_row(index, structure), STRUCTURE)) == structure
    results = result_layer(restored)
    index = choose(results)
    assert index == choose(result_layer(validation))
    for number, result in results.items():
        assert result_from_row(_stored(result_row(number, result), RESULT)) == result
    found, _, _ = diagnostic_layer(restored, index, structures[index], results[index], database)
    stored = pl.DataFrame([diagnostics_row(found)], schema=DIAGNOSTICS).row(0, named=True)
    assert diagnostics_from_row(stored) == found


def test_records_stored_with_result_sets_as_ipc_files_still_read(sample_dir: Path) -> None:
    """Records written before result sets were stored as IPC streams hold IPC files: they read back the same."""
    case = next(c for c in load_suite(sample_suite_path()).cases if c.case_id == "fail_rounding")
    evaluator = Evaluator(db_dir=sample_dir)
    text, frames = validation_record(validate(case, *evaluator.open(case)))
    assert all(frames) and not any(blob.startswith(b"ARROW1") for blob in frames)
    as_files = []
    for blob in frames:
        buffer = io.BytesIO()
        pl.read_ipc_stream(io.BytesIO(blob)).write_ipc(buffer)
        as_files.append(buffer.getvalue())
    assert validation_record(validation_from_record(text, as_files)) == (text, frames)


def test_rows_arrow_refuses_are_converted_by_polars() -> None:
    """Arrow takes no Decimal for a float, no bool for an integer: such rows become the frame polars makes."""
    schema = {"case_id": pl.Utf8(), "score": pl.Float64(), "count": pl.Int64()}
    rows = [{"case_id": "a", "score": decimal.Decimal("0.5"), "count": True}, {"case_id": "b"}]
    assert typed_frame(rows, schema).to_dicts() == [{"case_id": "a", "score": 0.5, "count": 1},
                                                    {"case_id": "b", "score": None, "count": None}]


def _stored(value: dict[str, object], dtype: pl.DataType) -> dict[str, object]:
    """``value`` after a trip through a polars column of ``dtype`` (what the layer tables store)."""
    return pl.Series([value], dtype=dtype).to_list()[0]


def test_why_the_database_did_not_open_is_stored(tmp_path: Path) -> None:
    """The Dagster layers read a stored validation back: a case whose database did not open stays invalid there."""
    case = next(c for c in load_suite(sample_suite_path()).cases if c.case_id == "pass_pre_materialized")
    database, error = Evaluator(db_dir=tmp_path).open(case)
    restored = validation_from_record(*validation_record(validate(case, database, error)))
    assert restored.database_error is not None and "cannot open database 'shop'" in restored.database_error
