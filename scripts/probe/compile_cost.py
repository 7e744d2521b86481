"""Where a candidate's first forward goes (run on a GPU machine): the Triton compilation of its
kernels, the C modules Triton builds with the system compiler (`cuda_utils` once per cache, a
launcher per kernel signature), `ptxas`, and the autotuner's benchmarking on the GPU.

Usage: compile_cost.py TASK.py CANDIDATE.py [TASK.py CANDIDATE.py ...]. For each pair, three
fresh interpreters, each with its own Triton cache: `cold` (an empty cache, what a candidate gets
today), `seeded` (only the `cuda_utils` module of a trusted earlier build copied in) and `warm`
(the whole cache of the cold run: a lower bound, never safe between candidates). Prints one JSON
line per run: wall of the first and second forward, and the cumulative seconds of the named
functions under cProfile during the first."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import cProfile, importlib.util, json, pstats, sys, time
t0 = time.perf_counter()
import torch, triton
imported = time.perf_counter() - t0

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

task, cand = load(sys.argv[1], "task"), load(sys.argv[2], "cand")
torch.manual_seed(0)
with torch.device("cuda"):
    inputs = task.get_inputs()
    model = cand.ModelNew(*task.get_init_inputs()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]
torch.cuda.synchronize()
prof = cProfile.Profile()
t = time.perf_counter()
prof.enable()
with torch.no_grad():
    model(*inputs)
torch.cuda.synchronize()
prof.disable()
first = time.perf_counter() - t
t = time.perf_counter()
with torch.no_grad():
    model(*inputs)
torch.cuda.synchronize()
second = time.perf_counter() - t
stats = pstats.Stats(prof).stats
NAMES = {"_build": "gcc (C modules)", "compile_module_from_src": "C modules incl. load",
         "make_cubin": "ptxas", "make_ptx": "llir->ptx", "make_llir": "ttgir->llir",
         "make_ttgir": "ttir->ttgir", "make_ttir": "ast->ttir", "compile": "triton.compile",
         "_bench": "autotune benchmark", "do_bench": "do_bench"}
found = {}
for (filename, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.items():
    if func in NAMES and ("triton" in filename):
        key = NAMES[func]
        found[key] = max(found.get(key, 0.0), ct)
print(json.dumps({"import_s": imported, "first_s": first, "second_s": second, "cumulative_s": found}))
"""


def find_cuda_utils(cache):
    for dirpath, _dirs, files in os.walk(cache):
        if any(f.startswith("cuda_utils") and f.endswith(".so") for f in files):
            return dirpath
    return None


def run(task, cand, cache, mode):
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, task, cand], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        print(json.dumps({"task": os.path.basename(task), "mode": mode, "error": out.stderr[-2000:]}))
        return None
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row.update(task=os.path.basename(task), mode=mode)
    print(json.dumps(row), flush=True)
    return row


def main():
    args = sys.argv[1:]
    for task, cand in zip(args[0::2], args[1::2], strict=True):
        root = tempfile.mkdtemp()
        cold = os.path.join(root, "cold")
        run(task, cand, cold, "cold")
        utils = find_cuda_utils(cold)
        seeded = os.path.join(root, "seeded")
        os.makedirs(seeded)
        if utils:
            shutil.copytree(utils, os.path.join(seeded, os.path.relpath(utils, cold)))
        run(task, cand, seeded, "seeded")
        run(task, cand, cold, "warm")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
