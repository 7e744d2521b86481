"""The verifiers plugin ``crucible-kernels`` (verifiers finds a plugin id's package by name):
the taskset, multi-turn env and in-process chat harness of
:mod:`crucible.integrations.verifiers_env`. Importing it imports verifiers."""

from crucible.integrations.verifiers_env import (
    KernelChatHarness,
    KernelEnv,
    KernelTaskset,
    load_environment,
)

__all__ = ["KernelChatHarness", "KernelEnv", "KernelTaskset", "load_environment"]
