"""Can a referee outlive its candidate? What CUDA IPC leaves behind when the consumer is killed.

A referee shares its trial tensors with the candidate process through CUDA IPC
(`reduce_tensor`). Each share adds a reference count in a shared-memory file that the consumer
gives back when it frees its mapping; a producer that frees a tensor whose count is not zero
parks its memory in torch's "limbo" until it is. The judge kills every candidate process
(`SIGKILL`), which gives nothing back: in a referee that served one evaluation and died, that
does not matter; a referee kept for the next evaluation of the same task (issue 11) would keep
every shared tensor's memory for good. This probe measures that, and one way out: once the
consumer is dead, the producer gives its counts back itself (`_release_ipc_counter`, what
torch's own consumer calls) and collects (`torch.cuda.ipc_collect`).

Each round: the producer allocates SIZE_MIB in a `MemPool` (as the referee does), shares it,
a fresh consumer process maps it, writes it, says so and waits; the producer kills it, drops
its tensor, (`--release`: gives the count back), collects, empties the cache, and prints the
memory torch still holds. Usage (GPU only):
`python3 scripts/probe/ipc_limbo.py [--rounds 5] [--size-mib 1024] [--release]`.
Prints one JSON line per round and a verdict line.
"""

import argparse
import json
import os
import pickle
import signal
import subprocess
import sys

import torch
from torch.multiprocessing.reductions import reduce_tensor

CONSUMER = r"""
import pickle, sys
import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor
args = pickle.loads(bytes.fromhex(sys.stdin.readline().strip()))
t = rebuild_cuda_tensor(*args)
t.fill_(1.0)
torch.cuda.synchronize()
print("mapped", flush=True)
sys.stdin.readline()  # killed before this returns
"""

# The positions of the reference counter's file handle and offset in `reduce_tensor`'s
# arguments for `rebuild_cuda_tensor` (torch 2.x: tensor_cls, size, stride, offset,
# storage_cls, dtype, device, handle, size_bytes, offset_bytes, requires_grad, ref_counter_handle,
# ref_counter_offset, event_handle, event_sync_required).
REF_COUNTER_HANDLE, REF_COUNTER_OFFSET, STORAGE_CLS, DEVICE = 11, 12, 4, 6


def one_round(pool, size_mib, release):
    with torch.cuda.use_mem_pool(pool):
        tensor = torch.empty(size_mib * 2**20 // 4, dtype=torch.float32, device="cuda")
    _rebuild, args = reduce_tensor(tensor)
    consumer = subprocess.Popen(
        [sys.executable, "-c", CONSUMER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    consumer.stdin.write(pickle.dumps(args).hex() + "\n")
    consumer.stdin.flush()
    mapped = consumer.stdout.readline().strip() == "mapped"
    os.kill(consumer.pid, signal.SIGKILL)
    consumer.wait()
    del tensor
    if release:
        storage_cls = args[STORAGE_CLS]
        storage_cls._release_ipc_counter(args[REF_COUNTER_HANDLE], args[REF_COUNTER_OFFSET], device=args[DEVICE])
    torch.cuda.synchronize()
    torch.cuda.ipc_collect()
    torch.cuda.empty_cache()
    return mapped


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--release", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: CUDA IPC needs a GPU")
        return
    torch.cuda.init()
    pool = torch.cuda.MemPool()
    base = torch.cuda.memory_allocated()
    held = []
    for index in range(args.rounds):
        mapped = one_round(pool, args.size_mib, args.release)
        held_mib = (torch.cuda.memory_allocated() - base) / 2**20
        held.append(held_mib)
        print(
            json.dumps(
                {"round": index, "consumer_mapped": mapped, "still_allocated_mib": held_mib, "release": args.release}
            )
        )
    leaks = held[-1] >= args.size_mib * args.rounds * 0.9
    freed = held[-1] < args.size_mib * 0.5
    verdict = "every round's tensor is still held (leaks)" if leaks else "freed" if freed else "partly held"
    print(json.dumps({"release": args.release, "rounds": args.rounds, "size_mib": args.size_mib, "verdict": verdict}))


if __name__ == "__main__":
    main()
