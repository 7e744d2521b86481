"""The README's copy-paste snippets: the ten-line TRL example runs as written (the trainer class
replaced by a recorder: the real GRPOTrainer run is test_grpo_smoke), and the verl config names
things that exist."""

import importlib
import re
from pathlib import Path

import crucible
import pytest
import torch
import yaml
from conftest import REAL_VERL, REPO, solution


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
    fn = config["reward"]["custom_reward_function"]
    module = importlib.import_module(fn["path"].removeprefix("pkg://"))
    assert module is importlib.import_module("crucible.integrations.verl")
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


def test_verl_loads_the_readme_reward_config(monkeypatch):
    """verl 0.9.1's own loading of the README's reward config (its defaults underneath): the
    custom function resolves, and the reward loop's manager judges a row with it for real."""
    if not REAL_VERL:
        pytest.skip("verl is not installed here: scripts/test-python runs this with verl 0.9.1")
    import numpy as np
    from omegaconf import OmegaConf
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    defaults = OmegaConf.load(Path(verl_file()).parent / "trainer/config/reward/reward.yaml")
    config = OmegaConf.merge(
        {"reward": defaults},
        yaml.safe_load(readme_block("yaml", "verl (rows carry")),
    )
    monkeypatch.setenv("CRUCIBLE_RECIPE", "tiered")
    manager = load_reward_manager(config, _OneText(f"```python\n{solution('01_relu')}\n```"))
    assert type(manager).__name__ == "NaiveRewardManager"
    row = DataProto.from_dict(
        tensors={
            "prompts": torch.zeros((1, 2), dtype=torch.long),
            "responses": torch.zeros((1, 3), dtype=torch.long),
            "attention_mask": torch.ones((1, 5), dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array(["crucible"], dtype=object),
            "reward_model": np.array([{"ground_truth": "01_relu"}], dtype=object),
            "extra_info": np.array([{}], dtype=object),
        },
    )
    # On the event loop the manager took at construction, as verl's reward worker runs it.
    out = manager.loop.run_until_complete(manager.run_single(row))
    # A correct answer (tiered: -0.1 below the reference's speed, up to 1.0; less 0.1 for a flag)
    # scores above an incorrect one (-0.3).
    assert out["reward_score"] >= -0.2
    assert out["reward_extra_info"] == {"acc": out["reward_score"]}


def verl_file() -> str:
    import verl

    return verl.__file__


class _OneText:
    """A tokenizer whose every decode is the one answer."""

    def __init__(self, text):
        self.text = text

    def decode(self, ids, skip_special_tokens=True):
        return self.text
