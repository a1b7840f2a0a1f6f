from __future__ import annotations

import pytest

from sqlcmp_dagster.engine.parsing import canonical_tree, parse
from sqlcmp_dagster.engine.structure import CLAUSE_WEIGHTS, StructuralComparison, compare_structure, query_shape


def structure(expected: str, actual: str) -> StructuralComparison:
    e, a = parse(expected, "sqlite"), parse(actual, "sqlite")
    assert e.ast is not None and a.ast is not None
    return compare_structure(e.normalized_sql or "", a.normalized_sql or "",
                             query_shape(canonical_tree(e.ast, "sqlite")), query_shape(canonical_tree(a.ast, "sqlite")))


@pytest.mark.parametrize(
    ("expected", "actual", "clause"),
    [
        ("SELECT a FROM t", "SELECT a, b FROM t", "projection"),
        ("SELECT a FROM t WHERE x = 1", "SELECT a FROM t WHERE x = 2", "selection_predicate"),
        ("SELECT a FROM t GROUP BY a HAVING count(*) > 1", "SELECT a FROM t GROUP BY a HAVING count(*) > 2",
         "post_aggregation_predicate"),
        ("SELECT t.a FROM t JOIN u ON t.id = u.id", "SELECT t.a FROM t LEFT JOIN u ON t.id = u.id", "join"),
        ("SELECT t.a FROM t JOIN u ON t.id = u.id", "SELECT t.a FROM t JOIN u ON t.id = u.tid", "join"),
        ("SELECT t.a FROM t JOIN u ON t.id = u.id", "SELECT t.a FROM t JOIN v ON t.id = v.id", "join"),
        ("SELECT a, count(*) FROM t GROUP BY a", "SELECT a, count(*) FROM t GROUP BY a, b", "aggregation_grain"),
        ("SELECT a FROM t ORDER BY a", "SELECT a FROM t ORDER BY a DESC", "ordering"),
        ("SELECT a FROM t ORDER BY a, b", "SELECT a FROM t ORDER BY b, a", "ordering"),
        ("SELECT a FROM t LIMIT 3", "SELECT a FROM t LIMIT 5", "top_k"),
        ("SELECT a FROM t LIMIT 3 OFFSET 1", "SELECT a FROM t LIMIT 3", "top_k"),
        ("SELECT DISTINCT a FROM t", "SELECT a FROM t", "distinct"),
        ("SELECT rank() OVER (ORDER BY a) FROM t", "SELECT rank() OVER (ORDER BY b) FROM t", "window"),
        ("SELECT a FROM t UNION SELECT a FROM u", "SELECT a FROM t UNION ALL SELECT a FROM u", "set_operators"),
        ("SELECT a FROM t INTERSECT SELECT a FROM u", "SELECT a FROM t EXCEPT SELECT a FROM u", "set_operators"),
    ],
)
def test_each_clause_difference_is_seen_in_its_own_clause(expected: str, actual: str, clause: str) -> None:
    result = structure(expected, actual)
    assert not result.normalized_sql_match
    assert not result.clause_match[clause]["match"]
    assert 0 < result.clause_weighted_distance <= 1


def test_identical_queries_have_distance_zero_and_every_clause_matching() -> None:
    sql = ("SELECT DISTINCT t.a, rank() OVER (PARTITION BY t.b ORDER BY t.c) FROM t JOIN u ON t.id = u.id "
           "WHERE t.x > 1 GROUP BY t.a, t.b, t.c HAVING count(*) > 1 ORDER BY t.a LIMIT 5 OFFSET 2")
    result = structure(sql, sql)
    assert result.normalized_sql_match and result.clause_weighted_distance == 0.0
    assert all(detail["match"] for detail in result.clause_match.values())


def test_weights_sum_to_one_and_distance_is_the_weighted_sum() -> None:
    assert sum(CLAUSE_WEIGHTS.values()) == pytest.approx(1.0)
    result = structure("SELECT a FROM t WHERE x = 1", "SELECT a FROM t WHERE x = 2")
    assert result.clause_weighted_distance == pytest.approx(CLAUSE_WEIGHTS["selection_predicate"])


def test_order_keys_map_to_projection_positions() -> None:
    shape = query_shape(canonical_tree(parse("SELECT a, count(*) AS c FROM t GROUP BY a ORDER BY c DESC, 1",
                                             "sqlite").ast, "sqlite"))  # type: ignore[arg-type]
    assert shape.order_keys == [1, 0] and shape.has_top_level_order
    nested = query_shape(canonical_tree(parse("SELECT * FROM (SELECT a FROM t ORDER BY a)", "sqlite").ast,
                                        "sqlite"))  # type: ignore[arg-type]
    assert not nested.has_top_level_order
    hidden = query_shape(canonical_tree(parse("SELECT a FROM t ORDER BY b", "sqlite").ast, "sqlite"))  # type: ignore[arg-type]
    assert hidden.order_keys is None


def test_a_shape_leaves_the_tree_it_reads_as_it_was() -> None:
    """The canonical tree is the case's, read by every layer: printing its fragments must not change it.
    sqlglot's default dialect rewrites a SQLite division into one by ``NULLIF(b, 0)`` as it prints it, so a
    fragment printed in place wrapped the divisor once more at each shape (a review's finding)."""
    tree = parse("SELECT a / b FROM t WHERE x > a / b GROUP BY a / b", "sqlite").tree
    assert tree is not None
    before = tree.copy()
    assert query_shape(tree) == query_shape(tree) and tree == before


def test_layer_2_reads_each_query_by_the_catalog_of_its_own_case() -> None:
    """A query's Layer 2 view is remembered for the next case with the same text (``Side.structural``), and the
    catalog decides it: an unqualified column belongs to whichever joined table has it on the case's database."""
    from sqlcmp_dagster.engine.models import CompareRequest
    from sqlcmp_dagster.engine.validation import Side, Validation

    actual, expected = "SELECT name FROM a JOIN b ON a.id = b.id", "SELECT a.name FROM a JOIN b ON a.id = b.id"

    def structure_on(catalog: dict[str, list[str]]) -> StructuralComparison:
        request = CompareRequest(user_query="q", expected_sql=[expected], actual_sql=actual)
        validation = Validation(request, "sqlite", None, Side(actual, parse(actual, "sqlite")),
                                [Side(expected, parse(expected, "sqlite"))], catalog=catalog)
        return validation.structure_against(0)

    name_in_a, name_in_b = {"a": ["id", "name"], "b": ["id"]}, {"a": ["id"], "b": ["id", "name"]}
    assert structure_on(name_in_a).normalized_sql_match
    assert not structure_on(name_in_b).normalized_sql_match
    assert structure_on(name_in_a).normalized_sql_match
    assert structure_on(dict(name_in_a)).normalized_sql_match  # the same tables read again: another object
