"""Layer 2's equivalence form: the canonical tree of a query rewritten, knowing its database's schema, so that
queries that mean the same thing on every database of that schema print alike.

The canonical form (:func:`~sqlcmp_dagster.engine.parsing.canonical_tree`) only undoes formatting. The rules
here undo spellings a model writes every day: each is one small function, in the manner of sqlglot's optimizer
rules, with an example, and each turns a query into one whose permitted results are the same on the case's
dialect (the same bag of rows; with an ORDER BY, the same rows in an order the original also permits), under
SQL's three-valued logic. What is not provably so stays apart (LEFT vs INNER joins, UNION vs UNION ALL, ``>=``
vs ``>``, LIKE vs ``=``, EXCEPT vs NOT IN, ...). tests/test_rewrites.py runs every rule's original and rewritten
query on random databases of one schema (SQLite, DuckDB and PostgreSQL) and requires the same bag.

The schema is a :data:`Catalog` (lower-case table name -> lower-case column names), read from the case's
database by the executions' schema reader; without one (a PostgreSQL case, a result given instead of a database)
the rules that need names resolved (:func:`qualify_columns`, :func:`double_quoted_strings`) are skipped, and a
quoted name on SQLite stays a name.

The tree is never executed by the pipeline (the fix search transplants canonical trees, not these), but every
rule keeps it executable, which is what lets the property test run it.

The rules live by family, one module each, as sqlglot's optimizer keeps them: :mod:`.conditions` (comparisons,
NOT, AND/OR chains, IN lists), :mod:`.clauses` (OFFSET, ORDER BY, GROUP BY, CTEs, join order) and :mod:`.names`
(the rules that need the schema, and identifier case); :mod:`.nodes` holds what they share. The order they run
in is :func:`equivalence_form`'s, here. Callers import from this package, not from its modules.
"""

from __future__ import annotations

import functools
from typing import cast

from sqlglot import exp

from sqlcmp_dagster.engine.equivalence import default_ascending
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.neighbors.schema import read_schema
from sqlcmp_dagster.engine.parsing import sort_commutative, tick
from sqlcmp_dagster.engine.rewrites.clauses import (
    distinct_for_group,
    inline_single_ctes,
    inner_join_order,
    order_by_outputs,
    zero_offset,
)
from sqlcmp_dagster.engine.rewrites.conditions import (
    between_bounds,
    flatten_connectives,
    gather_in_lists,
    orient_comparisons,
    push_negations,
    scalar_subquery_in,
)
from sqlcmp_dagster.engine.rewrites.names import (
    Catalog,
    double_quoted_strings,
    identifier_case,
    qualify_columns,
)

__all__ = ["Catalog", "equivalence_form", "read_catalog"]


def read_catalog(database: ExecutionAdapter, sample_rows: int, timeout_ms: int) -> dict[str, list[str]] | None:
    """The :data:`Catalog` of ``database``, from the schema the neighbor search reads (one read per database
    content, cached with it: ``sample_rows`` is the search's, so that both share one entry): its tables whose
    columns are all declared (a virtual table's hidden columns are not), so that a name no table of the catalog
    has is known to name no column. None on an engine whose schema is not read (PostgreSQL), where it cannot be
    read, or where two tables' names fold to one."""
    if database.dialect not in ("sqlite", "duckdb"):
        return None
    schema = read_schema(database, sample_rows, timeout_ms)
    return None if isinstance(schema, str) else schema.catalog


def equivalence_form(tree: exp.Expr, dialect: str, catalog: Catalog | None = None) -> exp.Expression:
    """A copy of the canonical ``tree`` with every rule applied, in an order where each rule sees the shapes the
    rules before it leave (NOTs pushed before ORs of equalities are gathered, parentheses dropped before chains
    are sorted).

    >>> import sqlglot
    >>> from sqlcmp_dagster.engine.parsing import canonical_tree
    >>> def form(sql): return equivalence_form(canonical_tree(sqlglot.parse_one(sql, read="sqlite"), "sqlite"),
    ...                                        "sqlite", {"t": ["a", "b"]}).sql("sqlite")
    >>> form('SELECT a FROM t WHERE NOT (b <= 3 OR "x" <> a) ORDER BY a ASC LIMIT 2 OFFSET 0')
    "SELECT a FROM t WHERE a = 'x' AND b > 3 ORDER BY a LIMIT 2"
    >>> form("SELECT a FROM t WHERE 3 < b AND a = 'x' ORDER BY 1")
    "SELECT a FROM t WHERE a = 'x' AND b > 3 ORDER BY a"
    """
    tree = tree.copy()
    if catalog is not None:
        tree = qualify_columns(tree, catalog)
        if dialect == "sqlite":
            tree = double_quoted_strings(tree, catalog)
    orient = functools.partial(orient_comparisons, columns_collate=dialect == "sqlite")
    for rule in (inline_single_ctes, zero_offset, order_by_outputs, default_ascending, between_bounds,
                 scalar_subquery_in, orient, push_negations, flatten_connectives, gather_in_lists, orient,
                 distinct_for_group, inner_join_order, flatten_connectives):
        tick(force=True)
        tree = rule(tree)
    tree = identifier_case(tree, dialect)
    # each rule replaces a node by one of sqlglot's concrete nodes (Expr is their abstract base): an Expression
    return sort_commutative(cast(exp.Expression, tree))
