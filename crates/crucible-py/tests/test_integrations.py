"""Each integration against the real in-process judge on the builtin suite (CPU)."""

import json

import crucible
import pytest
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
