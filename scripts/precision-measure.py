#!/usr/bin/env python3
"""Measures what the judge's precision classes look like, to derive their thresholds.

For representative ops (matmul of several K, conv, softmax, layernorm, reductions, elementwise)
on randn (and, where it matters, rand) inputs, computes the error against float64 of:
  fp32      torch in float32 (the fp32 reference as a task runs it);
  fp32-seq  float32 with sequential accumulation (an honest kernel's worst case; matmul, sum);
  tf32-rn   operands rounded to 10 mantissa bits, nearest even, computed in float32
            (= fp16 casts in range, and cuBLAS TF32);
  tf32-rz   operands truncated to 10 mantissa bits, computed in float32 (tensor cores reading
            fp32 registers: Triton's default tl.dot);
  fp16-tc   (matmul) fp16 operands, accumulator truncated to 21 bits every 16 terms: a stand-in
            for fp16 tensor cores, whose accumulation error can exceed the operands' rounding;
  bf16      operands rounded to 7 mantissa bits, computed in float32;
  fp16-all  everything in float16 (torch .half()), result back to float32;
  bf16-all  everything in bfloat16;
on a GPU also torch with TF32 allowed (tf32-torch), and for matmul a Triton kernel with `tl.dot`'s
default, with input_precision="ieee", and with operands cast to fp16 / bf16 inside the kernel
(on the CPU through Triton's interpreter, which computes `tl.dot` in float32 and honours casts).
For each: rel_rms, max_norm, the equivalent mantissa bits (10 + log2(rel_rms of the `rn10+out`
emulation / rel_rms)) and the fingerprint against every emulation (the coefficient of that
rounding's error pattern in the error, and its noise), computed by the same functions as the
referee's (python/crucible_harness/precision.py).

Usage: scripts/precision-measure.py [--device cpu|cuda] [--seed N]
(CPU: the judge's venv, e.g. $CRUCIBLE_PYTHON scripts/precision-measure.py)
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from crucible_harness import precision  # noqa: E402


class MatMul(nn.Module):
    def forward(self, a, b):
        return a @ b


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class LayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(4096)

    def forward(self, x):
        return self.norm(x)


class RowSum(nn.Module):
    def forward(self, x):
        return x.sum(dim=-1)


class GeluMul(nn.Module):
    def forward(self, x, y):
        return F.gelu(x) * y


class Relu(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def sequential(model, args):
    """fp32 with sequential accumulation over the reduced dimension, where the op has one."""
    if isinstance(model, MatMul):
        a, b = args
        acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
        for k in range(a.shape[1]):
            acc += a[:, k : k + 1] * b[k : k + 1, :]
        return [acc]
    if isinstance(model, RowSum):
        return [torch.cumsum(args[0], dim=-1)[..., -1].contiguous()]
    return None


def tensor_cores(model, args):
    """fp16 operands with an accumulator truncated to 21 mantissa bits after every 16 terms of K:
    a stand-in for an H200's fp16 tensor cores, whose accumulation added 2.4e-5 relative error
    to a 4096^3 matmul on rand inputs (measured, with only 5.5e-6 from the operands' rounding)."""
    if not isinstance(model, MatMul):
        return None
    a, b = (precision.round_mantissa(torch, x, 10, "nearest") for x in args)
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
    for k in range(0, a.shape[1], 16):
        acc = precision.round_mantissa(torch, acc + a[:, k : k + 16] @ b[k : k + 16, :], 21, "truncate")
    return [acc]


def cases(device):
    def randn(*shape):
        return lambda: torch.randn(*shape, device=device)

    def rand(*shape):
        return lambda: torch.rand(*shape, device=device)

    m = 256
    out = []
    for k in (64, 1024, 4096, 16384):
        out.append((f"matmul K={k} randn", MatMul(), [randn(m, k), randn(k, m)]))
    for k in (1024, 4096, 16384):
        out.append((f"matmul K={k} rand", MatMul(), [rand(m, k), rand(k, m)]))
    out += [
        ("conv2d 3x3 C=32 randn", Conv(), [randn(8, 32, 32, 32)]),
        ("softmax 4096 randn", Softmax(), [randn(256, 4096)]),
        ("layernorm 4096 randn", LayerNorm(), [randn(256, 4096)]),
        ("row sum 4096 randn", RowSum(), [randn(256, 4096)]),
        ("row sum 4096 rand", RowSum(), [rand(256, 4096)]),
        ("gelu(x)*y randn", GeluMul(), [randn(256, 4096), randn(256, 4096)]),
        ("relu randn", Relu(), [randn(256, 4096)]),
    ]
    return out


def variants(device):
    def rounded(bits, mode):
        def run(model, args):
            m = precision.model_in_float64(torch, model, bits, mode).float()
            return [m(*[precision.round_mantissa(torch, x, bits, mode) for x in args])]

        return run

    def in_dtype(dtype):
        def run(model, args):
            import copy

            m = copy.deepcopy(model).to(dtype)
            return [m(*[x.to(dtype) for x in args]).float()]

        return run

    def plain(model, args):
        return [model(*args)]

    def tf32_torch(model, args):
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            return [model(*args)]
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    out = [
        ("fp32", plain),
        ("fp32-seq", sequential),
        ("tf32-rn", rounded(10, "nearest")),
        ("tf32-rz", rounded(10, "truncate")),
        ("fp16-tc", tensor_cores),
        ("bf16", rounded(7, "nearest")),
        ("fp16-all", in_dtype(torch.float16)),
        ("bf16-all", in_dtype(torch.bfloat16)),
    ]
    if device.startswith("cuda"):
        out.insert(1, ("tf32-torch", tf32_torch))
    return out


TRITON_VARIANTS = ("triton-default", "triton-ieee", "triton-fp16cast", "triton-bf16cast")


def triton_matmul(device):
    """A plain Triton matmul whose operand handling differs per variant: `tl.dot`'s default
    (TF32 on a GPU, float32 numpy in the interpreter), `input_precision="ieee"`, and operands cast
    to fp16 or bf16 in the kernel (what a candidate does to go faster). None without Triton."""
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, M, N, K, MODE: tl.constexpr, INTERPRET: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
        offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
            b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :])
            if MODE == 0:
                acc = tl.dot(a, b, acc)
            elif MODE == 1:
                acc = tl.dot(a, b, acc, input_precision="ieee")
            elif MODE == 2:
                acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)
            elif INTERPRET:
                # The interpreter's bf16 tl.dot returns garbage: same products from fp32 copies
                # (it also truncates instead of rounding to nearest, unlike a GPU).
                acc = tl.dot(a.to(tl.bfloat16).to(tl.float32), b.to(tl.bfloat16).to(tl.float32), acc)
            else:
                acc = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc)

    def run(mode):
        def matmul(model, args):
            if not isinstance(model, MatMul):
                return None
            a, b = (x.contiguous() for x in args)
            (m, k), n = a.shape, b.shape[1]
            c = torch.empty(m, n, device=a.device, dtype=torch.float32)
            kernel[(m // 64, n // 64)](a, b, c, m, n, k, MODE=mode, INTERPRET=device == "cpu", BM=64, BN=64, BK=32)
            return [c]

        return matmul

    return [(name, run(mode)) for mode, name in enumerate(TRITON_VARIANTS)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = args.device
    if device.startswith("cuda"):
        # The fp32 reference as KernelBench runs it: PyTorch's defaults (cuDNN TF32 on).
        print(f"# {torch.cuda.get_device_name()}  cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32} "
              f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}")
    print(f"# torch {torch.__version__}, device {device}, seed {args.seed}")
    print("# rel_rms and max_norm against float64; bits = 10 + log2(rel_rms(rn10+out) / rel_rms); then")
    print("# per emulation the fingerprint `coefficient (noise)`: 1 when the error contains that rounding")
    names = [n for n, _b in precision.OUTPUT_ROUNDINGS]
    for n, _b, _m, with_out in precision.OPERAND_ROUNDINGS:
        names += [n, f"{n}+out"] if with_out else [n]
    print("| op | variant | rel_rms | max_norm | bits | " + " | ".join(names) + " |")
    print("|---" * (5 + len(names)) + "|")
    all_variants = variants(device) + (triton_matmul(device) or [])
    summary = {}
    for name, model, makers in cases(device):
        torch.manual_seed(args.seed)
        model = model.to(device)
        inputs = [make() for make in makers]
        with torch.no_grad():
            ref64 = precision.run_float64(torch, model, inputs)
            emulated = {emu: outs[0].clone() for emu, outs in precision.emulations(torch, model, inputs, ref64)}
            ref64 = ref64[0]
            sens = {emu: precision.error_stats(torch, ref64, [x])[0][0]["rel_rms"] for emu, x in emulated.items()}
            print(f"| {name} | *emulations (rel_rms)* | | | | " + " | ".join(f"{sens[n]:.3g}" for n in names) + " |")
            for variant, run in all_variants:
                if variant.startswith("triton") and ("K=16384" in name or not isinstance(model, MatMul)):
                    continue
                outputs = run(model, inputs)
                if outputs is None:
                    continue
                got = outputs[0]
                (stats,), _ = precision.error_stats(torch, ref64, [got])
                e = stats["rel_rms"]
                bits = 10 + math.log2(sens["rn10+out"] / e) if e > 0 else math.inf
                prints = {n: precision.fingerprint(torch, ref64, got, emulated[n]) for n in names}

                def cell(fp):
                    if fp["coefficient"] is None:
                        return "—"
                    return f"{fp['coefficient']:.3g} ({fp['coefficient_noise']:.1g})"

                cells = [cell(prints[n]) for n in names]
                print(f"| {name} | {variant} | {e:.3g} | {stats['max_norm']:.3g} | {bits:.1f} | " + " | ".join(cells) + " |")
                summary.setdefault(variant, []).append((name, bits, prints))
            del ref64, emulated
    print()
    print("# per variant: equivalent bits; per rounding family, the coefficient range over the ops,")
    print("# and the largest noise")
    families = {"10-bit nearest": ("rn10", "rn10+out", "out10"), "10-bit truncated": ("rz10",),
                "7-bit nearest": ("rn7", "rn7+out", "out7")}
    print("| variant | bits | " + " | ".join(families) + " |")
    print("|---" * (2 + len(families)) + "|")
    for variant, rows in summary.items():
        finite = [b for _n, b, _p in rows if math.isfinite(b)]
        cells = []
        for members in families.values():
            # Per op, the member closest to 1; then the range over the ops.
            best = []
            for _n, _b, prints in rows:
                fps = [prints[m] for m in members if prints[m]["coefficient"] is not None]
                if fps:
                    best.append(min(fps, key=lambda fp: abs(fp["coefficient"] - 1)))
            if best:
                lo = min(fp["coefficient"] for fp in best)
                hi = max(fp["coefficient"] for fp in best)
                noise = max(fp["coefficient_noise"] for fp in best)
                cells.append(f"{lo:.3g}–{hi:.3g} (≤{noise:.1g})")
            else:
                cells.append("—")
        bits = f"{min(finite):.1f}–{max(finite):.1f}" if finite else "inf"
        print(f"| {variant} | {bits} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
