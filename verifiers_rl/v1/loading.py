"""A verifiers v1 environment from a taskset id or an `[env]` config (`vf.resolve_env_config` → `vf.load_environment`),
ready for a local trainer. Each seat defaults to the `subprocess` runtime and the `null` harness, not verifiers' Prime
sandbox (docs/environments.md, "Defaults that differ from verifiers'").
"""


from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

# v1_available(): the installed verifiers version when it has the v1 API this adapter targets (>=0.4,<0.5), else None
from verifiers_rl.verifiers_runtime import v1_version as v1_available

SUBPROCESS = {"type": "subprocess"}

INSTALL = "install it with `uv sync --extra verifiers-v1` (pip: `pip install 'verifiers-rl[verifiers-v1]'`)"


_checked: Any = None  # the verifiers.v1 module whose version was checked (the check reads package metadata: ms)


def require_v1() -> Any:
    """`verifiers.v1`, or one line saying what to install."""
    global _checked
    vf = sys.modules.get("verifiers.v1")
    if vf is None or vf is not _checked:
        if v1_available() is None:
            raise ModuleNotFoundError(f"a verifiers v1 environment needs verifiers>=0.4,<0.5: {INSTALL}")
        vf = _checked = importlib.import_module("verifiers.v1")
    root = sys.modules.get("verifiers")
    if root is not None and getattr(root, "v1", None) is not vf:
        # Our classic root's `v1` attribute is verifiers_rl.v1 once imported, and `import verifiers.v1 as vf` reads
        # that attribute: point it at the real one (modules here import verifiers_rl.v1.* by name).
        root.v1 = vf
    return vf


def agent_seats(cfg: Any, vf: Any) -> list[str]:
    """The config's agent seats: its fields holding an `AgentConfig` (`agent`, or a multi-agent env's roles)."""
    return [name for name in type(cfg).model_fields if isinstance(getattr(cfg, name, None), vf.AgentConfig)]


def resolve_config(env: str | dict, taskset_args: dict | None = None) -> Any:
    """verifiers' EnvConfig for `env` (a taskset id, plus its config fields in `taskset_args`, or the raw `[env]`
    config dict), every seat defaulted to the subprocess runtime and the null harness."""
    vf = require_v1()
    data = {"taskset": {"id": env}} if isinstance(env, str) else {k: v for k, v in env.items()}
    if taskset_args:
        data["taskset"] = {**dict(data.get("taskset") or {}), **taskset_args}
    if not (data.get("taskset") or {}).get("id"):
        raise ValueError("a v1 environment config needs taskset.id (the installed taskset package)")
    cfg = vf.resolve_env_config(data)
    out = cfg.model_dump(mode="json", exclude_unset=True)
    for seat in agent_seats(cfg, vf):
        given = dict(data.get(seat) or {})
        seat_data = dict(out.get(seat) or {})
        if "runtime" not in given:
            seat_data["runtime"] = dict(SUBPROCESS)
        if "harness" not in given and getattr(getattr(cfg, seat), "harness", None) is None:
            seat_data["harness"] = {"id": "null"}
        out[seat] = seat_data
    return vf.resolve_env_config(out)


def load_env(env: str | dict, taskset_args: dict | None = None, path: str | Path | None = None) -> Any:
    """(verifiers' Env, its EnvConfig) for `env`; `path`: a directory put on sys.path and PYTHONPATH first."""
    from verifiers_rl.envs.loading import add_env_path

    add_env_path(path)
    vf = require_v1()
    cfg = resolve_config(env, taskset_args)
    return vf.load_environment(cfg), cfg
