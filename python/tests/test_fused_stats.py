"""The precision measurement's fused statistics (`fused_stats.py`): run here on Triton's
interpreter (conftest sets it), they must give the torch path's numbers for the same operands,
rounding included, and the torch path must take over whatever they cannot do."""

import math

import pytest
import torch

from crucible_harness import common, fused_stats, precision


def operands(dtype):
    """A float64 reference, a float64 source for the emulations and the expected and candidate
    outputs in `dtype`, over a length that is not a multiple of a block, with every kind of
    element the statistics single out."""
    g = torch.Generator().manual_seed(7)
    n = 3 * fused_stats.BLOCK + 123
    ref = torch.randn(n, generator=g, dtype=torch.float64) * 10
    src = ref + 1e-6 * torch.randn(n, generator=g, dtype=torch.float64)
    # Ties of both roundings, exactly half an ulp (10 and 7 explicit bits) above an even and an
    # odd kept mantissa, large enough to count in the sums; negative ones too.
    for i, (mantissa, bits) in enumerate([(0, 10), (1, 10), (0, 7), (1, 7)]):
        tie = (1.0 + mantissa * 2.0**-bits + 2.0 ** -(bits + 1)) * 64.0
        src[10 + i], src[20 + i] = tie, -tie
    src[30] = 3.5e38  # past float32's range once rounded: infinite, left out
    src[31] = 1e-40  # a float32 subnormal
    got = (ref + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    expected = ref.to(dtype)
    got[5], expected[n - 7], ref[100], src[2000] = math.nan, math.inf, math.nan, -math.inf
    return ref, src, got, expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_fused_emulation_sums_are_the_torch_paths(dtype):
    ref, src, got, expected = operands(dtype)
    derived = [("plain", None), ("rn10+out", 10), ("rn7+out", 7)]
    fused = fused_stats.emulation_sums(torch, ref, got, expected, src, derived)
    plain = precision.emulation_sums(torch, ref, got, expected, src, derived)
    assert fused.shape == plain.shape == (precision.SUMS_PER_EMULATION * len(derived),)
    assert torch.allclose(fused, plain, rtol=1e-12, atol=0.0), (fused - plain).abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_error_sums_are_the_torch_paths(dtype):
    ref, _src, got, expected = operands(dtype)
    fused = fused_stats.error_sums(torch, ref, got, expected)
    plain = precision.error_sums(torch, ref, [got, expected])
    assert torch.allclose(fused, plain, rtol=1e-12, atol=0.0), (fused - plain).abs().max()


def test_a_rounding_off_by_one_bit_shows_in_the_sums():
    """The comparison above can fail: the same operands with the source rounded to one bit more
    give different numbers."""
    ref, src, got, expected = operands(torch.float32)
    fused = fused_stats.emulation_sums(torch, ref, got, expected, src, [("rn10", 10)])
    other = precision.emulation_sums(torch, ref, got, expected, src, [("rn11", 11)])
    assert not torch.allclose(fused, other, rtol=1e-6, atol=0.0)


def test_only_large_device_tensors_take_the_kernels():
    big = torch.zeros(fused_stats.FUSED_MIN_ELEMENTS, dtype=torch.float32)
    assert not fused_stats.available(torch, big, big)  # on the CPU


def test_a_failing_kernel_hands_over_to_the_torch_path(monkeypatch, capsys):
    monkeypatch.setattr(fused_stats, "failed", False)

    def broken(torch, *args):
        raise RuntimeError("no launcher")

    assert fused_stats.guarded(torch, broken) is None
    assert fused_stats.failed
    assert "no launcher" in capsys.readouterr().err

    def out_of_memory(torch, *args):
        raise torch.OutOfMemoryError("CUDA out of memory")

    # Running out of memory is the measurement's to report (beside other evaluations, the judge
    # asks again and then retries the evaluation alone), not a reason to change paths.
    monkeypatch.setattr(fused_stats, "failed", False)
    with pytest.raises(torch.OutOfMemoryError):
        fused_stats.guarded(torch, out_of_memory)
    assert not fused_stats.failed


def test_the_warm_up_compiles_each_kernel_with_its_own_arguments(monkeypatch):
    """The thread compiles ahead exactly what `compare_statistics`, `error_sums` and
    `emulation_sums` launch (every argument of each kernel, by position, and the launch
    options): a mismatch would only print a line and leave the compile to the first launch,
    under a share of the GPU."""
    compiled = []

    class Kernel:
        def __init__(self, real):
            self.real = real

        def warmup(self, *args, grid, num_warps, **constexprs):
            assert len(args) + len(constexprs) == len(self.real.arg_names)
            assert list(constexprs) == ["BLOCK"] and constexprs["BLOCK"] == fused_stats.BLOCK
            assert (grid, num_warps) == ((1,), fused_stats.NUM_WARPS)
            compiled.append((self.real.arg_names, [getattr(a, "dtype", a) for a in args]))
            return self

        def _init_handles(self):
            pass

    for name in ("compare_block_sums", "error_block_sums", "emulation_block_sums"):
        monkeypatch.setattr(fused_stats, name, Kernel(getattr(fused_stats, name)))
    monkeypatch.setattr(fused_stats, "available", lambda torch, *tensors: True)
    monkeypatch.setattr(fused_stats, "warming", None)
    expected = [torch.zeros(4, dtype=torch.float16), torch.zeros(4, dtype=torch.int64)]
    fused_stats.warm_in_background(torch, expected)
    fused_stats.wait_warm()
    f64, f16 = torch.float64, torch.float16
    assert compiled == [
        (["exp_ptr", "got_ptr", "tol_ptr", "out_ptr", "n", "BLOCK"], [f16, f16, f64, f64, 16]),
        (["ref_ptr", "got_ptr", "exp_ptr", "out_ptr", "n", "BLOCK"], [f64, f16, f16, f64, 16]),
        (
            ["ref_ptr", "src_ptr", "got_ptr", "exp_ptr", "out_ptr", "n", "drop", "BLOCK"],
            [f64, f64, f16, f16, f64, 16, 0],
        ),
    ]  # once, for the one floating-point output
    fused_stats.warm_in_background(torch, expected)  # the next trial: nothing more
    fused_stats.wait_warm()
    assert len(compiled) == 3


def compared(dtype):
    """Expected and candidate outputs with every case `common.mismatch_masks` tells apart."""
    g = torch.Generator().manual_seed(13)
    n = 3 * fused_stats.BLOCK + 77
    expected = torch.randn(n, generator=g, dtype=torch.float64)
    got = expected + 1e-4 * torch.randn(n, generator=g, dtype=torch.float64)
    got[::97] += 0.5  # beyond the tolerance
    expected[:8] = torch.tensor([math.nan, math.inf, -math.inf, math.nan, math.inf, 0.0, 0.0, 1e-30])
    got[:8] = torch.tensor([math.nan, math.inf, math.inf, 1.0, 2.0, 1e-3, 0.0, 2e-30])
    got[9], got[10], got[11] = math.nan, math.inf, -math.inf  # where the reference is finite
    return expected.to(dtype), got.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_fused_comparison_is_the_torch_paths(dtype):
    expected, got = compared(dtype)
    atol, rtol = 1e-2, 1e-2
    # Blocks as `common.compare` slices an output: flat, the last one short.
    span = fused_stats.BLOCK + 5
    blocks = [(expected[i : i + span], got[i : i + span]) for i in range(0, expected.numel(), span)]
    fused = fused_stats.compare_statistics(torch, blocks, atol, rtol)
    plain = torch.stack([common.block_statistics(torch, e, g, atol, rtol) for e, g in blocks])
    assert fused.shape == plain.shape == (len(blocks), 7)
    assert torch.allclose(fused, plain, rtol=1e-12, atol=0.0, equal_nan=True), (fused, plain)
    assert plain[0, 2].isnan()  # a NaN in the reference makes the relative error NaN, both ways
    assert plain[:, 4].sum() > 40 and plain[:, 5].sum() == 6  # mismatches, non-finite ones


def test_an_all_nan_output_and_a_threshold_in_float64(monkeypatch):
    n = 2 * fused_stats.BLOCK
    expected = torch.full((n,), 1.0)
    got = torch.full((n,), math.nan)
    fused = fused_stats.compare_statistics(torch, [(expected, got)], 1e-2, 1e-2)
    plain = common.block_statistics(torch, expected, got, 1e-2, 1e-2)
    assert torch.allclose(fused[0], plain, equal_nan=True) and fused[0, 6] == 1.0
    # An error of exactly the tolerance passes in float64, where 0.01 in float32 would not.
    expected = torch.zeros(n, dtype=torch.float64)
    got = torch.full((n,), 0.01, dtype=torch.float64)
    fused = fused_stats.compare_statistics(torch, [(expected, got)], 0.01, 0.0)
    assert fused[0, 4] == common.block_statistics(torch, expected, got, 0.01, 0.0)[4] == 0.0


def test_compare_takes_the_fused_path_where_it_is_comparable(monkeypatch):
    """Through `common.compare`, slices and all: the same statistics and the same first mismatch."""
    expected, got = compared(torch.float32)
    monkeypatch.setattr(common, "COMPARE_CHUNK", fused_stats.BLOCK + 5)
    plain = common.compare(torch, expected, got, 1e-2, 1e-2)
    taken = []
    real = fused_stats.compare_statistics
    monkeypatch.setattr(fused_stats, "comparable", lambda torch, e, g: True)
    monkeypatch.setattr(fused_stats, "compare_statistics", lambda *args: taken.append(1) or real(*args))
    fused = common.compare(torch, expected, got, 1e-2, 1e-2)
    assert taken == [1]
    assert fused[1] == plain[1] and "elements" in fused[1]
    for key in ("max_abs", "mean_abs", "mismatched", "numel"):
        assert fused[0][key] == pytest.approx(plain[0][key], rel=1e-12), key


def test_the_sizing_begins_the_warm_up_for_large_floating_outputs_on_a_gpu(monkeypatch):
    """`warm_ahead` takes the meta-device outputs the referee's sizing drew: it compiles for a
    floating-point output of `FUSED_MIN_ELEMENTS` or more that will be on a CUDA device, and for
    nothing else (a smaller one, an integer one, a CPU device)."""
    started = []
    monkeypatch.setattr(fused_stats, "start_warming", lambda torch, outputs: started.append(outputs))
    monkeypatch.setattr(fused_stats, "failed", False)
    n = fused_stats.FUSED_MIN_ELEMENTS
    with torch.device("meta"):
        large = torch.empty(n, dtype=torch.float32)
        small = torch.empty(n - 1, dtype=torch.float32)
        integers = torch.empty(n, dtype=torch.int64)
    fused_stats.warm_ahead(torch, [small, large, integers, 3.0], "cuda:1")
    fused_stats.warm_ahead(torch, [large], "cpu")
    assert started == [[(torch.float32, torch.device("cuda:1"))]]
    # After a kernel failed, the torch path takes every output: nothing to compile.
    monkeypatch.setattr(fused_stats, "failed", True)
    fused_stats.warm_ahead(torch, [large], "cuda:0")
    assert len(started) == 1
