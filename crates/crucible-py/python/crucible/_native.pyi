"""Type stubs of the Rust extension `crucible._native` (see crates/crucible-py/src)."""

from collections.abc import Sequence
from os import PathLike
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

__version__: str
ESTIMATORS: list[str]
RECIPES: list[str]
REASONS: list[str]
OUTCOME_KINDS: list[str]

class EvalResult:
    """One judge result document (`crucible.result/1`)."""

    @staticmethod
    def from_json(text: str) -> EvalResult: ...
    @property
    def verdict(self) -> str: ...
    @property
    def correct(self) -> bool: ...
    @property
    def speedup(self) -> float | None: ...
    @property
    def speedup_matched(self) -> float | None: ...
    @property
    def coverage(self) -> float | None: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def task_name(self) -> str: ...
    @property
    def candidate_name(self) -> str: ...
    @property
    def infra_error(self) -> bool: ...
    @property
    def is_hack(self) -> bool: ...
    @property
    def flags(self) -> list[str]: ...
    @property
    def findings(self) -> list[dict[str, Any]]: ...
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self) -> str: ...

class Judge:
    """A configured in-process judge (`crucible eval`), reusable and thread-safe."""

    def __init__(
        self,
        python: str | PathLike[str],
        *,
        device: str = "cpu",
        trials: int = 5,
        seed: int | None = None,
        tolerance: str = "kb-v0",
        size_profile: str | None = None,
        generalize: str = "auto",
        timing: bool = True,
        verify_policy: str | None = "strict",
        verify_policy_file: str | PathLike[str] | None = None,
        stage_timeout: float | None = None,
    ) -> None: ...
    @property
    def device(self) -> str: ...
    @property
    def python(self) -> str: ...
    def evaluate(
        self, task_source: str, candidate_source: str, *, task_name: str = "task"
    ) -> EvalResult: ...
    def evaluate_many(
        self, jobs: Sequence[tuple[str, str, str]], *, concurrency: int = 2
    ) -> list[EvalResult]: ...

ResultLike: TypeAlias = EvalResult | str | dict[str, Any]
# A 1-D column: a NumPy array of the stated dtype, or a pyarrow Array / ChunkedArray of it.
Column: TypeAlias = npt.NDArray[Any] | Any

class Recipe:
    """A reward recipe as `crucible reward` builds it, plus `flag_penalty` (default 0)."""

    def __init__(
        self,
        name: str,
        *,
        speedup: str | None = None,
        coverage_weight: float | None = None,
        alpha: float | None = None,
        boundary: str | None = None,
        shape_specialized_penalty: float | None = None,
        flag_penalty: float = 0.0,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def speedup_basis(self) -> str: ...
    @property
    def shape_specialized_penalty(self) -> float: ...
    @property
    def flag_penalty(self) -> float: ...
    @property
    def void_reward(self) -> float: ...
    def reward(self, result: ResultLike) -> float | None: ...
    def rewards(self, results: Sequence[ResultLike]) -> npt.NDArray[np.float64]: ...
    def score_columns(
        self,
        kind: Column,
        speedup: Column,
        coverage: Column,
        shape_specialized: Column | None = None,
        flagged: Column | None = None,
    ) -> npt.NDArray[np.float64]:
        """Rewards over columns (uint8 `kind` codes indexing OUTCOME_KINDS, float64 `speedup`
        and `coverage`, bool flags), NumPy or pyarrow; NaN marks an infra_error."""
    def outcomes(self, results: Sequence[ResultLike]) -> dict[str, np.ndarray]: ...

def verify(
    source: str, policy: str = "strict", policy_file: str | PathLike[str] | None = None
) -> dict[str, Any]: ...
def rules_markdown() -> str: ...
def builtin_tasks() -> list[tuple[str, str]]: ...
def default_venv_python() -> str: ...
def prompt_keys(ids: Sequence[str]) -> npt.NDArray[np.uint64]: ...
def advantages(
    prompt: Column | Sequence[str],
    sample: Column,
    turn: Column,
    reward: Column,
    *,
    estimator: str = "trloo",
    gamma: float | None = None,
    normalize_std: bool = True,
    correct: Column | None = None,
    coverage: Column | None = None,
    void: Column | None = None,
    errored: Column | None = None,
    truncated: Column | None = None,
    prs: str | None = None,
    mrs: bool = False,
    train_logprobs: Sequence[npt.NDArray[np.float32]] | None = None,
    rollout_logprobs: Sequence[npt.NDArray[np.float32]] | None = None,
    group_filter: bool = False,
    drop_rejected_from_baseline: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """`{"ret", "advantage", "weight", "reason", "summary"}`: NaN for none; `reason` indexes
    REASONS (-1: kept). A NaN reward marks its turn errored unless `errored` is given. Columns
    are NumPy arrays or pyarrow arrays of the stated dtypes (uint64 prompt keys or prompt-id
    strings, uint32 sample and turn, float64 reward and coverage, bool flags); no casts."""

SYSTEM_PROMPT: str

def first_turn(task_name: str, task_source: str) -> str:
    """The first user message of a multi-turn rollout (as `crucible agent` writes it)."""

def feedback(result: ResultLike, max_tokens: int = 512) -> str:
    """The judge's note on an answer, as `crucible agent` feeds it back (at most `max_tokens`)."""

def no_code_feedback(reason: str) -> str:
    """The note on an answer without code in it."""
