"""verl: the multi-turn agent loop with the real judge, a real chat template (SmolLM2's) and a
scripted rollout server that returns fixed completions with log-probs.

With CRUCIBLE_REAL_VERL=1 (scripts/test-python's second run, verl 0.9.1 on PYTHONPATH) the loop is
built the way verl's AgentLoopWorker builds it: hydra instantiates the registry's entry with
DictConfigWrap'd OmegaConf configs, on verl's own AgentLoopBase; the output is verl's
AgentLoopOutput. Otherwise the same arguments go to the stand-ins."""

import asyncio
from types import SimpleNamespace

import crucible
import numpy as np
import pytest
from conftest import REAL_VERL, solution
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


class Config(dict):
    """Attribute access over a dict, as OmegaConf's DictConfig gives (verl absent)."""

    def __getattr__(self, key):
        value = self[key]
        return Config(value) if isinstance(value, dict) else value


def trainer_config(prompt_length, response_length):
    """The parts of verl's trainer config the loop and its base class read."""
    config = {
        "actor_rollout_ref": {
            "rollout": {
                "prompt_length": prompt_length,
                "response_length": response_length,
                "multi_turn": {"enable": True},
                "agent": {"default_agent_loop": "crucible_kernel_agent"},
            }
        },
        "data": {"apply_chat_template_kwargs": {}},
    }
    from crucible.integrations.verl_agent import HAVE_VERL

    if HAVE_VERL:
        from omegaconf import OmegaConf

        return OmegaConf.create(config)
    return Config(config)


def make_loop(server, tokenizer, prompt_length=4096, response_length=8192):
    """The loop, built with the arguments verl's AgentLoopWorker._run_agent_loop passes."""
    from crucible.integrations import verl_agent

    config = trainer_config(prompt_length, response_length)
    kwargs = {
        "trainer_config": verl_agent.DictConfigWrap(config),
        "server_manager": server,
        "tokenizer": tokenizer,
        "processor": None,
        "hf_model_type": None,
        "dataset_cls": None,
        "data_config": verl_agent.DictConfigWrap(config.data),
    }
    if not verl_agent.HAVE_VERL:
        return verl_agent.KernelAgentLoop(**kwargs, tools=None)
    import hydra
    from verl.experimental.agent_loop.agent_loop import ToolListWrap, _agent_loop_registry

    entry = _agent_loop_registry[verl_agent.AGENT_NAME]
    return hydra.utils.instantiate(config=entry, **kwargs, tools=ToolListWrap([]))


def run_loop(tokenizer, replies, scorer, monkeypatch, max_turns=3, **lengths):
    from crucible.integrations import verl

    monkeypatch.setattr(verl, "_scorer", scorer)
    monkeypatch.setenv("CRUCIBLE_MAX_TURNS", str(max_turns))
    server = ScriptedServer(tokenizer, replies)
    loop = make_loop(server, tokenizer, **lengths)
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
    metrics = out.metrics if isinstance(out.metrics, dict) else out.metrics.model_dump()
    assert metrics["compute_score"] > 0 and metrics["generate_sequences"] >= 0
    if REAL_VERL:
        from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

        assert type(out) is AgentLoopOutput
        # What verl's worker makes of it: token tensors, and the reward on the last token.
        tensors = out.as_dict()
        assert tensors["responses"].tolist() == out.response_ids
        assert tensors["rm_scores"][-1] == pytest.approx(out.reward_score)
        assert tensors["rollout_log_probs"].shape == tensors["responses"].shape
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


def test_which_verl_is_used(tokenizer):
    from crucible.integrations import verl_agent

    if not REAL_VERL:
        assert not verl_agent.HAVE_VERL, (
            "verl imports in the pinned venv: run with CRUCIBLE_REAL_VERL=1 to test it"
        )
        return
    assert verl_agent.HAVE_VERL, (
        "CRUCIBLE_REAL_VERL=1 but verl does not import (is the overlay on PYTHONPATH?)"
    )
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry

    assert issubclass(verl_agent.KernelAgentLoop, AgentLoopBase)
    assert _agent_loop_registry[verl_agent.AGENT_NAME] == {
        "_target_": "crucible.integrations.verl_agent.KernelAgentLoop"
    }
    loop = make_loop(ScriptedServer(tokenizer, []), tokenizer)
    assert type(loop) is verl_agent.KernelAgentLoop
    # verl's base built its Continuous Token builder from the tokenizer.
    assert loop.continuous_token_builder is not None


def test_rollout_lengths_come_from_the_config(tokenizer, monkeypatch):
    """A first answer longer than rollout.response_length ends the rollout, cut to that length;
    a prompt over rollout.prompt_length keeps its last tokens (verl's left truncation)."""
    long_answer = "Let me think about this kernel step by step. " * 10
    scorer = KernelScorer(judge=crucible.make_judge(trials=1), recipe="tiered")
    out, server = run_loop(
        tokenizer, [long_answer], scorer, monkeypatch, prompt_length=64, response_length=16
    )
    assert len(server.prompts) == 1
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == 16
    assert [t["verdict"] for t in out.extra_fields["crucible_turns"]] == ["void"]
    assert out.prompt_ids == server.prompts[0] and len(out.prompt_ids) == 64
    task = crucible.builtin_tasks()["16_swish"]
    full = tokenizer.apply_chat_template(
        [{"role": "user", "content": crucible.first_turn("16_swish", task)}],
        tokenize=True,
        add_generation_prompt=True,
    )
    full = list(full["input_ids"] if hasattr(full, "keys") else full)
    assert out.prompt_ids == full[-64:]
