"""What one round trip to the GPU (a tiny kernel, then waiting for it) costs while other processes
keep the GPU busy (run on a GPU machine). With several CUDA contexts holding work, the GPU
time-slices between them, so a process that waits for its kernel may wait for the others'
slices first. For BUSY = 0, 2, 5 background processes (each launching fp32 matmuls back to back,
like an autotuner's benchmark), the foreground process measures: one `.item()` after a tiny
kernel, the referee's comparison of a 4096x4096 output as written (five `.item()` calls and an
`.any()`), and the same statistics fetched with one transfer. Prints one JSON line per BUSY."""

import json
import multiprocessing as mp
import statistics
import sys
import time


def busy(stop):
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    while not stop.is_set():
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def compare_per_item(torch, exp, got):
    diff = (got - exp).abs()
    rel = diff / exp.abs().clamp_min(1e-12)
    out = [diff.max().item(), diff.mean().item(), rel.max().item(), rel.mean().item(), int((diff > 1e-2).sum().item())]
    return out, bool(torch.isnan(got).any())


def compare_batched(torch, exp, got):
    diff = (got - exp).abs()
    rel = diff / exp.abs().clamp_min(1e-12)
    stats = torch.stack([diff.max(), diff.mean(), rel.max(), rel.mean(), (diff > 1e-2).sum().double(), torch.isnan(got).any().double()])
    return stats.tolist()


def measure(torch, fn, reps=30):
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def main():
    import torch

    ctx = mp.get_context("spawn")
    exp = torch.randn(4096, 4096, device="cuda", dtype=torch.float64)
    got = exp + 1e-6
    small = torch.ones(16, device="cuda")
    for n in (int(x) for x in (sys.argv[1:] or ["0", "2", "5"])):
        stop = ctx.Event()
        procs = [ctx.Process(target=busy, args=(stop,)) for _ in range(n)]
        for p in procs:
            p.start()
        time.sleep(6 if n else 0)  # their torch import and first launches
        row = {
            "busy": n,
            "item_ms": measure(torch, lambda: (small * 2).sum().item()),
            "compare_per_item_ms": measure(torch, lambda: compare_per_item(torch, exp, got)),
            "compare_batched_ms": measure(torch, lambda: compare_batched(torch, exp, got)),
        }
        stop.set()
        for p in procs:
            p.join()
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
