"""Layer 1's data: a case's queries parsed and executed (:class:`Side`, :class:`Validation`), the comparison mode
they resolve to, and the case's time budget. Every layer reads these; they import no layer, so the layers and
the orchestrator (:mod:`sqlcmp_dagster.engine.pipeline`) import them from here, never from each other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import cast

from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlcmp_dagster.engine.context import current, keep_recent, recall
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, ResolvedMode
from sqlcmp_dagster.engine.parsing import ParseOutcome, RewriteCut, canonical_text, canonical_tree, clocked_rewrites
from sqlcmp_dagster.engine.relation import Execution, Relation
from sqlcmp_dagster.engine.rewrites import Catalog, equivalence_form
from sqlcmp_dagster.engine.structure import QueryShape, StructuralComparison, compare_structure, query_shape

#: Queries whose Layer 2 view a process remembers (:meth:`Side.structural`): a few KB each (0.8 KB pickled on
#: Spider dev), about 12 MB at most, more than the distinct queries of a Spider- or BIRD-sized suite.
STRUCTURES_KEPT = 4096


@dataclass
class Side:
    """Layer 1 for one query: parse outcome, execution outcome and the materialized relation.

    The canonical tree and its shape are computed once per side and shared by layers 2-4, which only read them.
    """

    sql: str
    parsed: ParseOutcome
    execution: Execution | None = None
    pre_materialized: bool = False
    _canonical: exp.Expression | None = field(default=None, repr=False)
    _shape: QueryShape | None = field(default=None, repr=False)
    _structural: tuple[str, QueryShape] | None = field(default=None, repr=False)

    @property
    def relation(self) -> Relation | None:
        return self.execution.relation if self.execution is not None else None

    @property
    def executed_ok(self) -> bool:
        return self.execution is not None and self.execution.success

    def tree(self, dialect: str) -> exp.Expression:
        """The canonical AST: the parser's own, or rebuilt once for a side restored from a stored record."""
        if self._canonical is None:
            assert self.parsed.ast is not None, "only a parsed query has a tree"
            self._canonical = self.parsed.tree if self.parsed.tree is not None \
                else canonical_tree(self.parsed.ast, dialect)
        return self._canonical

    def shape(self, dialect: str) -> QueryShape:
        if self._shape is None:
            self._shape = query_shape(self.tree(dialect))
        return self._shape

    def structural(self, dialect: str, catalog: Catalog | None) -> tuple[str, QueryShape]:
        """Layer 2's view of the query: the text and shape of its equivalence form on the case's schema (raises
        what :func:`~sqlcmp_dagster.engine.rewrites.equivalence_form` raises).

        The view is a function of the query's canonical text (the tree behind it), the dialect and the catalog,
        so it is remembered by them for the next case (:data:`STRUCTURES_KEPT`, least recently used out first):
        a suite asks most questions of several models, or twice (Spider dev: 1,034 cases, 563 expected
        queries), a model often answers with the expected query but for spacing and letter case (361 of
        SuperSQL's 1,034), and the form costs 0.5-1 ms a query. Equal canonical texts are the same query to
        Layer 2 already (``normalized_sql_match``), and to the neighbor search's proof. The catalog is told by
        identity: one object per database content (the cached schema's), held by the entry so that its id is
        not reused while the entry lives. A form the clock cut is not remembered (the exception passes
        through)."""
        if self._structural is None:
            text = ("canonical", self.parsed.normalized_sql) if self.parsed.normalized_sql is not None \
                else ("text", self.sql)
            key, kept = (id(catalog), dialect, text), current().structures
            entry = recall(kept, key)
            if entry is not None and entry[0] is catalog:
                self._structural = cast(tuple[str, QueryShape], entry[1])
                return self._structural
            form = equivalence_form(self.tree(dialect), dialect, catalog)  # a copy: printed last, as owned
            shape = query_shape(form)
            self._structural = canonical_text(form, dialect, owned=True), shape
            keep_recent(kept, key, (catalog, self._structural), STRUCTURES_KEPT)
        return self._structural


@dataclass
class Validation:
    """Layer 1 for a whole case: the actual side and every expected alternative."""

    request: CompareRequest
    dialect: str
    database: str | None
    actual: Side
    expected: list[Side]
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    #: Why the database a side needed could not be opened (None when it opened, or no side needed it): such a
    #: case is invalid whichever side needed it, since nothing it says is about the query under test.
    database_error: str | None = None
    #: The database's tables and columns (Layer 2 resolves names against them), None where it has none.
    catalog: Catalog | None = None
    #: What the Spider test-suite metric read beside the database (``published_metrics``), for the rule that gives
    #: a report to a later case with the same inputs (``pipeline``): the files of the folder it listed (None where
    #: it listed none: not a SQLite file, or no report metrics), and whether a run on one of them may not happen
    #: again (it read the clock or chance, failed for a reason other than its text, or found a file gone).
    suite_listing: list[str] | None = None
    suite_undecided: bool = False

    def runnable(self) -> list[int]:
        """Indexes of the expected alternatives that parsed and executed: the ones results can compare with."""
        return [i for i, side in enumerate(self.expected) if side.executed_ok and side.parsed.ast is not None]

    def structure_against(self, index: int) -> StructuralComparison:
        """Layer 2: the actual query against expected alternative ``index`` (both must have parsed)."""
        sides = (self.expected[index], self.actual)
        try:  # within the case's budget: a pathological query is compared in its canonical form instead
            with clocked_rewrites(time.monotonic() + self.request.config.case_budget_ms() / 1000):
                (expected_text, expected_shape), (actual_text, actual_shape) = (
                    side.structural(self.dialect, self.catalog) for side in sides)
        except (RewriteCut, SqlglotError, RecursionError):
            (expected_text, expected_shape), (actual_text, actual_shape) = (
                (side.parsed.normalized_sql or "", side.shape(self.dialect)) for side in sides)
        return compare_structure(expected_text, actual_text, expected_shape, actual_shape)


def resolve_mode(config: EvalConfig, expected_shape: QueryShape | None) -> ResolvedMode:
    """``auto`` is order-sensitive when the expected query has a top-level ORDER BY, else order-insensitive."""
    if config.comparison_mode != "auto":
        return config.comparison_mode
    return "order-sensitive" if expected_shape is not None and expected_shape.has_top_level_order \
        else "order-insensitive"


def remaining_timeout(validation: Validation, more_ms: float = 0.0) -> int | None:
    """The timeout of the case's next query: ``query_timeout_ms``, or less when the case's budget has less left
    (:func:`case_time_left`); None when nothing is left."""
    left = case_time_left(validation, more_ms)
    return None if left is None else min(validation.request.config.query_timeout_ms, left)


def case_time_left(validation: Validation, more_ms: float = 0.0) -> int | None:
    """What is left of the case's budget (``case_timeout_ms``) after parsing and the queries run so far
    (``timings`` plus ``more_ms`` not yet recorded there), an expected query served from the cache counted with
    the time it was measured with; None when nothing is left. Counting recorded time rather than a clock deadline
    keeps the budget right when Dagster runs the layers of a case in different steps, and the same with a warm
    cache as without one."""
    config, timings = validation.request.config, validation.timings
    spent = sum(timings.get(name, 0.0) for name in ("parse_ms", "execution_ms", "cached_execution_ms")) + more_ms
    left = config.case_budget_ms() - spent
    return None if left < 1 else int(left)
