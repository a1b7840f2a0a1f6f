"""The last stage of a proof: both queries admitted (:mod:`.admission`), rewritten on copies (:mod:`.rules`)
and their texts compared."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlcmp_dagster.engine.equivalence.admission import (
    chains_comparisons,
    order_free,
    permutable_projection,
    reads_base_tables_only,
)
from sqlcmp_dagster.engine.equivalence.rules import (
    NotProven,
    default_ascending,
    in_lists,
    inner_joins,
    numeric_text,
    quoted_strings,
    set_operands,
)
from sqlcmp_dagster.engine.parsing import (
    RewriteCut,
    clocked_rewrites,
    sort_commutative,
    sql_text,
)


def proven_equivalent(actual: exp.Expression, expected: exp.Expression, dialect: str,
                      tables: Mapping[str, frozenset[str]], *, deadline: float, unordered: bool = False,
                      columns_by_value: bool = False, affine: Mapping[str, frozenset[str]] | None = None) -> bool:
    """Whether the canonical trees ``actual`` and ``expected`` (read only; the rewrites work on copies) have
    equal text once rewritten, on a database whose base tables are ``tables`` (lower-case name -> lower-case
    column names, :attr:`~sqlcmp_dagster.engine.neighbors.schema.Schema.plain_tables`). Both queries must read
    only those tables (:func:`reads_base_tables_only`) and chain no comparisons (:func:`chains_comparisons`).
    The rewrites and the re-ordering of operands look at ``deadline`` (a ``time.monotonic()`` instant) as they
    go: past it, the answer is False (the search decides instead). When no rewrite changes either tree the
    answer is False without printing them: equal canonical trees are a proof of their own, the caller's. With
    ``unordered`` (the results are compared as bags), :func:`inner_joins` and :func:`set_operands` are applied
    too where both queries are :func:`order_free`; on SQLite, with ``unordered`` and ``columns_by_value`` (the
    comparison aligns columns by their values), the result columns are compared in one order where both queries'
    projections are :func:`permutable_projection` (DuckDB reads ``ORDER BY ALL`` and ``#1`` by position). With
    ``affine`` (the columns SQLite gives an affinity,
    :attr:`~sqlcmp_dagster.engine.neighbors.schema.Schema.affine_columns`), :func:`numeric_text` is applied too.

    >>> import sqlglot
    >>> from sqlcmp_dagster.engine.parsing import canonical_tree
    >>> def tree(sql): return canonical_tree(sqlglot.parse_one(sql, read="sqlite"), "sqlite")
    >>> t = {"t": frozenset({"a", "b"})}
    >>> proven_equivalent(tree('SELECT a FROM t WHERE "x" = b ORDER BY a ASC'),
    ...                   tree("SELECT a FROM t WHERE b = 'x' ORDER BY a"), "sqlite", t, deadline=9e99)
    True
    >>> proven_equivalent(tree('SELECT a FROM t WHERE "b" = b'), tree("SELECT a FROM t WHERE b = 'b'"), "sqlite",
    ...                   t, deadline=9e99)
    False
    """
    if not all(reads_base_tables_only(tree, tables) and not chains_comparisons(tree) for tree in (actual, expected)):
        return False
    edits: list[str] = []
    try:
        with clocked_rewrites(deadline):
            joins = unordered and all(order_free(tree) for tree in (actual, expected))
            rewritten = [_rewritten(tree.copy(), dialect, tables, edits, joins=joins, affine=affine)
                         for tree in (actual, expected)]
            columns_sorted = dialect == "sqlite" and unordered and columns_by_value \
                and all(map(permutable_projection, rewritten))
            if not edits and not columns_sorted:  # the texts would be the canonical texts: nothing is proven
                return False
            texts = [proof_text(tree, dialect, columns_sorted=columns_sorted) for tree in rewritten]
    except (RewriteCut, NotProven, SqlglotError, RecursionError):
        return False
    return texts[0] == texts[1]


def proof_text(tree: exp.Expression, dialect: str, *, columns_sorted: bool = False) -> str:
    """The text a proof compares: ``tree`` (the proof's own copy) with its commutative operands in order (and,
    with ``columns_sorted``, its result columns in the order of their text), printed as the canonical text is but
    with keywords as sqlglot prints them (upper case on both sides: the texts are compared, never shown, and
    texts equal before lower-casing are equal after it)."""
    tree = sort_commutative(tree)
    if columns_sorted:
        tree.set("expressions", sorted(tree.expressions, key=lambda e: sql_text(e, dialect, lower_functions=True)))
    return sql_text(tree, dialect, lower_functions=True)


def _rewritten(tree: exp.Expression, dialect: str, tables: Mapping[str, frozenset[str]], edits: list[str], *,
               joins: bool, affine: Mapping[str, frozenset[str]] | None = None) -> exp.Expression:
    """``tree`` with every rewrite of ``dialect`` applied (:func:`inner_joins` and :func:`set_operands` with
    ``joins``, :func:`numeric_text` with ``affine``), in place; each change is named in ``edits``."""
    tree = default_ascending(tree, edits)
    if dialect == "sqlite":
        tree = in_lists(quoted_strings(tree, frozenset().union(*tables.values()), edits), edits)
        if affine is not None:
            tree = numeric_text(tree, tables, affine, edits)
    return set_operands(inner_joins(tree, tables, edits), edits) if joins else tree
