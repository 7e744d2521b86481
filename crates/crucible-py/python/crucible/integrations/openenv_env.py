"""OpenEnv: a kernel-writing environment server (``reset`` / ``step`` / ``state``) over the
in-process judge.

Serve it::

    import uvicorn
    from crucible.integrations.openenv_env import make_app
    uvicorn.run(make_app(recipe="tiered", device="cpu", max_turns=4), port=8000)

An episode is one task (``reset(task="01_relu")``, else a seeded pick from the suite). Each
``step(KernelAction(code=...))`` judges the code; the observation carries the verdict, the
findings and the recipe's reward. ``done`` when the kernel is correct or after ``max_turns``.
An ``infra_error`` gives ``reward=None`` and ``metadata["infra_error"]=True`` (no reward; the
turn does not count); flags cost ``flag_penalty`` (see :mod:`crucible.scoring`).
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from ..scoring import KernelScorer
from .trl import PROMPT


class KernelAction(Action):
    code: str
    # OpenEnv's plain HTTP endpoints start a fresh environment per request; a stateless caller
    # names the task in the action (WebSocket sessions keep it from `reset`).
    task: str | None = None


class KernelObservation(Observation):
    task: str = ""
    prompt: str = ""
    verdict: str | None = None
    findings: list[dict[str, Any]] = Field(default_factory=list)
    feedback: str = ""


class KernelState(State):
    task: str = ""
    best_reward: float | None = None
    verdicts: list[str] = Field(default_factory=list)


class KernelEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, scorer: KernelScorer | None = None, *, max_turns: int = 4, **scorer_args):
        super().__init__()
        self.scorer = scorer or KernelScorer(**scorer_args)
        self.max_turns = max_turns
        self._state = KernelState()

    def reset(self, seed=None, episode_id=None, task: str | None = None, **kwargs):
        names = sorted(self.scorer.tasks)
        name = task or random.Random(seed).choice(names)
        if name not in self.scorer.tasks:
            raise ValueError(f"unknown task {name!r}")
        self._state = KernelState(episode_id=episode_id or str(uuid.uuid4()), task=name)
        prompt = PROMPT.format(source=self.scorer.tasks[name])
        return KernelObservation(task=name, prompt=prompt, done=False, reward=None)

    def step(self, action: KernelAction, timeout_s=None, **kwargs):
        name = action.task or self._state.task
        if name not in self.scorer.tasks:
            raise ValueError(f"unknown task {name!r}: reset(task=...) first, or name it")
        self._state.task = name
        [result] = self.scorer.judge_batch([name], [f"```python\n{action.code}\n```"])
        reward = self.scorer._reward(name, result)
        verdict = "void" if result is None else result.verdict
        infra = reward is None
        if not infra:
            self._state.step_count += 1
            self._state.verdicts.append(verdict)
            best = self._state.best_reward
            self._state.best_reward = reward if best is None else max(best, reward)
        correct = result is not None and result.correct
        findings = [] if result is None else list(result.findings)
        feedback = "; ".join(f"{f['severity']} {f['code']}: {f['message']}" for f in findings)
        return KernelObservation(
            task=name,
            verdict=verdict,
            findings=findings,
            feedback=feedback or verdict,
            reward=reward,
            done=correct or self._state.step_count >= self.max_turns,
            metadata={"infra_error": infra},
        )

    @property
    def state(self) -> KernelState:
        return self._state


def make_app(**env_args):
    """The OpenEnv HTTP app (FastAPI) serving :class:`KernelEnv`; one scorer is shared."""
    scorer = KernelScorer(**{k: v for k, v in env_args.items() if k != "max_turns"})
    max_turns = env_args.get("max_turns", 4)
    return create_app(
        lambda: KernelEnv(scorer, max_turns=max_turns),
        KernelAction,
        KernelObservation,
        env_name="crucible-kernels",
    )
