"""One batch of completions to rewards: extract, judge concurrently, score. Shared by every
trainer integration, so they all keep the same honesty rules:

- an ``infra_error`` (the judge failed) never becomes a reward: its reward is ``None``, and it is
  counted in ``stats["infra_error_dropped"]``;
- a result with a ``flag`` finding never silently gets full reward: by default the integrations
  take ``flag_penalty=0.1`` from a correct, flagged result (the ``crucible`` CLI and
  :class:`crucible.Recipe` default to 0; pass ``flag_penalty=0`` to score flags in full);
- a completion without code is a *void* turn: the recipe's ``void_reward``, never judged.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

from . import Judge, Recipe, ServiceJudge, builtin_tasks, make_judge
from .extract import extract_code

DEFAULT_FLAG_PENALTY = 0.1


class KernelScorer:
    """Scores completions for named tasks with the in-process judge, or with a ``crucible
    serve`` given as ``service`` (and ``token``): see :class:`crucible.ServiceJudge`.

    ``tasks`` maps task names to task sources (default: the builtin suite). ``results_path``, if
    given, receives one JSON line per scored completion, in order: ``{"task", "reward", "result"}``
    with the full result document (``null`` for a void turn), so every reward can be traced to
    the judgement that produced it.
    ``judge_options`` go to :func:`crucible.make_judge` (``device``, ``trials``, ``service``,
    ...).
    """

    def __init__(
        self,
        tasks: dict[str, str] | None = None,
        recipe: str | Recipe = "tiered",
        *,
        flag_penalty: float = DEFAULT_FLAG_PENALTY,
        shape_specialized_penalty: float | None = None,
        judge: Judge | ServiceJudge | None = None,
        concurrency: int = 2,
        results_path: str | Path | None = None,
        **judge_options,
    ):
        self.tasks = dict(tasks) if tasks is not None else builtin_tasks()
        if isinstance(recipe, str):
            recipe = Recipe(
                recipe,
                flag_penalty=flag_penalty,
                shape_specialized_penalty=shape_specialized_penalty,
            )
        self.recipe = recipe
        self.judge = judge or make_judge(**judge_options)
        self.concurrency = concurrency
        self.results_path = Path(results_path) if results_path else None
        self.stats: Counter[str] = Counter()
        self.hack_findings: Counter[str] = Counter()
        self._lock = threading.Lock()

    def judge_batch(self, task_names, completions) -> list:
        """The :class:`crucible.EvalResult` of each completion (``None`` for a void one)."""
        codes = [extract_code(c) for c in completions]
        jobs, where = [], []
        for i, (name, code) in enumerate(zip(task_names, codes, strict=True)):
            if code is None:
                continue
            if name not in self.tasks:
                raise KeyError(f"unknown task {name!r}; known: {sorted(self.tasks)}")
            jobs.append((name, self.tasks[name], code))
            where.append(i)
        judged = self.judge.evaluate_many(jobs, concurrency=self.concurrency) if jobs else []
        results: list = [None] * len(codes)
        for i, result in zip(where, judged, strict=True):
            results[i] = result
        return results

    def score(self, task_names, completions) -> list[float | None]:
        """Rewards in input order; ``None`` for an ``infra_error`` (drop the sample)."""
        results = self.judge_batch(task_names, completions)
        rewards = [self._reward(name, r) for name, r in zip(task_names, results, strict=True)]
        return rewards

    def _reward(self, task_name: str, result) -> float | None:
        with self._lock:
            if result is None:
                self.stats["void"] += 1
                self._record(task_name, self.recipe.void_reward, None)
                return self.recipe.void_reward
            self.stats[f"verdict/{result.verdict}"] += 1
            for f in result.findings:
                if f["severity"] == "reject":
                    self.hack_findings[f["code"]] += 1
                elif f["severity"] == "flag":
                    self.stats[f"flag/{f['code']}"] += 1
            reward = self.recipe.reward(result)
            if reward is None:
                self.stats["infra_error_dropped"] += 1
            self._record(task_name, reward, json.loads(result.to_json()))
            return reward

    def _record(self, task_name: str, reward: float | None, result: dict | None) -> None:
        if self.results_path:
            line = {"task": task_name, "reward": reward, "result": result}
            with self.results_path.open("a") as out:
                out.write(json.dumps(line) + "\n")

    def summary(self) -> dict[str, int]:
        """Counts so far: verdicts, void turns, dropped infra errors, flags and reject findings
        (hacks and decoys, and syntax errors, which the verifier also rejects)."""
        out = dict(self.stats)
        out.update({f"reject/{code}": n for code, n in self.hack_findings.items()})
        return out
