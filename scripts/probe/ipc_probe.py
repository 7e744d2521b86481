"""CUDA IPC under the candidate sandbox, for scripts/gpu-sandbox-probe.

`ipc_probe.py export [--not-dumpable] -- IMPORTER...` shares a device tensor the way the referee
does and runs IMPORTER... + [handle file]; `ipc_probe.py import FILE` maps it the way the candidate
does, checks it and adds 1. The exporter then checks that the write arrived."""
import ctypes
import pickle
import subprocess
import sys
import tempfile

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor


def export(argv):
    not_dumpable = argv[0] == "--not-dumpable"
    if not_dumpable:
        argv = argv[1:]
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    importer = argv[argv.index("--") + 1 :]
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    _, args = reduce_tensor(x)
    with tempfile.NamedTemporaryFile("wb", suffix=".pkl", dir="/tmp/crucible-probe", delete=False) as f:
        pickle.dump(args, f)
    done = subprocess.run(importer + [f.name], capture_output=True, text=True, timeout=120)
    torch.cuda.synchronize()
    ok = done.returncode == 0 and bool((x == torch.arange(1 << 20, device="cuda") + 1).all())
    lines = (done.stdout + done.stderr).strip().splitlines()
    for line in dict.fromkeys(lines):
        if line.startswith("failtrace") and "No such file" not in line:
            print("importer", line)
    tail = lines[-1:] or [""]
    print("ipc ok" if ok else f"ipc FAILED (rc={done.returncode}): {tail[0][:300]}")


def import_(path):
    with open(path, "rb") as f:
        args = pickle.load(f)
    x = rebuild_cuda_tensor(*args)
    expect = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    assert bool((x == expect).all()), "wrong values"
    x.add_(1)
    torch.cuda.synchronize()
    print("imported")


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2:])
    else:
        import_(sys.argv[2])
