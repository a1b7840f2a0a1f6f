"""Blocking asset checks from the pandera contracts: a broken row fails the check, naming case and column."""

from __future__ import annotations

import dagster as dg
import pandera.polars as pa
import polars as pl

from sqlcmp_dagster.contracts.schemas import SCHEMAS

CONTRACT_CHECK = "output_contract"
#: At most this many violations are spelled out in the check's description; all are counted.
_LISTED = 10
#: A failing value is quoted up to this many characters (a nested value can be long).
_VALUE_CHARS = 120


def contract_spec(asset: str) -> dg.AssetCheckSpec:
    """The blocking check spec of ``asset``: downstream layers do not run on an output that breaks it."""
    return dg.AssetCheckSpec(name=CONTRACT_CHECK, asset=asset, blocking=True,
                             description=f"{asset} rows satisfy its contract (column types, allowed values, "
                                         "ranges and, for case_reports, the failure precedence)")


def contract_check(asset: str, frame: pl.DataFrame) -> dg.AssetCheckResult:
    """Validate ``frame`` against ``asset``'s contract; every violation is listed as case, column and check."""
    try:
        SCHEMAS[asset].validate(frame, lazy=True)
    except pa.errors.SchemaErrors as errors:
        violations = _violations(frame, errors.failure_cases)
        listed = "; ".join(violations[:_LISTED]) + (f"; and {len(violations) - _LISTED} more"
                                                     if len(violations) > _LISTED else "")
        return dg.AssetCheckResult(check_name=CONTRACT_CHECK, passed=False, asset_key=asset,
                                   description=f"{len(violations)} contract violation(s): {listed}",
                                   metadata={"violations": len(violations)})
    return dg.AssetCheckResult(check_name=CONTRACT_CHECK, passed=True, asset_key=asset,
                               metadata={"rows": frame.height})


def _violations(frame: pl.DataFrame, failures: pl.DataFrame) -> list[str]:
    out = []
    for row in failures.iter_rows(named=True):
        index = row.get("index")
        case = frame["case_id"][index] if index is not None and "case_id" in frame.columns \
            and 0 <= index < frame.height else None
        where = f"case {case!r}" if case is not None else "the frame"
        if row["schema_context"] == "DataFrameSchema":  # a dataframe-level rule: its message begins with its name
            out.append(f"{where}, rule {row['check']}")
        else:
            value = repr(row["failure_case"])
            value = value if len(value) <= _VALUE_CHARS else value[:_VALUE_CHARS] + "..."
            out.append(f"{where}, column {row['column']!r}: {row['check']} (value {value})")
    return out
