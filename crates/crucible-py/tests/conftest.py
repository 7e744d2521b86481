"""Shared fixtures: the repository, the CLI binary and a CPU judge (the real in-process judge)."""

import os
import shutil
from pathlib import Path

import crucible
import pytest

REPO = Path(__file__).resolve().parents[3]
# scripts/test-python's second run of the verl tests, with verl 0.9.1 on PYTHONPATH (an overlay of
# crates/crucible-py/requirements-verl.lock): the tests then assert the real verl classes are used.
REAL_VERL = os.environ.get("CRUCIBLE_REAL_VERL") == "1"


def solution(name: str, kind: str = "solutions") -> str:
    return (REPO / "examples" / kind / f"{name}.py").read_text()


@pytest.fixture(scope="session")
def cli() -> str:
    """The `crucible` binary (CRUCIBLE_BIN, else on PATH); tests comparing with it skip
    without one, saying so."""
    path = os.environ.get("CRUCIBLE_BIN") or shutil.which("crucible")
    if not path:
        pytest.skip("no crucible CLI binary: set CRUCIBLE_BIN to compare Python with the CLI")
    return path


@pytest.fixture(scope="session")
def judge():
    return crucible.make_judge(device="cpu", trials=2, seed=7)
