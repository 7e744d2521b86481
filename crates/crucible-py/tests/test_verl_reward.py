"""verl: compute_score, compute_score_batch and CrucibleRewardManager with the real judge.

The batch is verl's own DataProto (a TensorDict inside) where verl imports (scripts/test-python's
second run, CRUCIBLE_REAL_VERL=1, which also checks the manager is registered in verl's registry);
otherwise a stand-in of the parts a reward manager reads."""

import crucible
import numpy as np
import pytest
import torch
from conftest import REAL_VERL, solution
from crucible.scoring import KernelScorer


def fenced(code: str) -> str:
    return f"Here is my kernel.\n```python\n{code}\n```\n"


class _Tok:
    """Decodes a response row to its text: row i's first token is i."""

    def __init__(self, texts):
        self.texts = texts

    def decode(self, ids, skip_special_tokens=True):
        return self.texts[int(ids[0])]


class _StandInDataProto:
    """The parts of verl's DataProto a reward manager reads (verl absent)."""

    def __init__(self, tensors, non_tensors):
        self.batch = dict(tensors)
        self.non_tensor_batch = dict(non_tensors)

    def __len__(self):
        return len(self.batch["responses"])


def batch_of(texts, tasks):
    """Two prompt tokens, three response tokens of which all are valid, one row per text."""
    n = len(texts)
    tensors = {
        "prompts": torch.zeros((n, 2), dtype=torch.long),
        "responses": torch.tensor([[i, 0, 0] for i in range(n)]),
        "attention_mask": torch.ones((n, 5), dtype=torch.long),
        "response_mask": torch.ones((n, 3), dtype=torch.long),
    }
    non_tensors = {
        "reward_model": np.array([{"ground_truth": t} for t in tasks], dtype=object),
        "data_source": np.array(["crucible"] * n, dtype=object),
    }
    from crucible.integrations.verl import HAVE_VERL

    if HAVE_VERL:
        from verl.protocol import DataProto

        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
    return _StandInDataProto(tensors, non_tensors)


def test_which_verl_is_used():
    from crucible.integrations import verl

    if not REAL_VERL:
        assert not verl.HAVE_VERL, (
            "verl imports in the pinned venv: run with CRUCIBLE_REAL_VERL=1 to test it"
        )
        return
    assert verl.HAVE_VERL, (
        "CRUCIBLE_REAL_VERL=1 but verl does not import (is the overlay on PYTHONPATH?)"
    )
    from verl.workers.reward_manager import get_reward_manager_cls
    from verl.workers.reward_manager.abstract import AbstractRewardManager

    assert get_reward_manager_cls("crucible") is verl.CrucibleRewardManager
    assert issubclass(verl.CrucibleRewardManager, AbstractRewardManager)
    # Every abstract method of verl's interface is implemented: it instantiates.
    assert not verl.CrucibleRewardManager.__abstractmethods__


def test_verl_compute_score_and_batch_manager(judge, monkeypatch):
    from crucible.integrations import verl

    monkeypatch.setattr(verl, "_scorer", KernelScorer(judge=judge, recipe="tiered"))
    ok = fenced(solution("01_relu"))
    score = verl.compute_score("crucible", ok, "01_relu", {})
    assert score == crucible.Recipe("tiered", flag_penalty=0.1).reward(
        judge.evaluate(
            crucible.builtin_tasks()["01_relu"], solution("01_relu"), task_name="01_relu"
        )
    )
    batch = verl.compute_score_batch(["c", "c"], [ok, "no code"], ["01_relu", "16_swish"], [{}, {}])
    assert [b["verdict"] for b in batch] == ["correct", "void"]
    texts = [ok, fenced(solution("02_gelu_tanh", "wrong"))]
    data = batch_of(texts, ["01_relu", "02_gelu_tanh"])
    manager = verl.CrucibleRewardManager(_Tok(texts), 0, None)
    out = manager(data, return_dict=True)
    assert out["reward_tensor"].shape == (2, 3)
    # The reward sits on the last valid response token, as verl's managers put it.
    assert out["reward_tensor"][0, 2] == pytest.approx(score)
    assert out["reward_tensor"][0, :2].abs().sum() == 0
    assert out["reward_extra_info"]["crucible_verdict"] == ["correct", "incorrect"]
    assert out["reward_extra_info"]["crucible_infra_error_dropped"] == [0, 0]
    assert torch.equal(data.batch["response_mask"], torch.ones((2, 3), dtype=torch.long))
    assert torch.equal(manager(data), out["reward_tensor"])


def test_verl_manager_drops_infra_errors(monkeypatch):
    from crucible.integrations import verl

    broken = crucible.make_judge(python="/nonexistent/python", trials=1)
    monkeypatch.setattr(verl, "_scorer", KernelScorer(judge=broken, recipe="tiered"))
    texts = [fenced(solution("01_relu")), "no code"]
    data = batch_of(texts, ["01_relu", "01_relu"])
    out = verl.CrucibleRewardManager(_Tok(texts), 0, None)(data, return_dict=True)
    assert out["reward_extra_info"]["crucible_verdict"] == ["infra_error", "void"]
    assert out["reward_extra_info"]["crucible_infra_error_dropped"] == [1, 1]
    # The infra error's row carries no loss (mask zeroed in the batch itself) and no reward; the
    # answer without code is judged void without the judge and keeps its mask.
    assert data.batch["response_mask"][0].sum() == 0
    assert data.batch["response_mask"][1].sum() == 3
    assert out["reward_tensor"][0].abs().sum() == 0
    assert out["reward_tensor"][1, 2] == pytest.approx(crucible.Recipe("tiered").void_reward)
