"""What a referee's start-up would cost forked from a process that has already imported torch.

Every evaluation starts two Python processes (referee and candidate), each importing torch,
triton and numpy and creating a CUDA context: on the H200 host most of an evaluation's CPU.
A CUDA context does not survive a fork, but a process that has only imported torch has none:
its children could each create their own. This probe compares, for ROUNDS children each:

- `fresh`: `python -c` that imports torch, triton, numpy and runs one kernel (what the warm
  pool pays per process today, without the harness);
- `forked`: a child forked from this process after it imported the same (and no CUDA), which
  then runs one kernel.

For each: the child's CPU seconds (user + system, from its rusage at exit), wall seconds to its
first kernel, and whether the kernel ran. Usage:
`python3 scripts/probe/fork_start.py [--rounds 5] [--device cuda]`. Prints one JSON line per
child and a summary line (medians).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def first_kernel(torch, device):
    """One small kernel and its result back: the device is up."""
    x = torch.ones(1024, device=device)
    if (x * 2).sum().item() != 2048.0:
        raise RuntimeError("wrong sum")


def fresh(device):
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import sys; sys.path.insert(0, {here!r})\n"
        "import torch, triton, numpy\n"
        f"from fork_start import first_kernel; first_kernel(torch, {device!r})\n"
    )
    started = time.perf_counter()
    before = os.times()
    done = subprocess.run([sys.executable, "-c", code], check=False)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"kind": "fresh", "ran": done.returncode == 0, "cpu_s": cpu, "wall_s": wall}


def forked(device, torch):
    started = time.perf_counter()
    before = os.times()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            first_kernel(torch, device)
            code = 0
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"kind": "forked", "ran": os.waitstatus_to_exitcode(status) == 0, "cpu_s": cpu, "wall_s": wall}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    started = time.perf_counter()
    before = os.times()
    import numpy  # noqa: F401
    import torch
    import triton  # noqa: F401

    own_import = {
        "kind": "this process's own import",
        "cpu_s": sum(os.times()[:2]) - sum(before[:2]),
        "wall_s": time.perf_counter() - started,
    }
    print(json.dumps(own_import))
    if args.device.startswith("cuda") and torch.cuda.is_initialized():
        print("SKIPPED: importing torch initialised CUDA here; a fork would not carry it")
        return
    rows = []
    for _ in range(args.rounds):
        for measure in (lambda: fresh(args.device), lambda: forked(args.device, torch)):
            row = measure()
            rows.append(row)
            print(json.dumps(row))
    summary = {}
    for kind in ("fresh", "forked"):
        mine = [r for r in rows if r["kind"] == kind]
        summary[kind] = {
            "ran": sum(r["ran"] for r in mine),
            "of": len(mine),
            "cpu_s_median": statistics.median(r["cpu_s"] for r in mine),
            "wall_s_median": statistics.median(r["wall_s"] for r in mine),
        }
    print(json.dumps({"device": args.device, "summary": summary}))


if __name__ == "__main__":
    main()
