"""Loading case suites (the format: docs/usage.md): JSONL, YAML or Parquet, one case per line/item/row.

A broken case is reported with its file and line and skipped; it never stops the other cases from loading.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import ValidationError

from sqlcmp_dagster.engine.models import CompareRequest

SUITE_SUFFIXES = (".jsonl", ".yaml", ".yml", ".parquet")


@dataclass(frozen=True)
class SuiteError:
    """One case that could not be loaded: where it is and what was wrong with it."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Suite:
    cases: list[CompareRequest]
    errors: list[SuiteError]
    #: Files of a suite folder that are not suites (reports, configuration), with why they were left out.
    skipped: list[str] = field(default_factory=list)


def load_suite(path: Path, config_overrides: dict[str, Any] | None = None) -> Suite:
    """Load every case of ``path``; ``config_overrides`` are applied under each case's own ``config``."""
    cases: list[CompareRequest] = []
    errors: list[SuiteError] = []
    for item in read_suite(path, config_overrides):
        if isinstance(item, SuiteError):
            errors.append(item)
        else:
            cases.append(item)
    return Suite(cases, errors)


def read_suite(path: Path, config_overrides: dict[str, Any] | None = None) -> Iterator[CompareRequest | SuiteError]:
    """Each case of ``path``, or the error that kept it from loading, in file order, read as they are asked for:
    a JSONL suite a line at a time, a Parquet one a batch of rows at a time, so that a suite of any length
    costs the memory of a few cases (the case ids seen, to refuse a duplicate, aside). A YAML suite is one
    document, parsed whole. Raises ``ValueError`` for a file that is no suite format, before any case."""
    return cast(Iterator[CompareRequest | SuiteError], read_suite_known(path, config_overrides, None))


def read_suite_known(path: Path, config_overrides: dict[str, Any] | None,
                     known: Callable[[str], Known | None] | None) -> Iterator[CompareRequest | SuiteError | Known]:
    """:func:`read_suite`, asking ``known`` (JSONL only; its caller passes no ``config_overrides`` with it) about
    each line's text before the line is parsed: a :class:`Known` it returns stands for the line (checked for a
    duplicate id like any case, and yielded as is), so that a line the caller read before is neither parsed nor
    validated again (the case sensor's scan)."""
    suffix = path.suffix.lower()
    if not suffix and path.exists() and not path.is_file():  # a pipe (<(...), /dev/stdin): JSONL lines, read once
        suffix = ".jsonl"
    if suffix not in SUITE_SUFFIXES:
        raise ValueError(f"{path}: unsupported suite format {suffix!r} (use {', '.join(SUITE_SUFFIXES)})")
    if suffix == ".jsonl":
        items = _jsonl_items(path, known)
    elif suffix == ".parquet":
        items = _parquet_items(path)
    else:
        items = _yaml_items(path)
    return _validate(path, items, config_overrides or {})


#: Rows of a Parquet suite read at a time (:func:`_parquet_items`).
_PARQUET_BATCH = 1024


def _parquet_items(path: Path) -> Iterator[tuple[int, Any]]:
    import polars as pl
    import pyarrow.parquet as pq

    number = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH):
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)  # a record batch is a frame, never a series
        for row in frame.iter_rows(named=True):
            number += 1
            yield number, row


def load_suites(folder: Path, config_overrides: dict[str, Any] | None = None,
                wanted: Callable[[str], bool] | None = None) -> Suite:
    """Every suite file directly in ``folder``, in name order; duplicate case ids are errors. With ``wanted``,
    only the cases whose id it accepts are kept (the others are read a case at a time and dropped: a Dagster
    chunk's run holds its own cases, not the suite's 100,000).

    A file is a suite when it has a suite's suffix and one of its first records is a case
    (:func:`is_suite_file`). Other files beside the suites, such as reports (``reports.jsonl``) or
    ``workspace.yaml``, are skipped and listed in :attr:`Suite.skipped`, not loaded as a thousand broken cases.
    """
    cases: list[CompareRequest] = []
    errors: list[SuiteError] = []
    skipped: list[str] = []
    seen: dict[str, str] = {}
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in SUITE_SUFFIXES):
        if not is_suite_file(path):
            skipped.append(f"{path}: not a suite (its first record has no expected_sql)")
            continue
        duplicates = []  # after the file's own errors, as before
        for case in read_suite(path, config_overrides):
            if isinstance(case, SuiteError):
                errors.append(case)
                continue
            if case.case_id in seen:
                duplicates.append(SuiteError(str(path), 0, f"duplicate case_id {case.case_id!r} (first in "
                                                           f"{seen[case.case_id]})"))
                continue
            seen[case.case_id] = str(path)
            if wanted is None or wanted(case.case_id):
                cases.append(case)
        errors += duplicates
    return Suite(cases, errors, skipped)


#: How many of a file's first records :func:`is_suite_file` reads for a case.
_RECORDS_LOOKED_AT = 20


def is_suite_file(path: Path) -> bool:
    """Whether one of the first :data:`_RECORDS_LOOKED_AT` records of ``path`` is a case (a mapping with
    ``expected_sql``). Not only the first: a suite whose first line broke (invalid JSON, a case without
    ``expected_sql``) stopped being a suite, and the case sensor deleted the partitions of all its cases."""
    if path.suffix.lower() == ".parquet":
        import polars as pl

        try:
            return "expected_sql" in pl.read_parquet_schema(path)
        except Exception:  # not Parquet at all: not a suite
            return False
    items = _jsonl_items(path) if path.suffix.lower() == ".jsonl" else _yaml_items(path)
    return any(isinstance(item, dict) and "expected_sql" in item
               for _, item in itertools.islice(items, _RECORDS_LOOKED_AT))


@dataclass(frozen=True)
class Known:
    """A suite line its reader read before (``read_suite``'s ``known``): its case id, and what the reader kept."""

    case_id: str
    value: Any


def _jsonl_items(path: Path, known: Callable[[str], Known | None] | None = None) -> Iterable[tuple[int, Any]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            text = raw.decode("utf-8", errors="replace").strip()
            if not text or text.startswith("//"):
                continue
            if known is not None and (seen := known(text)) is not None:
                yield number, seen
                continue
            try:
                yield number, json.loads(text)
            except json.JSONDecodeError as error:
                yield number, _Broken(f"invalid JSON: {error.msg} at column {error.colno}")
            except RecursionError:  # a value nested past the parser's limit: this line, not the file
                yield number, _Broken("invalid JSON: nested too deep to read")


class SuiteLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases: an alias is refused where it stands. A kilobyte of aliases of aliases
    (a "billion laughs") is a few nodes to the parser but a thousand million strings to any walk that copies the
    case (the text check every case goes through did), and a suite never needs one. Used for suites and
    ``--config`` files."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "an alias (*name): suites and config files take none",
                                              self.peek_event().start_mark)
        return super().compose_node(parent, index)


def load_yaml(text: str) -> Any:
    """``text`` read by :class:`SuiteLoader`; raises ``yaml.YAMLError``, or ``RecursionError`` for a value nested
    past the parser's limit."""
    return yaml.load(text, Loader=SuiteLoader)  # noqa: S506 - a SafeLoader without aliases


def _yaml_items(path: Path) -> Iterable[tuple[int, Any]]:
    try:
        data = load_yaml(path.read_text(encoding="utf-8", errors="replace"))
    except yaml.YAMLError as error:
        yield 0, _Broken(f"invalid YAML: {error}")
        return
    except RecursionError:
        yield 0, _Broken("invalid YAML: nested too deep to read")
        return
    if isinstance(data, dict) and "cases" in data:
        data = data["cases"]
    if not isinstance(data, list):
        yield 0, _Broken("a YAML suite is a list of cases (or a mapping with a 'cases' list)")
        return
    yield from enumerate(data, 1)


@dataclass(frozen=True)
class _Broken:
    message: str


def _validate(path: Path, items: Iterable[tuple[int, Any]], overrides: dict[str, Any]) \
        -> Iterator[CompareRequest | SuiteError | Known]:
    first_line: dict[str, int] = {}
    for number, item in items:
        if isinstance(item, Known):
            if item.case_id in first_line:
                yield SuiteError(str(path), number, f"duplicate case_id {item.case_id!r} (first on line "
                                                    f"{first_line[item.case_id]}): skipped")
            else:
                first_line[item.case_id] = number
                yield item
            continue
        if isinstance(item, _Broken):
            yield SuiteError(str(path), number, item.message)
            continue
        if not isinstance(item, dict):
            yield SuiteError(str(path), number, f"a case is an object, got {type(item).__name__}")
            continue
        item = {k: v for k, v in item.items() if v is not None}
        if isinstance(item.get("config"), dict):  # a Parquet struct holds every case's keys, null where unset
            item["config"] = {k: v for k, v in item["config"].items() if v is not None}
        item.setdefault("case_id", f"{path.stem}:{number}")
        if overrides:
            item["config"] = {**overrides, **(item.get("config") or {})}
        case_id = str(item["case_id"])
        if not case_id.strip():
            yield SuiteError(str(path), number, "case_id is empty: a case needs an id its report is known by")
            continue
        if case_id in first_line:
            yield SuiteError(str(path), number, f"duplicate case_id {case_id!r} (first on line "
                                                f"{first_line[case_id]}): skipped")
            continue
        first_line[case_id] = number
        yield _case(path, number, case_id, item)


def _case(path: Path, number: int, case_id: str, item: dict[str, Any]) -> CompareRequest | SuiteError:
    try:
        return CompareRequest.model_validate(item)
    except RecursionError:
        return SuiteError(str(path), number, f"case {case_id!r}: a value is nested too deep to read")
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'case'}: {e['msg']}" for e in error.errors())
        return SuiteError(str(path), number, f"case {item.get('case_id')!r}: {problems}")


def case_version(request: CompareRequest, database_fingerprint: str) -> str:
    """The data version of a case: a hash of everything that decides its report.

    That is the case itself (queries, config, context, pre-materialized results), the database's content and
    the engine version; editing any of them makes exactly this case stale.
    """
    from sqlcmp_dagster.engine.version import ENGINE_VERSION

    payload = json.dumps({"case": request.model_dump(mode="json"), "database": database_fingerprint,
                          "engine": ENGINE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()
