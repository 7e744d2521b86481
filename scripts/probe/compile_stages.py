"""Where a Triton kernel's compile goes, stage by stage, for an sm_90 target (no GPU needed).

Usage: PYTHONPATH=python python3 scripts/probe/compile_stages.py FILE KERNEL [serial|threads]

Compiles every autotune config of KERNEL (a `@triton.jit` function of FILE, under any
`@triton.autotune` / `@triton.heuristics`) in a fresh Triton cache, one after another or all at
once on threads (as the candidate's `AutotunePrecompile` does), with Triton's key computed first,
and prints one JSON line: the wall and CPU time (ptxas runs as a child process: its CPU is
`children_cpu_s`) and the seconds summed per stage (ttir, ttgir, llir, ptx, cubin = ptxas).
Pointer arguments are taken as fp32 and the rest as i32: the figures are the stages' cost, not
a specialization the task would choose. Run each variant in a fresh process.
"""

import collections
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource
from triton.runtime.cache import triton_key
from triton.runtime.jit import JITFunction

path, name = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "serial"
triton_key()  # computed once up front, as a prestarted candidate has it
seconds = collections.defaultdict(float)
add_stages = CUDABackend.add_stages


def timed_stages(self, stages, options, language):
    add_stages(self, stages, options, language)
    for stage, run in list(stages.items()):

        def timed(src, metadata, run=run, stage=stage):
            start = time.perf_counter()
            try:
                return run(src, metadata)
            finally:
                seconds[stage] += time.perf_counter() - start

        stages[stage] = timed


CUDABackend.add_stages = timed_stages
spec = importlib.util.spec_from_file_location("probed", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
kernel = getattr(module, name)
configs = getattr(kernel, "configs", None) or [None]
fn = kernel
while not isinstance(fn, JITFunction):
    fn = fn.fn
signature = {}
for arg, param in zip(fn.arg_names, fn.params, strict=True):
    signature[arg] = (
        "constexpr" if param.is_constexpr else "*fp32" if arg.endswith("ptr") else "i32"
    )
target = GPUTarget("cuda", 90, 32)


def compile_one(config):
    constants = dict(config.kwargs) if config else {}
    for arg, kind in signature.items():
        if kind == "constexpr":
            constants.setdefault(arg, True)  # a heuristics' flag such as EVEN_K
    options = (
        {"num_warps": config.num_warps, "num_stages": config.num_stages}
        if config
        else {}
    )
    return triton.compile(
        ASTSource(fn, signature, constants), target=target, options=options
    )


wall, cpu = time.perf_counter(), time.process_time()
if mode == "threads":
    with ThreadPoolExecutor(len(configs)) as pool:
        list(pool.map(compile_one, configs))
else:
    for config in configs:
        compile_one(config)
children = resource.getrusage(resource.RUSAGE_CHILDREN)
print(
    json.dumps(
        {
            "mode": mode,
            "configs": len(configs),
            "wall_s": round(time.perf_counter() - wall, 3),
            "cpu_s": round(time.process_time() - cpu, 3),
            "children_cpu_s": round(children.ru_utime + children.ru_stime, 3),
            "stages_s": {stage: round(s, 3) for stage, s in seconds.items()},
        }
    )
)
