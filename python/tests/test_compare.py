"""The output comparison shared by the referee and the audit (common.py)."""

import math

import numpy as np
import pytest
import torch

from crucible_harness import common


def test_identical_outputs_pass_with_zero_error():
    exp = torch.randn(3, 5)
    stats, problem = common.compare(torch, exp, exp.clone(), 1e-4, 1e-4)
    assert problem is None
    assert stats == {
        "shape": [3, 5],
        "dtype": "float32",
        "numel": 15,
        "max_abs": 0.0,
        "mean_abs": 0.0,
        "max_rel": 0.0,
        "mean_rel": 0.0,
        "mismatched": 0,
    }


def test_absolute_tolerance_bounds_the_error_near_zero():
    exp = torch.zeros(4)
    inside = exp + 0.9e-3
    outside = exp.clone()
    outside[2] = 1.1e-3
    assert common.compare(torch, exp, inside, 1e-3, 0.0)[1] is None
    stats, problem = common.compare(torch, exp, outside, 1e-3, 0.0)
    assert stats["mismatched"] == 1
    assert problem.startswith("1 of 4 elements differ beyond atol=0.001, rtol=0.0")
    assert "first at index (2,)" in problem


def test_relative_tolerance_scales_with_the_expected_value():
    exp = torch.full((2, 2), 100.0, dtype=torch.float64)
    got = exp + 0.5
    assert common.compare(torch, exp, got, 0.0, 1e-2)[1] is None
    stats, problem = common.compare(torch, exp, got, 0.0, 1e-3)
    assert stats["mismatched"] == 4
    assert stats["max_abs"] == pytest.approx(0.5)
    assert stats["max_rel"] == pytest.approx(0.005)
    assert "first at index (0, 0): expected 100, got 100.5" in problem


def test_first_mismatch_is_reported_by_its_multi_dimensional_index():
    exp = torch.zeros(2, 3, 4)
    got = exp.clone()
    got[1, 2, 3] = 1.0
    got[1, 0, 1] = 1.0
    stats, problem = common.compare(torch, exp, got, 1e-4, 1e-4)
    assert stats["mismatched"] == 2
    assert "first at index (1, 0, 1)" in problem


def test_nan_where_the_reference_is_finite_fails():
    exp = torch.ones(5)
    got = exp.clone()
    got[1] = math.nan
    got[3] = math.inf
    stats, problem = common.compare(torch, exp, got, 1.0, 1.0)
    assert problem == "2 elements are NaN/Inf where the reference is finite (or the reverse)"
    assert stats["mismatched"] == 2
    # Non-finite elements stay out of the error statistics.
    assert stats["max_abs"] == 0.0


def test_a_finite_value_where_the_reference_is_nan_fails():
    exp = torch.tensor([1.0, math.nan])
    got = torch.tensor([1.0, 0.0])
    _stats, problem = common.compare(torch, exp, got, 1.0, 1.0)
    assert problem == "1 elements are NaN/Inf where the reference is finite (or the reverse)"


def test_non_finite_values_must_match_the_reference_exactly():
    exp = torch.tensor([math.nan, math.inf, -math.inf, 2.0])
    assert common.compare(torch, exp, exp.clone(), 1e-4, 1e-4)[1] is None
    flipped = torch.tensor([math.nan, -math.inf, -math.inf, 2.0])
    stats, problem = common.compare(torch, exp, flipped, 1e-4, 1e-4)
    assert stats["mismatched"] == 1
    assert "NaN/Inf" in problem


def test_an_output_that_is_all_nan_was_probably_never_written():
    exp = torch.randn(8)
    got = torch.full_like(exp, math.nan)
    _stats, problem = common.compare(torch, exp, got, 1e-2, 1e-2)
    assert problem == "every element is NaN (was the output written at all?)"


def test_empty_outputs_compare_equal():
    exp = torch.empty(0, 3)
    stats, problem = common.compare(torch, exp, exp.clone(), 1e-4, 1e-4)
    assert problem is None
    assert stats["numel"] == 0
    assert stats["shape"] == [0, 3]


def test_integer_and_half_outputs_are_compared_in_float64():
    ints = torch.arange(10, dtype=torch.int64)
    off = ints.clone()
    off[7] += 1
    assert common.compare(torch, ints, ints.clone(), 0, 0)[1] is None
    stats, _problem = common.compare(torch, ints, off, 0, 0)
    assert stats["mismatched"] == 1
    assert stats["dtype"] == "int64"
    half = torch.randn(16).to(torch.bfloat16)
    stats, problem = common.compare(torch, half, half.clone(), 1e-2, 1e-2)
    assert problem is None
    assert stats["dtype"] == "bfloat16"


def test_chunked_comparison_combines_to_the_unchunked_statistics(monkeypatch):
    generator = torch.Generator().manual_seed(7)
    exp = torch.randn(5, 13, generator=generator)
    got = exp + 1e-3 * torch.randn(5, 13, generator=generator)
    got[2, 5] += 1.0  # flat index 31
    got[4, 0] += 1.0  # flat index 52
    whole, whole_problem = common.compare(torch, exp, got, 1e-2, 1e-2)
    # 65 elements in slices of 8: eight full slices and one of 1, unequal weights included.
    monkeypatch.setattr(common, "COMPARE_CHUNK", 8)
    chunked, chunked_problem = common.compare(torch, exp, got, 1e-2, 1e-2)
    assert whole["mismatched"] == chunked["mismatched"] == 2
    for key in ("shape", "dtype", "numel", "max_abs", "max_rel", "mismatched"):
        assert chunked[key] == whole[key], key
    for key in ("mean_abs", "mean_rel"):
        assert chunked[key] == pytest.approx(whole[key], rel=1e-12), key
    # The first failing slice is named; the index inside it is the slice's own.
    assert whole_problem.startswith("2 of 65 elements differ")
    assert chunked_problem.startswith("in flat elements [24, 32): 1 of 8 elements differ")
    assert "first at index (7,)" in chunked_problem


def test_chunked_comparison_keeps_the_nan_rule(monkeypatch):
    monkeypatch.setattr(common, "COMPARE_CHUNK", 4)
    exp = torch.ones(10)
    got = exp.clone()
    got[9] = math.nan
    stats, problem = common.compare(torch, exp, got, 1e-2, 1e-2)
    assert stats["mismatched"] == 1
    assert problem == "in flat elements [8, 10): 1 elements are NaN/Inf where the reference is finite (or the reverse)"


@pytest.mark.parametrize(
    ("dtype", "entry"),
    [
        (torch.float16, "half"),
        (torch.bfloat16, "half"),
        (torch.float32, "fp32"),
        (torch.float64, "fp32"),
        (torch.int32, "fp32"),
    ],
)
def test_tolerance_for_picks_the_half_entry_for_16_bit_floats(dtype, entry):
    tolerance = {"fp32": [1e-4, 2e-4], "half": [1e-2, 2e-2]}
    assert common.tolerance_for(torch, tolerance, torch.zeros(1, dtype=dtype)) == tolerance[entry]


def test_same_bits_is_bitwise():
    a = torch.tensor([1.0, math.nan, -0.0])
    assert common.same_bits(torch, a, a.clone())
    assert not torch.equal(a, a.clone())  # why bits: NaN is not equal to itself
    assert not common.same_bits(torch, a, torch.tensor([1.0, math.nan, 0.0]))  # -0.0 and 0.0 differ
    assert not common.same_bits(torch, a, a.reshape(3, 1))
    strided = torch.arange(12.0).reshape(3, 4).t()
    assert common.same_bits(torch, strided, strided.contiguous())


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 5), (4, 1, 6)])
def test_unravel_matches_numpy(shape):
    for flat in range(int(np.prod(shape))):
        assert common.unravel(flat, shape) == tuple(int(i) for i in np.unravel_index(flat, shape))


def test_unravel_of_a_scalar_is_the_empty_index():
    assert common.unravel(0, ()) == ()


def no_per_value_transfers(monkeypatch):
    """Counts `.tolist()` calls and makes every per-value transfer from a tensor (`.item()`,
    `bool`, `float`, `int`) fail: on a GPU each is a wait that other processes' time slices
    lengthen (see `common.compare`)."""
    fetches = []
    real_tolist = torch.Tensor.tolist

    def tolist(self):
        fetches.append(tuple(self.shape))
        return real_tolist(self)

    def forbidden(self, *_args):
        raise AssertionError("a per-value transfer from the device")

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    for name in ("item", "__bool__", "__float__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    return fetches


def test_a_passing_comparison_fetches_every_slice_at_once(monkeypatch):
    exp = torch.randn(5, 13, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(common, "COMPARE_CHUNK", 8)
    fetches = no_per_value_transfers(monkeypatch)
    stats, problem = common.compare(torch, exp, exp + 1e-6, 1e-2, 1e-2)
    assert problem is None
    assert stats["mismatched"] == 0 and 0 < stats["max_abs"] < 1e-5
    assert fetches == [(9, 7)]  # nine slices, seven statistics each, one transfer


def test_bitwise_differences_are_fetched_at_once(monkeypatch):
    a = torch.tensor([0.0, math.nan, 1.0])
    pairs = [(a, a.clone()), (a, torch.tensor([-0.0, math.nan, 1.0])), (a, a.reshape(3, 1)), (a, a.double())]
    fetches = no_per_value_transfers(monkeypatch)
    # Equal bits (NaN included); -0.0 is not 0.0; another shape or dtype always differs.
    assert common.differ_bitwise(torch, pairs) == [False, True, True, True]
    assert fetches == [(2,)]
    assert common.differ_bitwise(torch, []) == []
