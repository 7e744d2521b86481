"""Crucible for Python: the static verifier, the in-process kernel judge, reward recipes and
advantage estimators, all running in Rust (the same code as the ``crucible`` CLI).

>>> import crucible
>>> tasks = crucible.builtin_tasks()
>>> result = crucible.evaluate(tasks["01_relu"], candidate_source, task_name="01_relu")
>>> result.verdict, result.to_dict()["findings"]
>>> crucible.Recipe("tiered").reward(result)          # None for an infra_error: drop the sample
>>> crucible.advantages(prompt_ids, sample, turn, rewards, estimator="trloo")

The judge's harness runs in a Python that has torch and triton: ``CRUCIBLE_PYTHON`` if set, else
the venv ``scripts/bootstrap`` creates, else this interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ._native import (
    ESTIMATORS,
    OUTCOME_KINDS,
    REASONS,
    RECIPES,
    SYSTEM_PROMPT,
    EvalResult,
    Judge,
    Recipe,
    __version__,
    default_venv_python,
    feedback,
    first_turn,
    no_code_feedback,
    prompt_keys,
    rules_markdown,
    verify,
)
from ._native import advantages as _advantages
from ._native import builtin_tasks as _builtin_tasks
from .client import AsyncClient, Client, ServiceError
from .extract import extract_code
from .service import NotJudged, ServiceJudge

__all__ = [
    "ESTIMATORS",
    "OUTCOME_KINDS",
    "REASONS",
    "RECIPES",
    "SYSTEM_PROMPT",
    "AsyncClient",
    "Client",
    "EvalResult",
    "Judge",
    "NotJudged",
    "Recipe",
    "ServiceError",
    "ServiceJudge",
    "__version__",
    "advantages",
    "builtin_tasks",
    "evaluate",
    "extract_code",
    "feedback",
    "first_turn",
    "judge_python",
    "make_judge",
    "no_code_feedback",
    "prompt_keys",
    "rewards",
    "rules_markdown",
    "score_columns",
    "verify",
]


def builtin_tasks() -> dict[str, str]:
    """The builtin task suite the wheel carries: ``{name: task source}``."""
    return dict(_builtin_tasks())


def judge_python() -> str:
    """The interpreter the judge's harness runs in: ``CRUCIBLE_PYTHON``, else the bootstrap
    venv when it exists, else this interpreter (which then needs torch and triton)."""
    override = os.environ.get("CRUCIBLE_PYTHON")
    if override:
        return override
    venv = Path(default_venv_python())
    return str(venv) if venv.exists() else sys.executable


def make_judge(
    *,
    device: str = "cpu",
    python: str | None = None,
    service: str | None = None,
    token: str | None = None,
    **options,
) -> Judge | ServiceJudge:
    """A reusable :class:`Judge`; ``options`` are those of ``crucible eval`` (``trials``,
    ``seed``, ``tolerance``, ``size_profile``, ``generalize``, ``timing``, ``verify_policy``,
    ``verify_policy_file``, ``stage_timeout``).

    With ``service`` (a ``crucible serve`` URL, and its bearer ``token``), a
    :class:`ServiceJudge` instead: the same ``evaluate`` and ``evaluate_many``, judged by the
    service's workers (``device`` and ``python`` are theirs; ``options`` as ServiceJudge
    takes them: ``client``, ``priority``, ``deadline_s``, ``cache`` and the judge options the
    service accepts)."""
    if service is not None:
        if python is not None or device != "cpu":
            raise TypeError(
                "with `service`, the service's workers choose the device and interpreter"
            )
        return ServiceJudge(service, token, **options)
    if token is not None:
        raise TypeError("`token` is the service's bearer token: it needs `service`")
    return Judge(python or judge_python(), device=device, **options)


def evaluate(
    task_source: str,
    candidate_source: str,
    *,
    task_name: str = "task",
    device: str = "cpu",
    **options,
) -> EvalResult:
    """Judges one candidate against one task in-process (see :func:`make_judge` for options).
    Never raises for a bad candidate: every problem is a verdict in the result."""
    judge = make_judge(device=device, **options)
    return judge.evaluate(task_source, candidate_source, task_name=task_name)


def rewards(results, recipe: str | Recipe = "tiered", **params):
    """Rewards of many results as a float64 NumPy array; NaN marks an ``infra_error``, which has
    no reward (drop it). ``params`` build the :class:`Recipe` when ``recipe`` is a name."""
    if isinstance(recipe, str):
        recipe = Recipe(recipe, **params)
    return recipe.rewards(list(results))


_TABLE_COLUMNS = ("correct", "coverage", "void", "errored", "truncated")


def _columns(table) -> dict:
    """A pyarrow Table / RecordBatch, or a mapping of columns, as ``{name: column}``."""
    if hasattr(table, "column_names"):
        return {name: table.column(name) for name in table.column_names}
    return dict(table)


def advantages(prompt, sample=None, turn=None, reward=None, **options) -> dict:
    """Returns, masks, rejection sampling and advantages over a batch of turns, as
    ``crucible advantages`` computes them (see the stub of ``crucible._native.advantages``).

    Columns are NumPy arrays or pyarrow arrays (numbers without nulls are read in place). Or
    pass one pyarrow Table / RecordBatch (or a dict of columns) as ``prompt``: its columns
    ``prompt_id`` (or ``prompt``), ``sample``, ``turn``, ``reward`` and any of ``correct``,
    ``coverage``, ``void``, ``errored``, ``truncated`` are used.
    """
    if sample is None and turn is None and reward is None:
        cols = _columns(prompt)
        key = "prompt_id" if "prompt_id" in cols else "prompt"
        for name in (key, "sample", "turn", "reward"):
            if name not in cols:
                raise ValueError(f"the table has no column {name!r}")
        for name in _TABLE_COLUMNS:
            if name in cols and name not in options:
                options[name] = cols[name]
        prompt, sample, turn, reward = cols[key], cols["sample"], cols["turn"], cols["reward"]
    return _advantages(prompt, sample, turn, reward, **options)


def score_columns(table, recipe: str | Recipe = "tiered", **params):
    """Rewards over outcome columns (:meth:`Recipe.score_columns`) from a pyarrow Table /
    RecordBatch or a dict of columns: ``kind``, ``speedup``, ``coverage`` and optionally
    ``shape_specialized``, ``flagged``."""
    if isinstance(recipe, str):
        recipe = Recipe(recipe, **params)
    cols = _columns(table)
    return recipe.score_columns(
        cols["kind"],
        cols["speedup"],
        cols["coverage"],
        cols.get("shape_specialized"),
        cols.get("flagged"),
    )
