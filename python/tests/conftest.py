"""Shared pieces of the harness's CPU tests. Run with the judge's interpreter (it has torch and
triton): `$CRUCIBLE_PYTHON -m pytest python/tests`, with pytest from python/requirements-dev.lock
on the path (scripts/test does both)."""

import functools
import gc
import json
import os
import socket
import sys
import textwrap
from pathlib import Path

# Before anything imports triton: the CPU has no Triton backend, only the interpreter (the judge
# sets the same for device cpu).
os.environ["TRITON_INTERPRET"] = "1"

import pytest

from crucible_harness import common

PYTHON_DIR = Path(__file__).resolve().parent.parent

# A tiny task in KernelBench format, with a `small` size profile the CPU uses.
RELU_TASK = """
import torch
import torch.nn as nn

ROWS = 64
COLS = 16
PROFILES = {"small": {"ROWS": 6}}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
"""

TOLERANCE = {"fp32": [1e-2, 1e-2], "half": [1e-2, 1e-2]}


def write(path, source):
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture
def relu_task(tmp_path):
    return write(tmp_path / "relu_task.py", RELU_TASK)


def started_referee(torch, tmp_path, task, init_seed, standing_shares=False, size_trials=False):
    """A referee (in this process) that has loaded `task` on the CPU, sharing through `shm` in
    `tmp_path/scratch`; its init reply is kept as `init_reply`."""
    from crucible_harness import referee

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ref = referee.Referee(torch, None)
    ref.init_reply = ref.init(
        {
            "device": "cpu",
            "transport": "shm",
            "shared_dir": str(scratch),
            "tolerance": TOLERANCE,
            "profile": "auto",
            "task_path": str(task),
            "init_seed": init_seed,
            "standing_shares": standing_shares,
            "size_trials": size_trials,
        }
    )
    return ref


@pytest.fixture(autouse=True)
def forget_loaded_modules():
    """`load_module` registers what it loads in sys.modules; each test starts without them."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("crucible_task", "crucible_candidate", "t_")):
            del sys.modules[name]


class Pipe:
    """The judge's end of a real channel: a socket pair whose other end becomes the harness's
    `common.Channel`, as the harness gets it from the judge."""

    def __init__(self):
        self.judge, harness = socket.socketpair()
        self.reader = self.judge.makefile("rb")
        self.harness_fd = harness.detach()
        self.channels = []

    @functools.cached_property
    def channel(self):
        return self.adopt(common.Channel(fd=self.harness_fd))

    def adopt(self, channel):
        """A channel built on `harness_fd` elsewhere (by `common.start`), closed with the pipe."""
        self.channels.append(channel)
        return channel

    def send(self, *msgs):
        for msg in msgs:
            self.judge.sendall(json.dumps(msg).encode() + b"\n")

    def close_harness_end(self):
        # The makefile reader holds the socket open too: both must go for the judge to see EOF.
        for channel in self.channels:
            channel.reader.close()
            channel.sock.close()

    def replies(self):
        """Closes the harness's end, then returns every reply it sent."""
        self.close_harness_end()
        return [json.loads(line) for line in self.reader]

    def close(self):
        if not self.channels:
            os.close(self.harness_fd)
        self.close_harness_end()
        self.reader.close()
        self.judge.close()


@pytest.fixture
def pipe():
    p = Pipe()
    yield p
    p.close()
    # A harness started in this process (`common.start`) froze its objects; later tests count
    # live tensors through the collector, which does not see frozen ones.
    gc.unfreeze()
