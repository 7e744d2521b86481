"""Measured precision: the candidate's outputs, and the reference's own, against a float64 copy of
the reference, next to the error that rounding the operands to a known precision produces.

Trusted, run by the referee only (and by scripts/precision-measure.py, which derives the
thresholds the judge classifies with). Nothing here decides anything: it returns numbers, and
the judge (crates/crucible-judge/src/precision.rs) derives the precision class from them.

Error measures, per floating-point output, over the elements where the float64 reference, the
reference and the candidate are all finite:
- `rel_rms`  = ||x - ref64||_2 / ||ref64||_2 (scale-free: the same for any scale of the output);
- `max_norm` = max |x - ref64| / rms(ref64)  (the worst element, in units of the output's RMS).

Emulations: the float64 reference run once more with every floating-point operand (inputs,
parameters, buffers) rounded to fewer mantissa bits first, then computed in float64, so that
the only error is the rounding (and, for the `+out` ones, the output rounded the same way too;
`out10`/`out7` round only the float64 reference's output):
- `rn10`, `rn10+out`, `out10`: 10 explicit bits, round to nearest even: fp16 casts (in range);
  TF32 as cuBLAS rounds it looks the same;
- `rz10`: 10 explicit bits, truncated: TF32 as tensor cores read fp32 registers (what Triton's
  default `tl.dot` does with fp32 operands);
- `rn7`, `rn7+out`, `out7`: 7 explicit bits, round to nearest even: bf16.
For each, `rel_rms` of the emulation (how large that rounding's error is for this computation),
and a fingerprint of the candidate's error and of the reference's own (`fingerprint`): mainly
the share of the emulated rounding's error pattern that the error contains (1 when it rounded
its operands the same way, whatever accumulation error it adds; 0 when unrelated).
"""

import contextlib
import copy
import math
import threading
import time

from crucible_harness import common, fused_stats

# Operand roundings, one float64 forward each: (name, explicit mantissa bits, rounding, whether an
# emulation with the output rounded the same way is reported too).
OPERAND_ROUNDINGS = (("rn10", 10, "nearest", True), ("rz10", 10, "truncate", False), ("rn7", 7, "nearest", True))
# Output-only roundings of the float64 reference (no forward): (name, bits).
OUTPUT_ROUNDINGS = (("out10", 10), ("out7", 7))
# The float64 forwards of one measurement: the reference's, then one per operand rounding.
FORWARDS = 1 + len(OPERAND_ROUNDINGS)

# Statistics are accumulated over flat slices of this many elements, so that a 1.6e9-element
# output needs no full-size float64 temporaries beyond the ones the forward itself makes.
CHUNK = 1 << 24

# The reference's own error against its float64 copy beyond this (relative RMS) means the two
# do not compute the same thing (a random op, a dtype-dependent branch): nothing is measured.
SAME_COMPUTATION = 0.05


class Unmeasured(Exception):
    """The measurement cannot be made; the message says why. Never the candidate's fault.
    `errors`: the outputs' errors against float64 known before it was raised (see `measure`);
    `out_of_memory`: the device ran out of memory (on a shared device, not the task's doing)."""

    errors = ()
    out_of_memory = False


def out_of_memory(exc, errors=()):
    """The `Unmeasured` for torch's `OutOfMemoryError` `exc`."""
    unmeasured = Unmeasured(f"the device ran out of memory: {str(exc).splitlines()[0]}")
    unmeasured.out_of_memory = True
    unmeasured.errors = errors
    return unmeasured


def round_mantissa(torch, x, bits, mode):
    """`x` rounded to `bits` explicit mantissa bits with fp32's exponent range, as float32.

    Bit manipulation on the int32 view (IEEE sign-magnitude, so the same integer arithmetic
    rounds negative values by magnitude); non-finite values pass unchanged."""
    x32 = x.detach().to(torch.float32).contiguous()
    drop = 23 - bits
    if drop <= 0:
        return x32.clone()
    i = x32.view(torch.int32)
    if mode == "nearest":
        # Add half an ulp minus one, plus the lowest kept bit: ties go to even.
        i = i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)
    elif mode != "truncate":
        raise ValueError(f"unknown rounding {mode!r}")
    i = i & ~((1 << drop) - 1)
    out = i.view(torch.float32)
    return torch.where(torch.isfinite(x32), out, x32)


def operand(torch, value, bits=None, mode=None):
    """A floating-point tensor in float64 (rounded first when `bits` is given); anything else
    unchanged. Rounded a slice of `CHUNK` elements at a time straight into the float64 copy: the
    rounding's integer temporaries never exist at full size (a full-size rounding took about
    three fp32 copies of the operand at once, beside every other tensor of the measurement)."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    value = value.detach()
    if bits is None:
        return value.to(torch.float64)
    out = torch.empty(value.shape, dtype=torch.float64, device=value.device)
    flat_in, flat_out = value.contiguous().reshape(-1), out.reshape(-1)
    for start in range(0, flat_in.numel(), CHUNK):
        flat_out[start : start + CHUNK] = round_mantissa(torch, flat_in[start : start + CHUNK], bits, mode)
    return out


def model_in_float64(torch, model, bits=None, mode=None):
    """A float64 copy of the reference model (its floating parameters and buffers rounded first
    when `bits` is given)."""
    copied = copy.deepcopy(model)
    with torch.no_grad():
        if bits is not None:
            for tensor in list(copied.parameters()) + list(copied.buffers()):
                if tensor.is_floating_point():
                    tensor.copy_(round_mantissa(torch, tensor, bits, mode).to(tensor.dtype))
        return copied.double()


def run_float64(torch, model, inputs, bits=None, mode=None):
    """The reference's outputs computed in float64 (operands rounded first when asked)."""
    return run_float64_on(torch, model, lambda: inputs, bits, mode)


def run_float64_on(torch, model, draw, bits=None, mode=None):
    """`run_float64` on the inputs `draw()` gives: what it gives is let go once converted to
    float64, so inputs drawn for the forward alone are not held beside it."""
    model64 = model_in_float64(torch, model, bits, mode)
    args = [operand(torch, x, bits, mode) for x in draw()]
    with torch.no_grad():
        outputs = common.as_output_list(torch, model64(*args))
    del model64, args
    return outputs


class Held:
    """A trial's pristine inputs and expected outputs, held by the caller for the measurement."""

    def __init__(self, inputs, expected):
        self._inputs = inputs
        self._expected = expected

    def inputs(self):
        return self._inputs

    def expected(self):
        return self._expected


class DrawnAgain:
    """A trial's pristine inputs and expected outputs drawn again from its seed each time they
    are asked for (`draw()` gives the inputs; the reference's forward on a draw of its own, the
    expected outputs: the forward may change its inputs), and held only while used. A large
    trial's measurement then runs each float64 forward beside neither: on 23_Softmax's 1.6e9
    elements they were 12 of the 54 GiB the referee held in each float64 forward (beside the
    float64 reference, the candidate's outputs and the forward's float64 operands and outputs),
    which ran out of memory beside any other evaluation on an 80 GiB H100. The price is a
    draw per forward and a reference forward per emulation source, each a fraction of one
    float64 forward. A reference whose forward is not deterministic (atomics) gives expected
    outputs as far from each other as its runs are, which is what the measurement's figure
    for the reference describes anyway."""

    def __init__(self, torch, model, draw):
        self._torch = torch
        self._model = model
        self._draw = draw

    def inputs(self):
        return self._draw()

    def expected(self):
        with self._torch.no_grad():
            return common.as_output_list(self._torch, self._model(*self._draw()))


def flat_pairs(torch, tensors):
    """Aligned flat float64 slices of same-shaped tensors."""
    flats = [t.detach().reshape(-1) for t in tensors]
    total = flats[0].numel()
    for start in range(0, total, CHUNK):
        yield [f[start : start + CHUNK].to(torch.float64) for f in flats]


def error_stats(torch, ref64, others):
    """`rel_rms` and `max_norm` of each tensor in `others` against `ref64`, over the elements
    where all of them are finite, plus that element count (fetched from the device at once)."""
    return error_stats_from(error_sums(torch, ref64, others).tolist(), len(others))


def error_sums(torch, ref64, others):
    """What `error_stats` derives its numbers from, left on the device as one float64 vector:
    the element count, the reference's squared norm, each other's squared error, each other's
    largest error. Sums are kept on the device across slices: every fetch waits for each other
    busy process's time slice on a shared GPU (see `common.compare`), so the measurement fetches
    as rarely as it can."""
    if len(others) == 2 and fused_stats.available(torch, ref64, *others):
        fused = fused_stats.guarded(torch, fused_stats.error_sums, ref64, *others)
        if fused is not None:
            return fused
    sums, worst = None, None
    for ref, *rest in flat_pairs(torch, [ref64, *others]):
        mask = torch.isfinite(ref)
        for x in rest:
            mask &= torch.isfinite(x)
        ref = torch.where(mask, ref, 0.0)
        diffs = [torch.where(mask, x - ref, 0.0) for x in rest]
        step = torch.stack([mask.sum().to(torch.float64), square(torch, ref), *[square(torch, d) for d in diffs]])
        largest = torch.stack([largest_abs(torch, d) for d in diffs])
        sums = accumulate(sums, step)
        worst = largest if worst is None else torch.maximum(worst, largest)
    if sums is None:
        raise Unmeasured("the output has no elements")
    return torch.cat([sums, worst])


def square(torch, x):
    """<x, x> of a flat float64 slice, in one kernel and no temporary (the statistics pass over
    outputs of up to 1.6e9 elements several times: each full-size temporary is a pass more)."""
    return torch.dot(x, x)


def largest_abs(torch, x):
    """max |x| of a flat slice, in one kernel."""
    return torch.linalg.vector_norm(x, math.inf)


def error_stats_from(fetched, n_others):
    """`error_stats` from the fetched `error_sums`."""
    count, sq_ref = int(fetched[0]), fetched[1]
    sq, worst = fetched[2 : 2 + n_others], fetched[2 + n_others :]
    if count == 0:
        raise Unmeasured("no element of the output is finite in both the reference and its float64 copy")
    norm_ref = math.sqrt(sq_ref)
    if norm_ref == 0.0:
        raise Unmeasured("the float64 reference output is all zeros; relative errors are undefined")
    rms_ref = norm_ref / math.sqrt(count)
    stats = [
        {"rel_rms": finite(math.sqrt(s) / norm_ref), "max_norm": finite(w / rms_ref)}
        for s, w in zip(sq, worst, strict=True)
    ]
    return stats, count


def finite(x):
    """The channel's JSON has no NaN or infinity: those travel as null."""
    return x if math.isfinite(x) else None


def fingerprint(torch, ref64, got, emulated):
    """How much of `got`'s error is the emulated rounding, over the elements where all three are
    finite (d = x - ref64):
    - `coefficient` = <d_got, d_emul> / <d_emul, d_emul>: the share of the emulated rounding
      that the error contains, 1 when `got` rounded the same way (whatever else it adds, such as
      accumulation error), 0 when unrelated;
    - `coefficient_noise`: its standard error, ||d_got - coefficient d_emul|| / (||d_emul|| sqrt(n-1));
    - `unexplained` = ||d_got - d_emul|| / ||d_got||.
    Values are None where undefined (no error, no emulated error)."""
    return fingerprint_from(fingerprint_sums(torch, ref64, got, emulated).tolist())


def fingerprint_sums(torch, ref64, got, emulated):
    """What `fingerprint` derives its numbers from, left on the device: <d_got, d_got>,
    <d_emul, d_emul>, <d_got, d_emul> and the element count."""
    totals = None
    for ref, x, e in flat_pairs(torch, [ref64, got, emulated]):
        mask = torch.isfinite(ref) & torch.isfinite(x) & torch.isfinite(e)
        d = torch.where(mask, x - ref, 0.0)
        de = torch.where(mask, e - ref, 0.0)
        totals = accumulate(totals, fingerprint_step(torch, d, de, mask))
    return totals if totals is not None else torch.zeros(4, dtype=torch.float64, device=ref64.device)


def fingerprint_step(torch, d, de, mask):
    """One slice's part of `fingerprint_sums`."""
    return torch.stack([square(torch, d), square(torch, de), torch.dot(d, de), mask.sum().to(torch.float64)])


def accumulate(totals, step):
    return step if totals is None else totals + step


# `emulation_sums`' numbers per emulation: `error_sums` of one tensor (4), two `fingerprint_sums` (4 each).
SUMS_PER_EMULATION = 12


def emulation_sums(torch, ref64, got, expected, source, derived):
    """For each emulation in `derived` (`(name, bits)`: `source` itself when `bits` is None, else
    `source` rounded to `bits`), `error_sums(ref64, [emulated])`,
    `fingerprint_sums(ref64, got, emulated)` and `fingerprint_sums(ref64, expected, emulated)`
    concatenated, the same numbers, in one walk over the slices: each element of `got` and
    `expected` is converted, tested for finiteness and subtracted from the reference once for
    all of them, and a rounded emulation exists only one slice at a time."""
    if fused_stats.available(torch, ref64, source, got, expected):
        fused = fused_stats.guarded(torch, fused_stats.emulation_sums, ref64, got, expected, source, derived)
        if fused is not None:
            return fused
    sums = [[None, None, None, None] for _ in derived]
    for ref, src, *others in flat_pairs(torch, [ref64, source, got, expected]):
        finite_ref = torch.isfinite(ref)
        finite = [torch.isfinite(x) for x in others]
        diffs = [x - ref for x in others]
        for (_name, bits), acc in zip(derived, sums, strict=True):
            e = src if bits is None else round_output(torch, src, bits)
            mask = finite_ref & torch.isfinite(e)
            kept = torch.where(mask, ref, 0.0)
            de = torch.where(mask, e - ref, 0.0)
            acc[0] = accumulate(
                acc[0], torch.stack([mask.sum().to(torch.float64), square(torch, kept), square(torch, de)])
            )
            largest = largest_abs(torch, de).reshape(1)
            acc[1] = largest if acc[1] is None else torch.maximum(acc[1], largest)
            for k, (finite_other, diff) in enumerate(zip(finite, diffs, strict=True)):
                within = mask & finite_other
                d = torch.where(within, diff, 0.0)
                acc[2 + k] = accumulate(acc[2 + k], fingerprint_step(torch, d, torch.where(within, de, 0.0), within))
    if sums[0][0] is None:
        raise Unmeasured("the output has no elements")
    return torch.cat([t for acc in sums for t in acc])


def fingerprint_from(fetched):
    """`fingerprint` from the fetched `fingerprint_sums`."""
    sq_got, sq_emul, dot, count = fetched
    count = int(count)
    out = {"unexplained": None, "coefficient": None, "coefficient_noise": None}
    if sq_got > 0.0:
        out["unexplained"] = finite(math.sqrt(max(sq_got - 2 * dot + sq_emul, 0.0) / sq_got))
    if sq_emul > 0.0 and count > 1:
        coefficient = dot / sq_emul
        residual = max(sq_got - coefficient * dot, 0.0)
        out["coefficient"] = finite(coefficient)
        out["coefficient_noise"] = finite(math.sqrt(residual / sq_emul / (count - 1)))
    return out


def measure(torch, model, inputs, expected, got, budget_s, sync=lambda: None, ahead=None):
    """The precision measurement of one trial: `(outputs, errors)`.

    `inputs` are the trial's pristine inputs, `expected` the reference's outputs (as the task
    runs, at its own precision), `got` the candidate's; `ahead`, where given, the float64
    forwards on those inputs already computed (`precompute`), which are then not run again.
    `errors` holds each floating-point output's relative RMS error against float64, the
    candidate's and the reference's: the judge reads it also when the rest cannot be measured,
    so `Unmeasured` carries the errors computed before it was raised. Raises `Unmeasured` with
    the reason when the measurement cannot be made; every other exception is the caller's to
    turn into one too.
    """
    return measure_trial(torch, model, Held(inputs, expected), got, budget_s, sync, ahead)


def measure_trial(torch, model, trial, got, budget_s, sync=lambda: None, ahead=None):
    """`measure`, with the trial's inputs and expected outputs given by `trial` (`Held` or
    `DrawnAgain`); running out of memory anywhere, a draw included, is `out_of_memory`."""
    errors = []
    try:
        return measure_all(torch, model, trial, got, budget_s, sync, errors, ahead)
    except torch.OutOfMemoryError as exc:
        raise out_of_memory(exc, errors) from exc
    except Unmeasured as exc:
        exc.errors = errors
        raise


def measure_all(torch, model, trial, got, budget_s, sync, errors, ahead=None):
    """`measure_trial`, appending to `errors` as they are known. Each float64 forward runs
    before the expected outputs its statistics need are asked for, and those are let go before
    the next forward runs (`DrawnAgain`)."""
    # The candidate's outputs have the expected outputs' dtypes (the referee's slots are made
    # like them), so a drawn trial learns there is nothing to measure before any forward.
    if not any(x.is_floating_point() for x in got):
        raise Unmeasured("the task has no floating-point output")
    if ahead is None:
        started = time.perf_counter()
        ref64 = run_float64_on(torch, model, trial.inputs)
        sync()
        elapsed = time.perf_counter() - started
    else:
        ref64, elapsed = ahead.ref64, ahead.elapsed_s
    expected = trial.expected()
    outputs = float64_errors(torch, ref64, expected, got, errors)
    if over_budget(elapsed, budget_s):
        raise Unmeasured(
            f"the float64 reference took {elapsed:.1f} s; with its {len(OPERAND_ROUNDINGS)} "
            f"emulations the measurement would exceed its {budget_s:.0f} s budget"
        )
    # Every emulation's numbers stay on the device until all are computed: one fetch in all.
    pending = []
    rounded = None if ahead is None else ahead.rounded
    for source, derived in emulation_sources(torch, model, trial.inputs, ref64, rounded):
        if expected is None:
            expected = trial.expected()
        for out in outputs:
            j = out["index"]
            sums = emulation_sums(torch, ref64[j], got[j], expected[j], source[j], derived)
            n = SUMS_PER_EMULATION
            pending.extend((out, name, sums[n * k : n * (k + 1)]) for k, (name, _bits) in enumerate(derived))
        # Let go of this forward's outputs, and of expected outputs drawn again, before the
        # next forward runs, not after it.
        del source
        expected = None
    if pending:
        fetched = iter(torch.cat([sums for _out, _name, sums in pending]).tolist())
        for out, name, _sums in pending:
            (emul,), _ = error_stats_from([next(fetched) for _ in range(4)], 1)
            candidate, reference = (fingerprint_from([next(fetched) for _ in range(4)]) for _ in range(2))
            out["emulations"].append(
                {"name": name, "rel_rms": emul["rel_rms"], "candidate": candidate, "reference": reference}
            )
    return outputs, errors


def over_budget(elapsed_s, budget_s):
    """Whether a measurement whose float64 reference took `elapsed_s` would exceed `budget_s`:
    each operand rounding costs about one more float64 forward."""
    return elapsed_s * FORWARDS > budget_s


def float64_errors(torch, ref64, expected, got, errors):
    """Each floating-point output's errors against the float64 reference `ref64`, appended to
    `errors` as they are known (so that they outlive an `Unmeasured` raised here), and the
    measurement's outputs, their emulations still to come."""
    floating = [j for j, e in enumerate(expected) if e.is_floating_point()]
    if not floating:
        raise Unmeasured("the task has no floating-point output")
    if len(ref64) != len(expected):
        raise Unmeasured(f"the float64 reference returned {len(ref64)} outputs, the reference {len(expected)}")
    outputs = []
    for j in floating:
        if not isinstance(ref64[j], torch.Tensor) or ref64[j].dtype != torch.float64:
            kind = getattr(ref64[j], "dtype", type(ref64[j]).__name__)
            raise Unmeasured(f"output {j} of the float64 reference is {kind}: the task fixes its dtype internally")
        if ref64[j].shape != expected[j].shape:
            raise Unmeasured(f"output {j} of the float64 reference has shape {list(ref64[j].shape)}")
        (cand, own), count = error_stats(torch, ref64[j], [got[j], expected[j]])
        errors.append({"index": j, "candidate": cand["rel_rms"], "reference": own["rel_rms"]})
        if own["rel_rms"] is None or own["rel_rms"] > SAME_COMPUTATION:
            raise Unmeasured(
                f"output {j} of the reference differs from its float64 copy by {own['rel_rms']} "
                "(relative RMS): they do not compute the same thing (random ops, or dtype-dependent code)"
            )
        outputs.append(
            {
                "index": j,
                "dtype": common.dtype_name(expected[j].dtype),
                "elements": count,
                "candidate": cand,
                "reference": own,
                "emulations": [],
            }
        )
    return outputs


def round_output(torch, value, bits):
    """A floating-point output rounded to `bits` mantissa bits (nearest even), in float64."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    return round_mantissa(torch, value, bits, "nearest").to(torch.float64)


def emulation_sources(torch, model, draw, ref64, rounded=None):
    """Yields `(outputs, emulations)`: the outputs of one float64 computation (the float64
    reference itself, then one forward per operand rounding on the inputs `draw()` gives, taken
    out of `rounded` where it holds them by name) and the emulations derived from them, each
    `(name, bits)`: those outputs (`bits` None) or those outputs rounded to `bits`. In
    `emulations`' order; a yielded list is valid until the next one is asked for."""
    yield ref64, list(OUTPUT_ROUNDINGS)
    for name, bits, mode, with_output in OPERAND_ROUNDINGS:
        outputs = rounded.pop(name) if rounded is not None else run_float64_on(torch, model, draw, bits, mode)
        yield outputs, [(name, None)] + ([(f"{name}+out", bits)] if with_output else [])
        del outputs


def emulations(torch, model, inputs, ref64):
    """Yields `(name, outputs)` for every emulation (one float64 forward per operand rounding);
    a yielded list is valid until the next one is asked for."""
    for outputs, derived in emulation_sources(torch, model, lambda: inputs, ref64):
        for name, bits in derived:
            yield name, outputs if bits is None else [round_output(torch, o, bits) for o in outputs]


class Precomputed:
    """A measurement's float64 forwards, computed before the candidate's outputs exist: the
    float64 reference (`ref64`), the seconds it took with its wait for the device
    (`elapsed_s`, which the budget is judged by), and each operand rounding's outputs by name
    (`rounded`; None where the reference alone already exceeded the budget)."""

    def __init__(self, ref64, elapsed_s, rounded):
        self.ref64 = ref64
        self.elapsed_s = elapsed_s
        self.rounded = rounded


def precompute(torch, model, inputs, budget_s, sync):
    """Every float64 forward `measure` runs on `inputs`, in its order: none of them depends on
    the candidate's outputs."""
    started = time.perf_counter()
    ref64 = run_float64(torch, model, inputs)
    sync()
    elapsed = time.perf_counter() - started
    if over_budget(elapsed, budget_s):
        return Precomputed(ref64, elapsed, None)
    rounded = {name: run_float64(torch, model, inputs, bits, mode) for name, bits, mode, _ in OPERAND_ROUNDINGS}
    sync()
    return Precomputed(ref64, elapsed, rounded)


class Ahead:
    """`precompute` on a thread of the referee, begun while the candidate's process compiles
    and runs the trial to be measured, when the referee has nothing else to do. `wait` gives
    the `Precomputed`, or None where it failed (out of memory, an op without float64):
    `measure` then runs the forwards itself and reports what stops them as it always did."""

    def __init__(self, torch, trial, model, inputs, budget_s, sync):
        self.trial = trial
        self.seconds = 0.0
        self.error = None
        self._result = None
        self._thread = threading.Thread(
            target=self._run, args=(torch, model, inputs, budget_s, sync), name="precision-ahead", daemon=True
        )
        self._thread.start()

    def _run(self, torch, model, inputs, budget_s, sync):
        started = time.perf_counter()
        try:
            self._result = precompute(torch, model, inputs, budget_s, sync)
        except Exception as exc:  # `measure` meets it again and reports it
            self.error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        self.seconds = time.perf_counter() - started

    def wait(self):
        """Blocks until the forwards are done; their `Precomputed`, or None."""
        self._thread.join()
        return self._result


@contextlib.contextmanager
def matched(torch, cls, device):
    """Runs the reference at a measured precision class, for the matched timing: `tf32` allows
    TF32 in cuBLAS and cuDNN, `fp32` forbids it, `fp16`/`bf16` run under autocast; the backend
    flags are restored afterwards. `None` changes nothing."""
    if cls is None:
        yield
        return
    if cls in ("fp16", "bf16"):
        dtype = torch.float16 if cls == "fp16" else torch.bfloat16
        with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
            yield
        return
    if cls not in ("fp32", "tf32"):
        raise ValueError(f"unknown precision class {cls!r}")
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    allow = cls == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
