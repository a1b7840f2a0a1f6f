"""Partitions of chunks of cases (``SQLCMP_CASE_CHUNKS``, :mod:`sqlcmp_dagster.cases.chunks`): a chunk's run
re-evaluates only the cases whose data version changed, and takes the others' rows from the store.

Each chunk records its cases' marks in the store (:meth:`PartitionedParquetIOManager.case_marks`): case id ->
[data version, complete]. ``parsed_cases``, the first layer of a run, compares each case's version with its
mark (:func:`begin`): a case at its marked version and complete is reused by every layer of the run (its stored
rows, no evaluation); any other case is marked [its version, not complete] before any layer writes a row of it,
and evaluated. ``case_reports``, the last layer, marks the cases of its output complete once the output is
stored (:func:`complete`). So a case is reused only when every layer holds its rows at its current version,
whatever failed or was edited in between. A run tagged ``sqlcmp/recompute`` re-evaluates every case of its
chunks (a judge or database change that no case version sees).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
import polars as pl

from sqlcmp_dagster.cases.chunks import partition_of
from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

#: A run with this tag (any value) re-evaluates every case of its chunks.
RECOMPUTE_TAG = "sqlcmp/recompute"


def store_of(context: dg.AssetExecutionContext) -> PartitionedParquetIOManager:
    """The case store of the step (the layers' IO manager, which every layer asset requires)."""
    store = context.resources.case_store
    assert isinstance(store, PartitionedParquetIOManager), f"case_store is a {type(store).__name__}"
    return store


def begin(context: dg.AssetExecutionContext, asset: str, versions: dict[str, str]) -> pl.DataFrame:
    """Mark the run's cases (``versions``: case id -> data version, every case of the run's chunks) and return
    ``asset``'s stored rows of those that are reused (see the module's docstring). A chunk's marks then hold
    exactly its current cases."""
    store = store_of(context)
    marks = store.case_marks(context.partition_keys)
    forced = RECOMPUTE_TAG in context.run.tags
    reusable = [case for case, version in versions.items() if not forced and marks.get(case) == [version, True]]
    stored = store.rows(asset, reusable)
    kept = set(stored["case_id"].to_list())
    by_chunk: dict[str, dict[str, list[Any]]] = {key: {} for key in context.partition_keys}
    for case, version in versions.items():
        by_chunk.setdefault(partition_of(case), {})[case] = [version, case in kept]
    store.put_case_marks(by_chunk)
    context.log.info(f"{asset}: {len(kept):,} of {len(versions):,} case(s) unchanged, reused")
    return stored


def reusing(context: dg.AssetExecutionContext, asset: str, compute: Callable[..., pl.DataFrame],
            args: Sequence[Any], inner: dict[str, Any]) -> pl.DataFrame:
    """``compute(*args, **inner)`` (a layer below ``parsed_cases``) on the cases not marked complete, and the
    stored rows of ``asset`` for those that are, in the order of the first input frame's cases."""
    frames = [value for value in (*args, *inner.values()) if isinstance(value, pl.DataFrame)]
    cases = frames[0]["case_id"].to_list() if frames else []
    store = store_of(context)
    marks = {} if RECOMPUTE_TAG in context.run.tags else store.case_marks(context.partition_keys)
    stored = store.rows(asset, [case for case in cases if (mark := marks.get(case)) is not None and mark[1]])
    kept = stored["case_id"].to_list()
    if kept:
        args = [without(value, kept) for value in args]
        inner = {name: without(value, kept) for name, value in inner.items()}
    return merged(compute(*args, **inner), stored, cases)


def without(value: Any, cases: list[str]) -> Any:
    """``value`` without the rows of ``cases`` when it is a frame of cases."""
    return value.filter(~pl.col("case_id").is_in(cases)) if isinstance(value, pl.DataFrame) else value


def merged(fresh: pl.DataFrame, stored: pl.DataFrame, cases: Sequence[str]) -> pl.DataFrame:
    """The rows of ``fresh`` and ``stored`` (the same layer's), with ``fresh``'s columns, in the order of
    ``cases``."""
    if stored.is_empty():
        return fresh
    frame = pl.concat([fresh, stored.select([c for c in fresh.columns if c in stored.columns])],
                      how="diagonal_relaxed").select(fresh.columns)
    order = pl.DataFrame({"case_id": list(cases), "_order": range(len(cases))},
                         schema={"case_id": pl.Utf8, "_order": pl.Int64})
    return frame.join(order, on="case_id", how="left").sort("_order").drop("_order")


def complete(context: dg.AssetExecutionContext, frame: pl.DataFrame) -> None:
    """Mark the cases of ``frame`` (the stored ``case_reports`` of the run) complete at their marked versions."""
    store = store_of(context)
    written = set(frame["case_id"].to_list())
    changed: dict[str, dict[str, list[Any]]] = {}
    for chunk, marks in store.chunk_marks(context.partition_keys).items():
        if any(case in written and not mark[1] for case, mark in marks.items()):
            changed[chunk] = {case: [mark[0], mark[1] or case in written] for case, mark in marks.items()}
    store.put_case_marks(changed)
