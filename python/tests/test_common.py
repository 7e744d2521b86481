"""Module loading, size profiles, tensor transport over `shm`, `sync` and start-up (common.py)."""

import gc
import os
import sys

import pytest
import torch
from conftest import RELU_TASK, write

from crucible_harness import common


def test_load_module_applies_a_size_profile(tmp_path):
    path = write(tmp_path / "task.py", RELU_TASK)
    full = common.load_module(str(path), "t_full", "full")
    assert (full.ROWS, full.COLS) == (64, 16)
    small = common.load_module(str(path), "t_small", "small")
    assert (small.ROWS, small.COLS) == (6, 16)
    assert small.get_inputs()[0].shape == (6, 16)
    assert sys.modules["t_small"] is small


def test_load_module_refuses_a_profile_the_task_lacks(tmp_path):
    path = write(tmp_path / "task.py", RELU_TASK)
    with pytest.raises(KeyError, match=r"task has no size profile 'tiny' \(has: \['small'\]\)"):
        common.load_module(str(path), "t_tiny", "tiny")
    plain = write(tmp_path / "plain.py", "N = 3\n")
    with pytest.raises(KeyError, match=r"has: \[\]"):
        common.load_module(str(plain), "t_plain", "small")


def test_peek_profiles_reads_without_importing(tmp_path):
    # The file would fail if it ran: peeking must not run it.
    path = write(tmp_path / "task.py", RELU_TASK + "\nraise RuntimeError('imported')\n")
    assert common.peek_profiles(str(path)) == {"small": {"ROWS": 6}}
    assert common.peek_profiles(str(write(tmp_path / "none.py", "N = 3\n"))) == {}


def test_sync_on_the_cpu_is_a_no_op():
    common.sync(torch, "cpu")


def test_b64_pickle_round_trip():
    value = {"inputs": [1, 2.5, "x"], "shape": (2, 3)}
    assert common.b64_unpickle(common.b64_pickle(value)) == value


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 4),
        torch.arange(10, dtype=torch.int64).reshape(2, 5),
        torch.tensor([True, False, True]),
        torch.randn(4, 6).to(torch.bfloat16).t(),  # not contiguous
        torch.empty(0, 5),
    ],
    ids=["float32", "int64", "bool", "bf16-transposed", "empty"],
)
def test_shm_round_trip(tmp_path, tensor):
    desc = common.share_tensor(torch, tensor, "shm", str(tmp_path), "t0_in0")
    public = common.public_desc(desc)
    assert "mapped" not in public
    assert os.path.exists(public["path"])
    assert os.path.dirname(public["path"]) == str(tmp_path)
    # The descriptor travels pickled; the other process rebuilds the tensor from it alone.
    opened, host = common.open_shared(torch, common.b64_unpickle(common.b64_pickle(public)))
    assert host is None  # on the CPU the mapping itself is the tensor, nothing is staged
    assert opened.shape == tensor.shape
    assert opened.dtype == tensor.dtype
    assert torch.equal(opened, tensor)


def test_writes_through_the_shared_mapping_reach_the_owner(tmp_path):
    slot = torch.full((2, 3), float("nan"))
    desc = common.share_tensor(torch, slot, "shm", str(tmp_path), "t0_out0")
    theirs, _host = common.open_shared(torch, common.public_desc(desc))
    theirs.copy_(torch.arange(6.0).reshape(2, 3))
    mine = desc["mapped"][: desc["numel"]].view(desc["shape"])
    assert torch.equal(mine, torch.arange(6.0).reshape(2, 3))
    # The owner's original tensor is not the mapping: only the mapping is shared.
    assert slot.isnan().all()


def test_start_says_hello_and_brings_up_the_cpu(pipe, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_DEVICE", "cpu")
    chan, torch_module, device = common.start("a test", fd=pipe.harness_fd)
    pipe.adopt(chan)
    assert torch_module is torch
    assert device == "cpu"
    assert pipe.replies() == [{"ok": True, "ready": True}]


def test_start_freezes_what_the_imports_made_before_the_hello(pipe, monkeypatch):
    """A full collection in a started process must not walk torch's and triton's objects (it
    took 0.06-0.2 s of a trial once per candidate process before they were frozen)."""
    monkeypatch.setenv("CRUCIBLE_DEVICE", "cpu")
    gc.unfreeze()
    chan, _torch, _device = common.start("a test", fd=pipe.harness_fd)
    pipe.adopt(chan)
    assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()


SETTLE = """
import json, os, sys
import triton
from triton.runtime import autotuner, cache
from crucible_harness import common
how = common.settle_triton_key()
print(json.dumps({"how": how, "version": triton.__version__, "cache": cache.triton_key(),
                  "autotuner": autotuner.triton_key()}))
"""


def settle_in_a_fresh_process(**env):
    """`settle_triton_key` patches Triton's modules: each case runs in its own interpreter."""
    import json
    import subprocess

    base = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CRUCIBLE_TRITON_KEY")}
    base["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-c", SETTLE], env={**base, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_triton_key_is_settled_once_from_the_seed_or_computed():
    computed = settle_in_a_fresh_process()
    assert computed["how"] == "computed"
    real = computed["cache"]
    assert real.startswith(computed["version"]) and computed["autotuner"] == real
    # Given by a trusted process for this Triton: every name Triton calls it by returns it.
    given = settle_in_a_fresh_process(CRUCIBLE_TRITON_KEY=real)
    assert given == {**computed, "how": "given"}
    other = computed["version"] + "-made-up"
    assert settle_in_a_fresh_process(CRUCIBLE_TRITON_KEY=other)["autotuner"] == other
    # Another Triton's key is not taken; the interpreter compiles nothing, so it is left alone.
    assert settle_in_a_fresh_process(CRUCIBLE_TRITON_KEY="0.0.1-stale")["how"] == "computed"
    assert settle_in_a_fresh_process(TRITON_INTERPRET="1")["how"] is None
