"""Where a fresh referee's first trial goes, against its later ones (one GPU, alone).

Usage: python3 scripts/probe/referee_first_trial.py TASK.py [warm] (DEVICE=cpu to try it here)

Drives a `Referee` in this process as the judge would (init, then prepare and check for trials
0-3; the "candidate" copies the expected outputs into the shared slots, as a correct one would),
and times each piece of prepare and check with the device synchronized around it. Trials 0 and
1 are measured for precision as the judge measures trial 0 (`start_precision` after prepare,
`await_precision` before the check, `measure_precision` after it), so the first measurement's
float64 forwards and statistics show against a second one's. With `warm`, runs
`referee.warm_up` first (what the referee does before its hello), timed apart. Prints one JSON
line. Run each variant in a fresh process: the point is a process's first use of each kernel
(CUDA loads a kernel's module at its first launch) and of the allocator.
"""

import json
import os
import sys
import tempfile
import threading
import time

import torch

from crucible_harness import common, referee

task, variant = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "cold")
device = os.environ.get("DEVICE", "cuda:0")
PRECISION_TRIALS = (0, 1)


def synchronize():
    common.sync(torch, device)


started = time.perf_counter()
common.bring_up(torch, device)
context_s = time.perf_counter() - started
warm_s = None
if variant == "warm":
    started = time.perf_counter()
    referee.warm_up(torch, device)
    synchronize()
    warm_s = time.perf_counter() - started

parts = {}
current = []


def timed(name, fn):
    def wrapper(*args, **kwargs):
        synchronize()
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            synchronize()
            # Not the precision forwards ahead, on their thread: they overlap the parts.
            if threading.current_thread() is threading.main_thread():
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
        "profile": "full" if device.startswith("cuda") else "small",
        "device": device,
        "transport": "cuda_ipc" if device.startswith("cuda") else "shm",
        "shared_dir": shared,
        "init_seed": 1,
        "inputs_on_host": False,
        "tolerance": {"fp32": [1e-2, 1e-2], "half": [1e-2, 1e-2]},
        "size_trials": False,
    }
)
synchronize()
init = {"init_s": time.perf_counter() - t, **current.pop()}
ref.draw_inputs = timed("draw", ref.draw_inputs)
ref.model.forward = timed("forward", ref.model.forward)
trials = []
for index in range(4):
    measured = index in PRECISION_TRIALS
    current.append({})
    t = time.perf_counter()
    ref.prepare({"trial": index, "seed": 100 + index})
    synchronize()
    prepare_s = time.perf_counter() - t
    ahead = None
    if measured:
        ahead = ref.start_precision({"trial": index, "max_bytes": 1 << 40, "budget_s": 60.0})
    _inputs, _pristine, expected, _shared, slots = ref.trials[index]
    for (slot, desc), exp in zip(slots, expected, strict=True):
        # What the candidate writes: the slot itself over CUDA IPC, its mapping over shm.
        (slot if desc["kind"] != "shm" else desc["mapped"][: desc["numel"]].view(desc["shape"])).copy_(exp)
    synchronize()
    prepare_parts = current.pop()
    result = {"prepare_s": prepare_s, "prepare": prepare_parts}
    if measured:
        t = time.perf_counter()
        ahead = {**ahead, **ref.await_precision({})}
        result["precision_ahead"] = {"await_s": time.perf_counter() - t, **ahead}
    current.append({})
    t = time.perf_counter()
    reply = ref.check({"trial": index, "keep": index == 0, "precision": measured})
    synchronize()
    result["check_s"] = time.perf_counter() - t
    result["check"] = current.pop()
    assert not reply["problems"], reply["problems"]
    if measured:
        current.append({})
        t = time.perf_counter()
        reply = ref.measure_precision({"budget_s": 60.0})
        synchronize()
        result["precision_s"] = time.perf_counter() - t
        result["precision"] = {**current.pop(), "unmeasured": reply["unmeasured"]}
    trials.append(result)
print(
    json.dumps(
        {
            "task": task.rsplit("/", 1)[-1],
            "variant": variant,
            "device": device,
            "context_s": context_s,
            "warm_s": warm_s,
            "init": init,
            "trials": trials,
        }
    )
)
