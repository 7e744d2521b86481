"""Why a CUPTI reader with ctypes callbacks hung a candidate process, and whether buffer callbacks
in C (`cupti_shim.c`) do not (run on a GPU machine).

On 2026-12-04 a harness reader built on `cupti_direct.py`'s ctypes callbacks hung a fresh
evaluation (`timer_tamper`, 60 s in `trial_4`) right after it was started on a thread. The
suspected cycle: CUPTI calls a buffer callback while it holds its own lock, the ctypes callback
waits for the GIL, and the thread holding the GIL waits for CUPTI's lock in a kernel launch. Each
variant runs in a fresh interpreter under a watchdog (`faulthandler`, WATCHDOG_S: a hang prints
every thread's stack and exits 1) and prints one JSON line:

- `ctypes_thread` / `shim_thread`: a second thread profiles a tiny op over and over (enable,
  launch, synchronize, disable, flush), as the warm-up thread did, while the main thread
  launches small kernels for STRESS_S seconds;
- `ctypes_fill` / `shim_fill`: the main thread alone profiles one window of LAUNCHES tiny
  kernels, more records than one 4 MiB buffer holds, and counts the buffers CUPTI handed back on
  a thread other than the flushing one (its worker thread), where a ctypes callback would have
  to take the GIL from a thread that may be launching.

Usage: `python3 scripts/probe/cupti_gil.py [--device cuda:0]`.
"""

import argparse
import ctypes
import faulthandler
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cupti_direct

KERNEL = cupti_direct.CONCURRENT_KERNEL
WATCHDOG_S = 40
STRESS_S = 8
LAUNCHES = 60000


class ShimRecord(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("start", ctypes.c_uint64),
        ("end", ctypes.c_uint64),
        ("name", ctypes.c_char * 256),
    ]


class ShimReader:
    """The reader whose buffer callbacks are C (`cupti_shim.c`)."""

    def __init__(self, shim_path, cupti_path):
        self.lib = ctypes.CDLL(shim_path)
        self.lib.shim_take.restype = ctypes.c_size_t
        code = self.lib.shim_init(cupti_path.encode())
        if code != 0:
            raise RuntimeError(f"shim_init returned {code}")
        # Allocated once: the thread variant drains thousands of times, and an 18 MB zeroed array
        # each time would slow its profiling thread next to the ctypes reader's.
        self.out = (ShimRecord * 65536)()

    def enable(self):
        assert self.lib.shim_enable(KERNEL) == 0

    def disable_and_flush(self):
        assert self.lib.shim_disable(KERNEL) == 0
        assert self.lib.shim_flush() == 0
        out, taken = self.out, []
        while n := self.lib.shim_take(out, len(out)):
            taken.extend((out[i].name.decode(errors="replace"), (out[i].end - out[i].start) / 1e3) for i in range(n))
        return taken

    def off_caller(self):
        completed, off = ctypes.c_uint64(), ctypes.c_uint64()
        self.lib.shim_counts(ctypes.byref(completed), ctypes.byref(off))
        return completed.value, off.value


class CountingCtypesReader(cupti_direct.DirectCupti):
    """`cupti_direct.py`'s ctypes reader, counting the buffers handed back off the flushing thread."""

    def __init__(self, path):
        # Names of their own: the base class keeps its callbacks and buffers under `completed`,
        # `requested` and `buffers`.
        self.handed_back, self.handed_back_off, self.flusher = 0, 0, None
        super().__init__(path)

    def on_completed(self, *args):
        self.handed_back += 1
        if threading.get_ident() != self.flusher:
            self.handed_back_off += 1
        super().on_completed(*args)

    def disable_and_flush(self):
        self.flusher = threading.get_ident()
        return super().disable_and_flush()

    def off_caller(self):
        return self.handed_back, self.handed_back_off


def profile_once(torch, device, reader, work):
    reader.enable()
    work()
    torch.cuda.synchronize(device)
    return reader.disable_and_flush()


def child(variant, device, shim_path):
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    import torch

    torch.cuda.set_device(device)
    x = torch.ones(1024, device=device)
    torch.cuda.synchronize(device)
    cupti = cupti_direct.find_cupti(torch)
    reader = ShimReader(shim_path, cupti) if variant.startswith("shim") else CountingCtypesReader(cupti)
    result = {"variant": variant, "cupti": cupti}
    if variant.endswith("_thread"):
        stop, profiled = threading.Event(), [0, 0]

        def profiler():
            while not stop.is_set():
                records = profile_once(torch, device, reader, lambda: torch.ones(1, device=device).add_(1))
                profiled[0] += 1
                profiled[1] += len(records)

        thread = threading.Thread(target=profiler, daemon=True)
        thread.start()
        launches, until = 0, time.monotonic() + STRESS_S
        while time.monotonic() < until:
            for _ in range(100):
                x.mul_(1.0)
            launches += 100
            torch.cuda.synchronize(device)
        stop.set()
        thread.join()
        result.update(main_launches=launches, profiled_windows=profiled[0], records=profiled[1])
    else:

        def many():
            for _ in range(LAUNCHES):
                x.mul_(1.0)

        t0 = time.perf_counter()
        records = profile_once(torch, device, reader, many)
        result.update(launches=LAUNCHES, records=len(records), window_s=time.perf_counter() - t0)
    completed, off = reader.off_caller()
    result.update(buffers_completed=completed, buffers_off_the_flushing_thread=off, hung=False)
    print(json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--child")
    parser.add_argument("--shim")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.device, args.shim)
        return
    with tempfile.TemporaryDirectory() as tmp:
        shim = os.path.join(tmp, "cupti_shim.so")
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cupti_shim.c")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", shim, source, "-ldl", "-lpthread"], check=True)
        for variant in ("shim_fill", "ctypes_fill", "shim_thread", "ctypes_thread"):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, __file__, "--child", variant, "--device", args.device, "--shim", shim],
                capture_output=True,
                text=True,
                check=False,
            )
            lines = done.stdout.strip().splitlines()
            if done.returncode == 0 and lines:
                print(lines[-1], flush=True)
            else:
                hung = "Timeout" in done.stderr
                print(
                    json.dumps(
                        {
                            "variant": variant,
                            "hung": hung,
                            "rc": done.returncode,
                            "wall_s": time.monotonic() - started,
                            "stderr": done.stderr[-3000:],
                        }
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main()
