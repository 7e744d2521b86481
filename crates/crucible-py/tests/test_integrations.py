"""Each integration against the real in-process judge on the builtin suite (CPU)."""

import json

import crucible
import numpy as np
import pytest
import torch
from conftest import solution
from crucible.scoring import KernelScorer


def fenced(code: str) -> str:
    return f"Here is my kernel.\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def scorer(judge, tmp_path_factory):
    return KernelScorer(
        judge=judge, recipe="tiered", results_path=tmp_path_factory.mktemp("r") / "judged.jsonl"
    )


def test_extract_code():
    assert crucible.extract_code("no code here") is None
    text = "```python\nprint(1)\n```\nthen\n```python\nclass ModelNew: pass\n```"
    assert crucible.extract_code(text).startswith("class ModelNew")
    assert crucible.extract_code([{"role": "assistant", "content": text}]) is not None


def test_trl_reward_function(judge, tmp_path):
    from crucible.integrations.trl import KernelReward, kernel_prompts

    results_path = tmp_path / "judged.jsonl"
    reward = KernelReward(judge=judge, recipe="tiered", results_path=results_path)
    logged = {}
    completions = [
        [{"role": "assistant", "content": fenced(solution("01_relu"))}],
        [{"role": "assistant", "content": fenced(solution("02_gelu_tanh", "wrong"))}],
        [{"role": "assistant", "content": "I cannot do this."}],
    ]
    rewards = reward(
        prompts=["p"] * 3,
        completions=completions,
        task=["01_relu", "02_gelu_tanh", "16_swish"],
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    tiered = crucible.Recipe("tiered", flag_penalty=0.1)
    assert rewards[2] == tiered.void_reward
    lines = [json.loads(x) for x in results_path.read_text().splitlines()]
    assert [x["result"] and x["result"]["verdict"] for x in lines] == ["correct", "incorrect", None]
    assert rewards == [x["reward"] for x in lines]
    assert rewards[:2] == [tiered.reward(x["result"]) for x in lines[:2]]
    assert logged["crucible/verdict/correct"] == 1 and logged["crucible/void"] == 1
    rows = kernel_prompts(crucible.builtin_tasks(), ["01_relu"])
    assert rows[0]["task"] == "01_relu" and "class Model" in rows[0]["prompt"][0]["content"]


def test_infra_error_is_dropped_and_counted(scorer):
    result = crucible.EvalResult.from_json(json.dumps(_infra_doc()))
    assert scorer._reward("01_relu", result) is None
    assert scorer.summary()["infra_error_dropped"] == 1


def _infra_doc():
    judge = crucible.make_judge(trials=1)
    doc = judge.evaluate(
        crucible.builtin_tasks()["01_relu"], solution("01_relu"), task_name="01_relu"
    ).to_dict()
    doc["verdict"], doc["correct"] = "infra_error", False
    return doc


class _Tok:
    def __init__(self, texts):
        self.texts = texts

    def decode(self, ids, skip_special_tokens=True):
        return self.texts[int(ids[0])]


class _Batch(dict):
    pass


class _DataProto:
    """The parts of verl's DataProto a reward manager reads (verl itself is not installed:
    verl 0.9.1 pins transformers<5.11 and ray; see scripts/test-python)."""

    def __init__(self, texts, tasks):
        n = len(texts)
        self.batch = _Batch(
            prompts=torch.zeros((n, 2), dtype=torch.long),
            responses=torch.tensor([[i, 0, 0] for i in range(n)]),
            attention_mask=torch.ones((n, 5), dtype=torch.long),
            response_mask=torch.ones((n, 3), dtype=torch.long),
        )
        self.non_tensor_batch = {
            "reward_model": np.array([{"ground_truth": t} for t in tasks], dtype=object),
            "data_source": np.array(["crucible"] * n, dtype=object),
        }

    def __len__(self):
        return len(self.batch["responses"])


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
    data = _DataProto(texts, ["01_relu", "02_gelu_tanh"])
    manager = verl.CrucibleRewardManager(_Tok(texts), 0, None)
    out = manager(data, return_dict=True)
    assert out["reward_tensor"].shape == (2, 3)
    assert out["reward_tensor"][0, 2] == pytest.approx(score)
    assert out["reward_extra_info"]["crucible_verdict"] == ["correct", "incorrect"]
    assert out["reward_extra_info"]["crucible_infra_error_dropped"] == [0, 0]


def test_openenv_server_reset_step_state(judge):
    from crucible.integrations.openenv_env import KernelAction, KernelEnv, make_app
    from fastapi.testclient import TestClient

    env = KernelEnv(KernelScorer(judge=judge), max_turns=2)
    obs = env.reset(task="16_swish")
    assert "class Model" in obs.prompt and not obs.done
    obs = env.step(KernelAction(code=solution("02_gelu_tanh", "wrong")))
    assert obs.verdict == "runtime_error" and not obs.done
    obs = env.step(KernelAction(code=solution("16_swish")))
    assert obs.verdict == "correct" and obs.done and obs.reward is not None
    assert env.state.verdicts == ["runtime_error", "correct"]

    app = make_app(judge=judge, max_turns=1)
    with TestClient(app) as http:
        reset = http.post("/reset", json={"task": "01_relu"}).json()
        assert reset["observation"]["task"] == "01_relu"
        step = http.post(
            "/step", json={"action": {"code": solution("01_relu"), "task": "01_relu"}}
        ).json()
        assert step["observation"]["verdict"] == "correct" and step["done"]
        assert isinstance(step["reward"], float)
