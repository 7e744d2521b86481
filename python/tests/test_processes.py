"""The three harness processes as the judge starts them (`python -m crucible_harness.X`, the
channel): one start-up, one request loop, each with its own error shape."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from conftest import PYTHON_DIR, started_referee, write


class Process:
    def __init__(self, module, device="cpu"):
        judge, harness = socket.socketpair()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(PYTHON_DIR),
            "PYTHONSAFEPATH": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TRITON_INTERPRET": "1",
            "CRUCIBLE_DEVICE": device,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"crucible_harness.{module}"],
            # fd 3, where the zygote puts a referee's channel and a harness process looks without
            # CRUCIBLE_CHANNEL_FD (dup2 makes the copy inheritable; Python's own fds
            # are not, so nothing else leaks into the child).
            preexec_fn=lambda: os.dup2(harness.fileno(), 3),
            close_fds=False,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        harness.close()
        judge.settimeout(120)
        self.judge = judge
        self.reader = judge.makefile("rb")

    def receive(self):
        line = self.reader.readline()
        return json.loads(line) if line else None

    def request(self, msg):
        self.judge.sendall(json.dumps(msg).encode() + b"\n")
        return self.receive()

    def wait(self):
        status = self.proc.wait(timeout=60)
        self.stderr = self.proc.stderr.read().decode()
        self.proc.stderr.close()
        self.reader.close()
        self.judge.close()
        return status


@pytest.fixture
def started():
    processes = []

    def start(module, device="cpu"):
        process = Process(module, device)
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.proc.poll() is None:
            process.proc.kill()
            process.wait()


@pytest.mark.parametrize(
    ("module", "bad", "error_keys"),
    [
        ("referee", {"op": "prepare", "trial": "trial_0", "seed": 1}, {"ok", "error", "traceback"}),
        (
            "candidate",
            {"op": "run", "stage": "trial_0", "trial": "trial_0", "payload": "", "grad": False},
            {"ok", "class", "message"},
        ),
        ("audit", {"op": "audit"}, {"ok", "stage", "error", "traceback", "restart"}),
    ],
)
def test_each_process_starts_answers_errors_in_its_shape_and_ends_with_its_channel(started, module, bad, error_keys):
    process = started(module)
    assert process.receive() == {"ok": True, "ready": True}
    failed = process.request(bad)  # a request the process cannot serve yet: its error reply
    assert failed["ok"] is False
    assert set(failed) == error_keys
    unknown = process.request({"op": "no_such_op"})
    assert unknown["ok"] is False
    assert set(unknown) == error_keys
    assert "unknown op 'no_such_op'" in json.dumps(unknown)
    # Still serving after both; it ends quietly when the judge closes the channel.
    assert process.request({"op": "exit"})["ok"] is False  # no such op: the judge never sends it
    process.judge.shutdown(socket.SHUT_WR)
    assert process.receive() is None
    assert process.wait() == 0


def test_the_candidate_process_starts_its_profiler_when_asked_and_nothing_on_the_cpu(started):
    # The judge asks before the timed phases (a process started on the spot has not warmed it):
    # the reply is checked against the protocol on both sides, so a wrong shape fails here.
    process = started("candidate")
    assert process.receive() == {"ok": True, "ready": True}
    assert process.request({"op": "start_profiler", "stage": "profiler-start"}) == {"ok": True}
    # A process whose trials passed is asked to begin it on a thread first, then waited for.
    assert process.request({"op": "warm_profiler", "stage": "profiler-warm-up"}) == {"ok": True}
    assert process.request({"op": "start_profiler", "stage": "profiler-start"}) == {"ok": True}
    process.judge.shutdown(socket.SHUT_WR)
    assert process.receive() is None
    assert process.wait() == 0


@pytest.mark.parametrize("module", ["referee", "candidate", "audit"])
def test_a_device_that_cannot_be_used_is_reported_in_the_hello(started, module):
    # No machine has a 100th GPU: bring-up fails the same way with or without GPUs.
    process = started(module, device="cuda:99")
    hello = process.receive()
    assert hello["ok"] is False
    assert hello["error"].startswith(f"cannot use cuda:99 in the {module}")
    assert process.wait() == 1
    assert "cannot use cuda:99" in process.stderr  # in the log too


def test_a_cuda_error_is_reported_before_the_process_leaves(started, tmp_path, relu_task):
    """A sticky CUDA error would abort the process when the next tensor is freed: the candidate
    sends its reply first and then leaves at once, without waiting for `exit`."""
    ref = started_referee(torch, tmp_path, relu_task, init_seed=1)
    init = ref.init_reply
    path = write(
        tmp_path / "sticky.py",
        """
        import torch

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
        """,
    )
    process = started("candidate")
    assert process.receive()["ok"] is True
    loaded = process.request(
        {
            "op": "load",
            "device": "cpu",
            "candidate_path": str(path),
            "init_inputs": init["init_inputs"],
            "init_seed": 1,
            "autotune_ms": [5, 25],
        }
    )
    assert loaded == {"ok": True}
    payload = ref.prepare({"trial": "trial_0", "seed": 2})["payload"]
    reply = process.request({"op": "run", "stage": "trial_0", "trial": "trial_0", "payload": payload, "grad": False})
    assert reply["ok"] is False
    assert reply["class"] == "cuda_error"
    assert "an illegal memory access" in reply["message"]
    assert process.receive() is None  # gone: the channel closed without an `exit`
    assert process.wait() == 0
