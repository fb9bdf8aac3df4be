"""The processes a launch runs, from the plan (`verifiers_rl.plan.RunPlan`): the trainer process(es), started by
the plan's launcher (`python -m verifiers_rl.launch worker <output_dir>/configs/rl.toml`); the trainer starts the
vLLM server itself when the plan says so (logs/inference.log)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from verifiers_rl.plan.launch import RunPlan


@dataclass
class Process:
    name: str
    cmd: list[str]
    env: dict[str, str] = field(default_factory=dict)


def build_processes(plan: RunPlan, config_path: Path) -> list[Process]:
    """The trainer process (it starts the vLLM server itself when one is needed)."""
    worker = ["-m", "verifiers_rl.launch", "worker", str(config_path)]
    return [Process("trainer", [*plan.launcher, *worker], dict(plan.trainer_env))]
