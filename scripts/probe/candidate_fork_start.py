"""What a candidate process's start-up would cost forked from a zygote, phase by phase (GPU).

The warm pool's candidate processes use about 4.8 CPU-seconds each before they are taken
(one H200, with the bytecode compiled): the imports, the CUDA context, Triton's driver and the
profiler's first start. A process that imported torch, triton and numpy (and the profiler's
Python side, and CUPTI's library) but never touched CUDA could fork candidates that skip the
imports. This probe runs ROUNDS children of each kind, doing the phases in the same order, and
prints each phase's CPU (user + system of the child, with the children it waited for) and wall:

- `fresh`: a new interpreter (`python -c`), as the pool starts one today;
- `forked`: a child forked from this process after its imports.

Usage: `python3 scripts/probe/candidate_fork_start.py [--rounds 3] [--device cuda:0]`.
Prints one JSON line per child and a summary line (medians per kind and phase).
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = r"""
import json, os, sys, time

def now():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system, time.perf_counter()

marks, last = {}, now()

def mark(name):
    global last
    current = now()
    marks[name] = {"cpu_s": current[0] - last[0], "wall_s": current[1] - last[1]}
    last = now()

import torch, numpy, triton
import torch.profiler
mark("imports")
device = DEVICE
torch.cuda.set_device(device)
torch.ones(1024, device=device).sum().item()
mark("cuda_context")
from triton.runtime import driver
driver.active.utils
mark("triton_driver")
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CUDA]):
    torch.ones(16, device=device).add_(1)
    torch.cuda.synchronize(device)
mark("profiler_first_start")
"""


def fresh(device, cache):
    code = PHASES.replace("DEVICE", repr(device)) + "print(json.dumps(marks))\n"
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"kind": "fresh", "error": done.stderr[-800:]}
    return {"kind": "fresh", **json.loads(done.stdout.strip().splitlines()[-1])}


def forked(device, cache):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 1
        try:
            os.environ["TRITON_CACHE_DIR"] = cache
            scope = {}
            # The imports are already done: this phase measures only their lookup.
            exec(PHASES.replace("DEVICE", repr(device)), scope)
            os.write(write, json.dumps(scope["marks"]).encode())
            code = 0
        except BaseException as exc:
            os.write(write, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(code)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return {"kind": "forked", **json.loads(data or b"{}")}


def preload_cupti():
    """CUPTI's library, loaded in the parent as a zygote could (no CUDA call)."""
    import ctypes

    import torch

    roots = [os.path.dirname(os.path.dirname(torch.__file__))]
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "**", "libcupti.so*"), recursive=True)):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return path
            except OSError:
                continue
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            results.append(fresh(args.device, os.path.join(tmp, f"fresh{i}")))
            print(json.dumps(results[-1]), flush=True)
        import numpy  # noqa: F401
        import torch
        import torch.profiler  # noqa: F401
        import triton  # noqa: F401

        cupti = preload_cupti()
        print(json.dumps({"parent_preloaded_cupti": cupti}), flush=True)
        for i in range(args.rounds):
            results.append(forked(args.device, os.path.join(tmp, f"forked{i}")))
            print(json.dumps(results[-1]), flush=True)
    summary = {}
    for kind in ("fresh", "forked"):
        rows = [r for r in results if r["kind"] == kind and "error" not in r]
        if not rows:
            continue
        phases = [k for k in rows[0] if k != "kind"]
        summary[kind] = {
            p: {m: statistics.median(r[p][m] for r in rows) for m in ("cpu_s", "wall_s")} for p in phases
        }
        summary[kind]["total_cpu_s"] = sum(v["cpu_s"] for v in summary[kind].values())
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
