"""What `vf-rl @ config.toml` launches (the pieces live in verifiers_rl.launching, whose __init__ lists them): the
plan (`plan_launch`), the files a launch writes (`prepare_launch`), the supervisor (`supervise`) and the trainer
process (`worker_main`, which runs `launching.pipeline.run`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from verifiers_rl.config.loading import ConfigError
from verifiers_rl.launching.pipeline import run
from verifiers_rl.launching.planning import Process, build_processes
from verifiers_rl.launching.prepare import LAUNCH_FILE, apply_process_settings, prepare_launch
from verifiers_rl.launching.stats import paired_gain
from verifiers_rl.launching.supervisor import STOP_GRACE_S, start_detached, supervise
from verifiers_rl.plan.hardware import gpu_count
from verifiers_rl.plan.launch import PLAN_FILE, RunPlan, plan_launch, read_plan

__all__ = [
    "LAUNCH_FILE", "PLAN_FILE", "STOP_GRACE_S", "Process", "RunPlan", "apply_process_settings", "build_processes",
    "gpu_count", "main", "paired_gain", "plan_launch", "prepare_launch", "run", "start_detached", "supervise",
    "worker_main",
]


def worker_main(config_path: str) -> int:
    """The trainer process: `python -m verifiers_rl.launch worker <output_dir>/configs/rl.toml`, on the plan written
    beside it (configs/plan.json)."""
    from rich.console import Console

    from verifiers_rl.config.schema import load_run
    from verifiers_rl.startup_gc import paused_gc

    try:
        with paused_gc():  # the RLConfig imports transformers: no collection over it until it is loaded
            resolved, _ = load_run(["@", config_path])
        plan_path = Path(config_path).parent / PLAN_FILE
        # no plan.json: a config from `vf-rl --dry-run` started by hand (torchrun on several machines,
        # docs/multi-node.md): the trainer plans from its RLConfig, as in a script
        plan = read_plan(plan_path) if plan_path.exists() else None
        apply_process_settings(resolved.cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from verifiers_rl.envs.loading import EnvironmentLoadError
    from verifiers_rl.verbosity import debug
    from verifiers_rl.errors import ModelNotFoundError, ModelServerError, NetworkError, TrainingStalledError
    from verifiers_rl.rubrics.rubric import RubricSetupError

    from verifiers_rl.env_output import route_env_output

    rank = int(os.environ.get("RANK", "0"))
    route_env_output(Path(resolved.output_dir) / "logs", rank)  # environment prints and logs: logs/env.log
    try:
        # rank 0 speaks for all; with a plan the RLConfig was built with the env files already loaded, so it is reused
        run(resolved.cfg, resolved.rl_kwargs, Console(quiet=rank != 0), plan, resolved.args if plan else None)
    except (RubricSetupError, ConfigError) as e:  # a judge that cannot run; a setting the world/transformers refuses
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    except (ModelServerError, EnvironmentLoadError, TrainingStalledError, NetworkError, ModelNotFoundError) as e:
        if debug():
            import traceback

            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr, flush=True)  # its message says why (and where a server's log is)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "worker":
        return worker_main(argv[1])
    if len(argv) == 2 and argv[0] == "supervise":
        return supervise(argv[1], echo=False)
    print("usage: python -m verifiers_rl.launch worker CONFIG.toml | supervise OUTPUT_DIR  (internal; use vf-rl)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
