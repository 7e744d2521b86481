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
"""

from __future__ import annotations

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
