"""TRL: a reward function for ``GRPOTrainer(reward_funcs=...)``.

Example::

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    import crucible
    from crucible.integrations.trl import KernelReward, kernel_prompts

    tasks = crucible.builtin_tasks()
    data = Dataset.from_list(kernel_prompts(tasks, ["01_relu", "16_swish"]))
    reward = KernelReward(tasks, recipe="tiered", device="cpu", results_path="judged.jsonl")
    trainer = GRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", reward_funcs=reward,
                          args=GRPOConfig(output_dir="out", num_generations=4), train_dataset=data)
    trainer.train()

The dataset needs a ``task`` column (a task name); TRL passes it to the reward function. Each
batch is judged concurrently; verdict counts, flags and hack findings go to the trainer's logs
(``crucible/...`` metrics). An ``infra_error`` returns ``None``, which TRL treats as unscorable
(no reward, advantage 0); flags cost ``flag_penalty`` (default 0.1, see
:mod:`crucible.scoring`).

Multi-turn, through TRL's environment interface (``GRPOTrainer(environment_factory=...)``,
experimental in TRL 1.16): :func:`kernel_environment_factory` makes :class:`KernelEnvironment`
instances whose one tool, ``submit_kernel(code)``, judges a candidate and answers with the
judge's note (the agent's feedback renderer), so the model can revise and resubmit within one
rollout; ``get_reward`` is the recipe's reward of the last judged submission::

    trainer = GRPOTrainer(model=..., args=GRPOConfig(..., max_tool_calling_iterations=4),
                          train_dataset=data,  # kernel_prompts(...): "prompt" and "task"
                          environment_factory=kernel_environment_factory(tasks, device="cpu"))

TRL renders the tool with the model's chat template, which must support tool calling.
"""

from __future__ import annotations

import functools

from .. import feedback, no_code_feedback
from ..scoring import KernelScorer

PROMPT = (
    "Write a faster implementation of the PyTorch module below as a Python file that defines "
    "`class ModelNew(nn.Module)` with the same constructor and forward signature, computing the "
    "forward pass with Triton kernels (`@triton.jit`). Answer with one ```python code block.\n\n"
    "```python\n{source}\n```"
)


def kernel_prompts(tasks: dict[str, str], names=None) -> list[dict]:
    """Dataset rows ``{"prompt": [chat message], "task": name}`` for the named tasks."""
    names = list(names) if names is not None else sorted(tasks)
    return [
        {"prompt": [{"role": "user", "content": PROMPT.format(source=tasks[n])}], "task": n}
        for n in names
    ]


class KernelReward(KernelScorer):
    """A TRL reward function (callable); see the module docstring."""

    __name__ = "crucible_kernel_reward"

    def __call__(self, prompts=None, completions=None, task=None, **kwargs):
        if task is None:
            raise ValueError("the dataset needs a `task` column naming each row's task")
        before = self.summary()
        rewards = self.score(task, completions)
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            after = self.summary()
            for key, value in after.items():
                log_metric(f"crucible/{key}", float(value - before.get(key, 0)))
        return rewards


class KernelEnvironment:
    """One rollout's kernel-writing environment for TRL's ``environment_factory``: every public
    method but ``reset`` and ``get_reward`` is a tool TRL shows the model."""

    def __init__(self, scorer: KernelScorer, *, max_submissions: int = 4, feedback_tokens=512):
        self._scorer = scorer
        self._max_submissions = max_submissions
        self._feedback_tokens = feedback_tokens
        self._task: str | None = None
        self._rewards: list[float | None] = []

    def reset(self, task: str | None = None, **row) -> str | None:
        """Starts a rollout on the row's ``task``; adds how to submit to the prompt."""
        if task not in self._scorer.tasks:
            raise ValueError(f"the dataset row needs a known `task`, not {task!r}")
        self._task, self._rewards = task, []
        return (
            "\n\nSubmit each version with the `submit_kernel` tool to have it judged; you get "
            f"the judge's note back and may submit up to {self._max_submissions} times."
        )

    def submit_kernel(self, code: str) -> str:
        """Judges a candidate kernel module against the task and returns the judge's note
        (verdict, errors, mismatches, speed and findings).

        Args:
            code: The complete Python module defining `class ModelNew(nn.Module)`.
        """
        if self._task is None:
            return "No task: the environment was not reset."
        if len(self._rewards) >= self._max_submissions:
            return f"No submissions left (at most {self._max_submissions}); stop here."
        [result] = self._scorer.judge_batch([self._task], [f"```python\n{code}\n```"])
        self._rewards.append(self._scorer._reward(self._task, result))
        if result is None:
            return no_code_feedback("the submission defines no `class ModelNew`")
        return feedback(result, self._feedback_tokens)

    def get_reward(self) -> float | None:
        """The last judged submission's reward; the void reward without one; ``None`` (no
        reward: TRL ignores it) when the judge failed on it."""
        if not self._rewards:
            return self._scorer.recipe.void_reward
        return self._rewards[-1]


def kernel_environment_factory(
    tasks: dict[str, str] | None = None,
    *,
    max_submissions: int = 4,
    feedback_tokens: int = 512,
    scorer: KernelScorer | None = None,
    **scorer_args,
):
    """The ``environment_factory`` for ``GRPOTrainer``: :class:`KernelEnvironment` instances
    sharing one scorer (one judge); ``scorer_args`` go to :class:`KernelScorer`."""
    shared = scorer or KernelScorer(tasks, **scorer_args)
    return functools.partial(
        KernelEnvironment, shared, max_submissions=max_submissions, feedback_tokens=feedback_tokens
    )
