"""The tolerance table and the first-mismatch comparison."""

from __future__ import annotations

import math

import pytest
import torch

from opreg_testing import EXACT, TOLERANCES, Tolerance, compare, tolerance_for


def test_table_is_exact_for_integers_and_loose_for_half_precision() -> None:
    assert tolerance_for(torch.int64) == EXACT
    assert tolerance_for(torch.bool).exact
    assert tolerance_for(torch.float32) == Tolerance(1.3e-6, 1e-5)
    assert (
        tolerance_for(torch.bfloat16).rtol
        > tolerance_for(torch.float16).rtol
        > tolerance_for(torch.float32).rtol
    )
    assert TOLERANCES[torch.float64] == Tolerance(1e-7, 1e-7)


def test_overrides_apply_to_floating_dtypes_only() -> None:
    loose = Tolerance(0.1, 0.1)
    assert tolerance_for(torch.float32, loose) == loose
    assert tolerance_for(torch.int32, loose) == EXACT
    assert tolerance_for(torch.float16, {torch.float16: loose}) == loose
    assert tolerance_for(torch.float32, {torch.float16: loose}) == TOLERANCES[torch.float32]


def test_negative_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Tolerance(-1.0, 0.0)


def test_equal_within_tolerance_and_nan_equals_nan() -> None:
    a = torch.tensor([1.0, math.nan, 3.0])
    assert compare(a, a + torch.tensor([1e-6, 0.0, 0.0])) is None


def test_first_mismatch_names_index_values_tolerance_and_count() -> None:
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 0.5
    actual[0, 1] = 0.25
    found = compare(expected, actual)
    assert found is not None
    assert (found.kind, found.index, found.expected, found.actual) == ("value", (0, 1), 0.0, 0.25)
    assert (found.count, found.total) == (2, 6)
    assert str(found) == (
        "output at index (0, 1): expected 0, actual 0.25, tolerance rtol=1.3e-06, atol=1e-05 "
        "(2 of 6 elements differ)"
    )


def test_integers_are_compared_exactly() -> None:
    found = compare(torch.tensor([10**9]), torch.tensor([10**9 + 1]))
    assert found is not None and found.tolerance == EXACT and "tolerance exact" in str(found)


def test_metadata_differences_come_before_values() -> None:
    assert compare(torch.zeros(2), torch.zeros(2, dtype=torch.float64)).kind == "dtype"  # type: ignore[union-attr]
    found = compare(torch.zeros(2, 3), torch.zeros(3, 2))
    assert found is not None and str(found) == "output: shape (3, 2), expected (2, 3)"


def test_tuples_name_the_output_and_nested_items() -> None:
    expected = (torch.zeros(2), [torch.zeros(1), torch.ones(1)])
    actual = (torch.zeros(2), [torch.zeros(1), torch.zeros(1)])
    found = compare(expected, actual)
    assert found is not None and found.where == "output 1[1]"
    assert compare((torch.zeros(1),), (torch.zeros(1), torch.zeros(1))).kind == "length"  # type: ignore[union-attr]
    assert compare(torch.zeros(1), 0.0).kind == "type"  # type: ignore[union-attr]


def test_plain_values() -> None:
    assert compare(3, 3) is None
    assert compare(1.0, 1.0 + 1e-9) is None
    assert compare("a", "b") is not None
