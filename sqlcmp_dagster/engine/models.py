"""Request, configuration and report models: the engine's input and output contract.

The report's top-level keys are fixed (docs/design.md, "What a report holds"), and the options are listed in
docs/configuration.md, generated from :class:`EvalConfig`. Every model forbids unknown fields so
that a misspelt option is a clear error naming the field rather than a silently ignored setting.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sqlcmp_dagster.engine.sandbox.cell_text import binary_text as binary_text  # where it is used, as before

ComparisonMode = Literal["exact", "order-insensitive", "order-sensitive", "auto"]
ResolvedMode = Literal["exact", "order-insensitive", "order-sensitive"]
Severity = Literal["pass", "minor issue", "moderate issue", "major issue", "critical failure"]
EvidenceStrength = Literal["low", "medium", "high"]
#: The classes of neighbor data (``engine/neighbors/classes.py``), each of which a suite may switch off.
NeighborClass = Literal["empty", "null", "boundary", "partner", "duplicate"]
ErrorCategory = Literal[
    "missing_table",
    "missing_column",
    "type_mismatch",
    "division_by_zero",
    "invalid_aggregation",
    "ambiguous_reference",
    "permission_error",
    "unknown_error",
    "timeout",
    "unsafe_statement",
]
SourceClause = Literal[
    "projection",
    "selection_predicate",
    "join",
    "aggregation_grain",
    "aggregate_function",
    "ordering",
    "top_k",
]


#: Defaults of :class:`EvalConfig`'s resource caps (docs/security.md gives the reasons). sqlglot's
#: parse and the canonical rewrites grow faster than linearly on pathological input (``SELECT 1+1+...``: 4 s at
#: 20,000 characters, 14-17 s at 50,000-100,000 here) and cannot be interrupted, so the length is what bounds
#: parse time; the longest Spider or BIRD gold query is a few thousand characters.
DEFAULT_MAX_SQL_CHARS = 20_000
DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_CELL_BYTES = 1024 * 1024
DEFAULT_FIX_SEARCH_MAX_STEPS = 4_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The longest time an option gives (a day, in milliseconds).
MAX_MS = 86_400_000
#: The largest count or length an option gives (a C int: SQLite's length limit is one).
MAX_COUNT = 2**31 - 1
#: The largest result size an option gives (a TiB; DuckDB's memory limit is set from it).
MAX_BYTES = 1 << 40
#: The largest count of SQLite virtual-machine steps an option gives (SQLite counts them in 64 bits).
MAX_STEPS = 1 << 62


class EvalConfig(_Strict):
    """Runtime options of one comparison (docs/configuration.md is generated from this class).

    ``numeric_abs_tolerance``/``numeric_rel_tolerance`` default to 1e-9 each; in ``exact`` mode they default to
    0 unless set explicitly (exact means exact), which :meth:`tolerances` resolves.

    The resource caps bound what one hostile query can cost: ``max_result_bytes`` (about 64 MiB per result;
    fetching stops there, the result is truncated with a warning), ``max_cell_bytes`` (1 MiB; a longer text or
    binary value is cut with a marker while fetching, or refused by SQLite itself), ``max_sql_chars`` (a longer
    query is a parse failure before the parser runs), ``case_timeout_ms`` (the case's total budget for parsing
    and every query it runs: expected, actual, counterfactual probes and tie re-checks; default three query
    timeouts, see :meth:`case_budget_ms`).

    Each number has the largest value the engines hold (:data:`MAX_MS`, :data:`MAX_COUNT`, :data:`MAX_BYTES`):
    past it a value was refused deep inside one engine (a timestamp out of range in DuckDB, a C int in SQLite's
    length limit, which made every query of the case fail), so it is refused here, naming the option. A
    tolerance is finite: an infinite one made every number equal to every other.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)  # merged with _Strict's: unknown options stay errors

    comparison_mode: ComparisonMode = "auto"
    """How rows are compared: ``order-insensitive`` as multisets, ``order-sensitive`` in order (ties of the ORDER BY
    keys accepted), ``exact`` in order with tolerances 0 unless set; ``auto`` is order-sensitive exactly when the
    expected query has a top-level ORDER BY."""
    numeric_abs_tolerance: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """``atol`` of ``|a-b| <= atol + rtol*|b|`` for floating-point and decimal values; unset: 1e-9, 0 in ``exact``
    mode. Integers always compare exactly."""
    numeric_rel_tolerance: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """``rtol`` of the same rule; unset: 1e-9, 0 in ``exact`` mode."""
    null_equality_mode: Literal["strict", "sql_semantic"] = "strict"
    """``strict``: NULL equals NULL and nothing else; ``sql_semantic``: NULL equals nothing, not even NULL."""
    require_column_name_match: bool = False
    """Result columns must carry the same names; otherwise columns are aligned by their values."""
    require_column_order_match: bool = False
    """Result columns must come in the same order; otherwise one consistent column permutation is searched."""
    max_rows_for_cell_alignment: int = Field(default=100_000, ge=0, le=MAX_COUNT)
    """Most unpaired rows for which rows that differ in one column are paired, so that the per-column mismatch
    counts say which attribute is wrong."""
    query_timeout_ms: int = Field(default=10_000, gt=0, le=MAX_MS)
    """Each query is interrupted past it (``timeout``), its fetches included."""
    max_result_rows: int = Field(default=1_000_000, gt=0, le=MAX_COUNT)
    """Fetching stops past it; the result is truncated with a warning."""
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, gt=0, le=MAX_BYTES)
    """Bytes of one result (text and binary lengths plus 8 a cell); fetching stops past it with a warning. On
    DuckDB it also sets the query process's memory bound (256 MiB + 8 times this)."""
    max_cell_bytes: int = Field(default=DEFAULT_MAX_CELL_BYTES, gt=0, le=MAX_COUNT)
    """A longer text or binary value is cut with a marker (its length and a digest) before it reaches the
    comparing process, or refused by SQLite itself."""
    max_sql_chars: int = Field(default=DEFAULT_MAX_SQL_CHARS, gt=0, le=MAX_COUNT)
    """A longer query is a parse failure before the parser runs."""
    case_timeout_ms: int | None = Field(default=None, gt=0, le=MAX_MS)
    """The case's whole budget for parsing and every query it runs (expected, actual, fix-search candidates, tie
    re-checks, neighbor search); an expected query served from the cache counts with the time it was measured with
    (``timings.cached_execution_ms``), so a warm cache leaves the rest of the case the time it would have without
    one; unset: three times ``query_timeout_ms``."""
    enable_ai_judge: bool = False
    """Ask the advisory LLM judge (it never changes the deterministic verdict)."""
    enable_performance_metrics: bool = False
    """Time ratio of the two queries and figures from their estimated plans; indicative, off and free by
    default."""
    enable_counterfactual_probes: bool = True
    """Search a failing case's verified minimal fix by re-running the actual query with expected clauses
    transplanted in."""
    fix_search_budget_ms: int = Field(default=10_000, gt=0, le=MAX_MS)
    """The verified-fix search's time, at most (``query_timeout_ms`` and what is left of ``case_timeout_ms`` too),
    and the search is skipped, with a warning, when the case's two queries (the actual query and the chosen
    expected one, as measured) took longer than it together. Each candidate is a query like them, up to 32 per
    search: on a large database the search costs many times the queries themselves (on a 1 GB database it was
    36-47% of all the time, ``benchmarks/large_database.py``); there, 1000 bounds it (the skip is decided from
    the two queries' measured times, not from a clock running out mid-search). The default, ``query_timeout_ms``'s
    own, searches as before this option: a default of 1000 made small databases' reports depend on the machine's
    load (eight workers on two cores measured a DuckDB case's two queries above 1 s and skipped its search)."""
    fix_search_max_steps: int = Field(default=DEFAULT_FIX_SEARCH_MAX_STEPS, gt=0, le=MAX_STEPS)
    """On SQLite, the verified-fix search is skipped, with a warning, when the case's two queries took more than this
    many virtual-machine steps together (SQLite's own count, in units of 10,000: the same on every machine and under
    any load, so the skip is too). Each candidate is a query like them, up to 32 per search, so below the bound a
    search does at most about 32 times its work (a few seconds of SQLite's time), mostly far less; on every Spider
    dev case the two queries take at most 0.5 million steps. A database of a gigabyte makes them take millions
    (world_1 copied to 1.15 GB: 17 million in the median case, up to 300 million), where the search cost many times
    the case's own queries: raise this to search there too. ``fix_search_budget_ms`` still bounds the search's
    time on every engine."""
    dialect: str | None = None
    """sqlglot dialect of both queries; unset: the database's own (``sqlite`` for SQLite files)."""
    include_asts: bool = False
    """Add both queries' parsed trees to the report's metrics."""
    include_result_tables: bool = False
    """Add both results (rows and schema) to the report's metrics."""
    verdict_scope: Literal["database", "neighborhood"] = "database"
    """``database``: a pass with a neighbor counterexample stays a pass, severity minor issue;
    ``neighborhood``: it becomes a fail."""
    neighbor_count: int = Field(default=12, ge=0, le=MAX_COUNT)
    """Neighbor databases built per passing case (the search stops at the first counterexample); 0 turns the
    search off."""
    neighbor_time_budget_ms: int = Field(default=30_000, gt=0, le=MAX_MS)
    """Wall-clock safety cap of one case's neighbor search, far above its work (bounded by ``neighbor_count``
    and the shrink tests): hitting it is a named cut in the report, not the norm."""
    neighbor_sample_rows: int = Field(default=40, gt=0, le=MAX_COUNT)
    """Rows read from each table the queries read (and from the parents their foreign keys reference)."""
    neighbor_seed: int = 0
    """Seed of the neighbor search; the same seed rebuilds the same neighbors and counterexample."""
    neighbor_skip_proven: bool = True
    """Do not search a pass whose queries are proven equal (equal canonical trees, or equal after the rewrites
    of ``engine/equivalence/``): no database of the case's schema tells them apart."""
    neighbor_classes: list[NeighborClass] = Field(default_factory=lambda: list(get_args(NeighborClass)))
    """Classes of neighbor data the search builds (``engine/neighbors/classes.py``): ``empty`` (an emptied table,
    or the rows a WHERE keeps removed: an empty table is admissible, every declared constraint holds on it),
    ``null`` (NULL where a column is nullable), ``boundary`` (rows on and next to each literal), ``partner`` (rows
    without a partner across a key or join), ``duplicate`` (values shared in non-unique columns). A suite may
    switch classes off; the neighbors of a profile that builds one are then not built."""

    def tolerances(self, mode: ResolvedMode) -> tuple[float, float]:
        """Return ``(atol, rtol)`` in force for ``mode``."""
        default = 0.0 if mode == "exact" else 1e-9
        atol = default if self.numeric_abs_tolerance is None else self.numeric_abs_tolerance
        rtol = default if self.numeric_rel_tolerance is None else self.numeric_rel_tolerance
        return atol, rtol

    def case_budget_ms(self) -> int:
        """``case_timeout_ms``, or three query timeouts when unset: the expected and the actual query can each
        use their whole timeout and the probes share what is left."""
        return self.case_timeout_ms if self.case_timeout_ms is not None else 3 * self.query_timeout_ms

    def shortest_time_limit_ms(self) -> int:
        """The least time after which a clock can decide something in a case: each query's timeout, the fix
        search's and the neighbor search's budgets, and what the case may spend before the fix search gets less
        than its whole budget (``case_timeout_ms`` less the least of ``query_timeout_ms`` and
        ``fix_search_budget_ms``; the report then names the rest). A case that spent less than this, by the clock and
        by the times its budget counts, was cut and limited by no clock.

        >>> EvalConfig().shortest_time_limit_ms(), EvalConfig(case_timeout_ms=12_500).shortest_time_limit_ms()
        (10000, 2500)
        """
        return min(self.query_timeout_ms, self.fix_search_budget_ms, self.neighbor_time_budget_ms,
                   self.case_budget_ms() - min(self.query_timeout_ms, self.fix_search_budget_ms))

    def config_hash(self) -> str:
        """A short stable hash of every option, recorded in run_metadata and used for cache keys.

        Remembered by the options as pydantic prints them (2 us), which tell the same options exactly as their
        sorted JSON does: that JSON and its digest cost 18-50 us, twice a case (the report and the cache key)."""
        printed = self.model_dump_json()
        known = _CONFIG_HASHES.get(printed)
        if known is None:
            payload = json.dumps(self.model_dump(mode="json"), sort_keys=True)
            known = hashlib.sha256(payload.encode()).hexdigest()[:16]
            if len(_CONFIG_HASHES) >= _CONFIG_HASHES_KEPT:
                _CONFIG_HASHES.clear()
            _CONFIG_HASHES[printed] = known
        return known


#: :meth:`EvalConfig.config_hash` by the options' JSON as pydantic prints them; a process sees a few option sets
#: (a suite's defaults and its cases' overrides), so the few kept are forgotten together when they fill up. A
#: value is a function of its key, so what the dict holds never changes a hash.
_CONFIG_HASHES: dict[str, str] = {}
_CONFIG_HASHES_KEPT = 256


class ResultTable(_Strict):
    """A pre-materialized result: column names and rows (suite field ``expected_result``/``actual_result``)."""

    columns: list[str]
    rows: list[list[Any]]

    @field_validator("columns", "rows")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        return encodable(value)

    @model_validator(mode="after")
    def _rows_fit_columns(self) -> ResultTable:
        width = len(self.columns)
        for index, row in enumerate(self.rows):
            if len(row) != width:
                raise ValueError(f"row {index} has {len(row)} values but there are {width} columns")
        return self


class CompareRequest(_Strict):
    """One evaluation case (one line of a suite: docs/usage.md)."""

    case_id: str = "case"
    user_query: str = ""
    expected_sql: list[str]
    actual_sql: str
    db: str | None = None
    config: EvalConfig = Field(default_factory=EvalConfig)
    context: dict[str, Any] | str | None = None
    expected_result: ResultTable | None = None
    actual_result: ResultTable | None = None

    @field_validator("expected_sql", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        return value

    @field_validator("case_id", "user_query", "actual_sql", "expected_sql", "db", "context")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        return encodable(value)

    @field_validator("expected_sql")
    @classmethod
    def _at_least_one(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one expected query is required")
        return value


def encodable(value: Any) -> Any:
    """``value`` with every text in it (in lists and dicts, keys too) that cannot be encoded as UTF-8 (a lone
    surrogate, which a JSON suite can spell ``"\\ud800"``) made encodable, its bad characters replaced by
    ``?``: no database driver, Parquet file or JSON report could carry it otherwise, and one such case would
    sink the batch's reports file. Applied to every text of a case as it is read (a pre-materialized result's
    column names and cells included).

    >>> encodable({"a\\ud800": ["x", "\\udcff", 1]}), encodable("ok")
    ({'a?': ['x', '?', 1]}, 'ok')
    """
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", errors="replace").decode("utf-8")
    if isinstance(value, list):
        return [encodable(v) for v in value]
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    return value


class ExecutionError(_Strict):
    """``execution_error_*``: a taxonomy category and the raw database message, always both."""

    category: ErrorCategory
    message: str


class Report(_Strict):
    """The output contract: one object per case, every key always present (docs/design.md). Its scores
    are finite numbers: JSON has no NaN or infinity, and pydantic would write one as ``null``, which a float
    field does not read back (a report that got one is an engine fault, reported as such for its case). A result
    cell that is an infinity (SQLite's ``-1e999``) is written as the text ``"-Infinity"``/``"Infinity"``, not as
    ``null``: a wrong infinite answer must not read back as a NULL."""

    model_config = ConfigDict(allow_inf_nan=False, ser_json_inf_nan="strings")

    case_id: str
    deterministic_verdict: Literal["pass", "fail"]
    ai_advisory_verdict: str | None
    verdict_consistency_flag: bool | None
    overall_score: float
    structure_score: float | None
    result_score: float | None
    diagnostic_scores: dict[str, Any] | None
    performance_scores: dict[str, Any] | None
    severity: Severity
    explanations: list[str]
    mismatch_map: dict[str, Any] | None
    error_types: list[ErrorCategory]
    blocked_reason: Literal["parse_failure", "execution_failure"] | None
    warnings: list[str]
    validity: dict[str, Any]
    evidence: dict[str, Any]
    run_metadata: dict[str, Any]
    metrics: dict[str, Any]

    @field_validator("diagnostic_scores", "performance_scores", "mismatch_map", "validity", "evidence",
                     "run_metadata", "metrics")
    @classmethod
    def _json_safe(cls, value: Any) -> Any:
        """Binary values anywhere in the report become text (:func:`binary_text`): JSON has no bytes, and a
        non-UTF-8 blob would otherwise crash serialization and lose the whole batch's reports."""
        return json_safe(value)


#: Types :func:`json_safe` returns as they are, told apart without a call: most of a report's values.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def json_safe(value: Any) -> Any:
    r"""``value`` with every ``bytes``/``bytearray``/``memoryview`` inside dicts, lists and tuples as
    :func:`binary_text` (tuples become lists). A plain value inside a container is kept without a call: a report
    holds about 200 values, and a call for each was 0.5 ms per report.

    >>> json_safe({"a": [b"\x01", (1, "x")], "b": None})
    {'a': ['\\x01', [1, 'x']], 'b': None}
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return binary_text(bytes(value))
    if isinstance(value, dict):
        return {k: v if type(v) in _PLAIN else json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _PLAIN else json_safe(v) for v in value]
    return value
