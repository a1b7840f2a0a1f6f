"""Equivalence beyond the canonical form: rewrites that keep a query's meaning on its database, applied to both
queries of a pass before their canonical texts are compared again.

The neighbor search (:mod:`~sqlcmp_dagster.engine.neighbors`) asks whether a pass is an accident of the rows. When
no database with the case's schema can tell the two queries apart, the answer is known without building one, and
the search is skipped (``robust_by_structure``). Equal canonical trees prove it; so do trees that become equal
under the rewrites here, each of which turns a query into one that returns the same result on every database
with this schema, in the same order, so that the proof stays sound for every comparison mode:

- :func:`default_ascending`: ``ORDER BY x ASC`` is ``ORDER BY x`` (ascending is the default, with the same NULL
  placement);
- :func:`quoted_strings` (SQLite): a double-quoted name that resolves to no column, alias or row id is the string
  SQLite reads it as (``WHERE name = "Aberdeen"``, the commonest spelling in Spider's gold queries). Both queries
  ran on this schema, and every neighbor has the same schema, so the name resolves the same way on all of them;
- :func:`in_lists` (SQLite): ``x IN (1, 'a')`` is ``x = 1 OR x = 'a'`` for a column ``x`` when every listed
  value is a literal (SQLite's own definition: the listed values carry no affinity, as literals never do);
- :func:`numeric_text` (SQLite): ``year = '2014'`` is ``year = 2014`` for a column with an affinity, of a table
  the column's SELECT can see, in a query that joins without USING or NATURAL (SQLite turns the text into the
  number before it compares with a numeric column, and the number into the text with a text column).

Two more rewrites keep the rows but not their order, and are applied only where the comparison ignores row order
(``order-insensitive``, which a case's ``auto`` mode resolves to when the expected query has no top-level ORDER
BY) and nothing in either query depends on the order rows are read in (:func:`order_free`):

- :func:`inner_joins`: ``FROM a JOIN b ON c WHERE w`` is ``FROM a, b WHERE c AND w``, its tables in one order
  (an inner join's rows are those of the cross product that meet every condition, whichever table comes first),
  and an unqualified column of exactly one of the tables is qualified with it;
- :func:`set_operands`: ``A INTERSECT B`` is ``B INTERSECT A`` (and ``UNION`` alike) where both project the
  same columns, so that either names the result's columns.

Where, besides, the comparison aligns columns by the values they hold (neither by position nor by name), the
result columns of a SQLite SELECT are compared in one order (:func:`permutable_projection`): ``SELECT b, a`` is
``SELECT a, b`` but for the order of its result columns (no plan depends on it: the same rows are read in the same
order; windows and a second MIN or MAX, which do depend on it, are not reordered), so it returns the same rows
with their columns swapped, and the comparison tries every order of up to
:data:`MAX_PERMUTED_COLUMNS` columns that it cannot tell apart by their values (``comparison.budgets.MAX_PERMUTATIONS``
candidates), so it finds the one that pairs every row on any database whose results its cell budget covers (the
neighbors' always are; past that budget it says so in a warning).

The rewrites are applied only to queries that read base tables alone (:func:`reads_base_tables_only`: no
subquery, CTE, VALUES or table-valued function as a source, no view, no table with generated or hidden columns,
no two tables whose names fold to one key here). There the names a query can resolve are the columns of the
database's tables, its own aliases and the row id, all known here, and no name is derived from an expression's
text (SQLite names an unaliased column of a derived table by its text, which a rewrite would change). Queries
that chain comparisons without parentheses (``x = a IN (1)``, ``'p' = NOT b``) are not proven: sqlglot does not
read their precedence as SQLite does, so their canonical text can equal another query's. An IN list is rewritten
only where the IN is a whole condition (under WHERE, HAVING, AND, OR or parentheses, through any NOT). Every
rewrite is bounded (:data:`MAX_COPIED_NODES`) and looks at the deadline; a query beyond either, or one sqlglot
cannot rewrite, is not proven (the search decides). Helper reviews reproduced wrong proofs against earlier
versions of these limits (four so far); tests/test_neighbors.py keeps each reproduction.

Nothing here changes ``normalized_sql`` or the structural scores: the rewrites serve only this proof.

A proof goes in three stages, one module each: :mod:`.admission` (whether a query's tree may be compared at all,
and whether the order-changing rewrites apply to it), :mod:`.rules` (the rewrites) and :mod:`.proof` (both
queries rewritten on copies and their texts compared). Callers import from this package, not from its modules.
"""

from sqlcmp_dagster.engine.equivalence.admission import (
    MAX_PERMUTED_COLUMNS,
    order_free,
    permutable_projection,
    provable,
    reads_base_tables_only,
)
from sqlcmp_dagster.engine.equivalence.proof import proven_equivalent
from sqlcmp_dagster.engine.equivalence.rules import (
    MAX_COPIED_NODES,
    default_ascending,
    in_lists,
    inner_joins,
    numeric_text,
    quoted_strings,
    set_operands,
)

__all__ = ["MAX_COPIED_NODES", "MAX_PERMUTED_COLUMNS", "default_ascending", "in_lists", "inner_joins",
           "numeric_text", "order_free", "permutable_projection", "provable", "proven_equivalent", "quoted_strings",
           "reads_base_tables_only", "set_operands"]
