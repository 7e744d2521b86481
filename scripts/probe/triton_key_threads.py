"""What Triton's key costs a process whose first compiles run on threads (no GPU needed).

Usage: PYTHONPATH=python python3 scripts/probe/triton_key_threads.py [cold|computed|given] [THREADS]

Compiles THREADS (6) configs of one small kernel at once on a thread pool for an sm_90 target,
as the candidate's `AutotunePrecompile` does at an autotuner's first cache miss, in a fresh
Triton cache, and counts how often `triton_key()` (a SHA-256 over Triton's sources and
libtriton.so) ran. `cold`: nothing before; `computed`: `common.settle_triton_key()` computes it
first; `given`: it is given as the warm pool's seed gives it (`CRUCIBLE_TRITON_KEY`, computed in
another process). Prints one JSON line. Run each variant in a fresh process.
"""

import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

variant = sys.argv[1] if len(sys.argv) > 1 else "cold"
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 6
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
if variant == "given":
    os.environ["CRUCIBLE_TRITON_KEY"] = subprocess.run(
        [sys.executable, "-c", "from triton.runtime.cache import triton_key; print(triton_key(), end='')"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from crucible_harness import common  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime import cache  # noqa: E402

# Count the computations: wrap what the lru_cache calls, keep the cache (and its missing lock).
runs = [0]
original = cache.triton_key.__wrapped__


def counted():
    runs[0] += 1
    return original()


cache.triton_key = functools.lru_cache()(counted)


@triton.jit
def add(x, y, o, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


signature = {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32", "BLOCK": "constexpr"}
settle = {"wall_s": 0.0, "cpu_s": 0.0}
if variant in ("computed", "given"):
    wall, cpu = time.perf_counter(), time.process_time()
    settle["how"] = common.settle_triton_key()
    settle["wall_s"], settle["cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
runs_before = runs[0]
wall, cpu = time.perf_counter(), time.process_time()
with ThreadPoolExecutor(threads) as pool:
    blocks = [128 << i for i in range(threads)]
    target = GPUTarget("cuda", 90, 32)
    list(pool.map(lambda b: triton.compile(ASTSource(add, signature, {"BLOCK": b}), target=target), blocks))
print(
    json.dumps(
        {
            "variant": variant,
            "threads": threads,
            "settle": settle,
            "compile_wall_s": round(time.perf_counter() - wall, 3),
            "compile_cpu_s": round(time.process_time() - cpu, 3),
            "triton_key_runs_in_compiles": runs[0] - runs_before,
        }
    )
)
