"""Per-partition Parquet storage on any fsspec filesystem: one object per (asset, case), so re-materializing a
case rewrites only its own objects.

The store is named by a URL (``s3://bucket/prefix``, ``gs://bucket/prefix``, ``file:///...``) or a local path,
through ``universal_pathlib``; credentials and endpoints come from the filesystem's usual configuration (for
S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL_S3``) or ``storage_options``.
A partitioned asset's output is one polars frame with a ``case_id`` column covering every partition of the run;
it is split by case on write and concatenated on read. An unpartitioned output (the summary) is stored as JSON.

Within one process and one run, a layer's frame is also kept in memory after it is stored, and the layers
downstream of it in the same run get that frame instead of reading its objects back (on a 1,000-case run,
reading the per-case objects again was the largest part of the store's cost: ``executions`` alone is read by
five layers). A step in another process, or a later run, reads the store.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from dagster import DagsterInvariantViolationError
from pydantic import PrivateAttr
from upath import UPath

from sqlcmp_dagster.engine.atomic import atomic_path, write_all_atomically


class PartitionedParquetIOManager(dg.ConfigurableIOManager):
    """Stores ``<base_path>/<asset>/<case_id>.parquet``. On a local disk a write goes to a temporary name and is
    renamed; on an object store each object is written whole by one request, which is already atomic."""

    base_path: str
    storage_options: dict[str, Any] = {}
    #: The frames stored by the current run in this process, by asset (see the module docstring).
    _written: dict[tuple[str, ...], pl.DataFrame] = PrivateAttr(default_factory=dict)
    _written_run: str | None = PrivateAttr(default=None)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        folder = asset_folder(self.base_path, context.asset_key.path, self.storage_options)
        if not context.has_asset_partitions:
            _write(folder / "value.json", json.dumps(obj, indent=2, default=str).encode())
            return
        assert isinstance(obj, pl.DataFrame), "partitioned assets return a polars DataFrame"
        expected = set(context.asset_partition_keys)
        objects: dict[UPath, pl.DataFrame] = {}
        written = set()
        for (case_id,), part in obj.group_by("case_id", maintain_order=True):
            if case_id not in expected:
                raise ValueError(f"{context.asset_key.to_user_string()}: row for case {case_id!r} is outside "
                                 "this run's partitions")
            objects[folder / f"{_file_name(str(case_id))}.parquet"] = part
            written.add(case_id)
        missing = expected - written
        if missing:
            raise ValueError(f"{context.asset_key.to_user_string()}: no row for cases {sorted(missing)[:5]}")
        _write_all(folder, objects)
        self._remember(context.run_id, tuple(context.asset_key.path), obj)
        context.add_output_metadata({"rows": obj.height})

    def load_input(self, context: dg.InputContext) -> Any:
        folder = asset_folder(self.base_path, context.asset_key.path, self.storage_options)
        if not context.has_asset_partitions:
            return json.loads((folder / "value.json").read_bytes())
        kept = self._recall(_run_of(context), tuple(context.asset_key.path), context.asset_partition_keys)
        if kept is not None:
            return kept
        paths = {key: folder / f"{_file_name(key)}.parquet" for key in context.asset_partition_keys}
        contents = _read_all(folder, list(paths.values()))
        missing = [key for key, path in paths.items() if isinstance(contents[path], FileNotFoundError)]
        if missing:
            raise FileNotFoundError(f"{context.asset_key.to_user_string()} has no stored row for cases "
                                    f"{missing[:5]}: materialize them first")
        return _concat(contents.values())

    def _remember(self, run_id: str, asset: tuple[str, ...], frame: pl.DataFrame) -> None:
        if run_id != self._written_run:  # only the current run's frames are kept
            self._written.clear()
            self._written_run = run_id
        self._written[asset] = frame

    def _recall(self, run_id: str | None, asset: tuple[str, ...], keys: list[str]) -> pl.DataFrame | None:
        """The frame this run stored for ``asset``, restricted to ``keys`` in their order; None unless it
        holds every one of them."""
        frame = self._written.get(asset) if run_id is not None and run_id == self._written_run else None
        if frame is None:
            return None
        if frame["case_id"].to_list() == keys:
            return frame
        order = pl.DataFrame({"case_id": keys, "_order": range(len(keys))})
        chosen = frame.join(order, on="case_id").sort("_order").drop("_order")
        return chosen if chosen.height == len(keys) else None


def _run_of(context: dg.InputContext) -> str | None:
    """The run an input is loaded in (None for a context built without one, e.g. by ``build_input_context``)."""
    try:
        return context.step_context.run_id
    except DagsterInvariantViolationError:
        return None


def asset_folder(base_path: str, asset: list[str] | str, storage_options: dict[str, Any] | None = None) -> UPath:
    """Where ``asset``'s objects live under the store ``base_path`` (a URL or a local path)."""
    parts = [asset] if isinstance(asset, str) else list(asset)
    return UPath(base_path, **(storage_options or {})).joinpath(*parts)


def read_asset(base_path: str, asset: str, storage_options: dict[str, Any] | None = None) -> pl.DataFrame:
    """Every stored row of a partitioned ``asset`` (e.g. ``case_reports``) from the store at ``base_path``: what
    a process outside Dagster reads (``engine.records.reports_from_frame`` turns report rows into reports)."""
    folder = asset_folder(base_path, asset, storage_options)
    return _concat(_read_all(folder, sorted(folder.glob("*.parquet"))).values())


def _file_name(case_id: str) -> str:
    """A file name for any case id (ids may hold '/', spaces or dots): safe characters kept, others escaped."""
    return "".join(c if c.isalnum() or c in "-_" else f"~{ord(c):x}~" for c in case_id)


def _parquet_bytes(frame: pl.DataFrame) -> bytes:
    """One case's rows as Parquet, LZ4-compressed and without column statistics.

    Every object holds one case, so min/max statistics can skip nothing a reader's path glob does not already
    skip, yet they were most of each object: a case's stored result relations (binary values) were written
    whole as the column's minimum and maximum, about 70 KB per ``executions`` object on Spider dev where the
    data is 5 KB. Without them, and with LZ4 instead of zstd, writing the 1,034 Spider dev cases' seven assets
    takes 2.2 s instead of 5.6 s of encoding (BENCHMARKS.md). DuckDB and polars read these objects as before.
    """
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="lz4", statistics=False)
    return buffer.getvalue()


def _local(path: UPath) -> bool:
    return path.protocol in ("", "file", "local")


def _write(path: UPath, data: bytes) -> None:
    if _local(path):
        with atomic_path(Path(path.path)) as partial:
            partial.write_bytes(data)
    else:
        path.write_bytes(data)


#: Threads that encode one step's per-case objects.
_ENCODERS = 4


def _write_all(folder: UPath, objects: dict[UPath, pl.DataFrame]) -> None:
    """Encode every case's object, then write them; each object is written whole or not at all and the first
    failure is raised.

    On a local disk the objects are written one after another by the calling thread once all are encoded.
    Threads that each encode and write contend twice: files created in one directory queue on that directory's
    lock in the kernel, and a thread back from a file system call waits for the interpreter lock while the
    others encode (up to the 5 ms switch interval each time). On the 1,034 Spider dev cases' 7,238 objects: 3-6 s
    with four threads encoding and writing, 2.7-4.0 s encoding on four threads and then writing from one
    (``benchmarks/dagster_pipeline.py``; BENCHMARKS.md). On an object store the objects are sent all at once
    (fsspec's ``pipe`` sends the requests concurrently, where one request after another costs a round trip
    each: a step of 50 cases writes 50 objects).
    """
    if not objects:
        return
    with ThreadPoolExecutor(_ENCODERS) as pool:
        encoded = dict(zip(objects, pool.map(_parquet_bytes, objects.values())))
    if _local(folder):
        write_all_atomically(Path(folder.path), {path.name: data for path, data in encoded.items()})
    else:
        folder.fs.pipe({path.path: data for path, data in encoded.items()})


def _read_all(folder: UPath, paths: list[UPath]) -> dict[UPath, bytes | Exception]:
    """The content of every path, or the error reading it (``FileNotFoundError`` for a missing one); on an object
    store fetched concurrently by fsspec's ``cat`` (one GET each instead of an existence check and a GET, one
    after another)."""
    if _local(folder) or not paths:
        return {path: path.read_bytes() if path.exists() else FileNotFoundError(path.path) for path in paths}
    contents = folder.fs.cat([path.path for path in paths], on_error="return")
    return {path: contents[path.path] for path in paths}


def _concat(contents: Iterable[bytes | Exception]) -> pl.DataFrame:
    """One frame of the stored per-case Parquet objects, their columns unified (an older object may lack one).

    The objects are read as one scan, which decodes them in parallel: 1,034 case reports in 0.25 s, against
    1.0 s read one by one. A scan takes its columns from the first object and fills the ones an object lacks
    with nulls; when a later object has a column the first lacks, or another type, they are read one by one
    and concatenated with their types relaxed, which keeps every column.
    """
    buffers = []
    for content in contents:
        if isinstance(content, Exception):
            raise content
        buffers.append(content)
    if not buffers:
        return pl.DataFrame(schema={"case_id": pl.Utf8})
    try:
        return pl.scan_parquet([io.BytesIO(data) for data in buffers], missing_columns="insert").collect()
    except (pl.exceptions.PolarsError, TypeError):  # TypeError: a polars without ``missing_columns``
        return pl.concat([pl.read_parquet(io.BytesIO(data)) for data in buffers], how="diagonal_relaxed")
