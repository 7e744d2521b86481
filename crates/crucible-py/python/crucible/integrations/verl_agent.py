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

verl 0.9.1 cannot be imported without ray (``import verl`` imports it), so where verl is absent
this module mirrors the interface of ``verl.experimental.agent_loop.AgentLoopBase`` (constructor
arguments, ``async run(sampling_params, **row) -> AgentLoopOutput``, ``server_manager.generate
(request_id=, prompt_ids=, sampling_params=) -> TokenOutput(token_ids, log_probs)``) and returns a
dataclass of the same fields; with verl importable it subclasses and registers the real ones.

Honesty: an ``infra_error`` ends the rollout with ``reward_score`` 0 and every response token
masked (no loss from it), counted in ``extra_fields["crucible_infra_error_dropped"]``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from .. import feedback, no_code_feedback
from . import verl as _verl

try:  # verl's own base class and registry, where verl imports (it needs ray).
    from verl.experimental.agent_loop.agent_loop import (  # type: ignore[import-not-found]
        AgentLoopBase,
        AgentLoopOutput,
        register,
    )

    HAVE_VERL = True
except Exception:  # noqa: BLE001 (verl absent, or present without ray)
    HAVE_VERL = False

    class AgentLoopBase:  # type: ignore[no-redef]
        """The constructor of verl's ``AgentLoopBase`` (the parts this loop reads)."""

        def __init__(
            self,
            trainer_config=None,
            server_manager=None,
            tokenizer=None,
            processor=None,
            dataset_cls=None,
            data_config=None,
            **kwargs,
        ):
            self.config = getattr(trainer_config, "config", trainer_config)
            self.server_manager = server_manager
            self.tokenizer = tokenizer
            self.processor = processor

    @dataclass
    class AgentLoopOutput:  # type: ignore[no-redef]
        """The fields of verl's ``AgentLoopOutput`` this loop fills."""

        prompt_ids: list[int]
        response_ids: list[int]
        response_mask: list[int]
        response_logprobs: list[float] | None = None
        reward_score: float | None = None
        num_turns: int = 0
        metrics: dict[str, Any] = field(default_factory=dict)
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
        rollout = getattr(self, "rollout_config", None)
        self.response_length = getattr(rollout, "response_length", None)

    async def run(self, sampling_params: dict[str, Any], **row) -> AgentLoopOutput:
        scorer = _verl.scorer()
        name = _verl._task_names(
            [(row.get("reward_model") or {}).get("ground_truth")], [row.get("extra_info")], scorer
        )[0]
        messages = list(row["raw_prompt"])
        prompt_ids = self._chat_ids(messages, add_generation_prompt=True)
        context = list(prompt_ids)
        response, mask, logprobs, turns = [], [], [], []
        infra = False
        while True:
            out = await self.server_manager.generate(
                request_id=uuid.uuid4().hex, prompt_ids=context, sampling_params=sampling_params
            )
            tokens, lps = list(out.token_ids), out.log_probs
            start = len(response)
            response += tokens
            mask += [1] * len(tokens)
            logprobs += list(lps) if lps else [0.0] * len(tokens)
            context += tokens
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            [result] = await asyncio.to_thread(scorer.judge_batch, [name], [text])
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
        return self._output(prompt_ids, response, mask, logprobs, turns, infra)

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
        ids = self.tokenizer.apply_chat_template(messages, tokenize=True, **kwargs)
        # transformers 5 answers a BatchEncoding, 4 a list.
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def _full(self, response: list[int]) -> bool:
        return self.response_length is not None and len(response) >= self.response_length

    def _output(self, prompt_ids, response, mask, logprobs, turns, infra) -> AgentLoopOutput:
        n = self.response_length or len(response)
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
            metrics={},
            extra_fields={
                "turn_scores": [0.0 if r is None else r for r in rewards],
                "crucible_turns": turns,
                "crucible_infra_error_dropped": int(infra),
            },
        )


__all__ = ["AGENT_NAME", "HAVE_VERL", "KernelAgentLoop"]
