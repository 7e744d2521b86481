"""The audit process: runs null candidates (zeros, ones, a copy of an input, the input's mean)
against tasks and reports which ones pass.

It is trusted: it runs only task files and its own null outputs, never candidate code, so one
process can loop over a whole suite without restarting (torch and CUDA start once). Inputs and
the reference model are built exactly as the referee builds them (its own `init` and
`draw_inputs`), and outputs are compared with the referee's own comparison (`common.compare`,
with `common.tolerance_for`), so a null that passes here would pass the judge. The judge (Rust)
drives it over its channel, one task per request.
"""

import gc
import sys
import traceback

from crucible_harness import common, referee

NULLS = ("zeros", "ones", "input-copy", "broadcast-mean")


class Skip(Exception):
    """This null cannot be built for this task (say, no input reshapes to the output)."""


def tensor_inputs(torch, inputs):
    return [x for x in inputs if isinstance(x, torch.Tensor)]


def build_null(torch, name, exp, inputs):
    """The null candidate's value for one expected output `exp`, given the trial's inputs."""
    if name == "zeros":
        return torch.zeros_like(exp)
    if name == "ones":
        return torch.ones_like(exp)
    tensors = tensor_inputs(torch, inputs)
    if not tensors:
        raise Skip("the task has no tensor inputs")
    if name == "input-copy":
        for x in tensors:
            if x.shape == exp.shape and x.dtype == exp.dtype:
                return x
        first = tensors[0]
        if first.numel() == exp.numel():
            return first.reshape(exp.shape).to(exp.dtype)
        try:
            return torch.broadcast_to(first, exp.shape).to(exp.dtype)
        except RuntimeError:
            raise Skip(
                f"no input has the output's shape {list(exp.shape)} and dtype, and the first input "
                f"{list(first.shape)} neither reshapes nor broadcasts to it"
            ) from None
    if name == "broadcast-mean":
        first = tensors[0]
        if first.numel() == 0:
            raise Skip("the first input is empty")
        try:
            mean = first.detach().mean(dtype=torch.float64)  # no float64 copy of a huge input
        except RuntimeError:
            raise Skip(f"the first input ({first.dtype}) has no real mean") from None
        return mean.to(exp.dtype).expand(exp.shape)
    raise ValueError(f"unknown null candidate {name!r}")


class Auditor:
    def __init__(self, torch):
        self.torch = torch

    def audit(self, msg):
        torch = self.torch
        device = msg["device"]
        tolerance = msg["tolerance"]
        ref = referee.Referee(torch, None)
        stage = "load"
        try:
            # The referee's own init: same size profile rule, seeding, device context and mode.
            ref.init(
                {
                    "device": device,
                    "transport": "shm",
                    "shared_dir": None,
                    "tolerance": tolerance,
                    "profile": msg["profile"],
                    "task_path": msg["task_path"],
                    "init_seed": msg["init_seed"],
                    "size_trials": False,
                }
            )
            results = {name: {"name": name, "trials_run": 0, "trials_passed": 0} for name in msg["nulls"]}
            outputs = []
            for index, seed in enumerate(msg["seeds"]):
                stage = f"trial_{index}"
                inputs = ref.draw_inputs(seed)
                # Nulls see the inputs as a candidate would: before any in-place op of the reference.
                pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
                with torch.no_grad():
                    expected = common.as_output_list(torch, ref.model(*inputs))
                del inputs
                for out in expected:
                    if type(out) is not torch.Tensor:
                        raise TypeError(f"reference returned {type(out).__name__}; only tensors are supported")
                common.sync(torch, device)
                outputs = [{"shape": list(e.shape), "dtype": common.dtype_name(e.dtype)} for e in expected]
                for name, result in results.items():
                    if result.get("skipped") or result.get("message"):
                        continue  # already out: passing needs every trial
                    self.run_null(name, result, expected, pristine, tolerance)
                del expected, pristine
        except Exception as exc:
            fatal = device.startswith("cuda") and isinstance(exc, (torch.AcceleratorError, torch.OutOfMemoryError))
            return {
                "ok": False,
                "stage": stage,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=-6),
                # A CUDA error can poison the context; the judge starts a fresh process.
                "restart": fatal,
            }
        finally:
            ref.model = None
            sys.modules.pop("crucible_task", None)
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        for result in results.values():
            result["passed"] = not result.get("skipped") and result["trials_passed"] == len(msg["seeds"])
            for optional in ("skipped", "message", "max_abs", "mismatched_fraction"):
                result.setdefault(optional, None)
        return {
            "profile": ref.profile,
            "env": common.env_info(torch, device),
            "outputs": outputs,
            "nulls": list(results.values()),
        }

    def run_null(self, name, result, expected, inputs, tolerance):
        torch = self.torch
        result["trials_run"] += 1
        mismatched = numel = 0
        problems = []
        for j, exp in enumerate(expected):
            try:
                got = build_null(torch, name, exp, inputs)
            except Skip as why:
                result["skipped"] = f"output {j}: {why}"
                return
            atol, rtol = common.tolerance_for(torch, tolerance, exp)
            stats, problem = common.compare(torch, exp, got, atol, rtol)
            del got
            mismatched += stats["mismatched"]
            numel += stats["numel"]
            result["max_abs"] = max(result.get("max_abs", 0.0), stats["max_abs"])
            if problem:
                problems.append(f"output {j}: {problem}")
        result["mismatched_fraction"] = mismatched / numel if numel else 0.0
        if problems:
            result["message"] = "\n".join(problems)
        else:
            result["trials_passed"] += 1


def failure(exc, _msg):
    """A request that fails outside `audit` (which reports a task's own failures itself)."""
    return {
        "ok": False,
        "stage": "audit",
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": "".join(traceback.format_exception(exc)),
        "restart": False,
    }


def main():
    chan, torch, _device = common.start("the audit process")
    auditor = Auditor(torch)
    common.serve(chan, {"audit": auditor.audit}, failure, "audit")


if __name__ == "__main__":
    sys.exit(main())
