"""How long a process holding most of a GPU's memory takes to die after SIGKILL, and whether
its memory is free by the time it is a zombie (the state a forked referee is awaited in).

Run on the GPU machine: python3 scripts/probe/kill_release.py [GIB] [ROUNDS]. The parent never
touches CUDA (it forks, like the referee zygote); each child allocates GIB GiB and waits."""

import os
import signal
import subprocess
import sys
import time


def used_mib():
    out = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=memory.used",
            "--format=csv,noheader,nounits",
            "-i",
            "0",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.split()[0])


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def main():
    gib = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    base = used_mib()
    for r in range(rounds):
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            import torch

            _held = [
                torch.ones(1 << 28, device="cuda:0") for _ in range(gib)
            ]  # 1 GiB each
            torch.cuda.synchronize()
            os.write(ready_w, b"x")
            time.sleep(600)
            os._exit(0)
        os.read(ready_r, 1)
        held = used_mib() - base
        t0 = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        t_zombie = t_free = None
        while t_zombie is None or t_free is None:
            now = time.perf_counter() - t0
            if t_zombie is None and state(pid) in ("Z", "gone"):
                t_zombie = now
                at_zombie = used_mib() - base
            if t_free is None and used_mib() - base < 1024:
                t_free = now
            if now > 60:
                break
            time.sleep(0.01)
        os.waitpid(pid, 0)
        print(
            f"round {r}: held {held} MiB; zombie after {t_zombie:.3f} s with {at_zombie} MiB still used; "
            f"memory back after {t_free if t_free is None else round(t_free, 3)} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
