"""verl: the multi-turn agent loop with the real judge, a real chat template (SmolLM2's) and a
scripted rollout server that returns fixed completions with log-probs."""

import asyncio
from types import SimpleNamespace

import crucible
import numpy as np
import pytest
from conftest import solution
from crucible.scoring import KernelScorer
from test_grpo_smoke import smollm2_gguf


class ScriptedServer:
    """verl's ``server_manager.generate``: the next scripted reply's tokens, with log-probs."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts: list[list[int]] = []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        logprobs = [-0.01 * (i % 7) - 0.05 for i in range(len(ids))]
        return SimpleNamespace(token_ids=ids, log_probs=logprobs)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    gguf = smollm2_gguf()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def run_loop(tokenizer, replies, scorer, monkeypatch, max_turns=3):
    from crucible.integrations import verl, verl_agent

    monkeypatch.setattr(verl, "_scorer", scorer)
    monkeypatch.setenv("CRUCIBLE_MAX_TURNS", str(max_turns))
    server = ScriptedServer(tokenizer, replies)
    loop = verl_agent.KernelAgentLoop(None, server, tokenizer, None, None, None)
    task = crucible.builtin_tasks()["16_swish"]
    row = {
        "raw_prompt": [{"role": "user", "content": crucible.first_turn("16_swish", task)}],
        "reward_model": {"ground_truth": "16_swish"},
        "extra_info": {},
    }
    return asyncio.run(loop.run({"temperature": 1.0}, **row)), server


def test_multi_turn_rollout_keeps_logprobs_and_feeds_back(judge, tokenizer, monkeypatch):
    replies = [
        "Let me think.",
        fenced(solution("02_gelu_tanh", "wrong")),
        fenced(solution("16_swish")),
    ]
    scorer = KernelScorer(judge=judge, recipe="tiered")
    out, server = run_loop(tokenizer, list(replies), scorer, monkeypatch)
    turns = out.extra_fields["crucible_turns"]
    assert [t["verdict"] for t in turns] == ["void", "runtime_error", "correct"]
    assert (
        out.reward_score
        == turns[-1]["reward"]
        == scorer.recipe.reward(
            judge.evaluate(
                crucible.builtin_tasks()["16_swish"], solution("16_swish"), task_name="16_swish"
            )
        )
    )
    assert out.extra_fields["crucible_infra_error_dropped"] == 0
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    # Model tokens are trained and carry the server's log-probs; feedback tokens are masked.
    for t in turns:
        a, b = t["span"]
        assert out.response_mask[a:b] == [1] * (b - a)
        assert out.response_logprobs[a:b] == t["rollout_logprobs"]
    masked = [i for i, m in enumerate(out.response_mask) if m == 0]
    feedback_text = tokenizer.decode([out.response_ids[i] for i in masked])
    assert "Verdict: failed while running." in feedback_text
    # The third generation saw the prompt, both answers and both notes, token for token.
    assert server.prompts[2] == out.prompt_ids + out.response_ids[: turns[2]["span"][0]]
    # The kept log-probs are what MRS needs: one row per turn.
    n = len(turns)
    rollout = [np.array(t["rollout_logprobs"], np.float32) for t in turns]
    train = [lp + np.float32(0.01) for lp in rollout]
    adv = crucible.advantages(
        ["16_swish"] * n,
        np.zeros(n, np.uint32),
        np.arange(n, dtype=np.uint32),
        np.array(out.extra_fields["turn_scores"]),
        estimator="trloo",
        mrs=True,
        train_logprobs=train,
        rollout_logprobs=rollout,
    )
    assert adv["summary"]["rows"] == n


def test_infra_error_masks_the_rollout(tokenizer, monkeypatch):
    broken = crucible.make_judge(python="/nonexistent/python", trials=1)
    scorer = KernelScorer(judge=broken, recipe="tiered")
    out, _ = run_loop(tokenizer, [fenced(solution("16_swish"))], scorer, monkeypatch)
    assert out.extra_fields["crucible_turns"][0]["verdict"] == "infra_error"
    assert out.reward_score == 0.0 and set(out.response_mask) == {0}
    assert out.extra_fields["crucible_infra_error_dropped"] == 1
    assert scorer.summary()["infra_error_dropped"] == 1
