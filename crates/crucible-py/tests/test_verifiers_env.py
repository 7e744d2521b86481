"""verifiers: the multi-turn environment driven through verifiers' own rollout machinery
(interception server, harness, trace, scoring) against a scripted chat server; the judge is the
real in-process judge on a builtin task."""

import asyncio

import crucible
import pytest
from chat_stub import ChatStub
from conftest import solution


def fenced(code: str) -> str:
    return f"Here is my kernel.\n```python\n{code}\n```\n"


def run_episode(env, stub_url: str, task_name: str, monkeypatch):
    import verifiers.v1 as vf
    from verifiers.v1.configs.client import EvalClientConfig

    monkeypatch.setenv("CRUCIBLE_STUB_KEY", "stub")
    ctx = vf.ModelContext(
        model="stub-model",
        client=EvalClientConfig(base_url=stub_url, api_key_var="CRUCIBLE_STUB_KEY"),
    )
    [task] = [t for t in env.taskset if t.data.task_name == task_name]

    async def go():
        async with env.serving():
            return await env.run_episode(task, ctx)

    return asyncio.run(go())


def test_load_environment_is_the_plugin(judge):
    from crucible.integrations import verifiers_env as ve
    from verifiers.v1.utils.loaders import environment_class, taskset_class

    assert environment_class(ve.TASKSET_ID) is ve.KernelEnv
    assert taskset_class(ve.TASKSET_ID) is ve.KernelTaskset
    env = ve.load_environment(["01_relu", "16_swish"], judge=judge, max_turns=2)
    names = [t.data.task_name for t in env.taskset]
    assert names == ["01_relu", "16_swish"]
    first = next(iter(env.taskset)).data
    assert first.prompt == crucible.first_turn("01_relu", crucible.builtin_tasks()["01_relu"])
    with pytest.raises(ValueError, match="unknown tasks"):
        list(ve.load_environment(["nope"], judge=judge).taskset)


def test_multi_turn_episode_with_judge_feedback(judge, monkeypatch):
    from crucible.integrations import verifiers_env as ve

    env = ve.load_environment(
        ["16_swish"], judge=judge, max_turns=3, rubric={"tiered": 1.0, "drkernel": 0.5}
    )
    replies = [
        "I am not sure how to start.",
        fenced(solution("02_gelu_tanh", "wrong")),
        fenced(solution("16_swish")),
    ]
    with ChatStub(replies) as stub:
        episode = run_episode(env, stub.url, "16_swish", monkeypatch)
    assert episode.ok, episode.errors
    [trace] = episode.traces
    turns = trace.info["crucible_turns"]
    assert [t["verdict"] for t in turns] == ["void", "runtime_error", "correct"]
    # The model saw the judge's notes: a request for code, then the runtime error.
    assert len(stub.requests) == 3
    second_user = stub.requests[1]["messages"][-1]["content"]
    assert second_user == crucible.no_code_feedback(
        "no ```python block defining ModelNew was found"
    )
    third_user = stub.requests[2]["messages"][-1]["content"]
    assert third_user.startswith("Verdict: failed while running.")
    assert stub.requests[0]["messages"][0] == {"role": "system", "content": crucible.SYSTEM_PROMPT}
    # The rubric: each recipe's reward of the last judged answer, with its weight.
    tiered = crucible.Recipe("tiered", flag_penalty=0.1)
    assert trace.rewards["crucible/tiered"].score == turns[-1]["rewards"]["tiered"]
    assert trace.rewards["crucible/drkernel"].weight == 0.5
    assert turns[0]["rewards"]["tiered"] == tiered.void_reward
    assert trace.metrics["crucible/turns"] == 3
    assert trace.metrics["crucible/correct"] == 1.0


def test_infra_error_fails_the_episode_and_is_counted(judge, monkeypatch):
    from crucible.integrations import verifiers_env as ve
    from crucible.scoring import KernelScorer

    class BrokenJudge:
        """A judge whose harness interpreter does not exist: every answer is infra_error."""

        def __init__(self):
            self.real = crucible.make_judge(python="/nonexistent/python", trials=1)

        def evaluate_many(self, jobs, concurrency=2):
            return self.real.evaluate_many(jobs, concurrency=concurrency)

    scorer = KernelScorer(judge=BrokenJudge())
    env = ve.load_environment(["01_relu"], scorer=scorer, max_turns=2)
    with ChatStub([fenced(solution("01_relu"))]) as stub:
        episode = run_episode(env, stub.url, "01_relu", monkeypatch)
    assert not episode.ok
    [error] = episode.errors
    assert "InfraErrorNoReward: the judge failed on turn 0 of 01_relu" in error.message
    assert scorer.summary()["infra_error_dropped"] == 1
    assert not any("crucible/tiered" in t.rewards for t in episode.traces)
