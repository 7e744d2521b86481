"""Where a candidate process's start-up CPU goes, phase by phase (run on a GPU machine).

On one H200 the warm pool's candidate processes had used 8.1 CPU-seconds each before they were
taken (the referee 3.9): the imports, the CUDA context, Triton's driver build (gcc) and the
profiler's first start. This probe starts ROUNDS fresh children that do those phases in that
order and prints each phase's CPU (user + system, with the children it waited for: gcc) and
wall seconds; then ROUNDS more whose Triton cache already holds the driver that the first one
built (copied, as the judge could copy a driver it built once into each candidate's own cache).

Usage: `python3 scripts/probe/candidate_start_cpu.py [--rounds 3] [--device cuda:0]`.
Prints one JSON line per child and a summary line (medians per phase).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
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

import torch
mark("import_torch")
import numpy, triton
mark("import_triton_numpy")
device = sys.argv[1]
torch.cuda.set_device(device)
torch.ones(1024, device=device).sum().item()
mark("cuda_context")
from triton.runtime import driver
driver.active.utils
mark("triton_driver")
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    torch.ones(16, device=device).sum().item()
mark("profiler_first_start")
print(json.dumps(marks))
"""


def run_child(device, cache):
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, device], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    results = {"fresh_cache": [], "driver_copied": []}
    with tempfile.TemporaryDirectory() as scratch:
        seed = os.path.join(scratch, "seed")
        for i in range(args.rounds):
            cache = os.path.join(scratch, f"fresh{i}")
            row = run_child(args.device, cache)
            print(json.dumps({"kind": "fresh_cache", **row}), flush=True)
            results["fresh_cache"].append(row)
            if i == 0 and os.path.isdir(cache):
                shutil.copytree(cache, seed)
        for i in range(args.rounds):
            cache = os.path.join(scratch, f"copied{i}")
            if os.path.isdir(seed):
                shutil.copytree(seed, cache)
            row = run_child(args.device, cache)
            print(json.dumps({"kind": "driver_copied", **row}), flush=True)
            results["driver_copied"].append(row)
        seeded = sorted(
            os.path.relpath(os.path.join(d, f), seed)
            for d, _, fs in os.walk(seed)
            for f in fs
        )
    summary = {}
    for kind, rows in results.items():
        rows = [r for r in rows if "error" not in r]
        if not rows:
            continue
        summary[kind] = {
            phase: {
                key: round(statistics.median(r[phase][key] for r in rows), 3)
                for key in ("cpu_s", "wall_s")
            }
            for phase in rows[0]
        }
        summary[kind]["total_cpu_s"] = round(
            statistics.median(sum(p["cpu_s"] for p in r.values()) for r in rows), 3
        )
    print(json.dumps({"summary": summary, "seeded_files": seeded}))


if __name__ == "__main__":
    main()
