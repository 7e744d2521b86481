"""Pieces shared by the referee, the candidate process and the audit process: start-up, the
request loop, the channel, module loading, tensor transport, timing, and the output comparison.

This file is trusted: the judge writes it, the candidate never edits it. It must stay small and
boring. Everything the judge decides (verdicts, comparisons, statistics) happens in Rust or in
the referee (the audit uses the same comparison); the candidate process only runs the candidate
and reports what it saw. It imports this file too, but its copy is its own: nothing it does to it
reaches the referee's.
"""

import base64
import gc
import importlib.util
import json
import os
import pickle
import re
import socket
import sys

from crucible_harness import protocol

# Where a referee forked by the zygote finds its channel; a spawned process is told in
# CRUCIBLE_CHANNEL_FD.
CHANNEL_FD = 3


def channel_fd():
    """The descriptor of this process's channel to the judge. Read at the call, not at import:
    the zygote imports this module before it forks referees with an environment of their own."""
    return int(os.environ.get("CRUCIBLE_CHANNEL_FD", CHANNEL_FD))


class Channel:
    """Newline-delimited JSON over the private socket the judge passes (see `channel_fd`).

    stdout and stderr are never part of the protocol, so whatever the candidate prints is just
    text in a log.
    """

    def __init__(self, fd):
        self.sock = socket.socket(fileno=fd)
        self.reader = self.sock.makefile("rb")

    def send(self, msg):
        self.sock.sendall(json.dumps(msg, allow_nan=True).encode() + b"\n")

    def recv(self):
        line = self.reader.readline()
        if not line:
            sys.exit(0)
        return json.loads(line)


class UnknownOp(Exception):
    """A request this process does not serve: the judge and the harness disagree."""

    def __init__(self, op, known):
        super().__init__(f"unknown op {op!r} (this process serves: {', '.join(sorted(known))})")


def start(where, fd=None, warm=None):
    """The one start-up of every harness process: opens the channel, imports torch, brings the
    device up, runs `warm(torch, device)` if given, and says hello. A device that cannot be used
    is the machine's fault (or the sandbox's), never a candidate's: the hello says so and the
    process exits with status 1. Returns (channel, torch, device name)."""
    chan = Channel(channel_fd() if fd is None else fd)
    import torch

    device = os.environ.get("CRUCIBLE_DEVICE", "cpu")
    try:
        bring_up(torch, device)
        if warm is not None:
            warm(torch, device)
    except Exception as exc:
        error = f"cannot use {device} in {where}: {exc}"
        # Also in the log: a reader of the hello may only see that the process then exited.
        print(error, file=sys.stderr)
        chan.send({"ok": False, "error": error})
        sys.exit(1)
    # Everything imported so far (torch, triton: a few hundred thousand objects) is never
    # garbage; frozen, the collector's full passes no longer walk it. Unfrozen, one such pass
    # came once in every candidate's process, in the middle of a trial under its share of the
    # device (or in a timed phase): a later trial's run took 0.06-0.07 s on this 2-core CPU
    # against 0.002-0.003 s for the others, and 0.15-0.2 s with a second evaluation beside it
    # (`bench-throughput`'s later-trial shares). The same in a referee forked from the zygote.
    gc.freeze()
    chan.send({"ok": True, "ready": True})
    return chan, torch, device


def settle_triton_key():
    """Settles `triton_key()` before anything compiles. Triton keys every kernel it compiles by a
    SHA-256 of its own sources and of libtriton.so (415 MB in 3.6: about 0.36 CPU-s), cached per
    process but without a lock, so the autotuner's configs compiled on threads each computed it
    again (six threads, six passes over the library: `scripts/probe/triton_key_threads.py`).
    The value comes from `CRUCIBLE_TRITON_KEY` where a trusted process computed it for this same
    Triton (the warm pool's seed, `triton_seed.rs`), else it is computed here, once. Only the
    keys of this process's own Triton cache depend on it. Returns where it came from, or None
    where nothing compiles (Triton's interpreter) or Triton lacks it (then it is left alone)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None
    import functools

    import triton
    from triton.runtime import cache

    computed = getattr(cache, "triton_key", None)
    if not callable(computed):
        return None
    given = os.environ.get("CRUCIBLE_TRITON_KEY", "")
    if not given.startswith(triton.__version__):
        try:
            computed()
        except Exception as exc:
            # Only a head start lost: the first compile computes it again, and fails where it must.
            print(f"Triton's key not computed ahead: {exc}", file=sys.stderr)
            return None
        return "computed"
    settled = functools.lru_cache()(lambda: given)
    # `from .cache import triton_key` (the autotuner) holds the function under its own name.
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("triton") and getattr(module, "triton_key", None) is computed:
            module.triton_key = settled
    return "given"


def serve(chan, handlers, on_error, side, catch=Exception):
    """The one request loop: reads a request, dispatches it by its `op` to `handlers[op](msg)`,
    and sends the reply, until the judge closes the channel.

    A handler returns its reply as a dict; a reply is a success (`"ok": true` is added) unless it
    says `"ok": false` itself. Every request is checked against the protocol (`protocol.json`,
    generated from the judge's types) before it is handled, and every reply before it is sent:
    `side` (referee, candidate, audit) names this process's part of it. An exception of type
    `catch` raised by a handler, a request that does not fit, a reply that does not fit, and a
    request for an op this process does not serve become `on_error(exc, msg)`: each process
    decides who is charged for it and says so in its own error shape."""
    while True:
        msg = chan.recv()
        op = msg.get("op")
        try:
            handler = handlers.get(op)
            if handler is None:
                raise UnknownOp(op, handlers)
            protocol.check_request(side, msg)
            reply = {"ok": True, **handler(msg)}
            protocol.check_reply(side, op, reply)
        except catch as exc:
            reply = on_error(exc, msg)
        chan.send(reply)


def b64_pickle(obj):
    return base64.b64encode(pickle.dumps(obj)).decode()


def b64_unpickle(text):
    # Only ever called on data that the referee (trusted) produced.
    return pickle.loads(base64.b64decode(text))


def load_module(path, name, profile):
    """Imports a task or candidate file as a module, applying a size profile if asked."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if profile != "full":
        profiles = getattr(module, "PROFILES", None) or {}
        if profile not in profiles:
            raise KeyError(f"task has no size profile {profile!r} (has: {sorted(profiles)})")
        for key, value in profiles[profile].items():
            setattr(module, key, value)
    return module


def peek_profiles(path):
    """Reads a task's PROFILES without importing it twice: one import, then the profile is
    applied by `load_module`."""
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PROFILES" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def bring_up(torch, device):
    """Makes `device` this process's current device and starts its context. Triton launches on
    the current device, whatever tensors a kernel is given, so nothing may depend on which GPU
    happens to be current (the judge also shows each process only its own GPU)."""
    if device.startswith("cuda"):
        dev = torch.device(device)
        torch.cuda.set_device(dev)
        torch.empty(1, device=dev)


def dtype_name(dtype):
    """`float32`, never `torch.float32`: the one spelling of a dtype in every message."""
    return str(dtype).removeprefix("torch.")


def sync(torch, device):
    """Waits for the device's queued work; a no-op on the CPU, where nothing is queued. The
    current device is the process's one GPU (`bring_up`)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_context(torch, device):
    """Inputs and weights are created directly on the target device (no CPU staging)."""
    return torch.device(device)


def seed_all(torch, seed):
    torch.manual_seed(seed)


def tensor_bytes(torch, values):
    """The bytes of the tensors among `values`."""
    return sum(x.numel() * x.element_size() for x in values if isinstance(x, torch.Tensor))


def as_output_list(torch, out):
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def env_info(torch, device):
    import platform

    info = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
        "device_name": None,
        "driver": None,
        "triton": None,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # the referee does not need triton
        pass
    if device.startswith("cuda"):
        info["device_name"] = torch.cuda.get_device_name(torch.device(device))
        try:
            # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." or
            # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  ...".
            with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
                found = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", f.readline())
            info["driver"] = found.group(1) if found else None
        except OSError:
            pass
    return info


# --- tensor transport -------------------------------------------------------------------------
#
# The referee owns every buffer the candidate touches: the inputs and the output slots. It hands
# the candidate descriptors; the candidate maps them, runs, and copies its outputs into the slots.
# `shm` maps files in a tmpfs directory (CPU, and GPU staging through host memory); `cuda_ipc`
# shares device allocations directly.


def share_tensor(torch, tensor, transport, directory, tag):
    if transport == "cuda_ipc":
        from torch.multiprocessing.reductions import reduce_tensor

        _rebuild, args = reduce_tensor(tensor)
        return {"kind": "cuda_ipc", "args": args}
    path = os.path.join(directory, f"{tag}.bin")
    desc = {
        "kind": "shm",
        "path": path,
        "dtype": dtype_name(tensor.dtype),
        "shape": list(tensor.shape),
        "numel": tensor.numel(),
        "device": str(tensor.device),
        "mapped": torch.from_file(path, shared=True, size=max(tensor.numel(), 1), dtype=tensor.dtype),
    }
    write_shared(desc, tensor)
    return desc


def write_shared(desc, tensor):
    """Writes `tensor`'s values into the file an shm descriptor maps (its shape and dtype)."""
    desc["mapped"][: desc["numel"]].copy_(tensor.detach().contiguous().reshape(-1).to("cpu"))


def open_shared(torch, desc):
    if desc["kind"] == "cuda_ipc":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        return rebuild_cuda_tensor(*desc["args"]), None
    dtype = getattr(torch, desc["dtype"])
    numel = max(desc["numel"], 1)
    mapped = torch.from_file(desc["path"], shared=True, size=numel, dtype=dtype)
    host = mapped[: desc["numel"]].view(desc["shape"])
    if desc["device"] == "cpu":
        return host, None
    # Staged through host memory: the device copy is what the candidate sees; `host` is where
    # it must be written back for the referee to read.
    return host.to(desc["device"]), host


def public_desc(desc):
    """The part of a descriptor that travels (the mapping itself stays with its owner)."""
    return {k: v for k, v in desc.items() if k != "mapped"}


# --- timing -------------------------------------------------------------------------------------


def time_forward(torch, fn, args, warmup, iters, flush_bytes, device, on_output=None):
    """Times `fn(*args)` with CUDA events, an L2 flush before every iteration and a device-wide
    synchronize before the end event, so work on side streams is counted too. `on_output` sees
    each timed iteration's output, after the timing of that iteration."""
    dev = torch.device(device)
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device=dev)
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize(dev)
        samples = []
        for _ in range(iters):
            flush.zero_()
            # The flush must be over before the window opens: the events then bracket every
            # kernel the forward launches, side streams included, and no more (see timing.rs).
            torch.cuda.synchronize(dev)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args)
            torch.cuda.synchronize(dev)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
            if on_output is not None:
                on_output(len(samples) - 1, out)
            del out
    return samples


# --- comparison ---------------------------------------------------------------------------------
#
# Used by the referee (the verdict) and the audit (null candidates), so that a null that passes
# the audit would pass the judge's trials (the precision stage may still refuse it: 10% or more
# off a float64 reference, Rust's `precision::beyond_rounding`).

# Outputs larger than this are compared in slices: the comparison works in float64 with several
# temporaries, and KernelBench level 1 has outputs of 1.6e9 elements.
COMPARE_CHUNK = 1 << 25

# A relative error is taken against |expected| or this, whichever is larger.
RELATIVE_FLOOR = 1e-12


def tolerance_for(torch, tolerance, tensor):
    """(atol, rtol) for an output of this dtype, from the judge's tolerance profile
    (`{"fp32": [atol, rtol], "half": [atol, rtol]}`): fp16 and bf16 get the half entry."""
    half = tensor.dtype in (torch.float16, torch.bfloat16)
    return tolerance["half" if half else "fp32"]


def compare(torch, exp, got, atol, rtol):
    """Per-output error statistics, in slices for very large outputs (statistics combined).

    The statistics of every slice come back from the device in one transfer: on a GPU that
    other processes keep busy, each wait for a result waits for their time slices too (measured
    on an H200: 4.7 ms a wait beside two busy processes, 11.5 ms beside five, against 0.04 ms
    alone; `scripts/probe/sync_latency.py`), and a 1.6e9-element output has 48 slices."""
    pending = Comparison(torch, exp, got, atol, rtol)
    return pending.result(pending.statistics.tolist() if pending.statistics is not None else [])


class Comparison:
    """`compare` in two halves, so that a caller can fetch several comparisons' statistics (and
    other flags) in one transfer: `statistics` (blocks x 7, float64, on the device; None for an
    empty output) is queued at construction, `result(rows)` reads the fetched rows."""

    def __init__(self, torch, exp, got, atol, rtol):
        self.torch, self.exp, self.atol, self.rtol = torch, exp, atol, rtol
        total = exp.numel()
        if total == 0:
            self.blocks, self.statistics = [], None
            return
        if total <= COMPARE_CHUNK:
            # One block, in the output's own shape (a mismatch is located by its index there).
            self.blocks = [(None, exp, got)]
        else:
            flat_exp, flat_got = exp.reshape(-1), got.reshape(-1)
            self.blocks = [
                (
                    (start, min(start + COMPARE_CHUNK, total)),
                    flat_exp[start : start + COMPARE_CHUNK],
                    flat_got[start : start + COMPARE_CHUNK],
                )
                for start in range(0, total, COMPARE_CHUNK)
            ]
        self.statistics = block_statistics_of(torch, exp, got, [(e, g) for _span, e, g in self.blocks], atol, rtol)

    def result(self, fetched):
        """`(stats, problem)` from the fetched rows of `statistics`, one per block."""
        exp, total = self.exp, self.exp.numel()
        stats = {
            "shape": list(exp.shape),
            "dtype": dtype_name(exp.dtype),
            "numel": total,
            "max_abs": 0.0,
            "mean_abs": 0.0,
            "max_rel": 0.0,
            "mean_rel": 0.0,
            "mismatched": 0,
        }
        problem = None
        for (span, e, g), (max_abs, mean_abs, max_rel, mean_rel, mismatched, nonfinite, all_nan) in zip(
            self.blocks, fetched, strict=True
        ):
            weight = e.numel() / total
            stats["max_abs"] = max(stats["max_abs"], max_abs)
            stats["max_rel"] = max(stats["max_rel"], max_rel)
            stats["mean_abs"] += mean_abs * weight
            stats["mean_rel"] += mean_rel * weight
            stats["mismatched"] += int(mismatched)
            if problem is None and (mismatched or nonfinite):
                problem = block_problem(
                    self.torch, e, g, self.atol, self.rtol, int(mismatched), int(nonfinite), bool(all_nan), max_abs
                )
                if span is not None:
                    problem = f"in flat elements [{span[0]}, {span[1]}): {problem}"
        if len(self.blocks) == 1:
            # Exactly the block's own values (a weighted sum of one term could round them).
            stats["mean_abs"], stats["mean_rel"] = fetched[0][1], fetched[0][3]
        return stats, problem


def block_statistics_of(torch, exp, got, blocks, atol, rtol):
    """`block_statistics` of every `(expected, got)` block of one output, stacked: on a GPU, for
    outputs of `fused_stats.FUSED_MIN_ELEMENTS` or more, one Triton pass per block instead of
    about thirty torch operations (`fused_stats.py`)."""
    # Imported here: the candidate's harness imports this module too, and never compares.
    from crucible_harness import fused_stats

    if fused_stats.comparable(torch, exp, got):
        fused = fused_stats.guarded(torch, fused_stats.compare_statistics, blocks, atol, rtol)
        if fused is not None:
            return fused
    return torch.stack([block_statistics(torch, e, g, atol, rtol) for e, g in blocks])


def mismatch_masks(torch, expected, got, atol, rtol):
    """`(exp, act, diff, rel, mismatched, bad_nonfinite)` of one block, in float64: NaN/Inf where
    the reference has none fails; where the reference has them, they must match."""
    exp = expected.detach().to(torch.float64)
    act = got.detach().to(torch.float64)
    exp_finite = torch.isfinite(exp)
    act_finite = torch.isfinite(act)
    bad_nonfinite = (exp_finite & ~act_finite) | (~exp_finite & ~(act.eq(exp) | (exp.isnan() & act.isnan())))
    diff = (act - exp).abs()
    diff = torch.where(exp_finite & act_finite, diff, torch.zeros_like(diff))
    rel = diff / exp.abs().clamp_min(RELATIVE_FLOOR)
    within = diff <= atol + rtol * exp.abs()
    mismatched = (~within & exp_finite & act_finite) | bad_nonfinite
    return exp, act, diff, rel, mismatched, bad_nonfinite


def block_statistics(torch, expected, got, atol, rtol):
    """One block's statistics as a float64 vector left on the device: max_abs, mean_abs, max_rel,
    mean_rel, mismatched elements, NaN/Inf mismatches, whether every element of `got` is NaN.
    The candidate's shape and dtype were checked by the slot copy."""
    _exp, act, diff, rel, mismatched, bad_nonfinite = mismatch_masks(torch, expected, got, atol, rtol)
    return torch.stack(
        [
            diff.max(),
            diff.mean(),
            rel.max(),
            rel.mean(),
            mismatched.sum().to(torch.float64),
            bad_nonfinite.sum().to(torch.float64),
            act.isnan().all().to(torch.float64),
        ]
    )


def block_problem(torch, expected, got, atol, rtol, mismatched, nonfinite, all_nan, max_abs):
    """What is wrong with a block whose statistics showed a mismatch (the failing path only: it
    locates the first mismatch with further transfers)."""
    if nonfinite:
        if all_nan:
            return "every element is NaN (was the output written at all?)"
        return f"{nonfinite} elements are NaN/Inf where the reference is finite (or the reverse)"
    exp, act, _diff, _rel, mask, _bad = mismatch_masks(torch, expected, got, atol, rtol)
    where = mask.reshape(-1).nonzero()[0].item()
    idx = unravel(where, expected.shape)
    return (
        f"{mismatched} of {expected.numel()} elements differ beyond atol={atol}, rtol={rtol}; "
        f"max abs error {max_abs:.6g}; first at index {idx}: "
        f"expected {exp.reshape(-1)[where].item():.6g}, got {act.reshape(-1)[where].item():.6g}"
    )


def same_bits(torch, a, b):
    """Bitwise equality (NaN-safe, unlike torch.equal on floats)."""
    return not differ_bitwise(torch, [(a, b)])[0]


def differ_bitwise(torch, pairs):
    """For each `(a, b)`: whether they differ in shape or in any bit (NaN-safe, -0.0 is not 0.0),
    with one transfer from the device for all of them (see `compare`)."""
    flags = bitwise_flags(torch, pairs)
    return bitwise_result(pairs, flags.tolist() if flags is not None else [])


def bitwise_flags(torch, pairs):
    """`differ_bitwise`'s first half: one flag (bool, on the device) for each pair of the same
    shape and dtype, stacked; None where there is none."""
    flags = [
        a.contiguous().reshape(-1).view(torch.uint8).ne(b.contiguous().reshape(-1).view(torch.uint8)).any()
        for a, b in pairs
        if a.shape == b.shape and a.dtype == b.dtype
    ]
    return torch.stack(flags) if flags else None


def bitwise_result(pairs, fetched):
    """`differ_bitwise`'s second half, from the fetched flags of `bitwise_flags`."""
    fetched = iter(fetched)
    return [bool(next(fetched)) if a.shape == b.shape and a.dtype == b.dtype else True for a, b in pairs]


def unravel(flat, shape):
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(idx))
