"""The referee's statistics over large outputs on a GPU, one Triton kernel pass each: the
comparison of a trial's outputs (`common.compare`) and the precision measurement's sums.

`common.block_statistics` takes about thirty torch operations per slice of an output and
`precision.error_sums` / `precision.emulation_sums` about twenty per slice and emulation, each a
pass over the slice in float64: on an H200 the precision statistics were 1.5 s of 23_Softmax's
1.8 s measurement (a 1.6e9-element output), the largest piece of GPU time any evaluation of the
throughput set takes (`scripts/probe/gpu_time_per_stage.sh`), and each comparison of such an
output (every trial, the repeat, the timed output) dozens of passes more. Here each is one pass
that reads every operand once and leaves one row of partial sums per block; the rows are added
up by torch (a fixed order: the same numbers every run). The numbers are the torch path's, up to
the order of float64 additions; where a comparison finds a mismatch, the torch path still
locates it (`common.block_problem`).

Trusted, run by the referee only, and only for CUDA tensors of `FUSED_MIN_ELEMENTS` or more: a
kernel's first launch in a process compiles it (about a CPU-second), which a small output's
torch path does not cost, so the referee compiles them on a thread as soon as a trial's expected
outputs show a large one (`warm_in_background`). Anything else stays on the torch path
(`available` says which), and so does everything after a kernel failed (`guarded`)."""

import sys
import threading

from crucible_harness import common

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch path then takes every output
    triton = None

# At this many elements or more the statistics take the fused kernels on a GPU: four of the
# precision measurement's torch slices and two of the comparison's, each some twenty to thirty
# operations (per emulation, for the measurement) the kernels replace by one.
FUSED_MIN_ELEMENTS = 1 << 26

# Elements per program and warps per program (8 float64 elements of each operand per thread);
# rows of partial sums are `n / BLOCK` long (0.8 M rows, 75 MB, for 1.6e9 elements).
BLOCK = 2048
NUM_WARPS = 8

# Numbers per row of `emulation_block_sums`, in `precision.emulation_sums`' order.
EMULATION_SUMS = 12


def available(torch, *tensors):
    """Whether the fused kernels take these tensors: all on a CUDA device, the first one
    `FUSED_MIN_ELEMENTS` long or more, every one contiguous with as many elements (a copy of
    an output that size is gigabytes the memory estimate of the measurement does not hold)."""
    first = tensors[0]
    return (
        first.is_cuda
        and first.numel() >= FUSED_MIN_ELEMENTS
        and all(t.is_cuda and t.is_contiguous() and t.numel() == first.numel() for t in tensors)
        and triton is not None
        and not failed
    )


# Set once a kernel failed other than by running out of memory: the torch path from then on.
failed = False


def guarded(torch, compute, *args):
    """`compute(torch, *args)` on the fused path, or None (the caller takes the torch path) when
    it fails other than by running out of memory, which is the measurement's to report. The
    first failure goes to the referee's log."""
    global failed
    try:
        wait_warm()
        return compute(torch, *args)
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:
        failed = True
        print(f"fused statistics failed, the torch path takes over: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


# The thread compiling the kernels (`warm_in_background`), joined before their first launch.
warming = None


def warm_in_background(torch, expected):
    """Compiles, on a thread, the kernels that comparing and measuring these outputs (a trial's
    expected outputs, just computed: the candidate's have the same dtypes) will launch, so that
    their compile (about a CPU-second each, with the launcher's gcc) overlaps the candidate's
    first forward instead of holding a share of the GPU that timed phases wait for. Only for
    outputs the kernels will take, once per process."""
    outputs = [e for e in expected if e.is_floating_point() and comparable(torch, e, e)]
    start_warming(torch, [(e.dtype, e.device) for e in outputs])


def warm_ahead(torch, outputs, device):
    """`warm_in_background` for outputs known by their dtypes and sizes alone (the referee's
    sizing draws them on the meta device, before the first trial) that will be on `device`:
    on an H100 a 23_Softmax referee's first check waited 1.4-1.6 s for the compile, begun at its
    first trial's expected outputs, while the evaluation held the GPU's large-evaluation claim
    that every other such evaluation waits for; begun at the sizing, it overlaps the wait for
    that claim instead."""
    taken = [
        x
        for x in outputs
        if isinstance(x, torch.Tensor)
        and str(x.dtype).removeprefix("torch.") in COMPARED_DTYPES
        and x.numel() >= FUSED_MIN_ELEMENTS
    ]
    if str(device).startswith("cuda") and triton is not None and not failed:
        start_warming(torch, [(x.dtype, torch.device(device)) for x in taken])


def start_warming(torch, outputs):
    """Compiles the kernels for each `(dtype, device)` of `outputs` on a thread, once per
    process (the first call with any outputs starts it; later ones do nothing)."""
    global warming
    if warming is not None or not outputs:
        return

    def warm():
        try:
            for dtype, device in outputs:
                # `empty`, not `zeros`: nothing may run on the GPU here, outside the judge's share
                # of it (compiling and loading the kernels launches none).
                ref = torch.empty(16, dtype=torch.float64, device=device)
                out = torch.empty(16, dtype=dtype, device=device)
                rows = torch.empty((1, EMULATION_SUMS), dtype=torch.float64, device=device)
                launch = {"BLOCK": BLOCK, "num_warps": NUM_WARPS, "grid": (1,)}
                compare_block_sums.warmup(out, out, ref, rows, 16, **launch)._init_handles()
                error_block_sums.warmup(ref, out, out, rows, 16, **launch)._init_handles()
                emulation_block_sums.warmup(ref, ref, out, out, rows, 16, 0, **launch)._init_handles()
        except Exception as exc:
            # The first launch compiles again, and reports what fails there.
            print(f"warming the fused statistics failed: {type(exc).__name__}: {exc}", file=sys.stderr)

    warming = threading.Thread(target=warm, name="fused-stats-warm", daemon=True)
    warming.start()


def wait_warm():
    if warming is not None:
        warming.join()


if triton is not None:
    # At module level: Triton resolves a kernel's callees among its module's globals.
    @triton.jit
    def finite(v):
        return (v == v) & (tl.abs(v) < float("inf"))

    @triton.jit
    def load_f64(ptr, offs, inside):
        # Outside the tensor: 0, finite, so the caller's own `inside` must leave it out.
        return tl.load(ptr + offs, mask=inside, other=0.0).to(tl.float64)

    @triton.jit
    def store_fingerprint_sums(row, other, r, de, mask):
        # `precision.fingerprint_step` of `other`'s error and the emulated one over one block,
        # where `other` is finite too: <d, d>, <de, de>, <d, de>, the count.
        within = mask & finite(other)
        d = tl.where(within, other - r, 0.0)
        dw = tl.where(within, de, 0.0)
        tl.store(row + 0, tl.sum(d * d, 0))
        tl.store(row + 1, tl.sum(dw * dw, 0))
        tl.store(row + 2, tl.sum(d * dw, 0))
        tl.store(row + 3, tl.sum(within.to(tl.float64), 0))

    # `n` and `drop` unspecialized: a kernel compiled ahead on 16 elements serves any length.
    @triton.jit(do_not_specialize=["n"])
    def error_block_sums(ref_ptr, got_ptr, exp_ptr, out_ptr, n, BLOCK: tl.constexpr):
        # `precision.error_sums(ref64, [got, expected])` over one block: the element count,
        # <ref, ref>, each one's squared error, each one's largest error, over the elements
        # where all three are finite.
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        r = load_f64(ref_ptr, offs, inside)
        g = load_f64(got_ptr, offs, inside)
        x = load_f64(exp_ptr, offs, inside)
        mask = inside & finite(r) & finite(g) & finite(x)
        kept = tl.where(mask, r, 0.0)
        dg = tl.where(mask, g - kept, 0.0)
        dx = tl.where(mask, x - kept, 0.0)
        row = out_ptr + pid * 6
        tl.store(row + 0, tl.sum(mask.to(tl.float64), 0))
        tl.store(row + 1, tl.sum(kept * kept, 0))
        tl.store(row + 2, tl.sum(dg * dg, 0))
        tl.store(row + 3, tl.sum(dx * dx, 0))
        tl.store(row + 4, tl.max(tl.abs(dg), 0))
        tl.store(row + 5, tl.max(tl.abs(dx), 0))

    @triton.jit(do_not_specialize=["n"])
    def compare_block_sums(exp_ptr, got_ptr, tol_ptr, out_ptr, n, BLOCK: tl.constexpr):
        # `common.mismatch_masks` and `common.block_statistics` over one block, as sums: the
        # largest and summed |got - exp| where both are finite, the largest and summed relative
        # error (NaN where `exp` is NaN, as torch's clamp gives it), the elements beyond the
        # tolerance or non-finite where the other is not, the NaN/Inf mismatches alone, and
        # `got`'s NaN elements. `tol_ptr`: atol, rtol and `common.RELATIVE_FLOOR` as float64
        # (a float argument or literal would be float32, and 0.01 in float32 is not 0.01).
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        e = load_f64(exp_ptr, offs, inside)
        a = load_f64(got_ptr, offs, inside)
        e_finite, a_finite = finite(e), finite(a)
        e_nan, a_nan = e != e, a != a
        bad = inside & ((e_finite & ~a_finite) | (~e_finite & ~((a == e) | (e_nan & a_nan))))
        both = e_finite & a_finite
        diff = tl.where(both, tl.abs(a - e), 0.0)
        rel = tl.where(e_nan, float("nan"), diff / tl.maximum(tl.abs(e), tl.load(tol_ptr + 2)))
        within = diff <= tl.load(tol_ptr) + tl.load(tol_ptr + 1) * tl.abs(e)
        mismatched = inside & ((~within & both) | bad)
        rel_nan = rel != rel
        row = out_ptr + pid * 7
        tl.store(row + 0, tl.max(diff, 0))
        tl.store(row + 1, tl.sum(diff, 0))
        largest_rel = tl.max(tl.where(rel_nan, 0.0, rel), 0)
        tl.store(row + 2, tl.where(tl.sum(rel_nan.to(tl.int32), 0) > 0, float("nan"), largest_rel))
        tl.store(row + 3, tl.sum(rel, 0))
        tl.store(row + 4, tl.sum(mismatched.to(tl.float64), 0))
        tl.store(row + 5, tl.sum(bad.to(tl.float64), 0))
        tl.store(row + 6, tl.sum((a_nan & inside).to(tl.float64), 0))

    @triton.jit(do_not_specialize=["n", "drop"])
    def emulation_block_sums(ref_ptr, src_ptr, got_ptr, exp_ptr, out_ptr, n, drop, BLOCK: tl.constexpr):
        # One emulation of `precision.emulation_sums` over one block: `src` itself when `drop`
        # is 0, else `src` rounded to 23 - `drop` explicit bits as `precision.round_mantissa`
        # rounds (nearest, ties to even, on the float32 bits). Its 12 numbers: the element
        # count, <kept ref, kept ref>, the emulated error's square and largest value, then for
        # the candidate and for the reference's own output <d, d>, <de, de>, <d, de>, count.
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        r = load_f64(ref_ptr, offs, inside)
        s = load_f64(src_ptr, offs, inside)
        g = load_f64(got_ptr, offs, inside)
        x = load_f64(exp_ptr, offs, inside)
        s32 = s.to(tl.float32)
        bits = s32.to(tl.int32, bitcast=True)
        # Half an ulp minus one, plus the lowest kept bit: ties go to even. With `drop` 0 the
        # rounded value is computed but not used.
        half = (1 << tl.maximum(drop - 1, 0)) - 1
        bits = (bits + half + ((bits >> drop) & 1)) & ~((1 << drop) - 1)
        rounded = tl.where(finite(s32), bits.to(tl.float32, bitcast=True), s32).to(tl.float64)
        e = tl.where(drop > 0, rounded, s)
        mask = inside & finite(r) & finite(e)
        kept = tl.where(mask, r, 0.0)
        de = tl.where(mask, e - r, 0.0)
        row = out_ptr + pid * 12
        tl.store(row + 0, tl.sum(mask.to(tl.float64), 0))
        tl.store(row + 1, tl.sum(kept * kept, 0))
        tl.store(row + 2, tl.sum(de * de, 0))
        tl.store(row + 3, tl.max(tl.abs(de), 0))
        store_fingerprint_sums(row + 4, g, r, de, mask)
        store_fingerprint_sums(row + 8, x, r, de, mask)


def block_rows(torch, n, width, device):
    """One row of `width` partial sums per block of `n` elements."""
    return torch.empty((-(-n // BLOCK), width), dtype=torch.float64, device=device)


def fold(torch, partial, maxima):
    """The rows of partial sums added up; the columns in `maxima` take the largest instead."""
    total = partial.sum(0)
    for column in maxima:
        total[column] = partial[:, column].max()
    return total


def error_sums(torch, ref64, got, expected):
    """`precision.error_sums(torch, ref64, [got, expected])`, on the device, in one pass."""
    flat = [t.reshape(-1) for t in (ref64, got, expected)]
    n = flat[0].numel()
    partial = block_rows(torch, n, 6, ref64.device)
    error_block_sums[(partial.shape[0],)](*flat, partial, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return fold(torch, partial, (4, 5))


# The dtypes `compare_statistics` takes (anything else, integers and booleans included, stays on
# the torch path).
COMPARED_DTYPES = ("float16", "bfloat16", "float32", "float64")


def comparable(torch, expected, got):
    """Whether `compare_statistics` takes this output pair (`available`, and a floating dtype)."""
    return str(expected.dtype).removeprefix("torch.") in COMPARED_DTYPES and available(torch, expected, got)


def compare_statistics(torch, blocks, atol, rtol):
    """`common.block_statistics` of each `(expected, got)` block of one output, stacked: one
    pass per block. `atol`, `rtol`: the tolerance, as the torch path applies it."""
    rows = []
    tolerance = torch.tensor([atol, rtol, common.RELATIVE_FLOOR], dtype=torch.float64).to(blocks[0][0].device)
    for expected, got in blocks:
        n = expected.numel()
        partial = block_rows(torch, n, 7, expected.device)
        compare_block_sums[(partial.shape[0],)](
            expected.reshape(-1), got.reshape(-1), tolerance, partial, n, BLOCK=BLOCK, num_warps=NUM_WARPS
        )
        total = fold(torch, partial, (0, 2))
        rows.append(
            torch.stack(
                [
                    total[0],
                    total[1] / n,
                    total[2],
                    total[3] / n,
                    total[4],
                    total[5],
                    (total[6] == n).to(torch.float64),
                ]
            )
        )
    return torch.stack(rows)


def emulation_sums(torch, ref64, got, expected, source, derived):
    """`precision.emulation_sums`, on the device, one pass per emulation in `derived`."""
    flat = [t.reshape(-1) for t in (ref64, source, got, expected)]
    n = flat[0].numel()
    sums = []
    for _name, bits in derived:
        partial = block_rows(torch, n, EMULATION_SUMS, ref64.device)
        drop = 0 if bits is None else 23 - bits
        emulation_block_sums[(partial.shape[0],)](*flat, partial, n, drop, BLOCK=BLOCK, num_warps=NUM_WARPS)
        sums.append(fold(torch, partial, (3,)))
        del partial
    return torch.cat(sums)
