"""Where a fresh referee's first trial goes, against its later ones (one GPU, alone).

Usage: python3 scripts/probe/referee_first_trial.py TASK.py [warm]

Drives a `Referee` in this process as the judge would (init, then prepare and check for trials
0-3; the "candidate" copies the expected outputs into the shared slots, as a correct one would),
and times each piece of prepare and check with the device synchronized around it. With `warm`,
runs `referee.warm_up` first (what the referee does before its hello), timed apart. Prints one
JSON line. Run each variant in a fresh process: the point is a process's first use of each
kernel (CUDA loads a kernel's module at its first launch) and of the allocator.
"""

import json
import sys
import tempfile
import time

import torch

from crucible_harness import common, referee

task, variant = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "cold")
device = "cuda:0"
started = time.perf_counter()
common.bring_up(torch, device)
context_s = time.perf_counter() - started
warm_s = None
if variant == "warm":
    started = time.perf_counter()
    referee.warm_up(torch, device)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - started

parts = {}
current = []


def timed(name, fn):
    def wrapper(*args, **kwargs):
        torch.cuda.synchronize()
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.synchronize()
            current[-1][name] = current[-1].get(name, 0.0) + time.perf_counter() - t

    return wrapper


common.share_tensor = timed("share", common.share_tensor)
referee.compare = timed("compare", referee.compare)
common.differ_bitwise = timed("differ_bitwise", common.differ_bitwise)
torch.cuda.empty_cache = timed("empty_cache", torch.cuda.empty_cache)

shared = tempfile.mkdtemp()
ref = referee.Referee(torch, None)
current.append({})
t = time.perf_counter()
ref.init(
    {
        "task_path": task,
        "profile": "full",
        "device": device,
        "transport": "cuda_ipc",
        "shared_dir": shared,
        "init_seed": 1,
        "inputs_on_host": False,
        "tolerance": {"fp32": [1e-2, 1e-2], "half": [1e-2, 1e-2]},
    }
)
torch.cuda.synchronize()
init = {"init_s": time.perf_counter() - t, **current.pop()}
ref.draw_inputs = timed("draw", ref.draw_inputs)
ref.model.forward = timed("forward", ref.model.forward)
trials = []
for index in range(4):
    current.append({})
    t = time.perf_counter()
    ref.prepare({"trial": index, "seed": 100 + index})
    torch.cuda.synchronize()
    prepare_s = time.perf_counter() - t
    _inputs, _pristine, expected, _shared, slots = ref.trials[index]
    for (slot, _desc), exp in zip(slots, expected, strict=True):
        slot.copy_(exp)
    torch.cuda.synchronize()
    prepare_parts = current.pop()
    current.append({})
    t = time.perf_counter()
    reply = ref.check({"trial": index, "keep": index == 0, "precision": index == 0})
    torch.cuda.synchronize()
    check_s = time.perf_counter() - t
    assert not reply["problems"], reply["problems"]
    trials.append({"prepare_s": prepare_s, "prepare": prepare_parts, "check_s": check_s, "check": current.pop()})
print(
    json.dumps(
        {
            "task": task.rsplit("/", 1)[-1],
            "variant": variant,
            "context_s": context_s,
            "warm_s": warm_s,
            "init": init,
            "trials": trials,
        }
    )
)
