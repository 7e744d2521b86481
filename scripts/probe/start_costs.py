"""What a harness process's start-up costs, in wall and CPU seconds, for each way of making one
(run on a GPU machine): a fresh interpreter per process versus a fork of a warm parent that has
imported torch and triton but never touched CUDA. Each variant runs ROUNDS times; prints one JSON
line per variant with the medians. Also runs N fresh starts at once, to see how they share the
cores."""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROUNDS = int(os.environ.get("ROUNDS", "3"))
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"

STEPS = {
    "import": "import torch, triton, numpy",
    "cuda": "torch.cuda.set_device(0); x = torch.randn(16, 1024, device='cuda'); "
    "torch.relu(x); torch.cuda.synchronize()",
    "profiler": "from torch.profiler import profile, ProfilerActivity\n"
    "p = profile(activities=[ProfilerActivity.CUDA]); p.__enter__(); torch.relu(x); "
    "torch.cuda.synchronize(); p.__exit__(None, None, None); p.events()",
    # Triton wants its kernels in a file.
    "triton": "import importlib.util, os, tempfile\n"
    "d = tempfile.mkdtemp(); f = os.path.join(d, 'kern.py')\n"
    "open(f, 'w').write(KERNEL)\n"
    "spec = importlib.util.spec_from_file_location('kern', f)\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "m.k[(16,)](x, x.numel(), B=1024); torch.cuda.synchronize()",
}

KERNEL = """import triton
import triton.language as tl
@triton.jit
def k(X, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(X + i, tl.load(X + i, mask=i < n) * 2, mask=i < n)
"""
STEPS["triton"] = f"KERNEL = {KERNEL!r}\n" + STEPS["triton"]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fresh(steps, env=None):
    code = "\n".join(STEPS[s] for s in steps)
    cpu0, t0 = children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0, children_cpu() - cpu0


def forked(steps):
    """A fork of this process (which imported torch and triton, no CUDA) runs the steps."""
    code = "\n".join(STEPS[s] for s in steps if s != "import")
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            exec(code, {"torch": torch, "triton": triton})
            os._exit(0)
        except BaseException as e:  # noqa: BLE001
            print("child failed:", repr(e), file=sys.stderr)
            os._exit(1)
    _, status, usage = os.wait4(pid, 0)
    assert status == 0, status
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def report(name, fn, *args):
    walls, cpus = [], []
    for _ in range(ROUNDS):
        wall, cpu = fn(*args)
        walls.append(wall)
        cpus.append(cpu)
    print(
        json.dumps(
            {
                "variant": name,
                "wall_s": statistics.median(walls),
                "cpu_s": statistics.median(cpus),
                "walls": walls,
            }
        ),
        flush=True,
    )


print(json.dumps({"cpus": os.cpu_count(), "load": os.getloadavg()}), flush=True)
if not os.environ.get("SKIP_MEASURED"):
    report("fresh import", fresh, ["import"])
    report("fresh import+cuda", fresh, ["import", "cuda"])
    report("fresh import+cuda+profiler", fresh, ["import", "cuda", "profiler"])
report("fresh import+cuda+triton", fresh, ["import", "cuda", "triton"])
lazy = dict(os.environ, CUDA_MODULE_LOADING="EAGER")
report("fresh import+cuda EAGER", fresh, ["import", "cuda"], lazy)
import torch  # noqa: E402
import triton  # noqa: E402
import numpy  # noqa: E402, F401

assert not torch.cuda.is_initialized()
report("fork cuda", forked, ["cuda"])
report("fork cuda+profiler", forked, ["cuda", "profiler"])
report("fork cuda+triton", forked, ["cuda", "triton"])
assert not torch.cuda.is_initialized()

for n in (8, 16):
    cpu0, t0 = children_cpu(), time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", STEPS["import"] + "\n" + STEPS["cuda"]])
        for _ in range(n)
    ]
    for p in procs:
        p.wait()
    print(
        json.dumps(
            {
                "variant": f"{n} fresh import+cuda at once",
                "wall_s": time.perf_counter() - t0,
                "cpu_s_each": (children_cpu() - cpu0) / n,
            }
        ),
        flush=True,
    )
    cpu0, t0 = children_cpu(), time.perf_counter()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            exec(STEPS["cuda"], {"torch": torch})
            os._exit(0)
        pids.append(pid)
    cpu = 0.0
    for pid in pids:
        _, _, usage = os.wait4(pid, 0)
        cpu += usage.ru_utime + usage.ru_stime
    print(
        json.dumps(
            {
                "variant": f"{n} fork cuda at once",
                "wall_s": time.perf_counter() - t0,
                "cpu_s_each": cpu / n,
            }
        ),
        flush=True,
    )
