"""Faults in the middle of a batch and of a run: the database disappears or restarts (the affected cases are
execution failures carrying the engine's message; the others complete), and `sqlcmp evaluate` is stopped,
killed, starved of disk or given bad output paths (nothing finished is lost, no process survives, the next run
ends with the file a clean run writes)."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import ENGINE_POSTGRES, untimed
from sqlcmp_dagster.cases.sample import SAMPLE_DB_ID
from sqlcmp_dagster.engine.models import CompareRequest, Report
from sqlcmp_dagster.engine.pipeline import Evaluator


def test_sqlite_file_disappearing_mid_batch(tmp_path: Path, sample_db: Path) -> None:
    folder = tmp_path / "dbs"
    folder.mkdir()
    shutil.copy(sample_db, folder / f"{SAMPLE_DB_ID}.sqlite")
    cases = [CompareRequest(case_id=f"c{i}", db=SAMPLE_DB_ID, expected_sql="SELECT count(*) FROM products",
                            actual_sql="SELECT count(*) FROM products") for i in range(6)]
    evaluator = Evaluator(db_dir=folder)

    def remove_after_third(report: Report) -> None:
        if report.case_id == "c2":
            (folder / f"{SAMPLE_DB_ID}.sqlite").unlink()

    reports = evaluator.evaluate_all(cases, progress=remove_after_third)
    assert [r.deterministic_verdict for r in reports] == ["pass"] * 3 + ["fail"] * 3
    for report in reports[3:]:
        assert report.blocked_reason == "execution_failure"
        # Resolution happens per case, so the vanished file is named; an outage is not the model's error.
        assert f"database '{SAMPLE_DB_ID}' not found" in json.dumps(report.evidence)
        assert report.validity["case_valid"] is False


@ENGINE_POSTGRES
def test_postgres_restart_mid_batch(postgres_alone: None) -> None:
    """The server stopped in the middle of a batch: the cases after it are execution failures, not the model's,
    and the restarted server serves the next batch. Alone on the server: every other worker's test that needs it
    up (a Dagster storage) finishes first, and none starts until it is up again."""
    url, cluster = os.environ.get("SQLCMP_TEST_PG_URL"), os.environ.get("SQLCMP_TEST_PG_CLUSTER")
    if not (url and cluster and shutil.which("pg_ctlcluster")):
        if os.environ.get("SQLCMP_REQUIRE_SERVICES") == "1":
            pytest.fail("SQLCMP_TEST_PG_URL / SQLCMP_TEST_PG_CLUSTER not set: run .ci/services.sh")
        pytest.skip("needs the PostgreSQL cluster of .ci/services.sh")
    version, name = cluster.split()
    cases = [CompareRequest(case_id=f"p{i}", db=url, expected_sql="SELECT 1 AS x", actual_sql="SELECT 1 AS x")
             for i in range(6)]

    def stop_after_second(report: Report) -> None:
        if report.case_id == "p1":
            subprocess.run(["pg_ctlcluster", version, name, "stop", "-m", "fast"], check=True)

    try:
        reports = Evaluator().evaluate_all(cases, progress=stop_after_second)
    finally:
        subprocess.run(["pg_ctlcluster", version, name, "start"], check=False)
        for _ in range(60):
            if subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"]).returncode == 0:
                break
            time.sleep(0.5)
    assert [r.deterministic_verdict for r in reports[:2]] == ["pass", "pass"]
    for report in reports[2:]:
        assert report.blocked_reason == "execution_failure"
        assert "connection" in " ".join(report.explanations).lower() or "server" in " ".join(report.explanations)
    after = Evaluator().evaluate(cases[0])
    assert after.deterministic_verdict == "pass"  # the restarted server serves the next batch


def test_evaluate_output_is_whole_or_absent(tmp_path: Path, sample_dir: Path) -> None:
    """The report file is written under a temporary name and renamed: an old file is replaced whole, and no
    partial file stays behind, even when some cases failed on the way."""
    from sqlcmp_dagster.cli import EXIT_INVALID, main

    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps({"case_id": f"c{i}", "db": "shop" if i % 2 else "gone",
                                         "expected_sql": "SELECT 1", "actual_sql": "SELECT 1"}) + "\n"
                             for i in range(6)), encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    out.write_text("stale\n", encoding="utf-8")
    # the cases on the missing database are invalid (exit 3), the others pass: every report is still written
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out)]) == EXIT_INVALID
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["case_id"] for line in lines] == [f"c{i}" for i in range(6)]
    assert not list(tmp_path.glob("*.partial"))


def test_a_score_that_is_not_a_number_is_an_engine_fault_of_its_case(sample_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A report's scores are finite: JSON has no NaN, and a score written as null would not read back. A score
    an engine fault made NaN is refused where the report is built, which makes the case's report an engine
    fault; the other cases of the batch are reported as usual and every line reads back (a review's finding)."""
    import sqlcmp_dagster.engine.report as report_module

    real = report_module.overall_score
    def overall(result: float, structure: float, passed: bool) -> float:
        return real(result, structure, passed) if passed else float("nan")

    monkeypatch.setattr(report_module, "overall_score", overall)
    cases = [CompareRequest(case_id="fails", db=SAMPLE_DB_ID, expected_sql="SELECT 1", actual_sql="SELECT 2"),
             CompareRequest(case_id="passes", db=SAMPLE_DB_ID, expected_sql="SELECT 1", actual_sql="SELECT 1")]
    reports = Evaluator(db_dir=sample_dir).evaluate_all(cases)
    assert "internal engine error" in reports[0].explanations[0] and "finite number" in reports[0].explanations[0]
    assert reports[1].deterministic_verdict == "pass" and reports[1].overall_score == 1.0
    assert [Report.model_validate_json(r.model_dump_json()) for r in reports] == reports


# --- Fault injection into `sqlcmp evaluate`: signals, kill -9, full disks, dead writers' debris -----------------

#: Cases slow enough (a recursive count on SQLite, about 0.1-0.3 s each) that a run is still at work when its
#: fault is injected; each case has its own query, so no expected-result cache makes one cheap.
SLOW_CASES = 16


def _slow_suite(path: Path, cases: int = SLOW_CASES, *, changed: int | None = None) -> Path:
    lines = []
    for i in range(cases):
        count = 150_000 + i
        query = f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {count}) " \
                "SELECT count(*) AS n FROM c"
        actual = query.replace("count(*)", "count(*) + 1") if i == changed else query
        lines.append(json.dumps({"case_id": f"slow{i:02d}", "db": SAMPLE_DB_ID, "expected_sql": query,
                                 "actual_sql": actual}) + "\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _command(suite: Path, db_dir: Path, out: Path, *extra: str) -> list[str]:
    """The run of ``suite`` without a cache folder: every run evaluates its slow cases (from the folder, a case
    evaluated in an earlier run would get its report at once)."""
    return [sys.executable, "-m", "sqlcmp_dagster.cli", "evaluate", str(suite), "--db-dir", str(db_dir),
            "--out", str(out), "--quiet", "--no-cache", *extra]


def _untimed(out: Path) -> list[Any]:
    """The reports of ``out`` without what two runs of a case may differ in (run metadata, timings)."""
    return [untimed(json.loads(line)) for line in out.read_text(encoding="utf-8").splitlines()]


def _journal_lines(journal: Path) -> int:
    return journal.read_bytes().count(b"\n") if journal.exists() else 0


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (children, grandchildren...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _running(pids: list[int], wait_s: float = 30.0) -> list[int]:
    """Those of ``pids`` still running (a zombie waiting for its reaper has ended) after at most ``wait_s``."""
    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + wait_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


#: The tests that share :func:`clean_run` run on one pytest-xdist worker, which makes it once (a run of the slow
#: suite in a subprocess); so do those that share :func:`clean_demo` (a whole ``sqlcmp demo``).
SHARES_CLEAN_RUN, SHARES_CLEAN_DEMO = pytest.mark.xdist_group("clean_run"), pytest.mark.xdist_group("clean_demo")


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> tuple[Path, list[Any]]:
    """The slow suite and the reports of a run of it that nothing disturbed."""
    folder = tmp_path_factory.mktemp("clean")
    suite, out = _slow_suite(folder / "suite.jsonl"), folder / "reports.jsonl"
    subprocess.run(_command(suite, sample_dir, out), check=True, capture_output=True, timeout=600)
    return suite, _untimed(out)


@SHARES_CLEAN_RUN
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_or_killed_run_loses_nothing_leaves_no_process_and_resumes_to_a_clean_runs_file(
        tmp_path: Path, sample_dir: Path, clean_run: tuple[Path, list[Any]], signum: int, workers: str) -> None:
    """The fault lands after a random number of finished cases. Every report finished by then is in the journal
    afterwards, no process of the run is left (workers, forkserver, resource tracker), a stop signal exits
    128 + its number with one line saying how to resume, the earlier --out is untouched, and --resume ends with
    the file a clean run writes."""
    suite, clean = clean_run
    out, journal = tmp_path / "reports.jsonl", tmp_path / "reports.jsonl.journal"
    out.write_text("earlier run\n", encoding="utf-8")
    after = random.Random(f"{signum}-{workers}").randint(1, SLOW_CASES // 2)
    run = subprocess.Popen(_command(suite, sample_dir, out, "--workers", workers), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        while _journal_lines(journal) < after and run.poll() is None:
            time.sleep(0.02)
        family = _descendants(run.pid)
        finished = _journal_lines(journal)
        if signum == signal.SIGINT:
            os.killpg(run.pid, signum)  # as Ctrl-C does: the whole process group
        else:
            os.kill(run.pid, signum)
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum), stderr
    survivors = _running(family)
    for pid in survivors:  # not left running when the assertion fails
        os.kill(pid, signal.SIGKILL)
    assert survivors == []
    assert finished < SLOW_CASES and _journal_lines(journal) >= finished  # stopped early, nothing finished lost
    assert out.read_text(encoding="utf-8") == "earlier run\n"
    if signum != signal.SIGKILL:
        resume = [line for line in stderr.splitlines() if "--resume" in line]
        assert len(resume) == 1 and resume[0].startswith(f"sqlcmp: stopped by {signal.Signals(signum).name}")
    again = subprocess.run(_command(suite, sample_dir, out, "--workers", workers, "--resume"), capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    kept = int(again.stderr.split("resuming: ")[1].split()[0]) if "resuming: " in again.stderr else 0
    assert kept >= finished
    assert _untimed(out) == clean and not journal.exists()


@SHARES_CLEAN_RUN
def test_resume_evaluates_only_the_cases_that_changed(tmp_path: Path, sample_dir: Path,
                                                      clean_run: tuple[Path, list[Any]]) -> None:
    """A journal's report is kept only for the same case version: an edited case runs again."""
    suite, clean = clean_run
    out, journal = tmp_path / "reports.jsonl", tmp_path / "reports.jsonl.journal"
    shutil.copy(suite, tmp_path / "suite.jsonl")
    journal.write_bytes(b"")
    interrupted = subprocess.Popen(_command(tmp_path / "suite.jsonl", sample_dir, out), stderr=subprocess.PIPE)
    while _journal_lines(journal) < 4 and interrupted.poll() is None:
        time.sleep(0.02)
    interrupted.send_signal(signal.SIGTERM)
    interrupted.communicate(timeout=120)
    kept = _journal_lines(journal)
    edited = _slow_suite(tmp_path / "suite.jsonl", changed=0)
    again = subprocess.run(_command(edited, sample_dir, out, "--resume"), capture_output=True, text=True, timeout=600)
    assert again.returncode == 1, again.stderr  # the edited case now fails
    assert f"resuming: {kept - 1} of {SLOW_CASES} reports kept" in again.stderr
    reports = _untimed(out)
    assert [r["deterministic_verdict"] for r in reports] == ["fail"] + ["pass"] * (SLOW_CASES - 1)
    assert reports[1:] == clean[1:]


@pytest.mark.parametrize("linked", [False, True])
def test_a_write_left_in_the_write_ahead_log_is_another_case_version(tmp_path: Path, linked: bool) -> None:
    """``--resume`` keeps a journal's report only for the same case version: a database whose last write sits in
    its write-ahead log, the file itself untouched, is another version (the stamp used to read the file alone),
    also where the suite names a link to the file, whose log is beside the file (a review's finding)."""
    from sqlcmp_dagster.journal import CaseVersions

    path = tmp_path / "shop.sqlite"
    real = tmp_path / "real" / "shop.sqlite" if linked else path
    if linked:
        real.parent.mkdir()
        path.symlink_to(real)
    writer = sqlite3.connect(real)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")  # every later write stays in the log
        writer.execute("CREATE TABLE t (x INTEGER)")
        writer.commit()
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        case = CompareRequest(case_id="c", user_query="q", expected_sql="SELECT x FROM t",
                              actual_sql="SELECT x FROM t")
        before, file = CaseVersions(None, str(path))(case), os.stat(real)
        writer.execute("INSERT INTO t VALUES (1)")
        writer.commit()
        assert (os.stat(real).st_size, os.stat(real).st_mtime_ns) == (file.st_size, file.st_mtime_ns)
        assert CaseVersions(None, str(path))(case) != before
    finally:
        writer.close()


def _no_space(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make every write of the file ``name`` (through its private partial file) go to /dev/full, where a write
    fails as on a full disk (ENOSPC)."""
    real = Path.open

    def full_open(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if self.name.startswith(name + ".") and "w" in mode:
            return real(Path("/dev/full"), mode, *args, **kwargs)
        return real(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_open)


@pytest.mark.parametrize("failing", ["reports.jsonl", "summary.json"])
def test_a_full_disk_costs_one_line_and_its_own_exit_status_and_the_other_outputs_are_written(
        tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        failing: str) -> None:
    from sqlcmp_dagster.cli import EXIT_OUTPUT, main

    suite = _slow_suite(tmp_path / "suite.jsonl", 3)
    out, summary, csv, html = (tmp_path / name for name in ("reports.jsonl", "summary.json", "c.csv", "r.html"))
    (tmp_path / failing).write_text("earlier run\n", encoding="utf-8")
    _no_space(monkeypatch, failing)
    argv = ["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--summary-out", str(summary),
            "--csv", str(csv), "--html", str(html), "--quiet"]
    assert main(argv) == EXIT_OUTPUT
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if "No space left on device" in line]
    assert errors == [line for line in captured.err.splitlines() if line.startswith("sqlcmp: cannot write")]
    assert len(errors) == 1 and str(tmp_path / failing) in errors[0] and "Traceback" not in captured.err
    assert "passed" in captured.out  # the summary is still printed
    assert (tmp_path / failing).read_text(encoding="utf-8") == "earlier run\n"  # the old file intact
    for written in {out, summary, csv, html} - {tmp_path / failing}:
        assert written.stat().st_size > 0
    assert not list(tmp_path.glob("*.partial"))
    monkeypatch.undo()
    if failing == "reports.jsonl":  # the reports stayed in the journal: a resume writes them without evaluating
        assert main([*argv, "--resume"]) == 0
        assert "resuming: 3 of 3 reports kept" in capsys.readouterr().err
        assert len(out.read_text(encoding="utf-8").splitlines()) == 3


def test_a_run_resumed_with_another_judge_judges_its_cases_again(tmp_path: Path, sample_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--resume``'s case version held the case and its database, not the judge's settings, so a run resumed
    with another judge model kept the first model's judgments. The same judge under another
    key or concurrency keeps them."""
    from conftest import JUDGE_PASS
    from sqlcmp_dagster.cli import EXIT_OUTPUT, main

    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(f'{{"case_id": "{i}", "expected_sql": "SELECT name FROM products ORDER BY price", '
                             f'"actual_sql": "SELECT name FROM products ORDER BY price DESC LIMIT {i}", '
                             f'"db": "{SAMPLE_DB_ID}"}}\n' for i in (1, 2)), encoding="utf-8")

    def judge(verdict: str, **options: Any) -> Path:
        path = tmp_path / f"judge-{verdict}-{len(options)}.json"
        answer = json.dumps({**JUDGE_PASS, "advisory_verdict": verdict})
        path.write_text(json.dumps({"model": "openai/gpt-4o-mini", "litellm_params": {"mock_response": answer},
                                    **options}), encoding="utf-8")
        return path

    out = tmp_path / "reports.jsonl"
    argv = ["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet", "--judge-config"]
    _no_space(monkeypatch, "reports.jsonl")  # --out cannot be written: the reports stay in the journal
    assert main([*argv, str(judge("pass")), "--resume"]) == EXIT_OUTPUT
    capsys.readouterr()
    assert main([*argv, str(judge("pass", api_key="other", concurrency=1)), "--resume"]) == EXIT_OUTPUT
    assert "resuming: 2 of 2 reports kept" in capsys.readouterr().err
    monkeypatch.undo()
    assert main([*argv, str(judge("fail")), "--resume"]) == 1
    assert "resuming" not in capsys.readouterr().err
    reports = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["ai_advisory_verdict"] for r in reports] == ["fail", "fail"]


def test_a_full_disk_under_the_journal_does_not_stop_the_run(tmp_path: Path, sample_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import sqlcmp_dagster.journal as journal_module
    from sqlcmp_dagster.cli import main

    real = os.write
    appended: list[int] = []

    def write(fd: int, data: bytes) -> int:
        appended.append(fd)
        if len(appended) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(journal_module.os, "write", write)
    suite, out = _slow_suite(tmp_path / "suite.jsonl", 3), tmp_path / "reports.jsonl"
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert "reports.jsonl.journal: No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "reports.jsonl.journal").exists()


def test_every_output_path_is_checked_before_any_case_runs(tmp_path: Path, sample_dir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from sqlcmp_dagster.cli import EXIT_USAGE, main

    suite = _slow_suite(tmp_path / "suite.jsonl", 2)
    a_file = tmp_path / "README.md"
    a_file.write_text("not a folder", encoding="utf-8")
    out = tmp_path / "reports.jsonl"
    for flag, path in (("--out", a_file / "r.jsonl"), ("--html", Path("/proc/nope/r.html")),
                       ("--csv", tmp_path), ("--summary-out", out)):
        argv = ["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet", flag, str(path)]
        assert main(argv) == EXIT_USAGE
        error = capsys.readouterr().err
        assert error.startswith(f"sqlcmp: {flag} {path}") and "Traceback" not in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "suite.jsonl"]  # nothing ran, nothing left


def test_a_dead_writers_partial_files_are_removed_and_a_live_ones_kept(tmp_path: Path, sample_dir: Path) -> None:
    from sqlcmp_dagster.cli import main

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(ended.stdout)
    out = tmp_path / "reports.jsonl"
    dead, live = (tmp_path / f"reports.jsonl.{pid}-1.partial" for pid in (dead_pid, os.getppid()))
    other = tmp_path / f"other.jsonl.{dead_pid}-1.partial"
    for path in (dead, live, other):
        path.write_text("half a report", encoding="utf-8")
    suite = _slow_suite(tmp_path / "suite.jsonl", 1)
    assert main(["evaluate", str(suite), "--db-dir", str(sample_dir), "--out", str(out), "--quiet"]) == 0
    assert not dead.exists() and live.exists() and other.exists()  # only --out's dead writer's debris


def test_an_unreadable_database_is_named_once(tmp_path: Path, sample_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sqlcmp_dagster.cli import EXIT_INVALID, main

    folder = tmp_path / "dbs"
    folder.mkdir()
    shutil.copy(sample_dir / f"{SAMPLE_DB_ID}.sqlite", folder / f"{SAMPLE_DB_ID}.sqlite")
    damaged = bytearray((folder / f"{SAMPLE_DB_ID}.sqlite").read_bytes())
    damaged[100:4096] = b"\xff" * (4096 - 100)  # page 1 past the header: the schema SQLite reads first
    (folder / "damaged.sqlite").write_bytes(bytes(damaged))
    (folder / "garbage.sqlite").write_bytes(b"not a database at all")
    suite = tmp_path / "suite.jsonl"
    query = "SELECT count(*) FROM products"
    suite.write_text("".join(json.dumps({"case_id": f"{db}{i}", "db": db, "expected_sql": query, "actual_sql": query})
                             + "\n" for db in (SAMPLE_DB_ID, "damaged", "garbage") for i in range(3)), encoding="utf-8")
    code = main(["evaluate", str(suite), "--db-dir", str(folder), "--out", str(tmp_path / "r.jsonl"), "--quiet"])
    errors = capsys.readouterr().err.splitlines()
    assert code == EXIT_INVALID
    for db in ("damaged", "garbage"):
        named = [line for line in errors if f"{db}.sqlite" in line]
        assert len(named) == 1 and named[0].endswith("its 3 cases will be invalid"), errors
    assert not [line for line in errors if f"{SAMPLE_DB_ID}.sqlite" in line]


# --- Fault injection into the Dagster side: damaged and removed store objects, deleted cases, killed demos ------

def _stored(store: Path, asset: str) -> dict[str, Any]:
    """The stored rows of ``asset`` by case, without what two runs of a case may differ in (timings)."""
    from sqlcmp_dagster.engine.records import reports_from_frame
    from sqlcmp_dagster.resources.storage import read_asset

    frame = read_asset(str(store), asset)
    if asset == "case_reports":
        return {r.case_id: untimed(r.model_dump(mode="json")) for r in reports_from_frame(frame)}
    return {row["case_id"]: row for row in frame.drop([c for c in frame.columns if "ms" in c or "time" in c])
            .to_dicts()}


def test_the_store_heals_damaged_and_removed_objects_and_drops_deleted_cases(tmp_path: Path,
                                                                             sample_dir: Path) -> None:
    """A truncated object is moved aside and a removed one is noticed: exactly their cases run again, and end as
    they were; a case deleted from the suite leaves every layer's objects (and so the export)."""
    import dagster as dg

    from sqlcmp_dagster.assets.common import LAYER_ASSETS
    from sqlcmp_dagster.definitions import build_definitions
    from sqlcmp_dagster.event_log import local_instance
    from sqlcmp_dagster.local import sensor_tick

    folder, store = tmp_path / "cases", tmp_path / "store"
    folder.mkdir()
    cases = [{"case_id": f"c{i}", "db": SAMPLE_DB_ID, "expected_sql": "SELECT name FROM products ORDER BY name",
              "actual_sql": f"SELECT name FROM products WHERE price > {i} ORDER BY name"} for i in range(6)]
    (folder / "suite.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    defs = build_definitions(cases_dir=str(folder), db_dir=str(sample_dir), storage_dir=str(store))
    home = tmp_path / "home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home), overrides=local_instance(str(home / "runs"))) as instance:
        first = sensor_tick(defs, instance, None)
        assert [run.success for run in first.runs] == [True]
        clean = _stored(store, "case_reports")
        (damaged,) = (store / "executions").glob("*.parquet")
        damaged.write_bytes(damaged.read_bytes()[:200])  # a copy cut short
        for path in (store / "case_reports").glob("*.parquet"):
            path.unlink()
        healed = sensor_tick(defs, instance, first.cursor)
        assert [run.success for run in healed.runs] == [True]
        assert _stored(store, "case_reports") == clean
        assert sorted(_stored(store, "executions")) == [f"c{i}" for i in range(6)]
        assert (store / "executions" / f"{damaged.name}.damaged").exists()
        assert sensor_tick(defs, instance, healed.cursor).runs == []  # healed: nothing more to do

        (newest,) = (store / "executions").glob("~batch-*.parquet")  # a write that stopped before settling
        shutil.copy(newest, newest.with_name("~batch-99999999999999999999.parquet"))
        assert pl.scan_parquet(store / "executions" / "*.parquet").collect().height == 12
        assert sensor_tick(defs, instance, healed.cursor).runs == []
        assert pl.scan_parquet(store / "executions" / "*.parquet").collect().height == 6  # a DuckDB glob counts right

        (folder / "suite.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases[:5]), encoding="utf-8")
        removed = sensor_tick(defs, instance, healed.cursor)
        assert removed.deleted == ["c5"]
        for asset in LAYER_ASSETS:
            assert sorted(_stored(store, asset)) == [f"c{i}" for i in range(5)], asset


@pytest.fixture(scope="module")
def clean_demo(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> list[Any]:
    out = tmp_path_factory.mktemp("demo")
    subprocess.run([sys.executable, "-m", "sqlcmp_dagster.cli", "demo", "--out-dir", str(out)], check=True,
                   capture_output=True, timeout=600, env={**os.environ, "SQLCMP_SAMPLE_DIR": str(sample_dir)})
    return _untimed(out / "reports.jsonl")


@SHARES_CLEAN_DEMO
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_demo_stopped_or_killed_mid_run_leaves_nothing_running_and_the_next_ends_as_a_clean_one(
        tmp_path: Path, sample_dir: Path, clean_demo: list[Any], signum: int) -> None:
    """Stopped once its first layer is stored: no process of it is left, a stop signal stops the whole tick
    (its own exit status), the run it interrupted is not left STARTED (a killed one is marked failed by the next
    demo), and the next demo writes the reports a clean demo writes."""
    import dagster as dg

    out = tmp_path / "demo"
    command = [sys.executable, "-m", "sqlcmp_dagster.cli", "demo", "--out-dir", str(out)]
    env = {**os.environ, "SQLCMP_SAMPLE_DIR": str(sample_dir)}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        while not list(out.glob("storage/executions/*.parquet")) and run.poll() is None:
            time.sleep(0.02)
        family = _descendants(run.pid)
        os.kill(run.pid, signum)
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum), stderr
    assert _running(family) == []
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr
    assert _untimed(out / "reports.jsonl") == clean_demo
    with dg.DagsterInstance.from_config(str(out / "dagster_home")) as instance:
        statuses = [r.status for r in instance.get_runs()]
    assert dg.DagsterRunStatus.STARTED not in statuses and dg.DagsterRunStatus.FAILURE in statuses
