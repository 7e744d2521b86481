"""The referee's trial on the CPU (referee.py): prepare shares the inputs and NaN-poisoned output
slots, check compares what the candidate left there. The candidate's side is played by the real
`Candidate` where a whole run matters, and by writing the shared slots directly otherwise."""

import contextlib
import sys

import pytest
import torch
from conftest import started_referee, write

from crucible_harness import candidate, common
from crucible_harness import referee as referee_module
from crucible_harness.referee import memory_held


@pytest.fixture
def ref(tmp_path, relu_task):
    return started_referee(torch, tmp_path, relu_task, init_seed=11)


def shared(payload):
    """What the candidate maps: the inputs and the output slots, from the payload alone."""
    desc = common.b64_unpickle(payload)
    inputs = [common.open_shared(torch, item["tensor"])[0] for item in desc["inputs"]]
    slots = [common.open_shared(torch, item["desc"])[0] for item in desc["outputs"]]
    return desc, inputs, slots


def test_init_picks_the_small_profile_on_the_cpu(ref):
    assert ref.init_reply["profile"] == "small"
    assert common.b64_unpickle(ref.init_reply["init_inputs"]) == []
    assert ref.init_reply["env"]["device"] == "cpu"


def test_prepare_shares_the_drawn_inputs_and_nan_slots(ref, tmp_path):
    desc, inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 5})["payload"])
    torch.manual_seed(5)
    drawn = torch.randn(6, 16)  # the task's get_inputs at the small size, with the trial's seed
    assert torch.equal(inputs[0], drawn)
    tensor_desc = desc["inputs"][0]["tensor"]
    assert tensor_desc["kind"] == "shm"
    assert tensor_desc["path"].startswith(str(tmp_path / "scratch"))
    assert "mapped" not in tensor_desc
    assert desc["outputs"][0]["shape"] == [6, 16]
    assert desc["outputs"][0]["dtype"] == "float32"  # one spelling everywhere
    assert slots[0].isnan().all()


def test_prepare_reports_the_bytes_the_trial_holds(ref):
    # The inputs, their pristine copy, the expected outputs and the slots: 6 x 16 float32 each.
    assert ref.prepare({"trial": "trial_0", "seed": 5})["tensor_bytes"] == 4 * 6 * 16 * 4


def test_init_sizes_a_trial_from_shapes_as_prepare_will_report_it(tmp_path, relu_task):
    ref = started_referee(torch, tmp_path, relu_task, init_seed=11, size_trials=True)
    sizes = ref.init_reply["sizes"]
    assert sizes == {"trial_bytes": 4 * 6 * 16 * 4, "output_elements": 6 * 16}
    assert ref.prepare({"trial": "trial_0", "seed": 5})["tensor_bytes"] == sizes["trial_bytes"]


def test_init_sizes_nothing_unasked_or_where_shapes_alone_cannot_run_the_task(ref, tmp_path):
    assert ref.init_reply["sizes"] is None
    # `.item()` needs a value: the meta device has none. The task still loads and draws.
    task = write(
        tmp_path / "item_task.py",
        """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x)

        def get_inputs():
            rows = int(torch.randint(6, 7, ()).item())
            return [torch.randn(rows, 16)]

        def get_init_inputs():
            return []
        """,
    )
    (tmp_path / "other").mkdir()
    unsized = started_referee(torch, tmp_path / "other", task, init_seed=11, size_trials=True)
    assert unsized.init_reply["sizes"] is None
    assert unsized.prepare({"trial": "trial_0", "seed": 5})["tensor_bytes"] == 4 * 6 * 16 * 4


def test_an_honest_candidate_passes(ref, tmp_path):
    path = write(
        tmp_path / "honest.py",
        """
        import torch

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x)
        """,
    )
    cand = candidate.Candidate(torch, None, candidate.LaunchRecorder(), candidate.AutotuneBudget())
    loaded = cand.load(
        {
            "device": "cpu",
            "candidate_path": str(path),
            "init_inputs": ref.init_reply["init_inputs"],
            "init_seed": 11,
            "autotune_ms": [5, 25],
        }
    )
    assert loaded == {}
    payload = ref.prepare({"trial": "trial_0", "seed": 3})["payload"]
    ran = cand.run({"payload": payload, "stage": "correctness_0"})
    assert ran["problem"] is None
    assert ran["aliased_outputs"] == []
    checked = ref.check({"trial": "trial_0"})
    assert checked["problems"] == []
    assert checked["mutated_inputs"] == []
    assert checked["changed_after_return"] == []
    assert checked["outputs"][0]["mismatched"] == 0


def test_slots_never_written_fail_as_all_nan(ref):
    ref.prepare({"trial": "trial_0", "seed": 3})
    checked = ref.check({"trial": "trial_0"})
    assert checked["problems"]
    assert checked["problems"] == ["output 0: every element is NaN (was the output written at all?)"]


def test_a_wrong_value_fails_with_its_index(ref):
    _desc, inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    slots[0][4, 2] += 1.0
    checked = ref.check({"trial": "trial_0"})
    assert checked["problems"]
    assert "first at index (4, 2)" in checked["problems"][0]


def test_an_input_mutated_in_place_is_detected(ref):
    _desc, inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    inputs[0].relu_()  # through the shared mapping, as a candidate process would
    checked = ref.check({"trial": "trial_0"})
    assert checked["problems"] == []  # the expected output was computed before sharing
    assert checked["mutated_inputs"] == [0]


def test_a_write_after_the_snapshot_is_detected(ref):
    """The check compares a snapshot of the slots and then reads them again: a write landing in
    between (a kernel still running, a process that escaped the stop) must show. The late write
    is made, through the candidate's mapping, when the comparison starts."""
    _desc, inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    checked = checked_with_a_late_write(ref, "trial_0", slots[0])
    assert checked["problems"] == []  # the snapshot was right
    assert checked["changed_after_return"] == [0]


def checked_with_a_late_write(ref, trial, slot):
    """`ref.check(trial)`, with `slot` written (through the candidate's mapping) just as the
    comparison starts."""

    def late_writer(frame, event, _arg):
        if event == "call" and frame.f_code is common.Comparison.__init__.__code__:
            slot.fill_(7.0)

    sys.setprofile(late_writer)
    try:
        return ref.check({"trial": trial})
    finally:
        sys.setprofile(None)


def test_a_large_checked_trial_holds_no_tensor_when_its_memory_goes_back(ref, monkeypatch):
    """On a GPU the release empties torch's cache, which can give back only what no tensor
    holds: the trial's tensors must be gone by then, not kept alive by the comparison's locals.
    (On the CPU the release is a no-op; what it would free is counted instead.)"""
    monkeypatch.setattr(referee_module, "LARGE_TRIAL_BYTES", 0)
    ref.prepare({"trial": "trial_0", "seed": 3})  # one trial's tensors alive in the background
    _desc, inputs, slots = shared(ref.prepare({"trial": "trial_1", "seed": 4})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    at_release = []
    monkeypatch.setattr(ref, "release_device_memory", lambda: at_release.append(memory_held(ref)))
    assert ref.check({"trial": "trial_1"})["problems"] == []
    assert len(at_release) == 1
    assert at_release[0] == memory_held(ref)  # nothing more went once the check returned
    # and the checked trial's went: what is left is trial_0's and what the test maps
    ref.prepare({"trial": "trial_1", "seed": 4})
    assert memory_held(ref)["live_tensor_bytes"] > at_release[0]["live_tensor_bytes"]


def test_a_small_checked_trial_leaves_its_memory_cached_for_the_next(ref, monkeypatch):
    released = []
    monkeypatch.setattr(ref, "release_device_memory", lambda: released.append(True))
    _desc, inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    assert ref.check({"trial": "trial_0"})["problems"] == []
    assert released == []


def test_the_reference_timing_holds_no_tensor_when_its_memory_goes_back(ref, monkeypatch):
    # CUDA events time the loop on a GPU; here one forward stands for it.
    monkeypatch.setattr(common, "time_forward", lambda _torch, fn, args, *_rest: [float(fn(*args).numel())])
    at_release = []
    monkeypatch.setattr(ref, "release_device_memory", lambda: at_release.append(memory_held(ref)))
    before = memory_held(ref)
    ref.time_reference({"seed": 5, "warmup": 0, "iters": 0, "flush_bytes": 0})
    assert at_release == [before]


@pytest.mark.parametrize("large", [False, True])
def test_only_a_large_precision_measurement_empties_the_cache_after_it(ref, monkeypatch, large):
    monkeypatch.setattr(referee_module, "LARGE_TRIAL_BYTES", 0 if large else 1 << 62)
    _desc, inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    assert ref.check({"trial": "trial_0", "keep": True, "precision": True})["problems"] == []
    released = []
    monkeypatch.setattr(ref, "release_device_memory", lambda: released.append(True))
    assert ref.measure_precision({"budget_s": 60})["outputs"]
    assert released == ([True] if large else [])


def test_a_second_run_that_differs_from_the_first_is_a_repeat_problem(ref):
    for trial, noise in ((0, 0.0), (1, 0.5)):
        _desc, inputs, slots = shared(ref.prepare({"trial": trial, "seed": 3})["payload"])
        slots[0].copy_(torch.relu(inputs[0]) + noise)
        checked = ref.check({"trial": trial, "keep": trial == 0, "against_kept": trial == 1})
    assert len(checked["repeat_problems"]) == 1
    assert checked["repeat_problems"][0].startswith("output 0, second run vs first: ")
    assert ref.kept is None  # not held through the timed phases


def test_a_passing_check_fetches_from_the_device_twice(ref, monkeypatch):
    """Beside other busy processes every fetch from the device waits for their time slices: a
    check of a passing trial, the repeat's too, fetches its statistics and the inputs' flags
    together, then the slots' flags (their second read, after that wait). Counted on the CPU as
    the calls that would be those transfers on a GPU."""
    fetches = []
    for name in ("tolist", "item"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, _f=original, _n=name: fetches.append(_n) or _f(self))
    monkeypatch.setattr(common, "sync", lambda *_args: fetches.append("sync"))
    for trial in (0, 1):
        _desc, inputs, slots = shared(ref.prepare({"trial": trial, "seed": 3})["payload"])
        slots[0].copy_(torch.relu(inputs[0]))
        fetches.clear()
        checked = ref.check({"trial": trial, "keep": trial == 0, "against_kept": trial == 1})
        assert checked["problems"] == [] and checked["repeat_problems"] == []
        assert fetches == ["tolist", "tolist"], trial


def test_the_first_run_is_kept_only_until_the_repeat(ref):
    for trial in (0, 1):
        _desc, inputs, slots = shared(ref.prepare({"trial": trial, "seed": 3})["payload"])
        slots[0].copy_(torch.relu(inputs[0]))
        checked = ref.check({"trial": trial, "keep": trial == 0})
        assert checked["problems"] == []
        assert ref.kept is not None  # trial 1 is no repeat: the first run is still needed
    _desc, inputs, slots = shared(ref.prepare({"trial": 2, "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    assert ref.check({"trial": 2, "against_kept": True})["repeat_problems"] == []
    assert ref.kept is None


def _kept_trial_measured(ref, ahead, monkeypatch):
    """Trial 0 run by writing its slot (relu with a small error), checked as the kept trial,
    then measured; with `ahead`, its forwards begun before the slot is written and awaited
    before the check, as the judge does. The reply and the forwards the measurement ran."""
    from crucible_harness import precision

    _desc, inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    if ahead:
        began = ref.start_precision({"trial": "trial_0", "max_bytes": 1 << 20, "budget_s": 60})
        assert began == {"started": True, "held_bytes": 6 * 16 * 8 * precision.FORWARDS}
    slots[0].copy_(torch.relu(inputs[0]) * (1 + 1e-6))
    if ahead:
        waited = ref.await_precision({})
        assert waited["precomputed"] and waited["error"] is None, waited
    assert ref.check({"trial": "trial_0", "keep": True, "precision": True})["problems"] == []
    forwards = []
    run_float64 = precision.run_float64_on
    monkeypatch.setattr(precision, "run_float64_on", lambda *a: forwards.append(a) or run_float64(*a))
    measured = ref.measure_precision({"budget_s": 60})
    monkeypatch.setattr(precision, "run_float64_on", run_float64)
    return measured, len(forwards)


def test_precision_forwards_begun_ahead_give_the_same_measurement(tmp_path, relu_task, monkeypatch):
    """The kept trial's float64 forwards run while the candidate runs it; the measurement then
    runs none of them and replies exactly what it replies having run all four itself."""
    replies = []
    for ahead in (False, True):
        (tmp_path / str(ahead)).mkdir()
        ref = started_referee(torch, tmp_path / str(ahead), relu_task, init_seed=11)
        replies.append(_kept_trial_measured(ref, ahead, monkeypatch))
    (alone, forwards_alone), (measured, forwards_ahead) = replies
    assert (forwards_alone, forwards_ahead) == (4, 0)
    assert alone["unmeasured"] is None and alone["outputs"][0]["candidate"]["rel_rms"] > 0
    assert measured == alone


def test_precision_forwards_begin_only_where_their_copies_fit(ref):
    held = 6 * 16 * 8 * 4  # four float64 copies of the 6 x 16 output
    ref.prepare({"trial": "trial_0", "seed": 3})
    assert ref.start_precision({"trial": "trial_0", "max_bytes": held - 1, "budget_s": 60}) == {
        "started": False,
        "held_bytes": held,
    }
    assert ref.await_precision({}) == {"precomputed": False, "seconds": 0.0, "error": None}
    assert ref.start_precision({"trial": "trial_0", "max_bytes": held, "budget_s": 60})["started"]


def test_a_failed_kept_trial_lets_its_precision_forwards_go(ref):
    ref.prepare({"trial": "trial_0", "seed": 3})
    ref.start_precision({"trial": "trial_0", "max_bytes": 1 << 20, "budget_s": 60})
    ref.await_precision({})
    assert ref.check({"trial": "trial_0", "keep": True, "precision": True})["problems"]  # NaN slots
    assert ref.ahead is None
    assert ref.measure_precision({"budget_s": 60})["unmeasured"] == "no passing trial was kept for the measurement"


def test_the_precision_warm_up_is_a_whole_measurement():
    # It runs on a GPU only (the warm pool's `warm_up`), through the same code as the CPU: a
    # measurement that stopped short would leave its later kernels to the evaluation.
    from crucible_harness import precision, referee

    x = torch.randn(64, 64)
    outputs, errors = referee.warm_up_precision(torch, "cpu", x)
    assert len(outputs) == 1 and len(errors) == 1
    emulated = {e["name"] for e in outputs[0]["emulations"]}
    assert emulated == {name for name, *_ in precision.OPERAND_ROUNDINGS} | {
        f"{name}+out" for name, _bits, _mode, with_output in precision.OPERAND_ROUNDINGS if with_output
    } | {name for name, _ in precision.OUTPUT_ROUNDINGS}


def test_the_candidate_gets_the_inputs_as_drawn_even_where_the_reference_changes_its_own(tmp_path):
    # The expected outputs come from inputs the candidate never maps, and what it is given is the
    # pristine copy: a reference that works in place changes neither that nor the check's view.
    task = write(
        tmp_path / "in_place_task.py",
        """
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x):
                return x.mul_(2).add_(1)


        def get_inputs():
            return [torch.randn(6, 16)]


        def get_init_inputs():
            return []
        """,
    )
    ref = started_referee(torch, tmp_path, task, init_seed=11)
    reply = ref.prepare({"trial": "trial_0", "seed": 5})
    _desc, inputs, slots = shared(reply["payload"])
    torch.manual_seed(5)
    drawn = torch.randn(6, 16)
    assert torch.equal(inputs[0], drawn)
    slots[0].copy_(drawn * 2 + 1)
    checked = ref.check({"trial": "trial_0"})
    assert checked["problems"] == [] and checked["mutated_inputs"] == []


# A reference that changes its input in place: a redraw that took the forward's inputs for the
# pristine ones measures other numbers.
IN_PLACE_RANDOM_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        x.mul_(2.0)
        return x + 1.0


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
"""


def _measured_with_redraw(tmp_path, task, redrawn, monkeypatch):
    """Trial 0 passed with the candidate's outputs a little off, kept for the measurement (its
    inputs drawn again or not, per `redrawn`), then measured: what was kept, and the reply."""
    monkeypatch.setattr(referee_module, "LARGE_TRIAL_BYTES", 0 if redrawn else 1 << 62)
    (tmp_path / str(redrawn)).mkdir()
    ref = started_referee(torch, tmp_path / str(redrawn), task, init_seed=11)
    _desc, _inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    pristine, expected = ref.trials["trial_0"][1], ref.trials["trial_0"][2]
    slots[0].copy_(expected[0] * (1 + 1e-6))
    assert ref.check({"trial": "trial_0", "keep": True, "precision": True})["problems"] == []
    kept_inputs, kept_expected = ref.precision_trial[:2]
    del pristine, expected
    return (kept_inputs, kept_expected), ref.measure_precision({"budget_s": 60})


def test_a_large_kept_trial_draws_its_inputs_again_for_the_precision_measurement(tmp_path, monkeypatch):
    """Above `LARGE_TRIAL_BYTES` the kept trial holds only the candidate's outputs until the
    measurement (23_Softmax's pristine inputs and expected outputs were 12 of the 48.7 GiB its
    referee held through the trials), which draws both again: the same reply to the bit."""
    task = write(tmp_path / "in_place_random.py", IN_PLACE_RANDOM_TASK)
    (held_inputs, held_expected), kept = _measured_with_redraw(tmp_path, task, False, monkeypatch)
    (no_inputs, no_expected), redrawn = _measured_with_redraw(tmp_path, task, True, monkeypatch)
    assert held_inputs is not None and held_expected is not None
    assert no_inputs is None and no_expected is None
    assert kept["unmeasured"] is None and kept["outputs"][0]["candidate"]["rel_rms"] > 0
    assert redrawn == kept


def test_a_redrawn_precision_trial_kept_for_another_attempt_after_running_out_of_memory(tmp_path, monkeypatch):
    """Out of memory while drawing again: unmeasured for memory (the judge asks again after a
    pause), and the next attempt draws again and measures."""
    monkeypatch.setattr(referee_module, "LARGE_TRIAL_BYTES", 0)
    ref = started_referee(torch, tmp_path, write(tmp_path / "t.py", IN_PLACE_RANDOM_TASK), init_seed=11)
    _desc, _inputs, slots = shared(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(ref.trials["trial_0"][2][0])
    assert ref.check({"trial": "trial_0", "keep": True, "precision": True})["problems"] == []
    draw = ref.draw_inputs

    def out_of_memory(_seed):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")

    monkeypatch.setattr(ref, "draw_inputs", out_of_memory)
    first = ref.measure_precision({"budget_s": 60})
    assert first["out_of_memory"] and first["unmeasured"].startswith("the device ran out of memory"), first
    assert ref.precision_trial[0] is None and ref.precision_trial[2] is not None
    monkeypatch.setattr(ref, "draw_inputs", draw)
    again = ref.measure_precision({"budget_s": 60})
    assert again["unmeasured"] is None and not again["out_of_memory"], again


# --- standing shares ------------------------------------------------------------------------


@pytest.fixture
def standing_ref(tmp_path, relu_task):
    return started_referee(torch, tmp_path, relu_task, init_seed=11, standing_shares=True)


def loaded_candidate(ref, tmp_path, body="return torch.relu(x)"):
    path = write(
        tmp_path / "cand.py",
        f"""
        import torch

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                {body}
        """,
    )
    cand = candidate.Candidate(torch, None, candidate.LaunchRecorder(), candidate.AutotuneBudget())
    message = {"device": "cpu", "candidate_path": str(path), "init_seed": 11, "autotune_ms": [5, 25]}
    assert cand.load({**message, "init_inputs": ref.init_reply["init_inputs"]}) == {}
    return cand


def test_standing_shares_are_written_again_and_the_candidate_keeps_its_mapping(standing_ref, tmp_path):
    cand = loaded_candidate(standing_ref, tmp_path)
    descs = []
    for index, seed in enumerate([3, 4, 3]):
        trial = f"trial_{index}"
        payload = standing_ref.prepare({"trial": trial, "seed": seed})["payload"]
        descs.append(common.b64_unpickle(payload))
        assert cand.run({"payload": payload, "stage": trial})["problem"] is None
        checked = standing_ref.check({"trial": trial})
        assert checked["problems"] == [] and checked["mutated_inputs"] == [] and checked["changed_after_return"] == []
        torch.manual_seed(seed)
        assert torch.equal(cand.standing["in0"][0][0], torch.randn(6, 16)), "this trial's values, in place"
    first, later = descs[0]["inputs"][0]["tensor"], descs[1]["inputs"][0]["tensor"]
    assert first["standing"] == "in0" and "reuse" not in first
    assert later["reuse"] and later["path"] == first["path"]
    assert descs[2]["outputs"][0]["desc"]["reuse"]
    assert len(list((tmp_path / "scratch").iterdir())) == 2, "one file per standing share, not per trial"


def test_a_standing_slot_is_poisoned_again_for_every_trial(standing_ref, tmp_path):
    """A candidate that writes nothing after its first trial finds the slot NaN again, never
    its earlier output."""
    _desc, inputs, slots = shared(standing_ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    assert standing_ref.check({"trial": "trial_0"})["problems"] == []
    standing_ref.prepare({"trial": "trial_1", "seed": 4})
    assert slots[0].isnan().all(), "the first trial's mapping sees the poison"
    checked = standing_ref.check({"trial": "trial_1"})
    assert checked["problems"] == ["output 0: every element is NaN (was the output written at all?)"]


def test_an_input_mutated_through_a_standing_mapping_is_detected(standing_ref, tmp_path):
    _desc, inputs, slots = shared(standing_ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    assert standing_ref.check({"trial": "trial_0"})["mutated_inputs"] == []
    standing_ref.prepare({"trial": "trial_1", "seed": 4})
    slots[0].copy_(torch.relu(inputs[0]))  # the first trial's mapping holds the second's values
    inputs[0].add_(1.0)
    checked = standing_ref.check({"trial": "trial_1"})
    assert checked["problems"] == [] and checked["mutated_inputs"] == [0]


def test_a_late_write_through_a_standing_slot_is_detected(standing_ref):
    _desc, inputs, slots = shared(standing_ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    slots[0].copy_(torch.relu(inputs[0]))
    standing_ref.check({"trial": "trial_0"})
    standing_ref.prepare({"trial": "trial_1", "seed": 4})
    slots[0].copy_(torch.relu(inputs[0]))
    checked = checked_with_a_late_write(standing_ref, "trial_1", slots[0])
    assert checked["problems"] == [] and checked["changed_after_return"] == [0]


def test_a_standing_share_of_another_shape_is_shared_anew(standing_ref, tmp_path):
    cand = loaded_candidate(standing_ref, tmp_path)
    for index, rows in enumerate([6, 3, 3]):
        standing_ref.module.ROWS = rows
        trial = f"trial_{index}"
        payload = standing_ref.prepare({"trial": trial, "seed": index})["payload"]
        tensor_desc = common.b64_unpickle(payload)["inputs"][0]["tensor"]
        assert bool(tensor_desc.get("reuse")) == (index == 2), tensor_desc
        assert cand.run({"payload": payload, "stage": trial})["problem"] is None
        assert standing_ref.check({"trial": trial})["problems"] == []
    assert tuple(cand.standing["in0"][0][0].shape) == (3, 16)


def test_a_trial_prepared_beside_an_outstanding_one_shares_anew(standing_ref):
    first = common.b64_unpickle(standing_ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    second = common.b64_unpickle(standing_ref.prepare({"trial": "timing", "seed": 4})["payload"])
    assert first["inputs"][0]["tensor"]["standing"] == "in0"
    assert "standing" not in second["inputs"][0]["tensor"], "the first trial's values stay as shared"
    assert "reuse" not in second["inputs"][0]["tensor"]


def test_a_large_trial_never_stands(tmp_path, relu_task, monkeypatch):
    monkeypatch.setattr(referee_module, "LARGE_TRIAL_BYTES", 0)
    ref = started_referee(torch, tmp_path, relu_task, init_seed=11, standing_shares=True)
    desc = common.b64_unpickle(ref.prepare({"trial": "trial_0", "seed": 3})["payload"])
    assert "standing" not in desc["inputs"][0]["tensor"]
    assert ref.standing == {}


@pytest.fixture
def ipc_like_ref(standing_ref, monkeypatch):
    """The standing referee with CUDA IPC's shape on the CPU: shared tensors come from the share
    pool (here ordinary memory) and a descriptor carries the tensor itself, which the candidate
    then maps as the same memory, as a `cudaIpcOpenMemHandle` mapping would be."""
    shared, opened = [], []

    def share_tensor(_torch, tensor, transport, _directory, _tag):
        assert transport == "cuda_ipc"
        shared.append(tensor)
        return {"kind": "cuda_ipc", "args": len(shared) - 1}

    def open_shared(_torch, desc):
        opened.append(shared[desc["args"]])
        return shared[desc["args"]], None

    monkeypatch.setattr(common, "share_tensor", share_tensor)
    monkeypatch.setattr(common, "open_shared", open_shared)
    standing_ref.transport = "cuda_ipc"
    standing_ref.share_pool = "the share pool"
    standing_ref.shared_memory = contextlib.nullcontext
    standing_ref.opened = opened
    return standing_ref


def test_over_cuda_ipc_standing_tensors_are_opened_once_and_written_again(ipc_like_ref, tmp_path):
    cand = loaded_candidate(ipc_like_ref, tmp_path)
    for index, seed in enumerate([3, 4, 5, 3]):
        trial = f"trial_{index}"
        payload = ipc_like_ref.prepare({"trial": trial, "seed": seed})["payload"]
        inputs, _pristine, _expected, _descs, slots = ipc_like_ref.trials[trial]
        assert slots[0][0].isnan().all(), "poisoned again"
        torch.manual_seed(seed)
        assert torch.equal(inputs[0], torch.randn(6, 16))
        assert cand.run({"payload": payload, "stage": trial})["problem"] is None
        checked = ipc_like_ref.check({"trial": trial})
        assert checked["problems"] == [] and checked["mutated_inputs"] == [] and checked["changed_after_return"] == []
    assert len(ipc_like_ref.opened) == 2, "the input and the slot, each opened once"
    assert ipc_like_ref.opened[0] is cand.standing["in0"][0][0]


def test_over_cuda_ipc_a_write_to_a_standing_input_is_detected(ipc_like_ref, tmp_path):
    cand = loaded_candidate(ipc_like_ref, tmp_path, body="y = torch.relu(x.clone()); x.add_(1.0); return y")
    payload = ipc_like_ref.prepare({"trial": "trial_0", "seed": 3})["payload"]
    assert cand.run({"payload": payload, "stage": "trial_0"})["problem"] is None
    assert ipc_like_ref.check({"trial": "trial_0"})["mutated_inputs"] == [0]
    payload = ipc_like_ref.prepare({"trial": "trial_1", "seed": 4})["payload"]
    assert common.b64_unpickle(payload)["inputs"][0]["tensor"]["reuse"]
    assert cand.run({"payload": payload, "stage": "trial_1"})["problem"] is None
    assert ipc_like_ref.check({"trial": "trial_1"})["mutated_inputs"] == [0]


def test_a_candidates_run_waits_for_the_device_once(ref, tmp_path, monkeypatch):
    """The forward and the copies into the slots are waited for together: beside other busy
    processes each wait also waits for their time slices."""
    cand = loaded_candidate(ref, tmp_path)
    payload = ref.prepare({"trial": "trial_0", "seed": 3})["payload"]
    waits = []
    monkeypatch.setattr(common, "sync", lambda *_args: waits.append(True))
    ran = cand.run({"payload": payload, "stage": "correctness_0"})
    assert ran["problem"] is None
    assert len(waits) == 1
    assert ref.check({"trial": "trial_0"})["problems"] == []
