"""TRL's environment interface (`GRPOTrainer(environment_factory=...)`): the kernel environment
against the real judge, its tool as TRL and transformers see it, and a real 1-step GRPOTrainer
run with it (SmolLM2 GGUF, under TRL's own ChatML tool-calling template)."""

import inspect
import json

import crucible
import pytest
import torch
from conftest import solution
from crucible.scoring import KernelScorer
from test_grpo_smoke import smollm2_gguf


def test_tools_as_trl_discovers_them(judge):
    from crucible.integrations.trl import KernelEnvironment, kernel_environment_factory
    from transformers.utils import get_json_schema

    env = kernel_environment_factory(judge=judge)()
    # TRL's discovery: the class's public functions but reset and get_reward.
    tools = [
        name
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]
    assert tools == ["submit_kernel"] and isinstance(env, KernelEnvironment)
    schema = get_json_schema(env.submit_kernel)["function"]
    assert schema["name"] == "submit_kernel"
    assert schema["parameters"]["required"] == ["code"]
    assert schema["parameters"]["properties"]["code"]["type"] == "string"


def test_submit_feedback_and_reward(judge):
    from crucible.integrations.trl import kernel_environment_factory

    scorer = KernelScorer(judge=judge, recipe="tiered")
    env = kernel_environment_factory(scorer=scorer, max_submissions=2)()
    assert env.get_reward is not None
    note = env.reset(task="16_swish", prompt=[{"role": "user", "content": "p"}])
    assert "submit_kernel" in note
    assert env.get_reward() == scorer.recipe.void_reward
    wrong = env.submit_kernel(solution("02_gelu_tanh", "wrong"))
    assert wrong.startswith("Verdict: failed while running.")
    right = env.submit_kernel(solution("16_swish"))
    assert right.startswith("Verdict: correct")
    result = judge.evaluate(
        crucible.builtin_tasks()["16_swish"], solution("16_swish"), task_name="16_swish"
    )
    assert env.get_reward() == scorer.recipe.reward(result)
    assert env.submit_kernel("x = 1").startswith("No submissions left")
    with pytest.raises(ValueError, match="known `task`"):
        env.reset(task="nope")


def test_infra_error_has_no_reward():
    from crucible.integrations.trl import kernel_environment_factory

    broken = crucible.make_judge(python="/nonexistent/python", trials=1)
    scorer = KernelScorer(judge=broken)
    env = kernel_environment_factory(scorer=scorer)()
    env.reset(task="01_relu")
    assert env.submit_kernel(solution("01_relu")).startswith("Verdict: not judged")
    assert env.get_reward() is None
    assert scorer.summary()["infra_error_dropped"] == 1


def test_grpo_trainer_runs_the_environment(judge, tmp_path):
    from crucible.integrations.trl import kernel_environment_factory, kernel_prompts
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # SmolLM2 speaks ChatML (<|im_start|>, <|im_end|>) but its template has no tools; TRL's
    # Qwen2.5 template is ChatML with tool calls, and TRL knows how to parse its responses.
    tokenizer.chat_template = qwen2_5_chat_template
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    assert next(model.parameters()).dtype == torch.float32
    model.is_quantized, model.hf_quantizer = False, None
    model.config.quantization_config = None
    scorer = KernelScorer(judge=judge, recipe="tiered", results_path=tmp_path / "judged.jsonl")
    made: list = []
    factory = kernel_environment_factory(scorer=scorer)

    def tracked():
        env = factory()
        made.append(env)
        return env

    data = Dataset.from_list(kernel_prompts(crucible.builtin_tasks(), ["01_relu", "16_swish"]))
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=32,
        max_tool_calling_iterations=2,
        learning_rate=1e-6,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=data,
        environment_factory=tracked,
    )
    trainer.train()
    assert trainer.state.global_step == 1
    reset = [e for e in made if e._task is not None]
    assert len(reset) >= 4, "one environment per rollout, each reset on its row's task"
    assert {e._task for e in reset} <= {"01_relu", "16_swish"}
    logged = [h for h in trainer.state.log_history if "rewards/KernelEnvironment/mean" in h]
    assert logged, trainer.state.log_history
    judged = tmp_path / "judged.jsonl"
    lines = [json.loads(x) for x in judged.read_text().splitlines()] if judged.exists() else []
    print(f"TRL environment: {len(reset)} rollouts, {len(lines)} submissions judged")
