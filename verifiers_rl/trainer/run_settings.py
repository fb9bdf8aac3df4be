"""An RLConfig's run name, output dir and W&B table. W&B's environment variables are set only when training starts
(`export_wandb_env`), so a config can be built, checked or printed without side effects.
"""


from __future__ import annotations

import os
import time
from typing import Any

WANDB_KEYS = ("project", "entity", "name")


def report_list(report_to: Any) -> list[str]:
    """`report_to` (None, a name, or names) as a list of names."""
    return [report_to] if isinstance(report_to, str) else list(report_to or [])


def wandb_problem(wandb: Any) -> str | None:
    """One line saying what is wrong with a `wandb` table, or None."""
    if wandb is None:
        return None
    if not isinstance(wandb, dict):
        return f"wandb must be a table with keys {', '.join(WANDB_KEYS)}, got {type(wandb).__name__}"
    unknown = sorted(set(wandb) - set(WANDB_KEYS))
    if unknown:
        return f"wandb has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(WANDB_KEYS)}"
    return None


def resolve_run_settings(cfg: Any) -> None:
    """run_name (wandb.name, else the output dir's name, else a timestamp), output_dir (outputs/<run_name>) and,
    with a wandb table, report_to including wandb (the user's other integrations kept)."""
    if cfg.run_name is None:
        if cfg.wandb and cfg.wandb.get("name"):
            cfg.run_name = str(cfg.wandb["name"])
        elif cfg.output_dir:
            cfg.run_name = os.path.basename(os.path.normpath(os.path.expanduser(cfg.output_dir)))
        else:
            cfg.run_name = "vf-rl-" + time.strftime("%Y%m%d-%H%M%S")
    if cfg.output_dir is None:
        cfg.output_dir = os.path.join("outputs", cfg.run_name)
    if cfg.wandb is None:
        return
    if cfg.report_to in (None, "none", ["none"], []):
        cfg.report_to = ["wandb"]
    else:
        current = report_list(cfg.report_to)
        if "all" not in current and "wandb" not in current:
            current.append("wandb")
        cfg.report_to = current


def export_wandb_env(cfg: Any) -> None:
    """At train start: transformers' WandbCallback reads the project from the environment, and wandb the entity."""
    wandb = cfg.wandb or {}
    if wandb.get("project"):
        os.environ["WANDB_PROJECT"] = str(wandb["project"])
    if wandb.get("entity"):
        os.environ["WANDB_ENTITY"] = str(wandb["entity"])


def check_wandb_reachable(report_to: Any, key: str, need_key: bool = False) -> None:
    """NetworkError (one line) when `report_to` logs to W&B online and its server cannot be reached, before
    wandb.init retries for some 100 s; `need_key`: also when no key is set (a command, which wandb cannot prompt)."""
    from verifiers_rl.errors import NetworkError
    from verifiers_rl.network import wandb_needs_key, wandb_unreachable

    if "wandb" not in report_list(report_to):
        return
    offline = "set WANDB_MODE=offline to log offline (`wandb sync` later), or leave 'wandb' out"
    if need_key and wandb_needs_key(dict(os.environ)):
        raise NetworkError(f"{key} includes 'wandb', but no W&B API key is set here (WANDB_API_KEY, `wandb login`); "
                           f"set one, {offline}")
    why = wandb_unreachable()
    if why:
        raise NetworkError(f"{key} includes 'wandb', but {why}; {offline}")
