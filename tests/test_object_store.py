"""The case store on an object store: a real S3-compatible server on loopback (moto's server mode, started by
``.ci/services.sh``, which exports ``SQLCMP_TEST_S3_ENDPOINT``). A full run, a re-run of one changed case that
adds one object per layer and rewrites none, and a read of the stored reports by a second process; the
object store's layout without turns (writers in several processes, readers while objects are removed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from sqlcmp_dagster.assets.suite_scan import SCAN_OBJECT
from sqlcmp_dagster.cases.sample import sample_suite_path
from sqlcmp_dagster.definitions import build_definitions
from sqlcmp_dagster.engine.records import reports_from_frame
from sqlcmp_dagster.local import sensor_tick
from sqlcmp_dagster.resources.storage import BATCH_PREFIX, next_batch_name, store_batch, stored_rows, read_asset

LAYERS = ("parsed_cases", "executions", "structural_diffs", "result_comparisons", "diagnostics", "judgments",
          "case_reports")


def _written(bucket: str) -> dict[str, object]:
    """When each layer object of the bucket was last written (the sensor's own notes, such as its kept scan of
    the suite folder, aside)."""
    import s3fs

    filesystem = s3fs.S3FileSystem()
    layers = tuple(f"{bucket}/store/{layer}/" for layer in LAYERS)
    return {path: info["LastModified"] for path, info in filesystem.find(bucket, detail=True).items()
            if path.startswith(layers)}


def test_full_run_re_run_and_second_process_read_on_s3(tmp_path: Path, sample_dir: Path, bucket: str) -> None:
    import s3fs

    source = [json.loads(line) for line in sample_suite_path().read_text().splitlines()][:12]
    folder = tmp_path / "cases"
    folder.mkdir()
    suite = folder / "suite.jsonl"
    suite.write_text("".join(json.dumps(case) + "\n" for case in source), encoding="utf-8")
    store = f"s3://{bucket}/store"
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=store)
    with dg.instance_for_test() as instance:
        first = sensor_tick(defs, instance, None)
        assert len(first.runs) == 1 and first.runs[0].success
        time.sleep(1.1)  # S3 keeps LastModified to the second: a rewrite must be able to show
        stored = {r.case_id: r for r in reports_from_frame(read_asset(store, "case_reports"))}
        assert sorted(stored) == sorted(case["case_id"] for case in source)
        before = _written(bucket)
        assert len(before) == len(LAYERS)  # the run's one step per layer wrote one object each
        assert s3fs.S3FileSystem().exists(f"{bucket}/store/{SCAN_OBJECT}")  # the sensor's scan, kept in the store

        edited = source[3]["case_id"]
        source[3] = {**source[3], "actual_sql": "SELECT 42"}
        suite.write_text("".join(json.dumps(case) + "\n" for case in source), encoding="utf-8")
        again = sensor_tick(defs, instance, first.cursor)
        assert [r.dagster_run.tags.get("dagster/partition") for r in again.runs] == [edited]
        assert again.runs[0].success
        after = _written(bucket)
        assert {path: after[path] for path in before} == before  # nothing rewritten: the old objects kept
        added = sorted(after.keys() - before.keys())
        assert [path.split("/")[2] for path in added] == sorted(LAYERS)
        assert all(pl.read_parquet(s3fs.S3FileSystem().cat(path))["case_id"].to_list() == [edited] for path in added)

    reader = ("import json, sys; from sqlcmp_dagster.resources.storage import read_asset; "
              "from sqlcmp_dagster.engine.records import reports_from_frame; "
              "print(json.dumps({r.case_id: r.model_dump(mode='json') "
              "for r in reports_from_frame(read_asset(sys.argv[1], 'case_reports'))}))")
    out = subprocess.run([sys.executable, "-c", reader, store], capture_output=True, text=True, timeout=120,
                         env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    read = json.loads(out.stdout)
    assert read[edited]["metrics"]["validation"]["normalized_sql_actual"] == "select 42"
    assert {k: v for k, v in read.items() if k != edited} == {
        k: v.model_dump(mode="json") for k, v in stored.items() if k != edited}


def test_read_asset_unifies_the_columns_of_objects_written_by_different_versions(tmp_path: Path) -> None:
    """Objects written before a column was added, after it, or with a wider type read back as one frame that
    keeps every column and value, whichever object comes first."""
    import polars as pl

    folder = tmp_path / "store" / "case_reports"
    folder.mkdir(parents=True)
    pl.DataFrame({"case_id": ["a"], "score": [1]}).write_parquet(folder / "a.parquet")
    pl.DataFrame({"case_id": ["b"], "score": [0.5], "note": ["new"]}).write_parquet(folder / "b.parquet")
    pl.DataFrame({"case_id": ["c"], "score": [0]}).write_parquet(folder / "c.parquet")
    frame = read_asset(str(tmp_path / "store"), "case_reports")
    assert frame.sort("case_id").to_dicts() == [{"case_id": "a", "score": 1.0, "note": None},
                                                {"case_id": "b", "score": 0.5, "note": "new"},
                                                {"case_id": "c", "score": 0.0, "note": None}]
    (folder / "b.parquet").unlink()
    assert read_asset(str(tmp_path / "store"), "case_reports").schema == {"case_id": pl.Utf8, "score": pl.Int64}


def test_local_objects_are_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """A local write replaces an object whole; a failure raises and leaves no partial file behind, the objects
    around it untouched."""
    from sqlcmp_dagster.engine.atomic import atomic_path

    def put(name: str, data: bytes) -> None:
        with atomic_path(tmp_path / name) as partial:
            partial.write_bytes(data)

    (tmp_path / "b.parquet").mkdir()  # cannot be replaced by a file
    (tmp_path / "c.parquet").write_bytes(b"old")
    put("a.parquet", b"new a")
    with pytest.raises(OSError):
        put("b.parquet", b"new b")
    assert (tmp_path / "a.parquet").read_bytes() == b"new a"
    assert (tmp_path / "c.parquet").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet", "c.parquet"]
    put("c.parquet", b"newer c")
    assert (tmp_path / "c.parquet").read_bytes() == b"newer c"


def _cases(frame: pl.DataFrame) -> list[str]:
    return sorted(frame["case_id"].to_list())


def test_a_local_step_stores_one_object_and_each_case_stays_in_exactly_one(tmp_path: Path) -> None:
    """A step's cases go into one object; storing some of them again moves their rows into a new object and
    out of the old one, so the folder read as a table (``*.parquet``) holds each case once, with its newest
    row; an object left with no case is removed."""
    folder = tmp_path / "store" / "diagnostics"
    store_batch(folder, pl.DataFrame({"case_id": ["a", "b", "c"], "run": [1, 1, 1]}))
    assert len(list(folder.glob("*.parquet"))) == 1
    store_batch(folder, pl.DataFrame({"case_id": ["b"], "run": [2]}))
    table = pl.scan_parquet(folder / "*.parquet").collect()
    assert len(list(folder.glob("*.parquet"))) == 2
    assert dict(table.select("case_id", "run").iter_rows()) == {"a": 1, "b": 2, "c": 1}
    assert table.height == 3
    store_batch(folder, pl.DataFrame({"case_id": ["a", "c"], "run": [3, 3]}))
    assert len(list(folder.glob("*.parquet"))) == 2  # the first object held nothing more and is gone
    table = read_asset(str(tmp_path / "store"), "diagnostics")
    assert dict(table.select("case_id", "run").iter_rows()) == {"a": 3, "b": 2, "c": 3}


def test_a_local_store_of_cases_own_objects_is_read_and_taken_over(tmp_path: Path) -> None:
    """A store written when each case had its own object: read as before, and a step that stores some of those
    cases removes their own objects."""
    folder = tmp_path / "store" / "case_reports"
    folder.mkdir(parents=True)
    for case in ("a", "b"):
        pl.DataFrame({"case_id": [case], "run": [0]}).write_parquet(folder / f"{case}.parquet")
    assert _cases(read_asset(str(tmp_path / "store"), "case_reports")) == ["a", "b"]
    store_batch(folder, pl.DataFrame({"case_id": ["b", "c"], "run": [1, 1]}))
    assert (folder / "a.parquet").is_file() and not (folder / "b.parquet").exists()
    table = pl.scan_parquet(folder / "*.parquet").collect()
    assert dict(table.select("case_id", "run").iter_rows()) == {"a": 0, "b": 1, "c": 1} and table.height == 3
    assert _cases(stored_rows(folder, {"a", "c"})) == ["a", "c"]


def test_a_write_that_stopped_halfway_is_repaired_by_the_next_and_read_meanwhile(tmp_path: Path) -> None:
    """A write that stopped after its new object and before rewriting the old one leaves a case in two objects:
    readers take the newer row, and the next write of the folder, of any case, removes the older one."""
    folder = tmp_path / "store" / "executions"
    store_batch(folder, pl.DataFrame({"case_id": ["a", "b"], "run": [1, 1]}))
    [old] = folder.glob("*.parquet")
    kept = old.read_bytes()
    store_batch(folder, pl.DataFrame({"case_id": ["a"], "run": [2]}))
    old.write_bytes(kept)  # as if the second write had stopped before rewriting it
    assert pl.scan_parquet(folder / "*.parquet").collect().height == 3
    assert dict(stored_rows(folder, None).select("case_id", "run").iter_rows()) == {"a": 2, "b": 1}
    assert dict(stored_rows(folder, {"a"}).select("case_id", "run").iter_rows()) == {"a": 2}
    store_batch(folder, pl.DataFrame({"case_id": ["c"], "run": [3]}))
    table = pl.scan_parquet(folder / "*.parquet").collect()
    assert dict(table.select("case_id", "run").iter_rows()) == {"a": 2, "b": 1, "c": 3} and table.height == 3


def test_an_object_is_named_after_the_newest_even_when_the_clock_is_behind(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest row wins by the objects' order, which a clock set back does not invert."""
    folder = tmp_path / "store" / "judgments"
    store_batch(folder, pl.DataFrame({"case_id": ["a", "b"], "run": [1, 1]}))
    clock = time.time_ns() - 3_600 * 10**9
    monkeypatch.setattr(time, "time_ns", lambda: clock)
    store_batch(folder, pl.DataFrame({"case_id": ["a"], "run": [2]}))
    names = sorted(p.name for p in folder.glob("*.parquet"))
    assert pl.read_parquet(folder / names[-1])["run"].to_list() == [2]
    assert dict(read_asset(str(tmp_path / "store"), "judgments").select("case_id", "run").iter_rows()) == \
        {"a": 2, "b": 1}


def test_one_case_runs_do_not_pile_up_objects(tmp_path: Path) -> None:
    """A store fed one case at a time is merged into one object past a bound; no row is lost or doubled."""
    folder = tmp_path / "store" / "diagnostics"
    store_batch(folder, pl.DataFrame({"case_id": [f"c{i}" for i in range(30)], "run": [0] * 30}))
    for i in range(40):
        store_batch(folder, pl.DataFrame({"case_id": [f"n{i}"], "run": [i]}))
    assert len(list(folder.glob("*.parquet"))) <= 17
    table = pl.scan_parquet(folder / "*.parquet").collect()
    assert table.height == 70 and table["case_id"].n_unique() == 70


def test_merging_leaves_objects_of_other_columns_as_they_are(tmp_path: Path) -> None:
    """Objects an earlier version wrote with other column types are not merged into the newest (whose types
    would be unified with theirs); every write still succeeds and each case keeps its own types."""
    folder = tmp_path / "store" / "diagnostics"
    for i in range(3):
        store_batch(folder, pl.DataFrame({"case_id": [f"old{i}"], "x": [["a"]]}))  # another version's type
    for i in range(20):
        store_batch(folder, pl.DataFrame({"case_id": [f"n{i}"], "x": [i]}))
    assert stored_rows(folder, {"n0"}).schema["x"] == pl.Int64
    assert stored_rows(folder, {"old0"}).schema["x"] == pl.List(pl.Utf8)
    assert len(list(folder.glob("*.parquet"))) <= 17 + 3
    stored = [case for path in folder.glob("*.parquet")
              for case in pl.read_parquet(path, columns=["case_id"])["case_id"]]
    assert sorted(stored) == sorted([f"old{i}" for i in range(3)] + [f"n{i}" for i in range(20)])


def test_a_name_without_a_stamp_is_passed_over_when_the_next_is_named() -> None:
    """A stray name among the objects (a copy someone made) neither breaks the naming nor orders it."""
    names = [Path(f"{BATCH_PREFIX}copy.parquet"), Path(f"{BATCH_PREFIX}{2 * 10**19:020d}.parquet")]
    assert next_batch_name(names) == f"{BATCH_PREFIX}{2 * 10**19 + 1:020d}.parquet"


def test_an_unreadable_object_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "store" / "case_reports"
    store_batch(folder, pl.DataFrame({"case_id": ["a"], "run": [1]}))
    [stored] = folder.glob("*.parquet")
    stored.write_bytes(b"")
    with pytest.raises(ValueError, match=f"{stored.name}: not a readable Parquet object"):
        read_asset(str(tmp_path / "store"), "case_reports")
    with pytest.raises(ValueError, match=f"{stored.name}: not a readable Parquet object"):
        store_batch(folder, pl.DataFrame({"case_id": ["b"], "run": [2]}))


def test_a_reader_during_writes_sees_every_case_once(tmp_path: Path) -> None:
    """Readers take turns with writers: while cases are stored again one at a time, every read holds every
    case exactly once."""
    import threading

    folder = tmp_path / "store" / "structural_diffs"
    cases = [f"c{i}" for i in range(20)]
    store_batch(folder, pl.DataFrame({"case_id": cases, "run": [0] * len(cases)}))
    done = threading.Event()

    def write() -> None:
        for round_ in range(1, 3):
            for case in cases:
                store_batch(folder, pl.DataFrame({"case_id": [case], "run": [round_]}))
                time.sleep(0.02)  # as steps do, between their writes: the reader's turn
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    while not done.is_set() or reads == 0:
        assert sorted(read_asset(str(tmp_path / "store"), "structural_diffs")["case_id"]) == sorted(cases)
        assert _cases(stored_rows(folder, {"c3", "c17"})) == ["c17", "c3"]
        reads += 1
        time.sleep(0.02)
    writer.join()
    assert reads > 1


def _store_in_child(url: str, cases: list[str], run: int, ready: Any, go: Any) -> None:
    """Store ``cases`` one step each (many turns on a local folder's lock; on an object store, every write
    lists, adds and removes while another writer does), in the folder named by the path or URL ``url``."""
    from upath import UPath

    ready.set()
    go.wait(60)
    for case in cases:
        store_batch(UPath(url), pl.DataFrame({"case_id": [case], "run": [run]}))


def test_writers_in_two_processes_take_turns(tmp_path: Path) -> None:
    """Two processes re-store disjoint cases of one object at once: every case ends in exactly one object,
    with its new row (without the lock, one writer's rewrite of the shared object brings back the rows the
    other one moved out)."""
    import multiprocessing

    folder = tmp_path / "store" / "judgments"
    cases = [f"c{i}" for i in range(100)]
    store_batch(folder, pl.DataFrame({"case_id": cases, "run": [0] * len(cases)}))
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    ready = [context.Event() for _ in range(2)]
    children = [context.Process(target=_store_in_child, args=(str(folder), cases[i::2], i + 1, ready[i], go))
                for i in (0, 1)]
    for child in children:
        child.start()
    assert all(event.wait(120) for event in ready)
    go.set()  # both start storing at once
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    table = pl.scan_parquet(folder / "*.parquet").collect()
    assert table.height == len(cases)
    assert dict(table.select("case_id", "run").iter_rows()) == {case: i % 2 + 1 for i, case in enumerate(cases)}


def _store_once_in_child(folder: str, cases: list[str], run: int) -> None:
    store_batch(Path(folder), pl.DataFrame({"case_id": cases, "run": [run] * len(cases)}))


def test_a_local_objects_case_ids_are_read_once_per_file_state(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Healing (every sensor tick) reads an object's case ids only when the object changed since this process
    last saw it: objects another process wrote are read once, a rewritten one again, an unchanged one never
    (at 100,000 cases in 40 objects per asset, reading them all made each tick 6-7.6 s)."""
    import multiprocessing

    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    store = PartitionedParquetIOManager(base_path=str(tmp_path / "store"))
    folder = str(tmp_path / "store" / "executions")
    context = multiprocessing.get_context("spawn")

    def in_child(cases: list[str], run: int) -> None:
        child = context.Process(target=_store_once_in_child, args=(folder, cases, run))
        child.start()
        child.join(120)
        assert child.exitcode == 0

    in_child(["a", "b", "c"], 1)
    in_child(["d"], 2)
    real = pl.read_parquet
    reads: list[str] = []

    def counted(source: Any, *args: Any, **kwargs: Any) -> pl.DataFrame:
        reads.append(Path(source).name)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pl, "read_parquet", counted)
    assert store.heal(["executions"], ["a", "b", "c", "d"], removed=[]) == {}
    assert len(reads) == 2  # both objects, written by another process
    reads.clear()
    assert store.heal(["executions"], ["a", "b", "c", "d"], removed=[]) == {}
    assert reads == []
    in_child(["b"], 3)  # rewrites the first object without b (same name, new content) and adds one
    assert store.heal(["executions"], ["a", "b", "c", "d"], removed=[]) == {}
    assert len(reads) == 2 and len(set(reads)) == 2
    reads.clear()
    assert store.heal(["executions"], ["a", "c", "d"], removed=["b"]) == {}  # b's object removed, not read
    assert reads == []
    assert dict(stored_rows(Path(folder), None).select("case_id", "run").iter_rows()) == {"a": 1, "c": 1, "d": 2}
    reads.clear()
    assert store.rows("executions", ["d"])["run"].to_list() == [2]
    assert len(reads) == 1  # the object holding d, not the one holding a and c


def _s3_folder(bucket: str, asset: str) -> Any:
    from upath import UPath

    return UPath(f"s3://{bucket}/store/{asset}")


def _s3_names(folder: Any) -> list[str]:
    folder.fs.invalidate_cache()
    return sorted(path.rsplit("/", 1)[-1] for path in folder.fs.ls(folder.path, detail=False))


def test_an_object_store_step_adds_one_object_and_removes_only_those_wholly_replaced(bucket: str) -> None:
    """On an object store no object is rewritten: a step's object is added, an older one goes once newer ones
    hold all its cases, and reads take each case's newest row (the older rows an object keeps are passed over);
    an earlier version's objects of one case are read, and removed once a step stores their case."""
    folder = _s3_folder(bucket, "diagnostics")
    folder.fs.pipe({(folder / "old.parquet").path: _parquet(["old"], 0), (folder / "a.parquet").path: _parquet(["a"], 0)})
    store_batch(folder, pl.DataFrame({"case_id": ["a", "b", "c"], "run": [1, 1, 1]}))
    assert len(_s3_names(folder)) == 2 and "a.parquet" not in _s3_names(folder)
    store_batch(folder, pl.DataFrame({"case_id": ["b"], "run": [2]}))
    assert len(_s3_names(folder)) == 3  # the first step's object still holds the current rows of a and c
    rows = {case: run for case, run in stored_rows(folder, None).select("case_id", "run").iter_rows()}
    assert rows == {"a": 1, "b": 2, "c": 1, "old": 0}
    assert dict(stored_rows(folder, {"b", "old"}).select("case_id", "run").iter_rows()) == {"b": 2, "old": 0}
    store_batch(folder, pl.DataFrame({"case_id": ["a", "c"], "run": [3, 3]}))
    assert len(_s3_names(folder)) == 3  # the first step's object is gone; old.parquet and two steps' remain
    assert dict(read_asset(f"s3://{bucket}/store", "diagnostics").select("case_id", "run").iter_rows()) == \
        {"a": 3, "b": 2, "c": 3, "old": 0}


def _parquet(cases: list[str], run: int) -> bytes:
    import io

    buffer = io.BytesIO()
    pl.DataFrame({"case_id": cases, "run": [run] * len(cases)}).write_parquet(buffer)
    return buffer.getvalue()


def test_object_store_writers_in_two_processes_and_a_reader_meanwhile(bucket: str) -> None:
    """Two processes re-store disjoint cases of one step's object at once, one case a step, with no turns;
    meanwhile every read holds every case exactly once, and at the end each case has its new row. One-case
    objects are not merged while recent (a write in flight could be named before the merged object)."""
    import multiprocessing

    folder = _s3_folder(bucket, "judgments")
    cases = [f"c{i}" for i in range(24)]
    store_batch(folder, pl.DataFrame({"case_id": cases, "run": [0] * len(cases)}))
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    ready = [context.Event() for _ in range(2)]
    children = [context.Process(target=_store_in_child, args=(str(folder), cases[i::2], i + 1, ready[i], go))
                for i in (0, 1)]
    for child in children:
        child.start()
    assert all(event.wait(120) for event in ready)
    go.set()
    reads = 0
    while any(child.is_alive() for child in children) or reads == 0:
        frame = stored_rows(folder, None)
        assert sorted(frame["case_id"]) == sorted(cases)
        assert sorted(stored_rows(folder, {"c3", "c16"})["case_id"]) == ["c16", "c3"]
        reads += 1
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    assert dict(stored_rows(folder, None).select("case_id", "run").iter_rows()) == {
        case: i % 2 + 1 for i, case in enumerate(cases)}
    # The first object goes with its last case, by the writer that re-stores it or, when the two writers re-stored
    # its last two cases at once (neither listed the other's new object: once in CI), by the next write, which
    # sees newer objects holding all its cases.
    store_batch(folder, pl.DataFrame({"case_id": ["c0"], "run": [1]}))
    assert len(_s3_names(folder)) == len(cases)


def test_object_store_objects_of_one_case_runs_are_merged_once_settled(bucket: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bound, objects named long enough ago are merged into one, which keeps each case's newest row
    and its place in the order: a case stored again after it still reads its own newer row."""
    from sqlcmp_dagster.resources import storage

    folder = _s3_folder(bucket, "diagnostics")
    store_batch(folder, pl.DataFrame({"case_id": [f"c{i}" for i in range(5)], "run": [0] * 5}))
    monkeypatch.setattr(storage, "MERGE_AFTER_SECONDS", 3600)
    for i in range(20):
        store_batch(folder, pl.DataFrame({"case_id": [f"n{i}"], "run": [i]}))
    assert len(_s3_names(folder)) == 21  # all of them recent
    monkeypatch.setattr(storage, "MERGE_AFTER_SECONDS", 0)
    store_batch(folder, pl.DataFrame({"case_id": ["c1", "n3"], "run": [99, 99]}))
    assert len(_s3_names(folder)) <= 2
    expected = {**{f"c{i}": 0 for i in range(5)}, **{f"n{i}": i for i in range(20)}, "c1": 99, "n3": 99}
    assert dict(stored_rows(folder, None).select("case_id", "run").iter_rows()) == expected
    stored = pl.concat([pl.read_parquet(folder.fs.cat((folder / name).path)) for name in _s3_names(folder)])
    assert stored.height == len(expected)  # no stale row kept


def test_healing_an_object_store_takes_cases_out_and_sets_a_damaged_object_aside(bucket: str) -> None:
    """Cases gone from the suite are taken out by replacing the objects that hold them with copies without them
    (which keep their place in the order); an unreadable object is set aside as ``.damaged``, and since which
    cases it held is unknown, every case only older objects hold is missing too (its older row may be stale)."""
    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    store = PartitionedParquetIOManager(base_path=f"s3://{bucket}/store")
    folder = _s3_folder(bucket, "executions")
    store_batch(folder, pl.DataFrame({"case_id": ["a", "b", "c"], "run": [1, 1, 1]}))
    store_batch(folder, pl.DataFrame({"case_id": ["b"], "run": [2]}))
    assert store.heal(["executions"], ["b", "c"], removed=["a"]) == {}
    assert dict(stored_rows(folder, None).select("case_id", "run").iter_rows()) == {"b": 2, "c": 1}
    [first, second] = _s3_names(folder)
    assert "~r-" in first  # the copy sorts before the second step's object, as the original did
    store_batch(folder, pl.DataFrame({"case_id": ["d"], "run": [3]}))
    third = _s3_names(folder)[-1]
    folder.fs.pipe((folder / third).path, b"not parquet")
    assert store.heal(["executions"], ["b", "c", "d"], removed=[]) == {"executions": {"b", "c", "d"}}
    assert (folder / f"{third}.damaged").exists()
    # the next tick doubts them still (the copy set aside keeps its place), until they are stored again
    assert store.heal(["executions"], ["b", "c", "d"], removed=[]) == {"executions": {"b", "c", "d"}}
    store_batch(folder, pl.DataFrame({"case_id": ["b", "c", "d"], "run": [4, 4, 4]}))  # materialized again
    assert store.heal(["executions"], ["b", "c", "d"], removed=[]) == {}


def test_an_object_store_object_whose_footer_does_not_decode_is_damage(bucket: str) -> None:
    """Parquet's magic bytes intact around a footer that does not decode (pyarrow's OSError, not its
    ArrowInvalid) is damage all the same: set aside, its cases materialized again."""
    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    store = PartitionedParquetIOManager(base_path=f"s3://{bucket}/store")
    folder = _s3_folder(bucket, "executions")
    store_batch(folder, pl.DataFrame({"case_id": ["a", "b"], "run": [1, 1]}))
    [name] = _s3_names(folder)
    data = bytearray(folder.fs.cat((folder / name).path))
    data[-40:-8] = b"\xff" * 32
    folder.fs.pipe((folder / name).path, bytes(data))
    assert store.heal(["executions"], ["a", "b"], removed=[]) == {"executions": {"a", "b"}}
    assert _s3_names(folder) == [f"{name}.damaged"]


def test_an_object_store_out_of_reach_fails_healing_and_sets_nothing_aside(bucket: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that fails while an object is read is raised (the sensor's tick fails and is tried again);
    it is never taken for a damaged object, which would be set aside with its rows."""
    import s3fs

    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    store = PartitionedParquetIOManager(base_path=f"s3://{bucket}/store")
    folder = _s3_folder(bucket, "executions")
    store_batch(folder, pl.DataFrame({"case_id": ["a", "b"], "run": [1, 1]}))
    store_batch(folder, pl.DataFrame({"case_id": ["a"], "run": [2]}))
    names = _s3_names(folder)

    def reset(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionResetError("connection reset by peer")

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", reset)  # the object's bytes, as pyarrow reads them
    with pytest.raises(ConnectionResetError):
        store.heal(["executions"], ["a", "b"], removed=[])
    monkeypatch.undo()
    assert _s3_names(folder) == names
    assert dict(stored_rows(folder, None).select("case_id", "run").iter_rows()) == {"a": 2, "b": 1}


def test_a_large_object_is_never_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Merging takes the small objects only: a large run's object stays as it was written (merging every object
    into one read and rewrote the whole asset every 16 runs)."""
    from sqlcmp_dagster.resources import storage

    folder = tmp_path / "store" / "executions"
    store_batch(folder, pl.DataFrame({"case_id": [f"c{i}" for i in range(5000)], "run": [0] * 5000}))
    [large] = folder.glob("*.parquet")
    monkeypatch.setattr(storage, "MERGE_BELOW_CASES", 5000)
    for i in range(40):
        store_batch(folder, pl.DataFrame({"case_id": [f"n{i}"], "run": [i]}))
    assert large.is_file() and pl.read_parquet(large).height == 5000  # untouched
    assert len(list(folder.glob("*.parquet"))) <= 1 + 17
    table = pl.scan_parquet(folder / "*.parquet").collect()
    assert table.height == 5040 and table["case_id"].n_unique() == 5040


@pytest.mark.parametrize("where", ["local", "s3"])
def test_chunk_marks_are_written_and_read_together_by_chunk(where: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    """A run's chunks' marks are written in one call and read in one (on an object store: requests sent together,
    a chunk with no marks left out), each chunk's as it was written."""
    from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

    base = f"s3://{request.getfixturevalue('bucket')}/store" if where == "s3" else str(tmp_path / "store")
    store = PartitionedParquetIOManager(base_path=base)
    assert store.chunk_marks(["chunk-1", "chunk-2"]) == {}
    store.put_case_marks({"chunk-1": {"a": ["v1", True]}, "chunk-2": {"b": ["v2", False], "c": ["v3", True]}})
    store.put_case_marks({"chunk-2": {"b": ["v2", True]}})  # the whole chunk, replaced
    assert store.chunk_marks(["chunk-1", "chunk-2", "chunk-9"]) == {"chunk-1": {"a": ["v1", True]},
                                                                     "chunk-2": {"b": ["v2", True]}}
    assert store.case_marks(["chunk-2", "chunk-9"]) == {"b": ["v2", True]}
    store.drop_case_marks(["chunk-1"])
    assert store.case_marks(["chunk-1", "chunk-2"]) == {"b": ["v2", True]}
