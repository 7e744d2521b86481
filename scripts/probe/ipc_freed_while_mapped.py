"""Can a candidate that keeps a CUDA IPC mapping read what its referee allocates after freeing it?

The referee allocates every tensor the candidate maps in a pool of its own (`share_pool`) and
never gives that pool's segments back to the driver: a candidate may keep a mapping past its
trial (forging its reference count in /dev/shm so that the referee believes it let go), and a
segment freed and then reused for the referee's expected outputs could show them through it.
That costs memory: a 23_Softmax referee keeps 12 GiB reserved there from its first trial to its
end, idle through the precision measurement (the design notes, session 45), which is why that
task cannot run beside another evaluation on an 80 GiB card. Whether the driver ever lets freed
memory that another process still maps back into the exporter's new allocations decides whether
the referee may release the pool between trials. CUDA's documentation calls freeing an exported
allocation before every importer closed it undefined, so a "no" here is one driver's behaviour,
not a guarantee.

The producer (this process) allocates SIZE_MIB in a `MemPool`, fills it with 1.0 and shares it;
a consumer process maps it, checks it reads 1.0, gives its reference count back at once (what a
forged count achieves) and keeps the mapping; the producer drops the tensor and the pool,
collects, empties its cache (the segment goes to the driver with `cudaFree`), then allocates
ALLOCS tensors of SIZE_MIB each filled with a secret (7.0); the consumer reads its mapping again.
Verdicts: `leak` (the consumer read the secret), `kept` (it still reads 1.0: the driver kept the
old pages while mapped), `invalid` (the read failed: the mapping died with the free), or
`other` (neither value: memory of something else). Usage (GPU only):
`python3 scripts/probe/ipc_freed_while_mapped.py [--size-mib 1024] [--allocs 8]`.
Prints one JSON line per step and a verdict line. Not yet run on a GPU (written in session 45).
"""

import argparse
import json
import pickle
import subprocess
import sys

CONSUMER = r"""
import pickle, sys
import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor
args = pickle.loads(bytes.fromhex(sys.stdin.readline().strip()))
t = rebuild_cuda_tensor(*args)
first = t.float().mean().item()
# What a forged count achieves: the producer's limbo sees this share released, the mapping stays.
storage_cls, handle, offset, device = args[4], args[11], args[12], args[6]
storage_cls._release_ipc_counter(handle, offset, device=device)
print(f"mapped {first}", flush=True)
sys.stdin.readline()  # the producer has freed it and allocated the secret
try:
    values = torch.unique(t).tolist()
    print("read " + " ".join(repr(v) for v in values[:8]), flush=True)
except Exception as exc:
    print(f"failed {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
"""

SHARED, SECRET = 1.0, 7.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--allocs", type=int, default=8)
    args = parser.parse_args()
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    if not torch.cuda.is_available():
        print("SKIPPED: CUDA IPC needs a GPU")
        return
    torch.cuda.init()
    elements = args.size_mib * 2**20 // 4
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        shared = torch.full((elements,), SHARED, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    _rebuild, share_args = reduce_tensor(shared)
    consumer = subprocess.Popen(
        [sys.executable, "-c", CONSUMER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    consumer.stdin.write(pickle.dumps(share_args).hex() + "\n")
    consumer.stdin.flush()
    print(
        json.dumps({"step": "consumer", "said": consumer.stdout.readline().strip()}),
        flush=True,
    )

    address = shared.data_ptr()
    del shared, share_args
    torch.cuda.synchronize()
    torch.cuda.ipc_collect()
    del pool
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info()
    print(
        json.dumps(
            {
                "step": "freed",
                "reserved_mib": torch.cuda.memory_reserved() / 2**20,
                "device_free_mib": free / 2**20,
            }
        ),
        flush=True,
    )
    secrets = [
        torch.full((elements,), SECRET, dtype=torch.float32, device="cuda")
        for _ in range(args.allocs)
    ]
    torch.cuda.synchronize()
    reused = any(
        s.data_ptr() <= address < s.data_ptr() + s.numel() * 4 for s in secrets
    )
    print(
        json.dumps(
            {
                "step": "secret",
                "allocations": len(secrets),
                "same_address_reused": reused,
            }
        ),
        flush=True,
    )

    consumer.stdin.write("go\n")
    consumer.stdin.flush()
    said = consumer.stdout.readline().strip()
    consumer.wait(timeout=60)
    if said.startswith("read "):
        values = [float(v) for v in said.split()[1:]]
        verdict = (
            "leak" if SECRET in values else "kept" if values == [SHARED] else "other"
        )
    else:
        verdict = "invalid"
    print(json.dumps({"step": "verdict", "consumer_said": said, "verdict": verdict}))


if __name__ == "__main__":
    main()
