"""Pieces shared by the referee and the candidate process.

This file is trusted: the judge writes it, the candidate never edits it. It must stay small and
boring. Everything the judge decides (verdicts, comparisons, statistics) happens in Rust or in
the referee; the candidate process only runs the candidate and reports what it saw.
"""

import base64
import importlib.util
import json
import os
import re
import pickle
import socket
import sys
import time

CHANNEL_FD = 3


class Channel:
    """Newline-delimited JSON over the private socket the judge passes as fd 3.

    stdout and stderr are never part of the protocol, so whatever the candidate prints is just
    text in a log.
    """

    def __init__(self, fd=CHANNEL_FD):
        self.sock = socket.socket(fileno=fd)
        self.reader = self.sock.makefile("rb")

    def send(self, msg):
        self.sock.sendall(json.dumps(msg, allow_nan=True).encode() + b"\n")

    def recv(self):
        line = self.reader.readline()
        if not line:
            sys.exit(0)
        return json.loads(line)


def b64_pickle(obj):
    return base64.b64encode(pickle.dumps(obj)).decode()


def b64_unpickle(text):
    # Only ever called on data that the referee (trusted) produced.
    return pickle.loads(base64.b64decode(text))


def load_module(path, name, profile):
    """Imports a task or candidate file as a module, applying a size profile if asked."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if profile != "full":
        profiles = getattr(module, "PROFILES", None) or {}
        if profile not in profiles:
            raise KeyError(f"task has no size profile {profile!r} (has: {sorted(profiles)})")
        for key, value in profiles[profile].items():
            setattr(module, key, value)
    return module


def peek_profiles(path):
    """Reads a task's PROFILES without importing it twice: one import, then the profile is
    applied by `load_module`."""
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PROFILES" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def bring_up(torch, device):
    """Makes `device` this process's current device and starts its context. Triton launches on
    the current device, whatever tensors a kernel is given, so nothing may depend on which GPU
    happens to be current (the judge also shows each process only its own GPU)."""
    if device.startswith("cuda"):
        dev = torch.device(device)
        torch.cuda.set_device(dev)
        torch.empty(1, device=dev)


def device_context(torch, device):
    """Inputs and weights are created directly on the target device (no CPU staging)."""
    return torch.device(device)


def seed_all(torch, seed):
    torch.manual_seed(seed)


def as_output_list(torch, out):
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def env_info(torch, device):
    import platform

    info = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
        "device_name": None,
        "driver": None,
        "triton": None,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # the referee does not need triton
        pass
    if device.startswith("cuda"):
        info["device_name"] = torch.cuda.get_device_name(torch.device(device))
        try:
            # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." or
            # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  ...".
            with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
                found = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", f.readline())
            info["driver"] = found.group(1) if found else None
        except OSError:
            pass
    return info


# --- tensor transport -------------------------------------------------------------------------
#
# The referee owns every buffer the candidate touches: the inputs and the output slots. It hands
# the candidate descriptors; the candidate maps them, runs, and copies its outputs into the slots.
# `shm` maps files in a tmpfs directory (CPU, and GPU staging through host memory); `cuda_ipc`
# shares device allocations directly.


def share_tensor(torch, tensor, transport, directory, tag):
    if transport == "cuda_ipc":
        from torch.multiprocessing.reductions import reduce_tensor

        _rebuild, args = reduce_tensor(tensor)
        return {"kind": "cuda_ipc", "args": args}
    path = os.path.join(directory, f"{tag}.bin")
    flat = tensor.detach().contiguous().reshape(-1)
    numel = max(flat.numel(), 1)
    mapped = torch.from_file(path, shared=True, size=numel, dtype=flat.dtype)
    mapped[: flat.numel()].copy_(flat.to("cpu"))
    return {
        "kind": "shm",
        "path": path,
        "dtype": str(flat.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "numel": flat.numel(),
        "device": str(tensor.device),
        "mapped": mapped,
    }


def open_shared(torch, desc):
    if desc["kind"] == "cuda_ipc":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        return rebuild_cuda_tensor(*desc["args"]), None
    dtype = getattr(torch, desc["dtype"])
    numel = max(desc["numel"], 1)
    mapped = torch.from_file(desc["path"], shared=True, size=numel, dtype=dtype)
    host = mapped[: desc["numel"]].view(desc["shape"])
    if desc["device"] == "cpu":
        return host, None
    # Staged through host memory: the device copy is what the candidate sees; `host` is where
    # it must be written back for the referee to read.
    return host.to(desc["device"]), host


def public_desc(desc):
    """The part of a descriptor that travels (the mapping itself stays with its owner)."""
    return {k: v for k, v in desc.items() if k != "mapped"}


# --- timing -------------------------------------------------------------------------------------


def time_forward(torch, fn, args, warmup, iters, flush_bytes, device, on_output=None):
    """Times `fn(*args)` with CUDA events, an L2 flush before every iteration and a device-wide
    synchronize before the end event, so work on side streams is counted too. `on_output` sees
    each timed iteration's output, after the timing of that iteration."""
    dev = torch.device(device)
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device=dev)
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize(dev)
        samples = []
        for _ in range(iters):
            flush.zero_()
            # The flush must be over before the window opens: the events then bracket every
            # kernel the forward launches, side streams included, and no more (see timing.rs).
            torch.cuda.synchronize(dev)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args)
            torch.cuda.synchronize(dev)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
            if on_output is not None:
                on_output(len(samples) - 1, out)
            del out
    return samples


def now():
    return time.perf_counter()
