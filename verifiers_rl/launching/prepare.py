"""What a launch writes before any process starts (configs/rl.toml, configs/plan.json, configs/launch.json,
run.json) and what a config puts into the process environment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from verifiers_rl.launching.planning import build_processes
from verifiers_rl.plan.launch import RunPlan, write_plan

LAUNCH_FILE = "launch.json"


def apply_process_settings(cfg: Any) -> None:
    """What a config puts into the process environment (children inherit it): its env files, and who answers
    `import verifiers` (see verifiers_runtime)."""
    from verifiers_rl.config.loading import load_env_files
    from verifiers_rl.verifiers_runtime import SETTING

    load_env_files(cfg.env_file)
    if cfg.verifiers_runtime:
        os.environ[SETTING] = cfg.verifiers_runtime


def prepare_launch(run: Any, plan: RunPlan, options: dict[str, Any], detached: bool) -> Path:
    """Write configs/rl.toml (the config as resolved, never rewritten by the plan), configs/plan.json,
    configs/launch.json and run.json; load env_file into os.environ."""
    from verifiers_rl.config.schema import resolved_dict, write_resolved
    from verifiers_rl.runs import now_iso, write_run

    out = Path(run.output_dir)
    data = resolved_dict(run)
    config_path = write_resolved(run, data=data)
    write_plan(plan, out)
    procs = build_processes(plan, config_path.resolve(), (out / "logs").resolve())
    (out / "configs" / LAUNCH_FILE).write_text(json.dumps(
        {"main": "trainer", "processes": [vars(p) for p in procs]}, indent=2))
    apply_process_settings(run.cfg)
    write_run(out, {
        "name": run.run_name, "output_dir": str(out.resolve()), "pid": os.getpid(), "pid_start": None,
        "status": "starting", "detached": detached, "started_at": now_iso(), "ended_at": None, "exit_code": None,
        "config_files": [str(p) for p in run.config_files], "hosted_format": run.hosted,
        "command": ["vf-rl", *options.get("argv", [])], "children": {}, "config": data, "plan": plan.to_dict(),
    })
    return config_path
