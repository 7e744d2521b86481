"""The referee: builds the reference, draws the inputs, holds the expected outputs, compares.

It is trusted and never runs candidate code. The judge (Rust) drives it over fd 3, one request at
a time; every reply is `{"ok": true, ...}` or `{"ok": false, "error": ...}` (an infrastructure or
task fault, never the candidate's).
"""

import contextlib
import os
import sys
import traceback

from crucible_harness import common, precision


class Referee:
    def __init__(self, torch, chan):
        self.torch = torch
        self.chan = chan
        self.trials = {}  # trial index -> (inputs, pristine inputs, expected, shared descriptors)
        self.kept = None  # the candidate's outputs of the first trial, for the repeat check
        self.precision_trial = None  # (pristine inputs, expected, candidate outputs), for `measure_precision`

    def init(self, msg):
        torch = self.torch
        self.device = msg["device"]
        self.transport = msg["transport"]
        self.scratch = msg["scratch"]
        self.tolerance = msg["tolerance"]
        self.inputs_on_host = msg.get("inputs_on_host", False)
        # CUDA IPC maps a whole cudaMalloc segment, not just the shared tensor, and the caching
        # allocator packs small tensors into shared segments: what the candidate maps must come
        # from segments that never hold the expected outputs.
        self.share_pool = torch.cuda.MemPool() if self.transport == "cuda_ipc" else None
        profile = msg["profile"]
        if profile == "auto":
            # Small sizes on the CPU (the Triton interpreter is slow), the file as written on a GPU.
            has_small = "small" in (getattr(common.peek_profiles(msg["task_path"]), "keys", lambda: [])())
            profile = "small" if self.device == "cpu" and has_small else "full"
        self.profile = profile
        self.module = common.load_module(msg["task_path"], "crucible_task", profile)
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.module, name):
                raise AttributeError(f"task file defines no `{name}`")
        with common.device_context(torch, self.device):
            init_inputs = list(self.module.get_init_inputs())
            common.seed_all(torch, msg["init_seed"])
            # No .eval(): KernelBench runs the reference in the module's default mode.
            self.model = self.module.Model(*init_inputs).to(self.device)
        return {
            "env": common.env_info(torch, self.device),
            "init_inputs": common.b64_pickle(init_inputs),
            "profile": self.profile,
        }

    def draw_inputs(self, seed):
        torch = self.torch
        common.seed_all(torch, seed)
        if self.inputs_on_host:
            # What KernelBench does: draw on the CPU, then copy. Kept only to measure the cost.
            inputs = list(self.module.get_inputs())
            return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]
        with common.device_context(torch, self.device):
            return list(self.module.get_inputs())

    def shared_memory(self):
        """Allocations the candidate will map (inputs, output slots) happen inside this."""
        if self.share_pool is None:
            return contextlib.nullcontext()
        return self.torch.cuda.use_mem_pool(self.share_pool)

    def prepare(self, msg):
        """Draws fresh inputs for one trial, computes the expected outputs, and shares the inputs
        plus NaN-poisoned output slots with the candidate."""
        torch = self.torch
        index = msg["trial"]
        with self.shared_memory():
            inputs = self.draw_inputs(msg["seed"])
        pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad():
            expected = common.as_output_list(torch, self.model(*inputs))
        for out in expected:
            if type(out) is not torch.Tensor:
                raise TypeError(f"reference returned {type(out).__name__}; only tensors are supported")
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        shared_inputs, input_descs = [], []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                desc = common.share_tensor(torch, x, self.transport, self.scratch, f"t{index}_in{i}")
                shared_inputs.append(desc)
                input_descs.append({"tensor": common.public_desc(desc)})
            else:
                shared_inputs.append(None)
                input_descs.append({"value": x})
        slots, slot_descs = [], []
        for j, exp in enumerate(expected):
            with self.shared_memory():
                slot = torch.full_like(exp, float("nan")) if exp.is_floating_point() else torch.full_like(exp, -123457)
            desc = common.share_tensor(torch, slot, self.transport, self.scratch, f"t{index}_out{j}")
            slots.append((slot, desc))
            slot_descs.append({"desc": common.public_desc(desc), "shape": list(exp.shape), "dtype": str(exp.dtype)})
        self.trials[index] = (inputs, pristine, expected, shared_inputs, slots)
        payload = common.b64_pickle({"inputs": input_descs, "outputs": slot_descs})
        return {"payload": payload}

    def _slot_value(self, slot, desc):
        if desc["kind"] == "shm":
            mapped = desc["mapped"][: desc["numel"]].view(desc["shape"])
            return mapped.to(self.device)
        return slot

    def _shared_input_value(self, x, desc):
        if desc is None or desc["kind"] != "shm" or not self.device == "cpu":
            return x
        return desc["mapped"][: desc["numel"]].view(desc["shape"])

    def check(self, msg):
        """Compares the candidate's outputs (already in the shared slots) with the expected ones.

        The judge has stopped the candidate's processes for the duration; what is compared is a
        snapshot, and the slots must still hold it afterwards (nothing may write them late).
        """
        torch = self.torch
        index = msg["trial"]
        inputs, pristine, expected, shared_inputs, slots = self.trials.pop(index)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        snapshot = [self._slot_value(slot, desc).clone() for slot, desc in slots]
        outputs, problems, repeat_problems = [], [], []
        for j, (exp, got) in enumerate(zip(expected, snapshot)):
            atol, rtol = self.tolerance_for(exp)
            stats, problem = compare(torch, exp, got, atol, rtol)
            stats["index"] = j
            outputs.append(stats)
            if problem:
                problems.append(f"output {j}: {problem}")
        if msg.get("keep"):
            self.kept = snapshot
        if msg.get("precision") and not problems:
            self.precision_trial = (pristine, expected, snapshot)
        if msg.get("against_kept") and self.kept is not None:
            for j, (first, again) in enumerate(zip(self.kept, snapshot)):
                atol, rtol = self.tolerance_for(first)
                _stats, problem = compare(torch, first, again, atol, rtol)
                if problem:
                    repeat_problems.append(f"output {j}, second run vs first: {problem}")
        mutated = []
        for i, (x, orig, desc) in enumerate(zip(inputs, pristine, shared_inputs)):
            if isinstance(orig, torch.Tensor):
                now = self._shared_input_value(x, desc)
                if not torch.equal(now, orig):
                    mutated.append(i)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        changed = [
            j
            for j, ((slot, desc), snap) in enumerate(zip(slots, snapshot))
            if not same_bits(torch, self._slot_value(slot, desc), snap)
        ]
        return {
            "passed": not problems,
            "outputs": outputs,
            "problems": problems,
            "mutated_inputs": mutated,
            "changed_after_return": changed,
            "repeat_problems": repeat_problems,
        }

    def tolerance_for(self, tensor):
        half = tensor.dtype in (self.torch.float16, self.torch.bfloat16)
        return self.tolerance["half" if half else "fp32"]

    def time_reference(self, msg):
        torch = self.torch
        inputs = self.draw_inputs(msg["seed"])
        # `precision` (a measured class) runs the reference at the candidate's precision.
        with torch.no_grad(), precision.matched(torch, msg.get("precision"), self.device):
            outputs = common.as_output_list(torch, self.model(*inputs))
            started = common.now()
            samples = common.time_forward(
                torch, self.model, inputs, msg["warmup"], msg["iters"], msg["flush_bytes"], self.device
            )
            phase_s = common.now() - started
        tensors = [x for x in inputs + outputs if isinstance(x, torch.Tensor)]
        # The least traffic any implementation needs: read every input and write every output once.
        io_bytes = sum(x.numel() * x.element_size() for x in tensors)
        return {"samples_ms": samples, "phase_s": phase_s, "io_bytes": io_bytes}

    def measure_precision(self, msg):
        """The candidate's and the reference's errors against a float64 copy of the reference,
        on the trial the judge marked. Anything that prevents it (an op without float64, out of
        memory, a reference that fixes its dtype) leaves the precision unmeasured, with the
        reason: it is neither the judge's failure nor the candidate's."""
        torch = self.torch
        kept, self.precision_trial = self.precision_trial, None
        if kept is None:
            return {"unmeasured": "no passing trial was kept for the measurement"}
        inputs, expected, got = kept
        del kept
        cuda = self.device.startswith("cuda")
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        try:
            return {"outputs": precision.measure(torch, self.model, inputs, expected, got, msg["budget_s"], sync)}
        except precision.Unmeasured as exc:
            return {"unmeasured": str(exc)}
        except Exception as exc:
            return {"unmeasured": f"the float64 reference could not be computed: {type(exc).__name__}: {exc}"}
        finally:
            del inputs, expected, got
            if cuda:
                torch.cuda.empty_cache()


# Outputs larger than this are compared in slices: the comparison works in float64 with several
# temporaries, and KernelBench level 1 has outputs of 1.6e9 elements.
COMPARE_CHUNK = 1 << 25


def compare(torch, exp, got, atol, rtol):
    """Per-output error statistics, in slices for very large outputs (statistics combined)."""
    if exp.numel() <= COMPARE_CHUNK:
        return compare_block(torch, exp, got, atol, rtol)
    flat_exp, flat_got = exp.reshape(-1), got.reshape(-1)
    total, first_problem, combined = exp.numel(), None, None
    for start in range(0, total, COMPARE_CHUNK):
        end = min(start + COMPARE_CHUNK, total)
        stats, problem = compare_block(torch, flat_exp[start:end], flat_got[start:end], atol, rtol)
        if problem and first_problem is None:
            first_problem = f"in flat elements [{start}, {end}): {problem}"
        if combined is None:
            combined = dict(stats, mean_abs=0.0, mean_rel=0.0, mismatched=0)
        weight = (end - start) / total
        combined["max_abs"] = max(combined["max_abs"], stats["max_abs"])
        combined["max_rel"] = max(combined["max_rel"], stats["max_rel"])
        combined["mean_abs"] += stats["mean_abs"] * weight
        combined["mean_rel"] += stats["mean_rel"] * weight
        combined["mismatched"] += stats["mismatched"]
    combined.update(shape=list(exp.shape), numel=total)
    return combined, first_problem


def compare_block(torch, expected, got, atol, rtol):
    """Error statistics of one block; the candidate's shape and dtype were checked by the slot copy."""
    stats = {
        "shape": list(expected.shape),
        "dtype": str(expected.dtype).removeprefix("torch."),
        "numel": expected.numel(),
        "max_abs": 0.0,
        "mean_abs": 0.0,
        "max_rel": 0.0,
        "mean_rel": 0.0,
        "mismatched": 0,
    }
    if expected.numel() == 0:
        return stats, None
    exp = expected.detach().to(torch.float64)
    act = got.detach().to(torch.float64)
    exp_finite = torch.isfinite(exp)
    act_finite = torch.isfinite(act)
    # NaN/Inf where the reference has none fails; where the reference has them, they must match.
    bad_nonfinite = (exp_finite & ~act_finite) | (~exp_finite & ~(act.eq(exp) | (exp.isnan() & act.isnan())))
    diff = (act - exp).abs()
    diff = torch.where(exp_finite & act_finite, diff, torch.zeros_like(diff))
    rel = diff / exp.abs().clamp_min(1e-12)
    within = diff <= atol + rtol * exp.abs()
    mismatched = (~within & exp_finite & act_finite) | bad_nonfinite
    stats.update(
        max_abs=diff.max().item(),
        mean_abs=diff.mean().item(),
        max_rel=rel.max().item(),
        mean_rel=rel.mean().item(),
        mismatched=int(mismatched.sum().item()),
    )
    if bad_nonfinite.any():
        count = int(bad_nonfinite.sum().item())
        if not act_finite.all() and act.isnan().all():
            return stats, "every element is NaN (was the output written at all?)"
        return stats, f"{count} elements are NaN/Inf where the reference is finite (or the reverse)"
    if stats["mismatched"]:
        where = mismatched.reshape(-1).nonzero()[0].item()
        idx = unravel(where, expected.shape)
        return stats, (
            f"{stats['mismatched']} of {stats['numel']} elements differ beyond atol={atol}, rtol={rtol}; "
            f"max abs error {stats['max_abs']:.6g}; first at index {idx}: "
            f"expected {exp.reshape(-1)[where].item():.6g}, got {act.reshape(-1)[where].item():.6g}"
        )
    return stats, None


def same_bits(torch, a, b):
    """Bitwise equality (NaN-safe, unlike torch.equal on floats)."""
    return a.shape == b.shape and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def unravel(flat, shape):
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(idx))


def main():
    # Not dumpable: a process without CAP_SYS_PTRACE (the candidate drops it) can neither trace
    # this one nor read its memory through /proc, where the expected outputs live.
    import ctypes

    PR_SET_DUMPABLE = 4
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    chan = common.Channel()
    import torch

    referee = Referee(torch, chan)
    device = os.environ.get("CRUCIBLE_DEVICE", "cpu")
    if device.startswith("cuda"):
        try:
            torch.empty(1, device=device)
        except Exception as exc:
            chan.send({"ok": False, "error": f"cannot use {device} in the referee: {exc}"})
            return 1
    chan.send({"ok": True, "ready": True})
    handlers = {
        "init": referee.init,
        "prepare": referee.prepare,
        "check": referee.check,
        "time_reference": referee.time_reference,
        "measure_precision": referee.measure_precision,
    }
    while True:
        msg = chan.recv()
        op = msg.get("op")
        if op == "exit":
            return
        try:
            reply = handlers[op](msg)
            reply["ok"] = True
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        chan.send(reply)


if __name__ == "__main__":
    sys.exit(main())
