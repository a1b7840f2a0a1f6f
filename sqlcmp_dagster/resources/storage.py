"""Per-partition Parquet storage: one file per (asset, case), so re-materializing a case rewrites only its file.

A partitioned asset's output is one polars frame with a ``case_id`` column covering every partition of the run;
it is split by case on write and concatenated on read. An unpartitioned output (the summary) is stored as JSON.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from sqlcmp_dagster.engine.atomic import atomic_path


class PartitionedParquetIOManager(dg.ConfigurableIOManager):
    """Stores ``<base_dir>/<asset>/<case_id>.parquet``; writes go to a temporary name, then are renamed."""

    base_dir: str

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        folder = Path(self.base_dir, *context.asset_key.path)
        folder.mkdir(parents=True, exist_ok=True)
        if not context.has_asset_partitions:
            _atomic_write(folder / "value.json", json.dumps(obj, indent=2, default=str).encode())
            return
        assert isinstance(obj, pl.DataFrame), "partitioned assets return a polars DataFrame"
        expected = set(context.asset_partition_keys)
        written = set()
        for (case_id,), part in obj.group_by("case_id", maintain_order=True):
            if case_id not in expected:
                raise ValueError(f"{context.asset_key.to_user_string()}: row for case {case_id!r} is outside "
                                 "this run's partitions")
            _atomic_write(folder / f"{_file_name(str(case_id))}.parquet", _parquet_bytes(part))
            written.add(case_id)
        missing = expected - written
        if missing:
            raise ValueError(f"{context.asset_key.to_user_string()}: no row for cases {sorted(missing)[:5]}")
        context.add_output_metadata({"rows": obj.height})

    def load_input(self, context: dg.InputContext) -> Any:
        folder = Path(self.base_dir, *context.asset_key.path)
        if not context.has_asset_partitions:
            return json.loads((folder / "value.json").read_text())
        paths = {key: folder / f"{_file_name(key)}.parquet" for key in context.asset_partition_keys}
        missing = [key for key, path in paths.items() if not path.exists()]
        if missing:
            raise FileNotFoundError(f"{context.asset_key.to_user_string()} has no stored row for cases "
                                    f"{missing[:5]}: materialize them first")
        frames = [pl.read_parquet(path) for path in paths.values()]
        return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema={"case_id": pl.Utf8})


def _file_name(case_id: str) -> str:
    """A file name for any case id (ids may hold '/', spaces or dots): safe characters kept, others escaped."""
    return "".join(c if c.isalnum() or c in "-_" else f"~{ord(c):x}~" for c in case_id)


def _parquet_bytes(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def _atomic_write(path: Path, data: bytes) -> None:
    with atomic_path(path) as partial:
        partial.write_bytes(data)
