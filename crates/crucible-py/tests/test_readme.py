"""The README's copy-paste snippets: the ten-line TRL example runs as written (the trainer class
replaced by a recorder: the real GRPOTrainer run is test_grpo_smoke), and the verl config names
things that exist."""

import importlib
import re

import crucible
import torch
import yaml
from conftest import REPO, solution


def readme_block(lang: str, after: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(after)
    return re.search(rf"```{lang}\n(.*?)```", text[start:], re.DOTALL).group(1)


def test_trl_example_runs_as_written(monkeypatch, tmp_path):
    import trl

    code = readme_block("python", "TRL, ten lines:")
    assert len([line for line in code.splitlines() if line.strip()]) <= 11
    made = {}

    class RecordingTrainer:
        def __init__(self, **kwargs):
            made.update(kwargs)

        def train(self):
            made["trained"] = True

    monkeypatch.setattr(trl, "GRPOTrainer", RecordingTrainer)
    if not torch.cuda.is_available():
        # The example is written for a GPU (GRPOConfig defaults to bf16); here it validates the
        # same config on the CPU.
        config = trl.GRPOConfig
        monkeypatch.setattr(
            trl, "GRPOConfig", lambda **kw: config(**kw, use_cpu=True, bf16=False, report_to=[])
        )
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 (the README's own example)
    assert made["trained"] and made["args"].num_generations == 4
    data, reward = made["train_dataset"], made["reward_funcs"]
    assert set(data.column_names) == {"prompt", "task"} and len(data) == 2
    # The reward function the example builds judges for real.
    rewards = reward(completions=[f"```python\n{solution('01_relu')}\n```"], task=["01_relu"])
    assert rewards[0] is not None and rewards[0] > crucible.Recipe("tiered").void_reward
    assert (tmp_path / "judged.jsonl").exists()


def test_verl_config_names_what_exists():
    config = yaml.safe_load(readme_block("yaml", "verl (rows carry"))
    fn = config["custom_reward_function"]
    module = importlib.import_module("crucible.integrations.verl")
    assert fn["path"].endswith("crucible/integrations/verl.py")
    assert callable(getattr(module, fn["name"]))
    agent = config["actor_rollout_ref"]["rollout"]["agent"]
    loops_text = readme_block("yaml", "verl (rows carry").split("# crucible_agent_loops.yaml:")[1]
    loops = yaml.safe_load("\n".join(line.removeprefix("# ") for line in loops_text.splitlines()))
    [entry] = loops
    assert entry["name"] == agent["default_agent_loop"]
    module_name, cls = entry["_target_"].rsplit(".", 1)
    loop = getattr(importlib.import_module(module_name), cls)
    from crucible.integrations.verl_agent import AGENT_NAME

    assert entry["name"] == AGENT_NAME and callable(loop.run)
