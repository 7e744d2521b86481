"""verl: an agent loop for multi-turn kernel rollouts with the judge's feedback.

Each rollout is one task: the model answers, the in-process judge judges the answer, and the
agent's feedback note (verdict, error, mismatch, speed, findings; :func:`crucible.feedback`) is
appended as the next user turn, until the kernel is correct or ``CRUCIBLE_MAX_TURNS`` (default 3)
answers were judged. Model tokens are trained (``response_mask`` 1) and keep the rollout
log-probs the server returned (``response_logprobs``); feedback tokens are masked (0). Per-turn
verdicts, rewards, token spans and rollout log-probs go to ``extra_fields`` (``turn_scores``,
``crucible_turns``), so turn-level estimators and MRS (``crucible.advantages(mrs=True,
rollout_logprobs=...)``) can run on them. The rollout's reward (``reward_score``) is the last
judged answer's, by the recipe of :mod:`crucible.integrations.verl` (``CRUCIBLE_RECIPE``).

verl config (the loop file registers the name; rows pick it with ``agent_name``)::

    actor_rollout_ref:
      rollout:
        multi_turn: {enable: true}
        agent:
          default_agent_loop: crucible_kernel_agent
          agent_loop_config_path: crucible_agent_loops.yaml
    # crucible_agent_loops.yaml:
    # - name: crucible_kernel_agent
    #   _target_: crucible.integrations.verl_agent.KernelAgentLoop

Dataset rows: ``prompt`` (chat messages, e.g. ``[{"role": "user", "content":
crucible.first_turn(name, source)}]``) and ``reward_model.ground_truth`` = the task name.

verl's constructor (``AgentLoopWorker`` instantiates the registered class through hydra)::

    KernelAgentLoop(trainer_config=DictConfigWrap(config), server_manager=..., tokenizer=...,
                    processor=..., dataset_cls=..., data_config=DictConfigWrap(config.data),
                    hf_model_type=..., tools=...)

It reads ``actor_rollout_ref.rollout.{prompt_length, response_length}`` and
``data.apply_chat_template_kwargs``. With verl importable (0.9.1 imports ray, hydra, omegaconf and
tensordict) the loop subclasses verl's ``AgentLoopBase``, registers in its agent-loop registry and
returns verl's ``AgentLoopOutput``; where it is not, this module defines stand-ins of the same
constructor and fields (``DictConfigWrap``, ``AgentLoopBase``, ``AgentLoopOutput``), so the loop
runs the same code either way. The tests run both (scripts/test-python).

Honesty: an ``infra_error`` ends the rollout with ``reward_score`` 0 and every response token
masked (no loss from it), counted in ``extra_fields["crucible_infra_error_dropped"]``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .. import feedback, no_code_feedback
from . import verl as _verl

try:  # verl's own base class and registry, where verl imports (it needs ray).
    from verl.experimental.agent_loop.agent_loop import (  # type: ignore[import-not-found]
        AgentLoopBase,
        AgentLoopOutput,
        DictConfigWrap,
        register,
    )

    HAVE_VERL = True
except ImportError:  # verl absent, or present without ray, hydra, tensordict
    HAVE_VERL = False

    class DictConfigWrap:  # type: ignore[no-redef]
        """verl's wrapper that keeps hydra from resolving a config passed to a constructor."""

        def __init__(self, config):
            self.config = config

    class AgentLoopBase:  # type: ignore[no-redef]
        """verl 0.9.1's ``AgentLoopBase`` constructor, less the continuous-token builder and
        event loop (multimodal tokenization this loop does not use)."""

        def __init__(
            self,
            trainer_config: DictConfigWrap,
            server_manager,
            tokenizer,
            processor,
            dataset_cls,
            data_config: DictConfigWrap,
            hf_model_type: str | None = None,
            **kwargs,
        ):
            self.config = trainer_config.config
            self.rollout_config = self.config.actor_rollout_ref.rollout
            self.server_manager = server_manager
            self.tokenizer = tokenizer
            self.processor = processor
            self.dataset_cls = dataset_cls
            self.data_config = data_config.config
            self.apply_chat_template_kwargs = self.data_config.get("apply_chat_template_kwargs", {})

        def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
            """verl's: a prompt over ``rollout.prompt_length`` keeps its last tokens."""
            return prompt_ids[-self.rollout_config.prompt_length :]

    @dataclass
    class AgentLoopOutput:  # type: ignore[no-redef]
        """The fields of verl's ``AgentLoopOutput`` this loop fills (``metrics`` is verl's
        ``AgentLoopMetrics`` there, a dict here)."""

        prompt_ids: list[int]
        response_ids: list[int]
        response_mask: list[int]
        metrics: dict[str, Any]
        response_logprobs: list[float] | None = None
        reward_score: float | None = None
        num_turns: int = 0
        extra_fields: dict[str, Any] = field(default_factory=dict)

    def register(agent_name: str):  # type: ignore[no-redef]
        def decorator(cls):
            return cls

        return decorator


AGENT_NAME = "crucible_kernel_agent"
NO_CODE = "no ```python block defining ModelNew was found"


@register(AGENT_NAME)
class KernelAgentLoop(AgentLoopBase):
    """Answer, judge, feedback; see the module docstring."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_turns = int(os.environ.get("CRUCIBLE_MAX_TURNS", "3"))
        self.feedback_tokens = int(os.environ.get("CRUCIBLE_FEEDBACK_TOKENS", "512"))
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **row) -> AgentLoopOutput:
        scorer = _verl.scorer()
        name = _verl._task_names(
            [(row.get("reward_model") or {}).get("ground_truth")], [row.get("extra_info")], scorer
        )[0]
        messages = list(row["raw_prompt"])
        prompt_ids = self._cap_text_prompt_length(
            self._chat_ids(messages, add_generation_prompt=True)
        )
        context = list(prompt_ids)
        response, mask, logprobs, turns = [], [], [], []
        # verl's AgentLoopMetrics: seconds spent generating and judging.
        metrics = {"generate_sequences": 0.0, "compute_score": 0.0}
        infra = False
        while True:
            began = time.perf_counter()
            out = await self.server_manager.generate(
                request_id=uuid.uuid4().hex, prompt_ids=context, sampling_params=sampling_params
            )
            metrics["generate_sequences"] += time.perf_counter() - began
            tokens, lps = list(out.token_ids), out.log_probs
            start = len(response)
            response += tokens
            mask += [1] * len(tokens)
            logprobs += list(lps) if lps else [0.0] * len(tokens)
            context += tokens
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            began = time.perf_counter()
            [result] = await asyncio.to_thread(scorer.judge_batch, [name], [text])
            metrics["compute_score"] += time.perf_counter() - began
            reward = scorer._reward(name, result)
            verdict = "void" if result is None else result.verdict
            turns.append(
                {
                    "verdict": verdict,
                    "reward": reward,
                    "span": [start, len(response)],
                    "rollout_logprobs": list(lps) if lps else None,
                }
            )
            if reward is None:
                infra = True
                break
            if verdict == "correct" or len(turns) >= self.max_turns or self._full(response):
                break
            note = (
                no_code_feedback(NO_CODE)
                if result is None
                else feedback(result, self.feedback_tokens)
            )
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": note}]
            delta = self._user_turn_tokens(note)
            response += delta
            mask += [0] * len(delta)
            logprobs += [0.0] * len(delta)
            context += delta
        return self._output(prompt_ids, response, mask, logprobs, turns, infra, metrics)

    def _user_turn_tokens(self, note: str) -> list[int]:
        """The tokens a user turn adds after an assistant turn, with the generation prompt: the
        chat template of ``[system, user]`` less that of ``[system]``."""
        anchor = [{"role": "system", "content": "x"}]
        base = self._chat_ids(anchor)
        full = self._chat_ids(
            anchor + [{"role": "user", "content": note}], add_generation_prompt=True
        )
        if full[: len(base)] != base:
            raise ValueError("the chat template does not extend a conversation by appending")
        return full[len(base) :]

    def _chat_ids(self, messages, **kwargs) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, tokenize=True, **kwargs, **self.apply_chat_template_kwargs
        )
        # transformers 5 answers a BatchEncoding, 4 a list.
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def _full(self, response: list[int]) -> bool:
        return len(response) >= self.response_length

    def _output(
        self, prompt_ids, response, mask, logprobs, turns, infra, metrics
    ) -> AgentLoopOutput:
        n = self.response_length
        if infra:
            mask = [0] * len(mask)
        rewards = [t["reward"] for t in turns]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response[:n],
            response_mask=mask[:n],
            response_logprobs=logprobs[:n],
            reward_score=0.0 if infra else rewards[-1],
            num_turns=2 * len(turns),
            metrics=metrics,
            extra_fields={
                "turn_scores": [0.0 if r is None else r for r in rewards],
                "crucible_turns": turns,
                "crucible_infra_error_dropped": int(infra),
            },
        )


__all__ = ["AGENT_NAME", "HAVE_VERL", "DictConfigWrap", "KernelAgentLoop"]
