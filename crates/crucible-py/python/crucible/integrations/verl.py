"""verl: a ``custom_reward_function`` and a batch reward manager.

verl 0.9.1 config (copy into your PPO/GRPO config)::

    reward:
      custom_reward_function:
        path: pkg://crucible.integrations.verl   # by module name: a file path loses the package
        name: compute_score
      reward_manager:
        name: naive          # verl's reward loop calls compute_score once per row

Each row's ``reward_model.ground_truth`` is the task name (a builtin task, or one in the JSON file
``CRUCIBLE_TASKS`` names: ``{name: source}``); ``extra_info["task_source"]`` overrides it. Recipe
and judge come from ``CRUCIBLE_RECIPE`` (default ``tiered``), ``CRUCIBLE_DEVICE`` (default
``cpu``) and ``CRUCIBLE_CONCURRENCY`` (default 2); with ``CRUCIBLE_SERVICE`` (a ``crucible serve``
URL, its token in ``CRUCIBLE_TOKEN``) the service's workers judge instead
(:class:`crucible.ServiceJudge`).

An ``infra_error`` has no reward, and verl's stock managers need one for every row, so
``compute_score``/``compute_score_batch`` raise :class:`InfraErrorNoReward` rather than invent one.
:class:`CrucibleRewardManager` (verl's batch ``AbstractRewardManager``, registered as ``crucible``
in ``verl.workers.reward_manager`` when verl imports; 0.9.1's trainer resolves managers from its
reward loop's registry instead, so this serves code that calls batch managers itself) drops such
rows instead: reward 0 and ``response_mask`` zeroed, so they carry no loss, counted in
``reward_extra_info["crucible_infra_error_dropped"]``. The multi-turn agent loop
(:mod:`crucible.integrations.verl_agent`) judges in the rollout and drops them the same way.
Rollout log-probs stay in the batch untouched, so MRS (``crucible.advantages(mrs=True)``) can run.
Multi-turn rollouts with the judge's feedback: :mod:`crucible.integrations.verl_agent`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

from .. import builtin_tasks
from ..scoring import KernelScorer

_scorer: KernelScorer | None = None


class InfraErrorNoReward(RuntimeError):
    """The judge failed on a sample; it has no reward (use CrucibleRewardManager to drop it)."""


def scorer() -> KernelScorer:
    """The process's scorer, configured from the environment on first use."""
    global _scorer
    if _scorer is None:
        tasks = builtin_tasks()
        extra = os.environ.get("CRUCIBLE_TASKS")
        if extra:
            with open(extra) as f:
                tasks.update(json.load(f))
        service = os.environ.get("CRUCIBLE_SERVICE")
        judge = (
            {"service": service, "token": os.environ.get("CRUCIBLE_TOKEN")}
            if service
            else {"device": os.environ.get("CRUCIBLE_DEVICE", "cpu")}
        )
        _scorer = KernelScorer(
            tasks,
            recipe=os.environ.get("CRUCIBLE_RECIPE", "tiered"),
            concurrency=int(os.environ.get("CRUCIBLE_CONCURRENCY", "2")),
            **judge,
        )
    return _scorer


def _task_names(ground_truths, extra_infos, s: KernelScorer) -> list[str]:
    names = []
    for gt, extra in zip(ground_truths, extra_infos, strict=True):
        source = (extra or {}).get("task_source")
        if source:
            name = (extra or {}).get("task_name") or f"task-{abs(hash(source)):x}"
            s.tasks[name] = source
            gt = name
        names.append(gt)
    return names


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, **kwargs):
    """verl's batch form: one dict per row, ``{"score", "verdict", "judged"}``."""
    s = scorer()
    extra_infos = extra_infos if extra_infos is not None else [None] * len(solution_strs)
    names = _task_names(ground_truths, extra_infos, s)
    results = s.judge_batch(names, solution_strs)
    out = []
    for name, result in zip(names, results, strict=True):
        reward = s._reward(name, result)
        if reward is None:
            raise InfraErrorNoReward(
                f"the judge failed on a sample of {name} (infra_error, or the service's "
                "deadline passed); it has no reward"
            )
        verdict = "void" if result is None else result.verdict
        out.append({"score": reward, "verdict": verdict, "judged": result is not None})
    return out


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl's ``custom_reward_function`` form, one sample at a time."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info])[0][
        "score"
    ]


try:  # verl's interface and registry, where verl imports (0.9.1 needs ray, tensordict, hydra).
    from verl.workers.reward_manager import register as _register_manager
    from verl.workers.reward_manager.abstract import AbstractRewardManager as _ManagerBase

    HAVE_VERL = True
except ImportError:  # verl absent: the class works standalone on anything shaped like DataProto.
    HAVE_VERL = False
    _ManagerBase = object


class CrucibleRewardManager(_ManagerBase):
    """A verl reward manager that judges the whole batch at once and drops infra errors.

    verl's ``AbstractRewardManager`` (``(tokenizer, num_examine, compute_score, reward_fn_key)``,
    ``__call__(data: DataProto, return_dict)``); ``compute_score`` is unused (the judge scores)."""

    def __init__(
        self, tokenizer, num_examine=0, compute_score=None, reward_fn_key="data_source", **kwargs
    ):
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key

    def __call__(self, data, return_dict: bool = False):
        import torch

        s = scorer()
        prompt_len = data.batch["prompts"].shape[-1]
        lengths = data.batch["attention_mask"][:, prompt_len:].sum(dim=-1)
        responses = [
            self.tokenizer.decode(
                data.batch["responses"][i][: int(lengths[i])], skip_special_tokens=True
            )
            for i in range(len(data))
        ]
        gts = [rm.get("ground_truth") for rm in data.non_tensor_batch["reward_model"]]
        extras = data.non_tensor_batch.get("extra_info", [None] * len(data))
        names = _task_names(gts, extras, s)
        results = s.judge_batch(names, responses)
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        info = defaultdict(list)
        dropped = 0
        for i, (name, result) in enumerate(zip(names, results, strict=True)):
            reward = s._reward(name, result)
            if reward is None:
                dropped += 1
                if "response_mask" in data.batch.keys():  # noqa: SIM118 (a TensorDict in verl)
                    data.batch["response_mask"][i] = 0
                reward = 0.0
            reward_tensor[i, max(int(lengths[i]) - 1, 0)] = reward
            info["crucible_verdict"].append("void" if result is None else result.verdict)
        info["crucible_infra_error_dropped"] = [dropped] * len(data)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": dict(info)}
        return reward_tensor


if HAVE_VERL:
    _register_manager("crucible")(CrucibleRewardManager)
__all__ = [
    "HAVE_VERL",
    "CrucibleRewardManager",
    "InfraErrorNoReward",
    "compute_score",
    "compute_score_batch",
]
