"""Per-partition Parquet storage on a local disk or any fsspec filesystem, in which every case's rows are in
exactly one object of its asset's folder, so that ``<asset>/*.parquet`` reads as the asset's table.

On a local disk a step stores one object for all its cases and removes their rows from older objects (see
:func:`store_batch`): re-materializing a case rewrites the object it was in, without it, and adds one; writers
and this module's readers of a folder take turns on a lock file. On an object store, where writers cannot take
turns, each (asset, case) is an object of its own, so re-materializing a case rewrites only its own objects.
Readers take both layouts (a local store written before holds cases' own objects).

The store is named by a URL (``s3://bucket/prefix``, ``gs://bucket/prefix``, ``file:///...``) or a local path,
through ``universal_pathlib``; credentials and endpoints come from the filesystem's usual configuration (for
S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL_S3``) or ``storage_options``.
A partitioned asset's output is one polars frame with a ``case_id`` column covering every partition of the run.
An unpartitioned output (the summary) is stored as JSON.

Within one process and one run, a layer's frame is also kept in memory after it is stored, and the layers
downstream of it in the same run get that frame instead of reading its objects back (on a 1,000-case run,
reading the per-case objects again was the largest part of the store's cost: ``executions`` alone is read by
five layers). A step in another process, or a later run, reads the store.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

import dagster as dg
import polars as pl
from dagster import DagsterInvariantViolationError
from filelock import FileLock
from pydantic import PrivateAttr
from upath import UPath

from sqlcmp_dagster.cases.chunks import chunked, in_partitions, partition_of
from sqlcmp_dagster.engine.atomic import atomic_path


class PartitionedParquetIOManager(dg.ConfigurableIOManager):
    """Stores ``<base_path>/<asset>/*.parquet`` (see the module docstring). On a local disk a write goes to a
    temporary name and is renamed; on an object store each object is written whole by one request, which is
    already atomic."""

    base_path: str
    storage_options: dict[str, Any] = {}
    #: The frames stored by the current run in this process, by asset (see the module docstring).
    _written: dict[tuple[str, ...], tuple[pl.DataFrame, set[str]]] = PrivateAttr(default_factory=dict)
    _written_run: str | None = PrivateAttr(default=None)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        folder = asset_folder(self.base_path, context.asset_key.path, self.storage_options)
        if not context.has_asset_partitions:
            _write(folder / "value.json", json.dumps(obj, indent=2, default=str).encode())
            return
        assert isinstance(obj, pl.DataFrame), "partitioned assets return a polars DataFrame"
        expected = set(context.asset_partition_keys)
        written = {partition_of(case) for case in obj["case_id"].unique().to_list()}
        if written - expected:
            outside = next(case for case in obj["case_id"].to_list() if partition_of(case) not in expected)
            raise ValueError(f"{context.asset_key.to_user_string()}: row for case {outside!r} is outside this "
                             "run's partitions")
        if (missing := expected - written) and not chunked():  # a chunk may hold no case (any more)
            raise ValueError(f"{context.asset_key.to_user_string()}: no row for cases {sorted(missing)[:5]}")
        if _local(folder):
            store_batch(Path(folder.path), obj)
        else:
            _write_all(folder, {folder / f"{_file_name(str(case_id))}.parquet": part
                                for (case_id,), part in obj.group_by("case_id", maintain_order=True)})
        self._remember(context.run_id, tuple(context.asset_key.path), obj, expected)
        context.add_output_metadata({"rows": obj.height})

    def load_input(self, context: dg.InputContext) -> Any:
        folder = asset_folder(self.base_path, context.asset_key.path, self.storage_options)
        if not context.has_asset_partitions:
            return json.loads((folder / "value.json").read_bytes())
        kept = self._recall(_run_of(context), tuple(context.asset_key.path), context.asset_partition_keys)
        if kept is not None:
            return kept
        keys = context.asset_partition_keys
        if chunked():  # the chunks' cases: those of the stored ones that the chunks hold
            return self.rows(context.asset_key.path, in_partitions(self.case_ids(context.asset_key.path), keys))
        if _local(folder):
            frame = stored_rows(Path(folder.path), set(keys))
            missing = sorted(set(keys) - set(frame["case_id"].to_list()))
        else:
            paths = {key: folder / f"{_file_name(key)}.parquet" for key in keys}
            contents = read_objects(folder, list(paths.values()))
            missing = [key for key, path in paths.items() if isinstance(contents[path], FileNotFoundError)]
            frame = _concat([] if missing else contents.values())
        if missing:
            raise FileNotFoundError(f"{context.asset_key.to_user_string()} has no stored row for cases "
                                    f"{missing[:5]}: materialize them first")
        return _in_order(frame, keys)

    def heal(self, assets: Sequence[str], cases: Collection[str], removed: Collection[str],
             keep: Collection[str] | None = None) -> dict[str, set[str]]:
        """Check the store against what is believed materialized: take the ``removed`` cases (gone from the
        suite) out of every one of ``assets`` (with ``keep``, every case not in it as well: the store of chunks,
        whose deleted partitions name no case), and return, per asset, which of ``cases`` it holds no readable
        row for, so that they are materialized again.

        An object of a local store that is no readable Parquet (a truncated copy, a crash of the disk) is moved
        aside as ``<name>.damaged`` (kept for a person to look at; readers and writers pass it over), which
        makes exactly the cases it held missing. On an object store, where reading every object would cost a
        request each, an object is checked by its name only: a missing one is found, a damaged one is not."""
        missing = {}
        for asset in assets:
            folder = asset_folder(self.base_path, asset, self.storage_options)
            if _local(folder):
                held = _heal_folder(Path(folder.path), set(removed), None if keep is None else set(keep))
            else:
                if keep is not None:
                    removed = {*removed, *(case for case in map(_case_of, (p.name for p in folder.glob("*.parquet")))
                                           if case not in keep)}
                for case in removed:
                    own = folder / f"{_file_name(case)}.parquet"
                    if own.exists():
                        own.unlink()
                held = {_case_of(path.name) for path in folder.glob("*.parquet")}
            if gone := set(cases) - held:
                missing[asset] = gone
        return missing

    def rows(self, asset: Sequence[str] | str, cases: Sequence[str]) -> pl.DataFrame:
        """The stored rows of ``cases`` in ``asset``, in their order; a case with no stored row is left out."""
        if not cases:
            return _concat([])
        folder = asset_folder(self.base_path, asset, self.storage_options)
        if _local(folder):
            frame = stored_rows(Path(folder.path), set(cases))
        else:
            paths = [folder / f"{_file_name(case)}.parquet" for case in cases]
            frame = _concat(c for c in read_objects(folder, paths).values() if not isinstance(c, FileNotFoundError))
        held = set(frame["case_id"].to_list())
        return _in_order(frame, [case for case in cases if case in held])

    def case_ids(self, asset: Sequence[str] | str) -> list[str]:
        """The ids of every case ``asset`` holds rows of (in no set order)."""
        folder = asset_folder(self.base_path, asset, self.storage_options)
        if not _local(folder):
            return [_case_of(path.name) for path in folder.glob("*.parquet")]
        if not Path(folder.path).is_dir():
            return []
        with _turn(Path(folder.path)):
            return sorted({case for path in Path(folder.path).glob("*.parquet") for case in _case_ids(path)})

    def case_marks(self, partitions: Iterable[str]) -> dict[str, list[Any]]:
        """What the chunks ``partitions`` record of their cases (:mod:`sqlcmp_dagster.assets.chunked`): case id ->
        [data version, whether every layer holds its rows at that version]; nothing for a chunk never run."""
        marks: dict[str, list[Any]] = {}
        for partition in partitions:
            path = asset_folder(self.base_path, MARKS, self.storage_options) / f"{_file_name(partition)}.json"
            try:
                marks.update(json.loads(path.read_bytes()))
            except FileNotFoundError:
                continue
        return marks

    def put_case_marks(self, partition: str, marks: dict[str, list[Any]]) -> None:
        """Record ``marks`` (see :meth:`case_marks`) as everything the chunk ``partition`` holds."""
        folder = asset_folder(self.base_path, MARKS, self.storage_options)
        if _local(folder):
            Path(folder.path).mkdir(parents=True, exist_ok=True)
        _write(folder / f"{_file_name(partition)}.json", json.dumps(marks, sort_keys=True).encode())

    def read_note(self, name: str) -> Any:
        """The JSON value kept as ``name`` beside the assets' folders (the case sensor's scan), or None."""
        try:
            return json.loads(UPath(self.base_path, **self.storage_options).joinpath(name).read_bytes())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def write_note(self, name: str, value: Any) -> None:
        """Keep ``value`` as JSON under ``name`` (see :meth:`read_note`), whole or not at all."""
        base = UPath(self.base_path, **self.storage_options)
        if _local(base):
            Path(base.path).mkdir(parents=True, exist_ok=True)
        _write(base.joinpath(name), json.dumps(value).encode())

    def _remember(self, run_id: str, asset: tuple[str, ...], frame: pl.DataFrame, partitions: set[str]) -> None:
        if run_id != self._written_run:  # only the current run's frames are kept
            self._written.clear()
            self._written_run = run_id
        self._written[asset] = frame, partitions

    def _recall(self, run_id: str | None, asset: tuple[str, ...], keys: Sequence[str]) -> pl.DataFrame | None:
        """The frame this run stored for ``asset``, restricted to ``keys`` in their order; None unless it
        holds every one of them (with chunks: unless it was stored for every one of them)."""
        kept = self._written.get(asset) if run_id is not None and run_id == self._written_run else None
        if kept is None:
            return None
        frame, partitions = kept
        if chunked():
            return _in_order(frame, in_partitions(frame["case_id"].to_list(), keys)) if partitions >= set(keys) \
                else None
        chosen = _in_order(frame, keys)
        return chosen if chosen.height == len(keys) else None


#: The folder of the store's chunk marks (one JSON object per chunk), beside the assets' folders.
MARKS = "_case_marks"


def _in_order(frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The rows of ``frame`` whose case is one of ``keys``, in the order of ``keys``."""
    if frame["case_id"].to_list() == list(keys):
        return frame
    order = pl.DataFrame({"case_id": keys, "_order": range(len(keys))})
    return frame.join(order, on="case_id").sort("_order").drop("_order")


def _run_of(context: dg.InputContext) -> str | None:
    """The run an input is loaded in (None for a context built without one, e.g. by ``build_input_context``)."""
    try:
        return context.step_context.run_id
    except DagsterInvariantViolationError:
        return None


def asset_folder(base_path: str, asset: Sequence[str] | str, storage_options: dict[str, Any] | None = None) -> UPath:
    """Where ``asset``'s objects live under the store ``base_path`` (a URL or a local path)."""
    parts = [asset] if isinstance(asset, str) else list(asset)
    return UPath(base_path, **(storage_options or {})).joinpath(*parts)


def read_asset(base_path: str, asset: str, storage_options: dict[str, Any] | None = None) -> pl.DataFrame:
    """Every stored row of a partitioned ``asset`` (e.g. ``case_reports``) from the store at ``base_path``: what
    a process outside Dagster reads (``engine.records.reports_from_frame`` turns report rows into reports)."""
    folder = asset_folder(base_path, asset, storage_options)
    if _local(folder):
        return stored_rows(Path(folder.path), None)
    return _concat(read_objects(folder, sorted(folder.glob("*.parquet"))).values())


def _file_name(case_id: str) -> str:
    """A file name for any case id (ids may hold '/', spaces or dots): safe characters kept, others escaped."""
    return "".join(c if c.isalnum() or c in "-_" else f"~{ord(c):x}~" for c in case_id)


def _case_of(name: str) -> str:
    """The case id of a case's own object named ``name`` (the inverse of :func:`_file_name`)."""
    return re.sub(r"~([0-9a-f]+)~", lambda match: chr(int(match[1], 16)), name.removesuffix(".parquet"))


def _heal_folder(folder: Path, removed: set[str], keep: set[str] | None = None) -> set[str]:
    """The cases a local asset folder holds readable rows of, after moving its unreadable objects aside, taking
    the ``removed`` cases out, and taking a case that a write stopped halfway left in two objects out of the
    older (newest first, as :func:`_settle` does; see :meth:`PartitionedParquetIOManager.heal`), in the folder's
    turn."""
    if not folder.is_dir():
        return set()
    held: set[str] = set()
    with FileLock(folder / ".lock"):
        for path in sorted(folder.glob("*.parquet"), reverse=True):  # steps' objects newest first, then own ones
            try:
                cases = _case_ids(path)
            except ValueError:
                path.replace(path.with_name(path.name + ".damaged"))
                continue
            gone = cases & removed if keep is None else cases - (keep - removed)
            dropped = gone | (cases & held)
            if dropped == cases:
                path.unlink()
            elif dropped:
                _put(path, _read(path).filter(~pl.col("case_id").is_in(list(dropped))))
            held |= cases - gone
    return held


#: Name prefix of a local store's objects that hold a step's cases, followed by a 20-digit stamp that orders
#: them (a case's own object is named by :func:`_file_name`, which cannot start a name so: it escapes a
#: character as ``~<hex digits>~``).
BATCH_PREFIX = "~batch-"
_STAMP = re.compile(rf"{re.escape(BATCH_PREFIX)}(\d{{20}})")
#: Objects of steps' cases a local asset folder may hold before a write merges them into one: every write and
#: read looks at each object, and a store fed by one-case runs would otherwise gain an object per run.
_MAX_BATCHES = 16


def store_batch(folder: Path, frame: pl.DataFrame) -> None:
    """Store a step's rows on a local disk: one new object for all its cases, after which no other object holds
    a row of them.

    One object per (asset, case) cost a Parquet footer and a file creation per case, most of each object and of
    the store's time (7,238 objects for the 1,034 Spider dev cases; BENCHMARKS.md). Now the step's object is
    written, and then every older object holding one of its cases is rewritten without it, or removed when
    nothing is left (:func:`_settle`), so that each case's rows are in exactly one object and
    ``SELECT ... FROM '<asset>/*.parquet'`` counts each case once, with its newest row. Writers and this
    module's readers of one folder take turns on its ``.lock`` (``filelock``: processes of one machine); a
    reader that takes no turn (a DuckDB glob) during a write may see a re-stored case twice or not at all.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / ".lock"):
        batches = sorted(folder.glob(f"{BATCH_PREFIX}*.parquet"))
        newest = folder / next_batch_name(batches)
        _put(newest, frame)
        _settle(folder, batches, newest, set(frame["case_id"].to_list()))


def next_batch_name(batches: list[Path]) -> str:
    """A name that sorts after every one of ``batches``: the clock's time, or one past the newest stamp when the
    clock is behind it (a name without a stamp, e.g. a copy someone made, is passed over)."""
    stamps = [int(match[1]) for path in batches if (match := _STAMP.match(path.name))]
    return f"{BATCH_PREFIX}{max([time.time_ns(), *(stamp + 1 for stamp in stamps)]):020d}.parquet"


def _settle(folder: Path, batches: list[Path], newest: Path, newest_cases: set[str]) -> None:
    """Make each case's rows be in exactly one object of ``folder``, whose objects of steps' cases are
    ``batches`` (oldest first) and the one just written, ``newest``, holding ``newest_cases``: going from the
    newest, an object loses the cases a newer one holds (rewritten without them, or removed when nothing is
    left), and a case's own object goes when an object of steps holds the case. This also repairs what a write
    that stopped between its two writes left. Past :data:`_MAX_BATCHES` objects, those with the newest object's
    columns and types are merged into one (written first, then the others removed; objects an earlier version
    wrote with other columns keep them until their cases are stored again, rather than have their types unified
    with the newest)."""
    seen = set(newest_cases)
    kept = [newest]
    for path in reversed(batches):
        held = _case_ids(path)
        stale = held & seen
        if stale == held:
            path.unlink()
        elif stale:
            rest = _read(path).filter(~pl.col("case_id").is_in(list(stale)))
            _put(path, rest)
            kept.append(path)
        else:
            kept.append(path)
        seen |= held
    own = {p.name: p for p in folder.glob("*.parquet") if not p.name.startswith(BATCH_PREFIX)}
    for case in seen if own else ():
        if (own_object := own.get(f"{_file_name(case)}.parquet")) is not None:
            own_object.unlink()
    if len(kept) > _MAX_BATCHES:
        schema = _schema(newest)
        alike = [path for path in reversed(kept) if _schema(path) == schema]
        if len(alike) > 1:
            _put(folder / next_batch_name(kept), pl.concat([_read(p) for p in alike]))
            for path in alike:
                path.unlink()


def _put(path: Path, frame: pl.DataFrame) -> None:
    """Write ``frame`` as the local object ``path``, whole or not at all (:func:`atomic_path`)."""
    with atomic_path(path) as partial:
        partial.write_bytes(_parquet_bytes(frame))


def _case_ids(path: Path) -> set[str]:
    return set(_readable(path, lambda p: pl.read_parquet(p, columns=["case_id"]))["case_id"].to_list())


def _schema(path: Path) -> dict[str, pl.DataType]:
    return _readable(path, pl.read_parquet_schema)


def _read(path: Path) -> pl.DataFrame:
    return _readable(path, pl.read_parquet)


_Read = TypeVar("_Read")


def _readable(path: Path, read: Callable[[Path], _Read]) -> _Read:
    """``read(path)``, or an error that names the object and says what to do when it is no readable Parquet."""
    try:
        return read(path)
    except pl.exceptions.PolarsError as error:
        raise ValueError(f"{path}: not a readable Parquet object of the case store ({error}); restore it, or "
                         "remove it and materialize again the cases it held") from error


@contextmanager
def _turn(folder: Path) -> Iterator[None]:
    """The folder's lock, held while this module reads it (see :func:`store_batch`); a folder this process may
    not write to (a read-only copy of a store, which no one writes through it either) is read without it."""
    if not os.access(folder, os.W_OK):
        yield
        return
    with FileLock(folder / ".lock"):
        yield


def stored_rows(folder: Path, keys: set[str] | None) -> pl.DataFrame:
    """The stored rows of a local store's asset folder, of the cases in ``keys`` (all with None), read in the
    folder's turn (see :func:`store_batch`): objects of steps' cases, newest first, then cases' own objects.
    A case found in two objects (left by a write that stopped halfway, until the next write settles it) is
    taken from the newer."""
    if not folder.is_dir():
        return _concat([])
    frames: list[pl.DataFrame] = []
    taken: set[str] = set()
    with _turn(folder):
        for path in sorted(folder.glob(f"{BATCH_PREFIX}*.parquet"), reverse=True):
            frame = _read(path)
            held = set(frame["case_id"].to_list())
            wanted = (held if keys is None else held & keys) - taken
            if wanted:
                frames.append(frame if wanted == held else frame.filter(pl.col("case_id").is_in(list(wanted))))
                taken |= wanted
            if keys is not None and taken >= keys:
                break
        if keys is None:
            skipped = {f"{_file_name(case)}.parquet" for case in taken}
            own = sorted(p for p in folder.glob("*.parquet")
                         if not p.name.startswith(BATCH_PREFIX) and p.name not in skipped)
        else:
            own = [folder / f"{_file_name(key)}.parquet" for key in sorted(keys - taken)]
        contents = [path.read_bytes() for path in own if path.is_file()]
    if contents:
        frames.append(_concat(contents))
    if len(frames) == 1:
        return frames[0]
    return pl.concat(frames, how="diagonal_relaxed") if frames else _concat([])


def _parquet_bytes(frame: pl.DataFrame) -> bytes:
    """Stored rows as Parquet, LZ4-compressed and without column statistics.

    Statistics were most of each object when an object held one case: a case's stored result relations (binary
    values) were written whole as the column's minimum and maximum, about 70 KB per ``executions`` object on
    Spider dev where the data is 5 KB; the readers here read whole objects, which statistics do not shorten.
    Without them, and with LZ4 instead of zstd, writing the 1,034 Spider dev cases' seven assets as objects of
    their own took 2.2 s instead of 5.6 s of encoding (BENCHMARKS.md). DuckDB and polars read them as before.
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
    """Encode every case's object on an object store, then send them all at once (fsspec's ``pipe`` sends the
    requests concurrently, where one request after another costs a round trip each: a step of 50 cases writes
    50 objects); each object is written whole or not at all and the first failure is raised."""
    if not objects:
        return
    with ThreadPoolExecutor(_ENCODERS) as pool:
        encoded = dict(zip(objects, pool.map(_parquet_bytes, objects.values())))
    folder.fs.pipe({path.path: data for path, data in encoded.items()})


def read_objects(folder: UPath, paths: list[UPath]) -> dict[UPath, bytes | Exception]:
    """The content of every path on an object store, or the error reading it (``FileNotFoundError`` for a
    missing one), fetched concurrently by fsspec's ``cat`` (one GET each instead of an existence check and a
    GET, one after another)."""
    if not paths:
        return {}
    contents = folder.fs.cat([path.path for path in paths], on_error="return")
    return {path: contents[path.path] for path in paths}


def _concat(contents: Iterable[bytes | Exception]) -> pl.DataFrame:
    """One frame of stored Parquet objects, their columns unified (an older object may lack one).

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
        sources: list[IO[bytes]] = [io.BytesIO(data) for data in buffers]
        return pl.scan_parquet(sources, missing_columns="insert").collect()
    except (pl.exceptions.PolarsError, TypeError):  # TypeError: a polars without ``missing_columns``
        return pl.concat([pl.read_parquet(io.BytesIO(data)) for data in buffers], how="diagonal_relaxed")
