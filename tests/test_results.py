from __future__ import annotations

import itertools
import math
import random
from typing import Any

import polars as pl
import pytest

from sqlcmp_dagster.engine.equivalence import MAX_PERMUTED_COLUMNS
from sqlcmp_dagster.engine.relation import Relation, relation_from_rows
from sqlcmp_dagster.engine.models import EvalConfig, ResolvedMode
from sqlcmp_dagster.engine.comparison import ResultComparison, budgets, compare_results, frames, rows


def cmp(expected: tuple[list[str], list[tuple[Any, ...]]], actual: tuple[list[str], list[tuple[Any, ...]]],
        mode: ResolvedMode = "order-insensitive", order_keys: list[int] | None = None,
        **config: Any) -> ResultComparison:
    return compare_results(relation_from_rows(*expected), relation_from_rows(*actual), mode=mode,
                           config=EvalConfig(**config), order_keys=order_keys)


AB = ["a", "b"]


def test_bag_semantics_counts_duplicates() -> None:
    result = cmp((AB, [(1, "x"), (1, "x"), (2, "y")]), (AB, [(1, "x"), (2, "y"), (2, "y")]))
    assert not result.mode_pass
    assert result.bag_matched_rows == 2
    assert result.missing_rows == [[1, "x"]] and result.extra_rows == [[2, "y"]]
    assert result.row_overlap == pytest.approx(2 * 2 / 6)


def test_rows_stay_intact_when_columns_are_matched() -> None:
    """Sorting values within a row or matching columns independently would call these equal; they are not."""
    result = cmp((AB, [(1, 2), (3, 4)]), (AB, [(1, 4), (3, 2)]))
    assert not result.mode_pass


def test_one_consistent_column_permutation_is_found() -> None:
    result = cmp((["a", "b", "c"], [(1, "x", 0.5), (2, "y", 1.5)]), (["c", "a", "b"], [(1.5, 2, "y"), (0.5, 1, "x")]))
    assert result.mode_pass
    assert result.schema_match["column_mapping"] == {"a": "a", "b": "b", "c": "c"}
    assert not result.schema_match["order_match"]


def test_columns_with_equal_value_sets_are_resolved_by_whole_rows() -> None:
    # Both columns hold {1, 2}: only the swapped mapping makes the rows equal.
    result = cmp((AB, [(1, 2), (2, 1), (1, 1)]), (AB, [(2, 1), (1, 2), (1, 1)]))
    assert result.mode_pass
    swapped = cmp((AB, [(1, 2), (2, 2)]), (AB, [(2, 1), (2, 2)]))
    assert swapped.mode_pass and swapped.schema_match["column_mapping"] == {"a": "b", "b": "a"}


def test_require_column_order_and_names() -> None:
    expected, actual = (AB, [(1, "x")]), (["b", "a"], [("x", 1)])
    assert cmp(expected, actual).mode_pass
    assert not cmp(expected, actual, require_column_order_match=True).mode_pass
    assert cmp(expected, actual, require_column_name_match=True).mode_pass
    assert not cmp(expected, (["p", "q"], [(1, "x")]), require_column_name_match=True).mode_pass


def test_numeric_tolerance_is_abs_plus_rel_and_does_not_depend_on_sorting() -> None:
    expected = (["v"], [(0.1 + 0.2,), (1e12,), (-5.0,)])
    actual = (["v"], [(1e12 + 1e-4,), (-5.0 + 1e-12,), (0.3,)])
    assert cmp(expected, actual).mode_pass
    assert not cmp(expected, actual, numeric_rel_tolerance=0.0, numeric_abs_tolerance=0.0).mode_pass
    off = cmp((["v"], [(100.0,)]), (["v"], [(100.5,)]), numeric_abs_tolerance=0.1, numeric_rel_tolerance=0.003)
    assert not off.mode_pass
    ok = cmp((["v"], [(100.0,)]), (["v"], [(100.5,)]), numeric_abs_tolerance=0.1, numeric_rel_tolerance=0.005)
    assert ok.mode_pass and ok.numeric_tolerance_match["within_tolerance_cells"] == 1


def test_tolerance_pairs_rows_with_several_near_equal_numbers() -> None:
    # Numeric order of the first column differs between the sides; the greedy pass still pairs them.
    expected = (["x", "y"], [(1.0, 5.0), (1.0 + 1e-12, 6.0)])
    actual = (["x", "y"], [(1.0 + 2e-12, 5.0), (1.0, 6.0)])
    assert cmp(expected, actual, numeric_abs_tolerance=1e-9).mode_pass


def test_int_float_and_decimal_compare_numerically() -> None:
    from decimal import Decimal

    assert cmp((["v"], [(1,), (2,)]), (["v"], [(2.0,), (Decimal("1.000"),)])).mode_pass


def test_exact_mode_uses_zero_tolerance_and_positions() -> None:
    expected, actual = (["v"], [(0.1 + 0.2,)]), (["v"], [(0.3,)])
    assert not cmp(expected, actual, mode="exact").mode_pass
    assert cmp(expected, actual, mode="exact", numeric_abs_tolerance=1e-9).mode_pass
    assert not cmp((["v"], [(1,), (2,)]), (["v"], [(2,), (1,)]), mode="exact").mode_pass


def test_null_equals_null_and_nothing_else() -> None:
    assert cmp((["v"], [(None,), (1,)]), (["v"], [(1,), (None,)])).mode_pass
    for other in (0, "", "NULL", 0.0):
        result = cmp((["v"], [(None,)]), (["v"], [(other,)]))
        assert not result.mode_pass and not result.null_handling_match


def test_sql_semantic_nulls_match_nothing() -> None:
    assert not cmp((["v"], [(None,)]), (["v"], [(None,)]), null_equality_mode="sql_semantic").mode_pass


def test_both_empty_is_a_vacuous_pass_with_a_warning() -> None:
    result = cmp((["v"], []), (["v"], []))
    assert result.mode_pass and result.vacuous
    assert any("vacuous" in w for w in result.warnings)


def test_order_sensitive_accepts_permutations_within_ties_only() -> None:
    expected = (["k", "v"], [(1, "a"), (1, "b"), (2, "c")])
    assert cmp(expected, (["k", "v"], [(1, "b"), (1, "a"), (2, "c")]), mode="order-sensitive", order_keys=[0]).mode_pass
    wrong = cmp(expected, (["k", "v"], [(2, "c"), (1, "a"), (1, "b")]), mode="order-sensitive", order_keys=[0])
    assert not wrong.mode_pass and wrong.bag_pass
    strict = cmp(expected, (["k", "v"], [(1, "b"), (1, "a"), (2, "c")]), mode="order-sensitive", order_keys=None)
    assert not strict.mode_pass


def test_per_column_counts_locate_the_wrong_attribute() -> None:
    expected = (["id", "name", "total"], [(i, f"n{i}", float(i)) for i in range(10)])
    actual = (["id", "name", "total"], [(i, f"n{i}", float(i) + (1.0 if i < 3 else 0.0)) for i in range(10)])
    result = cmp(expected, actual)
    by_name = {c.name: c for c in result.columns}
    assert (by_name["id"].mismatched, by_name["name"].mismatched, by_name["total"].mismatched) == (0, 0, 3)
    assert by_name["total"].compared == 10 and by_name["total"].max_abs_diff == pytest.approx(1.0)
    assert result.cell_overlap == pytest.approx(27 / 30)


def test_extra_and_missing_columns_are_reported() -> None:
    extra = cmp((["a"], [(1,), (2,)]), (["a", "b"], [(1, 9), (2, 9)]))
    assert not extra.mode_pass and extra.schema_match["extra_attributes"] == ["b"] and extra.row_overlap == 1.0
    missing = cmp((["a", "b"], [(1, 9), (2, 9)]), (["a"], [(1,), (2,)]))
    assert not missing.mode_pass and missing.schema_match["missing_attributes"] == ["b"]


def test_cardinality_delta_and_ratio() -> None:
    result = cmp((["a"], [(1,), (2,)]), (["a"], [(1,), (2,), (3,), (4,), (5,), (6,)]))
    assert result.cardinality_match == {"expected_rows": 2, "actual_rows": 6, "delta": 4, "ratio": 3.0,
                                        "match": False}


def test_integers_compare_exactly_at_any_size() -> None:
    assert not cmp((["v"], [(12345678901,)]), (["v"], [(12345678910,)])).mode_pass  # within rtol as floats
    assert not cmp((["v"], [(9007199254740993,)]), (["v"], [(9007199254740992,)]), mode="exact").mode_pass
    huge = 2**100  # beyond Int64: the column is Int128 or exact text, never a rounded float
    assert not cmp((["v"], [(huge,)]), (["v"], [(huge + 1,)])).mode_pass
    assert cmp((["v"], [(huge,)]), (["v"], [(huge,)])).mode_pass
    off_by_one = cmp((["v"], [(9007199254740993,), (1,)]), (["v"], [(9007199254740992,), (1,)]))
    assert off_by_one.columns[0].numeric and off_by_one.columns[0].mismatched == 1
    # Tolerance still applies as soon as one side holds floating-point (or decimal) values.
    assert cmp((["v"], [(12345678901,)]), (["v"], [(12345678910.0,)])).mode_pass


def test_booleans_are_not_integers() -> None:
    assert not cmp((["v"], [(True,), (False,)]), (["v"], [(1,), (0,)])).mode_pass
    assert cmp((["v"], [(True,), (False,)]), (["v"], [(False,), (True,)])).mode_pass


def test_sqlite_comparisons_are_integers_and_equal_to_0_1_columns(run: Any) -> None:
    report = run("SELECT price > 17 FROM products", "SELECT CASE WHEN price > 17 THEN 1 ELSE 0 END FROM products")
    assert report.deterministic_verdict == "pass"


def test_column_permutation_search_is_bounded_and_says_so() -> None:
    names = [f"c{i}" for i in range(10)]
    # Ten columns of one value: every mapping ties. With one extra row no mapping can pair every row, so the
    # search is not even started; with equal heights it is cut at its budget and the report says so.
    extra = cmp((names, [tuple([1] * 10)] * 3), (names, [tuple([1] * 10)] * 4))
    assert not extra.mode_pass and not any("permutation search" in w for w in extra.warnings)
    rows = [tuple([1] * 10)] * 3
    different = cmp((names, rows), (names, rows[:2] + [tuple([1] * 9 + [2])]))
    assert not different.mode_pass
    assert any("column-permutation search cut" in w for w in different.warnings)
    assert cmp((names, rows), (names, list(rows))).warnings == []  # the identity matches at once: no search


@pytest.mark.parametrize("path", ["frames", "rows"])
def test_a_column_of_nan_only_is_found_in_another_position(path: str) -> None:
    """NaN equals NaN in the column similarity too (a review found polars' join pairing no NaN of one row with
    the NaN of another, so the frame path never tried the mapping that moves a column of NaN)."""
    rows = [(math.nan, 0), (math.nan, 1), (math.nan, 2)]
    result = compare_results(relation_from_rows(["x", "y"], rows), relation_from_rows(["y", "x"], [r[::-1] for r in rows]),
                             mode="order-insensitive", config=EvalConfig(), path=path)  # type: ignore[arg-type]
    assert result.mode_pass and result.schema_match["column_mapping"] == {"x": "x", "y": "y"}


@pytest.mark.parametrize("path", ["frames", "rows"])
def test_every_order_of_the_columns_a_proof_may_reorder_is_found(path: str) -> None:
    """The neighbor search's proof takes a projection in another order for the same result
    (``equivalence.MAX_PERMUTED_COLUMNS`` columns at most) because the comparison finds any order of that many
    columns, even where each column holds the same values (a Latin square: only whole rows tell them apart). Of one
    column more it would try only some orders (see the test above)."""
    width = MAX_PERMUTED_COLUMNS
    # Every column holds 0-4 once, and only the identity maps the rows onto themselves: one order pairs them.
    square = [(0, 3, 4, 2, 1), (4, 1, 0, 3, 2), (1, 2, 3, 0, 4), (3, 4, 2, 1, 0), (2, 0, 1, 4, 3)]
    assert all(sorted(column) == list(range(width)) for column in zip(*square))
    assert [order for order in itertools.permutations(range(width))
            if {tuple(row[c] for c in order) for row in square} == set(square)] == [tuple(range(width))]
    names = [f"c{i}" for i in range(width)]
    orders = list(itertools.permutations(range(width)))
    # The search tries the orders that move columns least first: those that move them most, and a sample.
    farthest = sorted(orders, key=lambda order: sum(abs(i - c) for i, c in enumerate(order)))[-6:]
    for order in farthest + random.Random(5).sample(orders, 6):
        actual = ([names[c] for c in order], [tuple(row[c] for c in order) for row in square])
        result = compare_results(relation_from_rows(names, square), relation_from_rows(*actual),
                                 mode="order-insensitive", config=EvalConfig(), path=path)  # type: ignore[arg-type]
        assert result.mode_pass and not result.warnings, order
    assert math.factorial(width) <= budgets.MAX_PERMUTATIONS < math.factorial(width + 1)


@pytest.mark.parametrize("path", ["frames", "rows"])
@pytest.mark.parametrize("mode", ["exact", "order-insensitive"])
def test_nan_and_infinity_equal_only_themselves_under_tolerance(mode: ResolvedMode, path: str) -> None:
    """polars orders NaN above every number, so ``|a - b| <= bound`` held when either was NaN."""
    for expected, actual in ((math.nan, 0.0), (math.inf, 1.0), (0.0, math.nan), (1.0, -math.inf)):
        result = compare_results(relation_from_rows(["x"], [(expected,)]), relation_from_rows(["x"], [(actual,)]),
                                 mode=mode, config=EvalConfig(), path=path)  # type: ignore[arg-type]
        assert not result.mode_pass, (expected, actual)
    for same in (math.nan, math.inf):
        assert compare_results(relation_from_rows(["x"], [(same,)]), relation_from_rows(["x"], [(same,)]),
                               mode=mode, config=EvalConfig(), path=path).mode_pass  # type: ignore[arg-type]


def test_the_plain_path_writes_numbers_as_tagged_text_does() -> None:
    """The plain path writes the tagged text of numbers itself; its order decides which rows pair in the cell
    alignment, so it must be polars' text exactly."""
    from sqlcmp_dagster.engine.relation import tagged_text

    values = [0.0, -0.0, 1.5, 1e-5, -1.5e-5, 8.9e-5, 1e-6, -3.6e-7, 1e15, 1e16, 1e20, 5e-324, math.nan, math.inf,
              -math.inf, 2.0**63, None]
    for column in (values, [0, -7, 2**62, None]):
        # A relation of rows (its columns told from them) and one of a frame give polars' text.
        told = relation_from_rows(["x"], [(value,) for value in column])
        framed = Relation(pl.DataFrame({"c0": column}), ["x"])
        polars_text = tagged_text(framed.frame.to_series(0)).to_list()
        assert rows.tagged_column(told, 0) == rows.tagged_column(framed, 0) == polars_text


@pytest.mark.parametrize(("columns", "searched"), [
    # one wrong cell; every column's values lie outside the others' ranges: the bounds decide, no similarity joins
    ({"id": range(0, 3000), "qty": [i % 7 for i in range(3000)], "name": [f"n{i:05}" for i in range(3000)]}, False),
    # two columns of the same values: the bounds cannot decide, the similarity is computed
    ({"a": range(0, 3000), "b": range(0, 3000), "name": [f"n{i:05}" for i in range(3000)]}, True),
])
def test_the_identity_mapping_is_kept_without_similarity_joins_when_bounds_decide(
        columns: dict[str, Any], searched: bool) -> None:
    """A large result with one wrong cell: the column mapping the similarity scores would choose is the identity;
    range bounds show that without the scores where they can, with the same comparison as computing them."""
    from unittest import mock

    names = list(columns)
    rows = list(zip(*columns.values()))
    changed = [tuple(v + 1 if (r == 1500 and c == 0) else v for c, v in enumerate(row)) for r, row in enumerate(rows)]
    expected, actual = relation_from_rows(names, rows), relation_from_rows(names, changed[::-1])
    with mock.patch.object(frames, "column_similarity", side_effect=frames.column_similarity) as scored:
        fast = compare_results(expected, actual, mode="order-insensitive", config=EvalConfig(), path="frames")
    with mock.patch.object(frames, "identity_dominates", return_value=False):
        full = compare_results(expected, actual, mode="order-insensitive", config=EvalConfig(), path="frames")
    assert scored.called is searched
    assert fast == full
    assert fast.bag_matched_rows == 2999 and fast.schema_match["column_mapping"] == {n: n for n in names}


def test_a_tolerance_pass_too_large_for_the_plain_path_is_made_on_frames() -> None:
    """Rows that pair only within tolerance and across their numeric order reach the pass that examines every
    pair of rows. The plain path, chosen for the results' size, stops before checking more than
    ``SMALL_RESULT_PAIRS`` pairs of cells one by one in one comparison, and the comparison is the frame path's;
    within the bound it is its own, and the same."""
    from unittest import mock

    expected = relation_from_rows(["x", "y"], [(0.0, 1.0), (1e-7, 0.0)])
    actual = relation_from_rows(["x", "y"], [(1e-7, 1.0), (0.0, 0.0)])
    config = EvalConfig(numeric_abs_tolerance=1e-6)
    framed = compare_results(expected, actual, mode="order-insensitive", config=config, path="frames")
    assert framed.mode_pass  # paired only by the pass over every pair: 2 x 2 pairs of rows, 2 columns each
    for bound, frames_used in ((8, False), (7, True)):
        with mock.patch.object(budgets, "SMALL_RESULT_PAIRS", bound), \
                mock.patch.object(frames, "pair", wraps=frames.pair) as spy:
            assert compare_results(expected, actual, mode="order-insensitive", config=config) == framed
        assert spy.called is frames_used


def test_the_bound_on_pairs_holds_for_a_whole_comparison_not_each_pass() -> None:
    """The column permutation search runs a tolerance pass for each candidate mapping of columns that tie: each
    pass alone fits the bound (columns matched by position: one mapping, one pass, and the plain path answers),
    all of them together do not (helper-40's review: 200 rows a side and 10 such columns took 8 s in Python
    against 1.7 s on frames)."""
    from unittest import mock

    height, width = 12, 4
    names = [f"c{k}" for k in range(width)]
    expected = relation_from_rows(names, [(1.0,) * (width - 2) + (float(i), float(i)) for i in range(height)])
    actual = relation_from_rows(names, [(1.0,) * (width - 2) + (float(i), float((i + 1) % height))
                                        for i in range(height)])
    one_pass = height * height * width
    for config, searched in ((EvalConfig(numeric_abs_tolerance=1e-6, require_column_order_match=True), False),
                             (EvalConfig(numeric_abs_tolerance=1e-6), True)):
        framed = compare_results(expected, actual, mode="order-insensitive", config=config, path="frames")
        with mock.patch.object(budgets, "SMALL_RESULT_PAIRS", one_pass), \
                mock.patch.object(frames, "pair", wraps=frames.pair) as spy:
            assert compare_results(expected, actual, mode="order-insensitive", config=config) == framed
        assert spy.called is searched


def test_a_wide_actual_result_is_scored_in_one_join_per_value_type_with_the_plain_paths_scores() -> None:
    """A model's answer of hundreds of columns (``SELECT *, *, *, ...``) against a few expected ones: the frame path
    scored each pair of columns with a join of its own (2,000 x 19 columns: 38,000 joins, 12 s and 1.6 GB for 48
    rows, a review's finding). Its scores now come from one join per value type, and the comparison is the plain
    path's, mapping included, whatever the types (NULL, NaN, -0.0, text that reads as a number)."""
    from unittest import mock

    random.seed(7)
    values = [[random.choice([None, 1, 2, 3]) for _ in range(40)],
              [random.choice([None, 0.0, -0.0, 1.5, math.nan]) for _ in range(40)],
              [random.choice([None, "1", "a", ""]) for _ in range(40)],
              [None] * 40,
              [random.choice([True, False, None]) for _ in range(40)]]
    names = ["i", "f", "s", "n", "b"]
    expected = relation_from_rows(names, list(zip(*values)))
    picks = [random.randrange(len(values)) for _ in range(400)]
    wide = list(zip(*(values[p][::-1] for p in picks)))
    actual = relation_from_rows([f"{names[p]}{n}" for n, p in enumerate(picks)], wide)
    joins = 0
    join = pl.DataFrame.join

    def counted(self: pl.DataFrame, *args: Any, **kwargs: Any) -> pl.DataFrame:
        nonlocal joins
        joins += 1
        return join(self, *args, **kwargs)

    with mock.patch.object(pl.DataFrame, "join", counted):
        framed = compare_results(expected, actual, mode="order-insensitive", config=EvalConfig(), path="frames")
    plain = compare_results(expected, actual, mode="order-insensitive", config=EvalConfig(), path="rows")
    assert framed.schema_match["column_mapping"] == plain.schema_match["column_mapping"]
    assert framed == plain
    assert joins < 20  # 2,000 (5 x 400) with a join per pair of columns
