"""The referee's float64 error measures (`precision.py`): their values against a direct
computation, over slices and non-finite elements, and fetched from the device once."""

import math

import pytest
import torch
from test_compare import no_per_value_transfers

from crucible_harness import precision
from crucible_harness.referee import live_tensor_bytes


def direct(ref, x):
    """rel_rms and max_norm over the elements where both are finite, the obvious way."""
    mask = torch.isfinite(ref) & torch.isfinite(x)
    r, d = ref[mask], x[mask] - ref[mask]
    norm = math.sqrt(float((r * r).sum()))
    return math.sqrt(float((d * d).sum())) / norm, float(d.abs().max()) / (norm / math.sqrt(r.numel()))


@pytest.fixture
def outputs():
    g = torch.Generator().manual_seed(11)
    ref = torch.randn(1000, generator=g, dtype=torch.float64)
    a = ref + 1e-3 * torch.randn(1000, generator=g, dtype=torch.float64)
    b = ref + 1e-1 * torch.randn(1000, generator=g, dtype=torch.float64)
    a[17], b[500], ref[999] = math.inf, math.nan, math.nan  # left out of every measure
    return ref, a, b


def test_error_stats_match_a_direct_computation_over_slices(monkeypatch, outputs):
    ref, a, b = outputs
    mask = torch.isfinite(ref) & torch.isfinite(a) & torch.isfinite(b)
    expected = [direct(ref[mask], x[mask]) for x in (a, b)]
    monkeypatch.setattr(precision, "CHUNK", 64)  # 16 slices, the last one short
    fetches = no_per_value_transfers(monkeypatch)
    (sa, sb), count = precision.error_stats(torch, ref, [a, b])
    assert fetches == [(2 + 2 + 2,)]
    assert count == 997
    for stats, (rel_rms, max_norm) in zip((sa, sb), expected, strict=True):
        assert stats["rel_rms"] == pytest.approx(rel_rms, rel=1e-12)
        assert stats["max_norm"] == pytest.approx(max_norm, rel=1e-12)


def test_error_stats_refuse_what_cannot_be_measured():
    with pytest.raises(precision.Unmeasured, match="finite"):
        precision.error_stats(torch, torch.full((4,), math.nan, dtype=torch.float64), [torch.zeros(4)])
    with pytest.raises(precision.Unmeasured, match="all zeros"):
        precision.error_stats(torch, torch.zeros(4, dtype=torch.float64), [torch.ones(4)])


def test_fingerprint_finds_the_emulated_rounding_in_an_error(monkeypatch, outputs):
    ref, _a, _b = outputs
    ref = ref.nan_to_num()
    g = torch.Generator().manual_seed(5)
    rounding = 1e-3 * torch.randn(1000, generator=g, dtype=torch.float64)
    noise = 1e-5 * torch.randn(1000, generator=g, dtype=torch.float64)
    monkeypatch.setattr(precision, "CHUNK", 100)
    fetches = no_per_value_transfers(monkeypatch)
    same = precision.fingerprint(torch, ref, ref + rounding + noise, ref + rounding)
    unrelated = precision.fingerprint(torch, ref, ref + noise, ref + rounding)
    assert fetches == [(4,), (4,)]
    assert same["coefficient"] == pytest.approx(1.0, abs=0.01)
    assert same["unexplained"] == pytest.approx(0.01, rel=0.1)
    assert abs(unrelated["coefficient"]) < 0.01
    assert unrelated["unexplained"] > 1.0


def test_emulation_sums_are_the_three_measures_in_one_walk(monkeypatch):
    """Bit for bit what the measures give one at a time, over slices, with non-finite elements
    in each of the four tensors at different places (each measure leaves out its own)."""
    g = torch.Generator().manual_seed(7)
    ref = torch.randn(1000, generator=g, dtype=torch.float64)
    emulated = ref + 1e-3 * torch.randn(1000, generator=g, dtype=torch.float64)
    got = (ref + 1e-3 * torch.randn(1000, generator=g, dtype=torch.float64)).float()
    expected = (ref + 1e-6 * torch.randn(1000, generator=g, dtype=torch.float64)).float()
    ref[3], emulated[40], got[500], expected[777], got[900], expected[900] = (
        math.nan,
        math.inf,
        math.nan,
        -math.inf,
        math.inf,
        math.nan,
    )
    monkeypatch.setattr(precision, "CHUNK", 64)
    # The emulation itself, and the same rounded to 7 bits one slice at a time.
    fused = precision.emulation_sums(torch, ref, got, expected, emulated, [("e", None), ("e+out", 7)]).tolist()
    apart = torch.cat(
        [
            sums
            for e in (emulated, precision.round_output(torch, emulated, 7))
            for sums in (
                precision.error_sums(torch, ref, [e]),
                precision.fingerprint_sums(torch, ref, got, e),
                precision.fingerprint_sums(torch, ref, expected, e),
            )
        ]
    ).tolist()
    assert fused == apart
    assert fused[:12] != fused[12:]
    # The counts: each measure's own finite elements.
    assert (fused[0], fused[7], fused[11]) == (998, 996, 996)


class _Matmul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def test_a_whole_measurement_fetches_twice_and_matches_the_measures_one_by_one(monkeypatch):
    """The float64 errors once (they decide whether the rest is measured), then every emulation's
    statistics at once; the numbers are those of the measures taken one at a time."""
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(64, 96, generator=g), torch.randn(96, 48, generator=g)]
    model = _Matmul()
    expected = [model(*inputs)]
    got = [
        precision.round_mantissa(torch, inputs[0], 10, "nearest")
        @ precision.round_mantissa(torch, inputs[1], 10, "nearest")
    ]
    ref64 = precision.run_float64(torch, model, inputs)
    one_by_one = {
        name: (
            precision.error_stats(torch, ref64[0], [emulated[0]])[0][0]["rel_rms"],
            precision.fingerprint(torch, ref64[0], got[0], emulated[0]),
            precision.fingerprint(torch, ref64[0], expected[0], emulated[0]),
        )
        for name, emulated in precision.emulations(torch, model, inputs, ref64)
    }
    fetches = no_per_value_transfers(monkeypatch)
    outputs, errors = precision.measure(torch, model, inputs, expected, got, budget_s=60)
    assert len(fetches) == 2, fetches
    assert [e["index"] for e in errors] == [0]
    measured = {e["name"]: (e["rel_rms"], e["candidate"], e["reference"]) for e in outputs[0]["emulations"]}
    assert measured == one_by_one
    # An fp16-rounded product: its error is the rn10 rounding's.
    assert measured["rn10"][1]["coefficient"] == pytest.approx(1.0, abs=0.05)


def _matmul_trial():
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(64, 96, generator=g), torch.randn(96, 48, generator=g)]
    model = _Matmul()
    got = [precision.round_mantissa(torch, inputs[0], 7, "nearest") @ inputs[1]]
    return model, inputs, [model(*inputs)], got


def test_forwards_computed_ahead_measure_the_same_numbers_without_running_again(monkeypatch):
    """`precompute` runs every float64 forward `measure` would, in its order; `measure` given
    them runs none and returns the same numbers, and still fetches twice."""
    model, inputs, expected, got = _matmul_trial()
    alone = precision.measure(torch, model, inputs, expected, got, budget_s=60)
    ahead = precision.Ahead(torch, "trial_0", model, inputs, 60, lambda: None).wait()
    assert ahead is not None and sorted(ahead.rounded) == ["rn10", "rn7", "rz10"]
    forwards = []
    monkeypatch.setattr(precision, "run_float64_on", lambda *args: forwards.append(args))
    fetches = no_per_value_transfers(monkeypatch)
    assert precision.measure(torch, model, inputs, expected, got, budget_s=60, ahead=ahead) == alone
    assert forwards == []
    assert len(fetches) == 2, fetches
    assert ahead.rounded == {}  # handed over one forward at a time, as measured


def test_forwards_ahead_past_the_budget_leave_it_unmeasured_with_the_errors():
    model, inputs, expected, got = _matmul_trial()
    ahead = precision.precompute(torch, model, inputs, 0.0, lambda: None)
    assert ahead.rounded is None  # the reference alone exceeded it: no emulation was run
    with pytest.raises(precision.Unmeasured, match="would exceed its 0 s budget") as raised:
        precision.measure(torch, model, inputs, expected, got, budget_s=0.0, ahead=ahead)
    assert [e["index"] for e in raised.value.errors] == [0]


class _NoFloat64(torch.nn.Module):
    def forward(self, x):
        if x.dtype == torch.float64:
            raise RuntimeError("no float64 here\nsecond line")
        return x * 2


def test_forwards_ahead_that_fail_give_none_and_say_why():
    """`measure` then runs them itself and reports the failure as it always did."""
    ahead = precision.Ahead(torch, "trial_0", _NoFloat64(), [torch.ones(4)], 60, lambda: None)
    assert ahead.wait() is None
    assert ahead.error == "RuntimeError: no float64 here"
    assert ahead.seconds >= 0.0


@pytest.mark.parametrize(("bits", "mode"), [(10, "nearest"), (10, "truncate"), (7, "nearest")])
def test_operands_rounded_slice_by_slice_are_rounded_as_a_whole(monkeypatch, bits, mode):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(9, 13, generator=g).t()  # not contiguous; 117 elements, not a multiple of 8
    x[3, 4], x[0, 0] = math.inf, math.nan
    monkeypatch.setattr(precision, "CHUNK", 8)
    sliced = precision.operand(torch, x, bits, mode)
    whole = precision.round_mantissa(torch, x, bits, mode).to(torch.float64)
    assert sliced.dtype == torch.float64 and sliced.shape == x.shape
    assert torch.equal(sliced.nan_to_num(), whole.nan_to_num())
    assert torch.isnan(sliced[0, 0]) and sliced[3, 4] == math.inf
    assert torch.equal(precision.operand(torch, x).nan_to_num(), x.double().nan_to_num())  # unrounded


# --- memory: a trial drawn again holds neither its inputs nor its expected outputs in a forward ---

# (the dtype of a float64 forward's first operand, or "sums" for an emulation's statistics, and
# the bytes of the large tensors alive then): filled by `_Watched` and `_watch_sums`.
SEEN = []


class _Watched(torch.nn.Module):
    """A row softmax that notes what is alive at each forward, its output included (`SEEN` is
    global: the float64 forwards run on a deep copy of the model)."""

    def __init__(self, floor):
        super().__init__()
        self.floor = floor

    def forward(self, x):
        out = torch.softmax(x, dim=-1)
        SEEN.append((x.dtype, live_tensor_bytes(torch, self.floor)))
        return out


def _watch_sums(monkeypatch, floor):
    sums = precision.emulation_sums

    def watched(*args):
        SEEN.append(("sums", live_tensor_bytes(torch, floor)))
        return sums(*args)

    monkeypatch.setattr(precision, "emulation_sums", watched)


def test_a_trial_drawn_again_holds_neither_inputs_nor_expected_outputs_beside_a_float64_forward(monkeypatch):
    """With its inputs and expected outputs held, the largest moment of a measurement is a
    rounded forward: those two, the candidate's outputs, the float64 reference and the
    forward's float64 operand and output, 36 bytes an element for a float32 task (23_Softmax:
    54 GiB, with the share pool's 12 beside it more than an 80 GiB H100 had beside any other
    evaluation). Drawn again, 28, and no more anywhere; the same numbers to the bit."""
    rows, cols = 64, 4096
    n = rows * cols
    floor = n * 4 // 2  # a float32 output's bytes and more, never a statistic's slice of it

    def draw():
        return [torch.randn(rows, cols, generator=torch.Generator().manual_seed(3))]

    model = _Watched(floor)
    with torch.no_grad():
        expected = model(*draw())
    got = [expected.to(torch.bfloat16).to(torch.float32)]
    _watch_sums(monkeypatch, floor)

    SEEN.clear()
    held = precision.measure(torch, model, draw(), [expected], got, budget_s=60)
    held_seen = list(SEEN)
    del expected
    SEEN.clear()
    draws = []

    def counted_draw():
        draws.append(1)
        return draw()

    drawn = precision.measure_trial(torch, model, precision.DrawnAgain(torch, model, counted_draw), got, 60)
    drawn_seen = list(SEEN)

    assert drawn == held
    forwards64 = [alive for what, alive in drawn_seen if what == torch.float64]
    assert len(forwards64) == precision.FORWARDS
    assert max(alive for _what, alive in held_seen) == 36 * n
    assert max(alive for _what, alive in drawn_seen) == 28 * n
    assert forwards64[0] == 20 * n  # the float64 reference: the candidate's outputs beside it
    # A draw per float64 forward, and per emulation source for the expected outputs, the first
    # source (the float64 reference itself) sharing the draw the errors against it made.
    assert len(draws) == 2 * precision.FORWARDS
