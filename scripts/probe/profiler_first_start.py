"""Where the profiler's first start in a process spends its CPU (run on a GPU machine).

A candidate that will be timed starts `torch.profiler` once before its hello, 3.5-4.4 CPU-s
(`profiler_cost.py`, `candidate_start_cpu.py`). This probe runs that first start under cProfile,
after torch, triton and a CUDA context are up, and prints the CPU and wall of each step
(import of torch.profiler, enter, work, exit, events) and the functions with the most own
time, so it says whether the cost is Python (imports, event parsing) or native (Kineto, CUPTI).
Usage: `python3 scripts/probe/profiler_first_start.py [cuda:0]`.
"""

import cProfile
import io
import os
import pstats
import sys
import time


def now():
    t = os.times()
    return t.user + t.system, time.perf_counter()


def step(marks, name, last):
    cur = now()
    marks.append((name, cur[0] - last[0], cur[1] - last[1]))
    return now()


import torch  # noqa: E402
import triton  # noqa: E402, F401

device = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
torch.cuda.set_device(device)
x = torch.ones(1024, device=device)
x.sum().item()
marks = []
prof_py = cProfile.Profile()
last = now()
prof_py.enable()
from torch.profiler import ProfilerActivity, profile  # noqa: E402

last = step(marks, "import torch.profiler", last)
p = profile(activities=[ProfilerActivity.CUDA])
p.__enter__()
last = step(marks, "enter (first)", last)
torch.relu(x).sum().item()
last = step(marks, "work", last)
p.__exit__(None, None, None)
last = step(marks, "exit (first)", last)
n = len(p.events())
last = step(marks, f"events ({n})", last)
p = profile(activities=[ProfilerActivity.CUDA])
p.__enter__()
torch.relu(x).sum().item()
p.__exit__(None, None, None)
last = step(marks, "second round, all", last)
prof_py.disable()
for name, cpu, wall in marks:
    print(f"{name:<24} cpu {cpu:7.3f} s  wall {wall:7.3f} s")
s = io.StringIO()
pstats.Stats(prof_py, stream=s).sort_stats("tottime").print_stats(18)
print(s.getvalue())
