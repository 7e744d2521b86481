"""Trainer integrations: ``trl``, ``verl``, ``verl_agent``, ``verifiers_env``, ``openenv_env``. Each is a small
module over :class:`crucible.scoring.KernelScorer` and imports its trainer lazily."""
