"""The processes a launch runs, from the plan (`verifiers_rl.plan.RunPlan`): the trainer process(es), started by
the plan's launcher (`python -m verifiers_rl.launch worker <output_dir>/configs/rl.toml`); the trainer starts the
vLLM server itself when the plan says so (logs/inference.log). With several training processes, ranks 1.. log to
logs/trainer/torchrun/ (torchrun's --log-dir / --redirects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from verifiers_rl.plan.launch import RANK_LOGS, RunPlan


@dataclass
class Process:
    name: str
    cmd: list[str]
    env: dict[str, str] = field(default_factory=dict)


def rank_log_args(world_size: int, logs_dir: Path | None) -> list[str]:
    """torchrun's per-rank log options: ranks 1.. write to files of their own under `logs/trainer/torchrun/`; rank 0
    keeps the console (torchrun's --tee would prefix every line and cut the live progress bar into lines)."""
    if world_size <= 1 or logs_dir is None:
        return []
    return ["--log-dir", str(logs_dir / RANK_LOGS), "--redirects", ",".join(f"{r}:3" for r in range(1, world_size))]


def rank_stderr_logs(logs_dir: Path, since: float = 0.0) -> list[Path]:
    """The ranks' non-empty stderr files written at or after `since` (a launch's start: an earlier run of the output
    dir left its own), where a rank other than 0 left its traceback."""
    root = logs_dir / RANK_LOGS
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("*/attempt_*/*/stderr.log")
                  if (st := p.stat()).st_size and st.st_mtime >= since)


def build_processes(plan: RunPlan, config_path: Path, logs_dir: Path | None = None) -> list[Process]:
    """The trainer process (it starts the vLLM server itself when one is needed); with several training processes
    and `logs_dir`, each rank but 0 logs to its own files there (`rank_log_args`)."""
    worker = ["-m", "verifiers_rl.launch", "worker", str(config_path)]
    launcher = [*plan.launcher, *rank_log_args(plan.world_size, logs_dir)]
    return [Process("trainer", [*launcher, *worker], dict(plan.trainer_env))]
