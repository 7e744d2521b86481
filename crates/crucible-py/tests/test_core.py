"""The package's results equal the CLI's for the same inputs: verifier findings, rewards and
advantages. The results judged here come from the real in-process judge (CPU interpreter)."""

import json
import subprocess

import crucible
import numpy as np
import pytest
from conftest import REPO, solution

HACK = """
import torch
import torch.nn as nn
import triton

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def run(*args, ok=(0,)):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode in ok, p.stderr
    return p.stdout


@pytest.mark.parametrize("policy", ["strict", "lenient"])
def test_verifier_findings_equal_the_cli(cli, tmp_path, policy):
    files = [REPO / "examples/solutions/06_softmax.py", REPO / "examples/wrong/06_softmax.py"]
    hack = tmp_path / "hack.py"
    hack.write_text(HACK)
    files.append(hack)
    out = json.loads(run(cli, "verify", "--json", "--policy", policy, *map(str, files), ok=(0, 1)))
    for path, entry in zip(files, out, strict=True):
        mine = crucible.verify(path.read_text(), policy=policy)
        assert mine["rejected"] == entry["rejected"]
        assert mine["findings"] == entry["findings"]
    assert out[2]["rejected"], "the torch-only forward must be rejected"


@pytest.fixture(scope="module")
def judged(judge):
    tasks = crucible.builtin_tasks()
    jobs = [
        ("01_relu", tasks["01_relu"], solution("01_relu")),
        ("02_gelu_tanh", tasks["02_gelu_tanh"], solution("02_gelu_tanh", "wrong")),
        ("01_relu", tasks["01_relu"], HACK),
        ("16_swish", tasks["16_swish"], "def broken(:\n"),
    ]
    return judge.evaluate_many(jobs, concurrency=2)


def test_the_judge_gives_real_verdicts(judged):
    assert [r.verdict for r in judged] == ["correct", "incorrect", "rejected", "compile_error"]
    doc = judged[0].to_dict()
    assert doc["schema"] == "crucible.result/1" and doc["task"]["name"] == "01_relu"
    again = crucible.EvalResult.from_json(judged[0].to_json())
    assert again.to_dict() == doc


@pytest.mark.parametrize("recipe", ["drkernel", "weighted", "tiered", "hierarchical"])
def test_rewards_equal_the_cli(cli, tmp_path, judged, recipe):
    r = crucible.Recipe(recipe)
    for i, result in enumerate(judged):
        path = tmp_path / f"r{i}.json"
        path.write_text(result.to_json())
        out = json.loads(run(cli, "reward", "--json", "--recipe", recipe, str(path)))
        assert r.reward(result) == out["reward"]
        assert r.reward(result.to_dict()) == out["reward"]
    cols = r.outcomes(judged)
    from_cols = r.score_columns(
        cols["kind"], cols["speedup"], cols["coverage"], cols["shape_specialized"], cols["flagged"]
    )
    assert np.array_equal(from_cols, crucible.rewards(judged, r))


def test_infra_error_has_no_reward_and_flags_are_charged(judged):
    doc = judged[0].to_dict()
    doc["verdict"], doc["correct"] = "infra_error", False
    assert crucible.Recipe("tiered").reward(doc) is None
    assert np.isnan(crucible.rewards([doc], "tiered")[0])
    flagged = judged[0].to_dict()
    flagged["findings"].append(
        {"code": "below-bandwidth-floor", "severity": "flag", "message": "m"}
    )
    full = crucible.Recipe("tiered").reward(flagged)
    assert crucible.Recipe("tiered", flag_penalty=0.1).reward(flagged) == pytest.approx(full - 0.1)


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "trloo", "kevin"])
def test_advantages_equal_the_cli(cli, tmp_path, judged, estimator):
    infra = judged[1].to_dict()
    infra["verdict"] = "infra_error"
    docs = [
        judged[0].to_json(),
        judged[1].to_json(),
        judged[2].to_json(),
        json.dumps(infra),
        judged[3].to_json(),
        judged[0].to_json(),
    ]
    rows = [("p", 0, 0), ("p", 0, 1), ("p", 1, 0), ("p", 2, 0), ("q", 0, 0), ("q", 1, 0)]
    src = tmp_path / "traj.jsonl"
    src.write_text(
        "".join(
            json.dumps({"prompt_id": p, "sample": s, "turn": t, "judge_result": d}) + "\n"
            for (p, s, t), d in zip(rows, docs, strict=True)
        )
    )
    out = tmp_path / "batch.jsonl"
    run(
        cli,
        "advantages",
        "--in",
        str(src),
        "--out",
        str(out),
        "--estimator",
        estimator,
        "--recipe",
        "tiered",
        "--prs",
    )
    want = [json.loads(line) for line in out.read_text().splitlines()]

    recipe = crucible.Recipe("tiered")
    results = [json.loads(d) for d in docs]
    rewards = recipe.rewards(results)
    cols = recipe.outcomes(results)
    got = crucible.advantages(
        [p for p, _, _ in rows],
        np.array([s for _, s, _ in rows], np.uint32),
        np.array([t for _, _, t in rows], np.uint32),
        rewards,
        estimator=estimator,
        correct=cols["correct"],
        coverage=cols["coverage"],
        prs="turn",
    )
    for i, w in enumerate(want):
        for key, mine in (
            ("return", got["ret"][i]),
            ("advantage", got["advantage"][i]),
            ("reward", rewards[i]),
        ):
            if w[key] is None:
                assert np.isnan(mine), (i, key)
            else:
                assert mine == pytest.approx(w[key], abs=1e-12), (i, key)
        assert got["weight"][i] == w["weight"]
        reason = got["reason"][i]
        assert (crucible.REASONS[reason] if reason >= 0 else None) == w["mask_reason"]
    assert got["summary"]["episode_error"] == 1


def test_arrow_columns_equal_the_numpy_path():
    pa = pytest.importorskip("pyarrow")
    rng = np.random.default_rng(3)
    n = 4000
    kind = rng.integers(0, 6, n).astype(np.uint8)  # 5: infra_error
    speedup = np.where(kind == 4, rng.uniform(0.5, 3.0, n), np.nan)
    coverage = rng.uniform(0, 1, n)
    flagged = rng.random(n) < 0.1
    recipe = crucible.Recipe("tiered", flag_penalty=0.1)
    want = recipe.score_columns(kind, speedup, coverage, None, flagged)
    got = recipe.score_columns(
        pa.array(kind), pa.array(speedup), pa.array(coverage), None, pa.array(flagged)
    )
    assert np.array_equal(want, got, equal_nan=True)
    table = pa.table({"kind": kind, "speedup": speedup, "coverage": coverage, "flagged": flagged})
    assert np.array_equal(crucible.score_columns(table, recipe), want, equal_nan=True)

    prompts = np.repeat(np.arange(n // 8, dtype=np.uint64), 8)
    sample = np.tile(np.arange(8, dtype=np.uint32), n // 8)
    turn = np.zeros(n, np.uint32)
    correct = kind == 4
    for estimator in ("trloo", "grpo", "rloo", "kevin"):
        a = crucible.advantages(
            prompts,
            sample,
            turn,
            want,
            estimator=estimator,
            correct=correct,
            coverage=coverage,
            prs="turn",
        )
        # Two chunks per column: pyarrow copies them into one array.
        chunked = {
            k: pa.chunked_array([v[: n // 2], v[n // 2 :]])
            for k, v in {
                "prompt": prompts,
                "sample": sample,
                "turn": turn,
                "reward": want,
                "correct": correct,
                "coverage": coverage,
            }.items()
        }
        b = crucible.advantages(
            chunked["prompt"],
            pa.array(sample),
            pa.array(turn),
            chunked["reward"],
            estimator=estimator,
            correct=chunked["correct"],
            coverage=pa.array(coverage),
            prs="turn",
        )
        c = crucible.advantages(
            pa.table(
                {
                    "prompt": prompts,
                    "sample": sample,
                    "turn": turn,
                    "reward": want,
                    "correct": correct,
                    "coverage": coverage,
                }
            ),
            estimator=estimator,
            prs="turn",
        )
        for other in (b, c):
            for key in ("ret", "advantage", "weight", "reason"):
                assert np.array_equal(a[key], other[key], equal_nan=True), (estimator, key)
            assert a["summary"] == other["summary"]
    assert a["summary"]["episode_error"] > 0, "NaN rewards (infra errors) mask their turns"


def test_arrow_strings_nulls_and_dtypes():
    pa = pytest.importorskip("pyarrow")
    ids = ["p", "p", "q", "q"]
    sample = np.array([0, 1, 0, 1], np.uint32)
    turn = np.zeros(4, np.uint32)
    reward = np.array([1.0, 0.0, 0.5, np.nan])
    want = crucible.advantages(ids, sample, turn, reward)
    got = crucible.advantages(pa.array(ids), sample, turn, pa.array([1.0, 0.0, 0.5, None]))
    for key in ("ret", "advantage", "weight", "reason"):
        assert np.array_equal(want[key], got[key], equal_nan=True), key
    assert got["summary"]["episode_error"] == 1, "a null reward is an errored turn"
    with pytest.raises(ValueError, match="sample must be a 1-D array of uint32"):
        crucible.advantages(ids, pa.array([0, 1, 0, 1], pa.int64()), turn, reward)
