"""The neighbor search (Layer 4): is a pass an accident of this database's rows?

For a case that passes, both queries run on small databases of the same schema built from the rows the
queries touch (:mod:`.generation`), each a scratch copy in memory with the schema's constraints enforced
(:mod:`.scratch`) and queried through the same read-only, time-limited adapter and safety gate as the
case itself, under the case's bounds (``max_result_rows``, ``max_result_bytes``, ``max_cell_bytes``; DuckDB
neighbors in the case's memory-bounded DuckDB process): a query that fails on a neighbor is named in the
report's warnings, and that neighbor is skipped. Results are compared by the case's own Layer 3
(:func:`compare_results`, same mode, tolerances and NULL mode). A difference that reproduces, that neither
query produces on its own by chance (re-run, rows inserted in the other order, a LIMIT cut inside a tie; an actual
query whose result changes so but never matches the expected one is no chance), is
shrunk by delta debugging and then row by row to a 1-minimal counterexample (``minimal`` says whether the test
budget let it get there). A difference that does come from chance is reported as non-determinism, never as a
counterexample.

Verdict policy (``verdict_scope``): with ``"database"`` (the default: a verdict is about one database) the verdict is
the evaluated database's; a counterexample leaves it a pass but makes the severity ``minor issue`` (the answer
is right here, the query means something else) with a warning. With ``"neighborhood"`` a counterexample is a
fail, with the severity Layer 3 gives the difference on the counterexample.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from sqlcmp_dagster.engine.comparison import ResultComparison, Rules, can_pass, compare_results, suits
from sqlcmp_dagster.engine.context import current, keep_recent, recall
from sqlcmp_dagster.engine.equivalence import provable, proven_equivalent
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.neighbor_report import SHOWN_ROWS, row_count
from sqlcmp_dagster.engine.neighbors.classes import named_class
from sqlcmp_dagster.engine.neighbors.generation import PROFILES, neighbor_numbers, neighbor_rows, seed_of
from sqlcmp_dagster.engine.neighbors.hints import Hints, hints
from sqlcmp_dagster.engine.neighbors.schema import Rows, SCRATCH_DIALECTS, Schema, read_schema, sample
from sqlcmp_dagster.engine.neighbors.scratch import Neighborhood, Scratch, neighborhood, scratch, stored
from sqlcmp_dagster.engine.neighbors.shrink import one_minimal
from sqlcmp_dagster.engine.parsing import ParseOutcome, sql_text
from sqlcmp_dagster.engine.relation import Relation
from sqlcmp_dagster.engine.scoring import severity
from sqlcmp_dagster.engine.structure import StructuralComparison
from sqlcmp_dagster.engine.validation import Side, Validation, resolve_mode

#: Most tests per row of the pass that removes rows after the whole tables (:func:`one_minimal`): its removals,
#: the longer runs that lost the difference, and the round that confirms no single row can go.
SHRINK_TESTS_PER_ROW = 3
#: Neighbor search outcomes kept for the next case with the same queries, options and database content
#: (:func:`neighbor_search`).
SEARCHES_KEPT = 512
#: Most distinct query failures on neighbors named in a report's warnings.
MAX_FAILURES_NAMED = 3
#: How a report names an engine that a dialect id (sqlglot's) stands for.
ENGINE_NAMES = {"sqlite": "SQLite", "duckdb": "DuckDB", "postgres": "PostgreSQL"}
#: Why a pass was not searched: its queries are proven to agree on every database (``robust_by_structure``).
PROVEN_BY_STRUCTURE = ("the canonical trees are equal: no database tells the queries apart, so the pass is robust "
                       "without a search")
PROVEN_BY_REWRITES = ("the canonical trees are equal once rewritten without changing what either query returns on "
                      "this schema (an explicit ASC dropped, a double-quoted name that is no column read as the "
                      "string SQLite reads it, an IN list of literals written as ORs, a whole number written as "
                      "text beside a column with an affinity read as the number; where row order does not "
                      "count, inner joins in one order and the operands of INTERSECT or UNION too, and where "
                      "columns are aligned by their values, the result columns in one order): no database "
                      "with this schema tells the queries apart, so the pass is robust without a search")
_NONDETERMINISTIC_FUNCTIONS = ("random", "randomblob", "changes", "last_insert_rowid", "total_changes")


class _Spent(Exception):
    """The case's time budget ran out."""


class _Stuck(_Spent):
    """A query on a neighbor is still inside a step of SQLite's that its case stopped waiting for
    (:class:`~sqlcmp_dagster.engine.sandbox.sqlite.Stuck`): the neighbor database is that call's until it ends, so
    the search stops there."""


@dataclass
class _Run:
    """One neighbor's outcome: both results (the chosen alternative's) and whether any alternative matches."""

    expected: Relation
    actual: Relation
    matches: bool


@dataclass
class _Search:
    validation: Validation
    index: int
    schema: Schema
    tables: list[str]
    deadline: float
    limit: str  # the time limit the deadline comes from, named in a cut
    place: Neighborhood  # where every neighbor of the search is built and queried
    found: Hints  # what the two queries look at (the generation's aim, a counterexample's class)
    elapsed_queries_ms: float = 0.0
    nondeterminism: list[str] = field(default_factory=list)
    cuts: list[str] = field(default_factory=list)  # what the time budget cut, for the report's warnings
    failures: list[str] = field(default_factory=list)  # queries that failed on a neighbor, for the warnings
    # Per side (by id): the text of its query without LIMIT and with its ORDER BY keys appended, the gate's parse
    # of that text when it succeeded, and how many keys (:func:`_keyed_uncut`), built once per search instead of
    # once per neighbor with a tie to look at. A parse that failed is not kept: one cut by the clock says nothing
    # of the next neighbor's (the text is parsed again there, as without the kept parse).
    keyed_uncut: dict[int, tuple[str, ParseOutcome | None, int] | None] = field(default_factory=dict)
    # What :meth:`differs` answered per row set in the shrinking under way, by the key its caller gave the set.
    tested: dict[Hashable, tuple[_Run, Scratch] | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        dialect = self.validation.dialect
        sides = [self.validation.actual, *(self.validation.expected[i] for i in self.validation.runnable())]
        self.semantics = {id(side): (resolve_mode(self.config, side.shape(dialect)), side.shape(dialect))
                          for side in sides}
        # A query compared with its own re-run: NULL equals NULL whatever the case's NULL mode, for a result
        # holding a NULL is not different from itself (under ``sql_semantic`` every such result would be).
        self.rerun_config = self.config.model_copy(update={"null_equality_mode": "strict"})

    @property
    def config(self) -> Any:
        return self.validation.request.config

    @property
    def adapter(self) -> ExecutionAdapter:
        return self.place.adapter

    def remaining_ms(self) -> int:
        left = int((self.deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise _Spent()
        return left

    def timeout_ms(self) -> int:
        """A query's timeout on a neighbor: the case's, cut to the time left in the budget."""
        return max(1, min(int(self.config.query_timeout_ms), self.remaining_ms()))

    def execute(self, side: Side, derived: tuple[str, ParseOutcome | None] | None = None) -> Relation | None:
        """Run ``side`` (or a query ``derived`` from it: its text and the gate's parse of it, None to have the
        text parsed) on the current neighbor under :meth:`timeout_ms`; None when it fails there."""
        config = self.config
        sql, parsed = derived if derived is not None else (side.sql, side.parsed)
        execution = self.adapter.execute(sql, parsed=parsed, timeout_ms=self.timeout_ms(),
                                         max_rows=config.max_result_rows, max_bytes=config.max_result_bytes,
                                         max_cell_bytes=config.max_cell_bytes)
        self.elapsed_queries_ms += execution.elapsed_ms
        self.usable()
        if execution.relation is None or execution.relation.truncated:
            self.remaining_ms()  # a timeout that was the budget's: stop here
            if execution.error is not None and execution.error.category == "timeout":
                self.cut(f"a query hit query_timeout_ms={self.config.query_timeout_ms} on a neighbor database: "
                         "that neighbor tells nothing")
            else:
                label = "actual" if side is self.validation.actual else "expected"
                why = f"{execution.error.category}: {execution.error.message}" if execution.error is not None \
                    else "; ".join(execution.warnings)
                failure = f"the {label} query failed on a neighbor database, which was skipped ({why[:300]})"
                if failure not in self.failures and len(self.failures) < MAX_FAILURES_NAMED:
                    self.failures.append(failure)
            return None
        return execution.relation

    def run(self, rows: Rows, *, reverse: bool = False) -> tuple[_Run | None, Scratch]:
        """Build ``rows`` (in reverse insertion order with ``reverse``) and run every side on it: the run and
        what the neighbor accepted."""
        ordered = {t: list(reversed(r)) if reverse else r for t, r in rows.items()}
        self.usable()
        with scratch(self.schema, self.tables, ordered, self.place, self.config.max_result_bytes) as built:
            return self._compare(), built

    def stored(self, rows: Rows) -> Rows:
        """``rows`` as a neighbor built from them stores them (what a counterexample shows)."""
        self.usable()
        with scratch(self.schema, self.tables, rows, self.place, self.config.max_result_bytes) as built:
            return stored(self.schema, self.tables, self.place, built.accepted)

    def _compare(self) -> _Run | None:
        validation = self.validation
        actual = self.execute(validation.actual)
        if actual is None:
            return None
        chosen: _Run | None = None
        matches = False
        for index in validation.runnable():
            side = validation.expected[index]
            expected = self.execute(side)
            if expected is None:
                continue
            same = self.same(side, expected, actual)
            if not same and expected.height == actual.height and any(
                    self._limit_cuts_tie(s) for s in (side, validation.actual)):
                self.note("a LIMIT cuts inside a tie of its ORDER BY keys on a neighbor: which tied rows come "
                          "back is the engine's choice there (non-determinism, not a counterexample)")
                same = True
            matches = matches or same
            if index == self.index:
                chosen = _Run(expected, actual, False)
        if chosen is None:
            return None
        chosen.matches = matches
        return chosen

    def same(self, side: Side, expected: Relation, actual: Relation, config: Any = None) -> bool:
        """Whether the results match under the case's semantics (Layer 3, :func:`compare_results`), or under
        ``config`` when given. Identical relations (same types and rows in the same order; in order-insensitive
        mode the same rows in any order; the same names where names count) match under every tolerance, and
        under either NULL mode when they hold no NULL: most neighbors of a sound pass give identical results,
        and the full comparison is then skipped. Most are told identical from their rows
        (:meth:`~sqlcmp_dagster.engine.execution.Relation.same_rows`) before any frame is made; small results
        that are not go to the plain comparison, which makes none either."""
        config = config or self.config
        mode, _ = self.semantics[id(side)]
        names_agree = expected.names == actual.names or not (mode == "exact" or config.require_column_name_match)
        if names_agree and expected.same_rows(actual, null_equals_null=config.null_equality_mode == "strict"):
            return True  # the frames would be equal: no frame is made
        if not can_pass(expected, actual):
            return False
        if suits(expected, actual):  # small: the plain comparison, which makes no frame, is the quick check
            return self.compare(side, expected, actual, config).mode_pass
        # Columns, types and NULL counts read from each column's metadata: polars' schema and null_count() frames
        # cost 40 us a neighbor query, about a tenth of its whole comparison.
        comparable = names_agree \
            and expected.frame.columns == actual.frame.columns and expected.frame.dtypes == actual.frame.dtypes \
            and (config.null_equality_mode == "strict"
                 or not any(column.null_count() for column in expected.frame.get_columns()))
        if comparable and expected.frame.equals(actual.frame):
            return True
        if comparable and mode == "order-insensitive" and expected.height == actual.height and \
                _sorted(expected).equals(_sorted(actual)):
            return True
        return self.compare(side, expected, actual, config).mode_pass

    def compare(self, side: Side, expected: Relation, actual: Relation, config: Any = None) -> ResultComparison:
        """Layer 3 with the case's own semantics (or ``config``'s): the mode resolved from the expected query, its
        ORDER BY keys."""
        mode, shape = self.semantics[id(side)]
        return compare_results(expected, actual, mode=mode, config=config or self.config, order_keys=shape.order_keys)

    def _limit_cuts_tie(self, side: Side) -> bool:
        """Whether ``side``'s top-level LIMIT falls inside a tie of its ORDER BY keys on this neighbor: the
        query re-run without LIMIT, its ORDER BY keys added as columns, has equal keys on both sides of the cut
        (keys need not be projected, unlike Layer 3's tie check)."""
        _, shape = self.semantics[id(side)]
        if id(side) not in self.keyed_uncut:
            keyed = _keyed_uncut(side.parsed.ast) if shape.limit is not None and side.parsed.ast is not None \
                else None
            if keyed is None:
                self.keyed_uncut[id(side)] = None
            else:
                text = sql_text(keyed[0], self.validation.dialect)
                gated = self.adapter.gate_parse(text, self.timeout_ms())
                self.keyed_uncut[id(side)] = (text, gated if gated.success else None, keyed[1])
        keyed_text = self.keyed_uncut[id(side)]
        if keyed_text is None:
            return False
        sql, parsed, width = keyed_text
        uncut = self.execute(side, (sql, parsed))
        cut = (shape.offset or 0) + (shape.limit or 0)
        if uncut is None or uncut.height <= cut or cut == 0:
            return False
        # The database's own values, read without making a frame (a third of the check's time): told apart as the
        # engine orders them (1 and '1' are no tie), where a frame's column of both would hold them as text.
        rows = uncut.rows
        assert rows is not None, "a result just fetched holds its rows"
        return tuple(rows[cut - 1][-width:]) == tuple(rows[cut][-width:])

    def usable(self) -> None:
        """Raise :class:`_Stuck` when a query left a step of SQLite's running on the neighbor database."""
        if self.adapter.stuck:
            raise _Stuck()

    def note(self, message: str) -> None:
        if message not in self.nondeterminism:
            self.nondeterminism.append(message)

    def cut(self, message: str) -> None:
        if message not in self.cuts:
            self.cuts.append(message)

    def differs(self, rows: Rows, key: Hashable) -> tuple[_Run, Scratch] | None:
        """The run on ``rows`` and what the neighbor accepted when no alternative matches the actual query
        there, else None. A row set tested before in this shrinking under the same ``key`` gets the answer it got
        then: the shrinking names a set by the positions of its rows in the set it shrinks (so the same rows in
        the same order, the same database), which costs nothing to compare, where the rows' values would have to
        be told apart by type and bits (``1`` and ``1.0``, ``0.0`` and ``-0.0`` are equal in Python, not in a
        TEXT column); it asks about one set again in about one test out of fifteen."""
        if key in self.tested:
            return self.tested[key]
        outcome, built = self.run(rows)
        answer = None if outcome is None or outcome.matches else (outcome, built)
        self.tested[key] = answer
        return answer

    def by_chance(self, rows: Rows, first: _Run) -> bool:
        """Whether the difference on ``rows`` is chance: the queries match when run again or when the rows are
        inserted in the other order (SQLite then scans them in another order), or the expected query's own result
        changes so. An actual query whose result changes so but differs from the expected result every time (a
        scalar subquery that meets two rows against a join that keeps both) is non-deterministic and still a
        counterexample: no choice the engine makes agrees with the expected result. A result is compared with
        its re-run with NULL equal to NULL, whatever the case's NULL mode."""
        expected, actual = self.validation.expected[self.index], self.validation.actual
        for reverse in (False, True):
            again, _ = self.run(rows, reverse=reverse)
            if again is None or again.matches:
                return True
            how = "when the rows are stored in another order" if reverse else "when run again"
            if not self.same(expected, first.expected, again.expected, self.rerun_config):
                self.note(f"the expected query's result changes {how} on a neighbor database "
                          "(non-determinism, not a counterexample)")
                return True
            if not self.same(actual, first.actual, again.actual, self.rerun_config):
                self.note(f"the actual query's result changes {how} on a neighbor database (non-determinism), "
                          "and differs from the expected result either way")
        return False


def neighbor_search(validation: Validation, index: int, structure: StructuralComparison, result: ResultComparison,
                    database: ExecutionAdapter | None, *, budget_ms: int | None) -> dict[str, Any]:
    """The neighbor search of one case (Layer 4): whether it ran (and why not), neighbors tried, the
    counterexample found, non-determinism seen. ``budget_ms`` is what the case's own budget
    (``case_timeout_ms``) has left, None when nothing: the search takes at most that, and at most
    ``neighbor_time_budget_ms``. Never raises for anything the case contains."""
    started = time.monotonic()
    config = validation.request.config
    reason = _not_run_reason(validation, index, result, database)
    if reason is None and budget_ms is None:
        reason = f"case_timeout_ms={config.case_budget_ms()} was spent before the neighbor search"
    if reason is not None:
        return _outcome(False, reason, started)
    assert database is not None
    assert budget_ms is not None
    time_limit_ms = min(config.neighbor_time_budget_ms, budget_ms)
    # The work is bounded by counts (neighbors, shrink tests, sampled rows), so the outcome is the same on every
    # run; the clock is only a safety cap, and a search that hits it says so (``budget_cuts``, warnings). So an
    # outcome the clock did not cut is the outcome of every case with the same queries, options and database
    # content (a suite asks the same question twice, and a model answers it the same way): kept for them.
    # The content is told by the file's state (``version``), as the schema cache tells it: its bytes' hash read
    # a 1 GB file whole in the first case that searched. Every option as pydantic prints it (in its own code, a
    # tenth of what config_hash's JSON and digest cost).
    key = (database.identifier, database.version(), validation.dialect, validation.actual.sql,
           tuple((i, validation.expected[i].sql) for i in validation.runnable()), index, config.model_dump_json(),
           result.comparison_mode)
    searches = current().searches
    kept = recall(searches, key)
    if kept is not None:
        return {**copy.deepcopy(kept), "elapsed_ms": round((time.monotonic() - started) * 1000, 3),
                **({"time_limit_ms": time_limit_ms} if "time_limit_ms" in kept else {})}
    outcome = _search(validation, index, result, database, budget_ms, started)
    if not outcome["budget_cuts"] and (outcome["neighbor_search_ran"] or outcome["robust_by_structure"]):
        keep_recent(searches, key, copy.deepcopy(outcome), SEARCHES_KEPT)
    return outcome


def _search(validation: Validation, index: int, result: ResultComparison, database: ExecutionAdapter,
            budget_ms: int, started: float) -> dict[str, Any]:
    """:func:`neighbor_search` of a pass it runs for: the proof that it needs none, else the search."""
    config = validation.request.config
    cap = config.neighbor_time_budget_ms
    limit = (f"neighbor_time_budget_ms={cap}" if cap <= budget_ms else
             f"what was left of case_timeout_ms={config.case_budget_ms()} ({budget_ms} ms)")
    deadline = started + min(cap, budget_ms) / 1000
    schema = read_schema(database, config.neighbor_sample_rows, min(config.query_timeout_ms, cap, budget_ms))
    if isinstance(schema, str):
        return _outcome(False, schema, started)
    proof = _proof(validation, index, result, schema, deadline) if config.neighbor_skip_proven else None
    if proof is not None:
        return {**_outcome(False, proof, started), "robust_by_structure": True}
    trees = [validation.actual.parsed.ast, validation.expected[index].parsed.ast]
    found = hints((t for t in trees if t is not None), schema)
    tables = schema.scope(found.tables)
    if not tables:
        return _outcome(False, "the queries read no table of the database", started)
    unread = sample(database, schema, tables, deadline, config.query_timeout_ms)
    if unread is not None:
        return _outcome(False, f"{unread} ({limit})" if unread.startswith("the time ran out") else unread, started)
    with neighborhood(database, schema, tables) as place:
        search = _Search(validation, index, schema, tables, deadline, limit, place, found)
        return _searched(search, found, started, min(cap, budget_ms))


def _searched(search: _Search, found: Hints, started: float, time_limit_ms: int) -> dict[str, Any]:
    """The search itself: neighbors built and compared one by one until a counterexample, then shrunk."""
    config = search.config
    schema, tables, limit = search.schema, search.tables, search.limit
    tried = nonempty = rejected = 0
    counterexample = None
    stop = None
    try:
        for number in neighbor_numbers(config.neighbor_count, tables, found, config.neighbor_classes, schema):
            rows = neighbor_rows(schema, tables, found, number,
                                 random.Random(seed_of(config.neighbor_seed, number)))
            outcome, built = search.run(rows)
            accepted = built.accepted
            tried += 1
            rejected += built.rejected
            if outcome is None:
                continue
            nonempty += outcome.expected.height > 0
            if outcome.matches or search.by_chance(accepted, outcome):
                continue
            counterexample = _shrink(search, accepted, outcome, number)
            break
    except _Stuck:
        stop = f"a query on a neighbor database was still inside a step of SQLite's past its timeout, after {tried} " \
            "neighbors: that database is the step's until it ends"
        search.cut(f"neighbor search stopped: {stop}")
    except _Spent:
        stop = f"{limit} was spent after {tried} neighbors"
        search.cut(f"neighbor search stopped: {stop}")
    return {**_outcome(True, stop, started), "budget_cuts": search.cuts, "query_failures": search.failures,
            "neighbors_tried": tried, "neighbors_nonempty": nonempty,
            "rejected_rows": rejected, "tables": [schema.tables[t].name for t in tables],
            "counterexample_found": counterexample is not None, "counterexample": counterexample,
            "nondeterminism": search.nondeterminism, "malformed_foreign_keys": schema.malformed_keys,
            "query_ms": round(search.elapsed_queries_ms, 3), "time_limit_ms": time_limit_ms}


def _keyed_uncut(tree: exp.Expression) -> tuple[exp.Expression, int] | None:
    """``tree`` without its LIMIT and OFFSET and with its ORDER BY keys appended to the projection (an ordinal
    or an alias resolved to its expression), and how many keys were appended; None for a set operation or a
    query without ORDER BY."""
    order = tree.args.get("order")
    if not isinstance(tree, exp.Select) or order is None:
        return None
    keyed = tree.copy()
    projections = list(tree.expressions)
    aliases = {p.alias.lower(): p.this for p in projections if isinstance(p, exp.Alias)}
    keys = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit() \
                and 0 < int(key.this) <= len(projections):
            key = projections[int(key.this) - 1]
            key = key.this if isinstance(key, exp.Alias) else key
        elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
            key = aliases[key.name.lower()]
        keys.append(key.copy())
    keyed.set("limit", None)
    keyed.set("offset", None)
    keyed.set("expressions", [*keyed.expressions, *(exp.alias_(k, f"sqlcmp_key_{i}") for i, k in enumerate(keys))])
    return keyed, len(keys)


def _sorted(relation: Relation) -> Any:
    return relation.frame.sort(relation.frame.columns, nulls_last=True) if relation.width else relation.frame


def _proof(validation: Validation, index: int, result: ResultComparison,
           schema: Schema, deadline: float) -> str | None:
    """Why the pass needs no search (:data:`PROVEN_BY_STRUCTURE`, :data:`PROVEN_BY_REWRITES`), or None. No proof
    rests on a tree that misses what SQLite reads in the text (:func:`provable`), on operand order where the
    schema names a collation, nor on names folded as SQLite does not fold them (:attr:`Schema.ascii_names`). The
    rewrites that change row order apply where ``result`` (Layer 3's comparison with the expected query
    ``index``) compared the results as bags, and those that reorder result columns where it also aligned columns
    by their values."""
    dialect, config = validation.dialect, validation.request.config
    sides = (validation.actual, validation.expected[index])
    if schema.collates or not schema.ascii_names \
            or not all(side.parsed.ast is not None and provable(side.sql, side.parsed.ast, side.tree(dialect), dialect)
                       for side in sides):
        return None
    # equal canonical texts, not Layer 2's match: its rewrites keep the bag of rows, not always their order
    if sides[0].parsed.normalized_sql == sides[1].parsed.normalized_sql:
        return PROVEN_BY_STRUCTURE
    plain = schema.plain_tables
    trees = [side.tree(dialect) for side in sides]
    # No rewrite adds, drops or renames a table, and the texts a proof compares name every table each query
    # reads: queries that read other tables are not proven, and are not rewritten to find it out (40 of Spider
    # dev's 395 pairs that reach the rewrites).
    if plain is not None and _tables_read(trees[0]) == _tables_read(trees[1]) \
            and proven_equivalent(trees[0], trees[1], dialect, plain, deadline=deadline,
                                  unordered=result.comparison_mode == "order-insensitive",
                                  columns_by_value=Rules.of(result.comparison_mode, config).by_value,
                                  affine=schema.affine_columns):
        return PROVEN_BY_REWRITES
    return None


def _tables_read(tree: exp.Expression) -> list[str]:
    """The names of the tables ``tree`` reads, each as often as it reads it, in lower case (where a proof's texts
    may fold case), sorted."""
    return sorted(table.name.lower() for table in tree.find_all(exp.Table))


def _not_run_reason(validation: Validation, index: int, result: ResultComparison,
                    database: ExecutionAdapter | None) -> str | None:
    config = validation.request.config
    if not result.mode_pass:
        return "the case fails on the evaluated database"
    if config.neighbor_count == 0:
        return "neighbor_count is 0"
    sides = [validation.actual, validation.expected[index]]
    if database is None or any(side.pre_materialized for side in sides):
        return "a result was given rather than executed: there is no database to build neighbors from"
    if database.dialect not in SCRATCH_DIALECTS:
        engine = ENGINE_NAMES.get(database.dialect, database.dialect)
        return (f"no scratch copy on {engine}: neighbors are built in memory in SQLite or DuckDB, and a copy on "
                f"{engine} would have to be created on the server, which the search never does: it never writes to "
                "the evaluated database or its server, and the case's read-only role could not")
    for label, side in (("actual", sides[0]), ("expected", sides[1])):
        if side.parsed.ast is not None and _random(side.parsed.ast):
            return f"the {label} query calls a non-deterministic function: its result is not a function of the data"
    return None


def _random(tree: exp.Expression) -> bool:
    return tree.find(exp.Rand) is not None or any(
        node.name.lower() in _NONDETERMINISTIC_FUNCTIONS for node in tree.find_all(exp.Anonymous))


def _shrink(search: _Search, rows: Rows, found: _Run, number: int) -> dict[str, Any]:
    """Runs of the counterexample's rows removed (whole tables among them) until no single removal keeps the
    difference (1-minimal, at most ``SHRINK_TESTS_PER_ROW`` tests a row: :func:`one_minimal`), then its report,
    which says whether it is 1-minimal. A row the engine rejected on a set that still differs (a child whose
    parent went, a repeated key) changes nothing there and goes with the removal that left it out."""
    best: list[tuple[Rows, _Run]] = [(rows, found)]
    last_kept: list[tuple[str, int]] = []  # the items of the last set that still differed, the engine accepted
    search.tested.clear()  # its keys name rows by their positions in this difference's rows

    def still_fails(items: list[tuple[str, int]]) -> bool | None:
        candidate: Rows = {t: [] for t in rows}
        sources: dict[str, list[tuple[str, int]]] = {t: [] for t in rows}
        for table, position in items:
            candidate[table].append(rows[table][position])
            sources[table].append((table, position))
        try:
            outcome = search.differs(candidate, tuple(items))
        except _Stuck:
            raise
        except _Spent:
            search.cut(f"the counterexample is shrunk only as far as {search.limit} allowed")
            return None
        if outcome is None:
            return False
        run, built = outcome
        best.append((built.accepted, run))
        chosen = {sources[table][at] for table, positions in built.kept.items() for at in positions}
        last_kept[:] = [item for item in items if item in chosen]
        return True

    # one_minimal asks which items of a set count right after that set was found to differ: those ``last_kept``
    # holds (the rows the engine accepted: a row removed may let another in). Its runs remove whole tables as
    # they remove rows: delta debugging over the tables first (Zeller's ddmin) cost Spider dev 264 tests more.
    items = [(t, i) for t in rows for i in range(len(rows[t]))]
    _, minimal = one_minimal(items, still_fails, kept=lambda candidate: list(last_kept),
                             max_tests=SHRINK_TESTS_PER_ROW * max(1, len(items)))
    # The smallest difference that is not chance (checked for the few smallest; the first was checked before:
    # checking the whole neighbor notes what chance does to either query there, which the smallest set may not
    # show).
    ranked = sorted(best, key=lambda pair: sum(len(r) for r in pair[0].values()))  # the last one found first
    for rank, (smallest, run) in enumerate(ranked[:3]):
        try:
            if run is found or not search.by_chance(smallest, run):
                return _counterexample(search, smallest, run, number, minimal=minimal and rank == 0)
        except _Stuck:
            raise
        except _Spent:
            search.cut(f"the counterexample is shrunk only as far as {search.limit} allowed")
            break
    return _counterexample(search, rows, found, number, minimal=False)


def _counterexample(search: _Search, rows: Rows, run: _Run, number: int, *, minimal: bool) -> dict[str, Any]:
    schema, config = search.schema, search.config
    comparison = search.compare(search.validation.expected[search.index], run.expected, run.actual)
    rows = search.stored(rows)
    total = sum(len(r) for r in rows.values())
    kind, where = named_class(PROFILES[number % len(PROFILES)].classes, schema, search.tables, rows, search.found)
    return {
        "seed": config.neighbor_seed,
        "neighbor": number,
        "rows": total,
        "minimal": minimal,
        "tables": {schema.tables[t].name: {"columns": [c.name for c in schema.tables[t].columns],
                                           "rows": [list(r) for r in rows[t]]} for t in search.tables if rows[t]},
        "expected_result": run.expected.to_rows(limit=SHOWN_ROWS),
        "actual_result": run.actual.to_rows(limit=SHOWN_ROWS),
        "comparison_mode": comparison.comparison_mode,
        "severity": severity(comparison, False),
        "class": kind,
        "sentence": _sentence(total, run, comparison, where),
    }


def _sentence(total: int, run: _Run, comparison: ResultComparison, fact: str | None) -> str:
    """The counterexample in one plain sentence: the fact of its class (``fact``: ``Dogs is empty``), both
    results' sizes, both values when each is a single value, and what differs when the sizes are equal (the same
    rows in another order, or how many rows)."""
    actual, expected = run.actual, run.expected
    if fact:
        where = f"on this {total}-row database, where {fact}," if total else f"on a database where {fact},"
    else:
        where = f"on this {total}-row database" if total else "on this empty database"
    if actual.height == expected.height == 1 and actual.width == expected.width == 1:
        return (f"{where} the actual query returns {_value(actual.frame.row(0)[0])}, the expected "
                f"{_value(expected.frame.row(0)[0])}")
    sentence = f"{where} the actual query returns {row_count(actual.height)}, the expected {row_count(expected.height)}"
    if actual.height != expected.height:
        return sentence
    if comparison.comparison_mode == "order-sensitive" and comparison.bag_pass:
        return f"{sentence}: the same rows in another order"
    differing = expected.height - comparison.matched_rows
    if differing == 0:
        return f"{sentence}, which differ under {comparison.comparison_mode} comparison"
    return f"{sentence}, and {differing} of them differ{'s' if differing == 1 else ''}"


def _value(value: Any) -> str:
    """A single result value as a sentence shows it: NULL, a number as it is, a text quoted."""
    if value is None:
        return "NULL"
    return repr(value) if isinstance(value, str) else str(value)


def _outcome(ran: bool, reason: str | None, started: float) -> dict[str, Any]:
    return {"neighbor_search_ran": ran, "reason": reason, "neighbors_tried": 0, "neighbors_nonempty": 0,
            "rejected_rows": 0, "tables": [], "counterexample_found": False, "counterexample": None,
            "nondeterminism": [], "malformed_foreign_keys": [], "query_ms": 0.0, "budget_cuts": [],
            "query_failures": [],
            "robust_by_structure": False,
            "elapsed_ms": round((time.monotonic() - started) * 1000, 3)}


