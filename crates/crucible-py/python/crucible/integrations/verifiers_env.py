"""verifiers: a multi-turn kernel-writing environment over the in-process judge (or a
``crucible serve``: ``service=URL``).

verifiers 0.4 (``verifiers.v1``) composes an environment from plugins found by id: a taskset
(the tasks), an env (how one task becomes one episode) and a harness (the program that talks
to the model). This module is all three, and the wheel's top-level module ``crucible_kernels``
exports them, so the id ``crucible-kernels`` loads it::

    import crucible.integrations.verifiers_env as ck

    env = ck.load_environment(tasks=["01_relu", "16_swish"], max_turns=3,
                              rubric={"tiered": 1.0}, device="cpu")
    # or from the verifiers CLI: vf eval crucible-kernels --env.max-turns 3

Each episode is one task. The model answers the agent's first prompt (the same text as
``crucible agent``); every answer is judged, and the judge's note (the agent's feedback
renderer: verdict, error, mismatch, speed, findings) is the next user turn, until the kernel is
correct or ``max_turns`` answers were judged. The rubric is built from the reward recipes:
``rubric`` maps recipe names to weights, each recorded on the trace as the reward
``crucible/<recipe>`` of the episode's last judged answer (``episode_reward="best"``: its best).
Every turn's verdict and rewards are kept in ``trace.info["crucible_turns"]`` for turn-level
estimators (``crucible.advantages``).

Honesty: an ``infra_error`` has no reward, so the episode fails (``InfraErrorNoReward``; verifiers
marks it not ok and trainers drop it) and the scorer counts it in ``infra_error_dropped``; a
``flag`` finding costs ``flag_penalty`` (default 0.1, see :mod:`crucible.scoring`); an answer
without code is a void turn, scored ``void_reward`` and answered with a request for code.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

from .. import SYSTEM_PROMPT, Recipe, feedback, first_turn, no_code_feedback
from ..scoring import DEFAULT_FLAG_PENALTY, KernelScorer

TASKSET_ID = "crucible-kernels"


class InfraErrorNoReward(RuntimeError):
    """The judge failed on an answer: the episode has no reward and is dropped."""


class KernelTasksetConfig(vf.TasksetConfig):
    tasks: list[str] | None = None
    """Builtin task names (default: the whole suite)."""


class KernelData(vf.TaskData):
    task_name: str
    task_source: str


class KernelTask(vf.Task[KernelData, vf.State, vf.TaskConfig]):
    @property
    def key(self) -> str:
        return self.data.task_name


class KernelTaskset(vf.Taskset[KernelTask, KernelTasksetConfig]):
    """The builtin suite (or ``tasks`` of it), one task per kernel problem."""

    def load(self) -> Iterator[KernelTask]:
        import crucible

        suite = crucible.builtin_tasks()
        names = self.config.tasks or sorted(suite)
        unknown = [n for n in names if n not in suite]
        if unknown:
            raise ValueError(f"unknown tasks {unknown}; known: {sorted(suite)}")
        for name in names:
            yield KernelTask(
                KernelData(
                    id=name,
                    name=name,
                    prompt=first_turn(name, suite[name]),
                    system_prompt=SYSTEM_PROMPT,
                    task_name=name,
                    task_source=suite[name],
                ),
                self.config.task,
            )


class KernelChatHarnessConfig(vf.HarnessConfig):
    max_tokens: int | None = None
    temperature: float | None = None


class KernelChatHarness(vf.Harness[KernelChatHarnessConfig]):
    """A tool-less chat loop run in-process: one chat completion per segment, through the
    rollout's interception endpoint (verifiers' contract for in-process harnesses), so the
    trace records every model call. Needs no subprocess, container or network."""

    APPENDS_SYSTEM_PROMPT: ClassVar[bool] = True
    SUPPORTS_RESUME: ClassVar[bool] = True
    EXECUTES_CODE: ClassVar[bool] = False
    NEEDS_CONTAINER: ClassVar[bool] = False

    async def setup(self, runtime) -> None:
        return None

    async def launch(
        self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_
    ) -> ProgramResult:
        from openai import AsyncOpenAI
        from verifiers.v1.dialects.chat import message_to_wire

        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt:
            messages.extend(message_to_wire(m) for m in prompt)
        sampling = {
            k: v
            for k, v in (
                ("max_tokens", self.config.max_tokens),
                ("temperature", self.config.temperature),
            )
            if v is not None
        }
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            await client.chat.completions.create(model=ctx.model, messages=messages, **sampling)
        return ProgramResult(exit_code=0, stdout="", stderr="")


class KernelEnvConfig(vf.EnvConfig):
    # The harness runs in this process and executes nothing: a local runtime, no network notice.
    player: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig(), network_notice=False)
    max_turns: int = Field(4, ge=1)
    """Answers judged per episode at most (the episode ends earlier on a correct kernel)."""
    rubric: dict[str, float] = Field(default_factory=lambda: {"tiered": 1.0}, min_length=1)
    """Reward recipes (crucible.RECIPES) and their weights."""
    episode_reward: Literal["last", "best"] = "last"
    """Which judged answer the rubric scores: ``last`` or ``best``."""
    flag_penalty: float = DEFAULT_FLAG_PENALTY
    feedback_tokens: int = 512
    device: str = "cpu"
    trials: int = 5
    concurrency: int = 2
    service: str | None = None
    """A ``crucible serve`` URL: its workers judge instead of this process (the bearer token
    from ``CRUCIBLE_TOKEN``; ``device`` is then theirs)."""


class KernelEnv(vf.Env[KernelEnvConfig]):
    """Multi-turn: answer, judge, feedback, until correct or ``max_turns``."""

    scorer: KernelScorer | None = None

    def _scorer(self) -> KernelScorer:
        if self.scorer is None:
            c = self.config
            judge = (
                {"service": c.service, "token": os.environ.get("CRUCIBLE_TOKEN")}
                if c.service
                else {"device": c.device}
            )
            self.scorer = KernelScorer(
                recipe=self._recipes()[0][0],
                trials=c.trials,
                concurrency=c.concurrency,
                **judge,
            )
        return self.scorer

    def _recipes(self) -> list[tuple[Recipe, float]]:
        c = self.config
        return [(Recipe(n, flag_penalty=c.flag_penalty), w) for n, w in c.rubric.items()]

    async def run(self, task: KernelTask, agents) -> None:
        scorer, recipes = self._scorer(), self._recipes()
        name = task.data.task_name
        scorer.tasks.setdefault(name, task.data.task_source)
        turns: list[dict[str, Any]] = []
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                [result] = await asyncio.to_thread(scorer.judge_batch, [name], [segment.last_reply])
                turn = self._score_turn(scorer, recipes, name, result)
                turns.append(turn)
                # No reward (the recipes refuse the same results): an infra_error, or the
                # service's timeout for a passed deadline; neither says anything of the answer.
                if None in turn["rewards"].values():
                    raise InfraErrorNoReward(
                        f"the judge failed on turn {len(turns) - 1} of {name} (or the service's "
                        "deadline passed); no reward"
                    )
                if turn["verdict"] == "correct" or len(turns) >= self.config.max_turns:
                    break
                note = (
                    no_code_feedback("no ```python block defining ModelNew was found")
                    if result is None
                    else feedback(result, self.config.feedback_tokens)
                )
                segment = await interaction.turn(note)
        self._record(interaction.trace, recipes, turns)

    @staticmethod
    def _score_turn(scorer, recipes, name, result) -> dict[str, Any]:
        scorer._reward(name, result)  # counts verdicts, flags, hacks and dropped infra errors
        if result is None:
            rewards = {r.name: r.void_reward for r, _ in recipes}
            return {"verdict": "void", "rewards": rewards, "findings": []}
        rewards = {r.name: r.reward(result) for r, _ in recipes}
        return {"verdict": result.verdict, "rewards": rewards, "findings": result.findings}

    def _record(self, trace, recipes, turns) -> None:
        if not turns:
            return
        for recipe, weight in recipes:
            values = [t["rewards"][recipe.name] for t in turns]
            value = max(values) if self.config.episode_reward == "best" else values[-1]
            trace.record_reward(f"crucible/{recipe.name}", value, weight)
        trace.record_metric("crucible/turns", len(turns))
        trace.record_metric("crucible/correct", float(turns[-1]["verdict"] == "correct"))
        hacks = sum(f["severity"] == "reject" for t in turns for f in t["findings"])
        trace.record_metric("crucible/reject_findings", hacks)
        trace.info["crucible_turns"] = turns


def load_environment(
    tasks: list[str] | None = None, *, judge=None, scorer: KernelScorer | None = None, **config
) -> KernelEnv:
    """The environment, configured like ``vf eval crucible-kernels --env.<key> value``:
    ``config`` holds :class:`KernelEnvConfig` fields (``max_turns``, ``rubric``,
    ``episode_reward``, ``flag_penalty``, ``feedback_tokens``, ``device``, ``trials``,
    ``service``, ``player``...). ``judge`` (a :class:`crucible.Judge` or
    :class:`crucible.ServiceJudge`) or ``scorer`` reuse an existing judge.
    """
    from verifiers.v1.utils.loaders import load_environment as vf_load

    cfg = KernelEnvConfig(taskset={"id": TASKSET_ID, "tasks": tasks}, **config)
    env = vf_load(cfg)
    if not isinstance(env, KernelEnv):
        raise TypeError(f"verifiers loaded {type(env).__name__} for {TASKSET_ID}")
    if scorer is None and judge is not None:
        first = next(iter(cfg.rubric))
        scorer = KernelScorer(
            judge=judge,
            recipe=Recipe(first, flag_penalty=cfg.flag_penalty),
            concurrency=cfg.concurrency,
        )
    env.scorer = scorer
    return env


__all__ = [
    "KernelChatHarness",
    "KernelEnv",
    "KernelTaskset",
    "load_environment",
]
