"""One environment of vf-rl's `[env]` / `[[eval.env]]` or vf-eval's command line, classic or verifiers v1, as
`envs.loading.environment_api` decides (`api` = "auto" | "classic" | "v1"). v1 `args` is the v1 env config
(docs/environments.md) plus our `max_tasks`, `warm_programs` and `renderer`. Failures are one line
(`EnvironmentLoadError` / `EnvironmentArgsError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verifiers_rl.envs.loading import (EnvironmentArgsError, EnvironmentLoadError, add_env_path, environment_api,
                                       first_line, is_folder_id, module_name_for)


def load_env_entry(env_id: str, args: dict[str, Any] | None = None, *, api: str = "auto",
                   path: str | Path | None = None, endless_tasks: int | None = None) -> Any:
    """The environment `env_id` with `args`: a classic one, or a `V1Environment` (docstring above);
    `endless_tasks`: how many tasks to take from an endless v1 taskset when `args` sets no `max_tasks` (a training
    run: the tasks its steps draw)."""
    chosen, why = environment_api(env_id, api, path)
    if chosen == "classic":
        from verifiers_rl.envs.loading import load_environment_or_one_line

        add_env_path(path)
        return load_environment_or_one_line(env_id, **(args or {}))
    return load_v1_entry(env_id, dict(args or {}), path, why, endless_tasks)


def load_v1_entry(env_id: str, args: dict[str, Any], path: str | Path | None, why: str,
                  endless_tasks: int | None = None) -> Any:
    """A `V1Environment` for `env_id`, its v1 config `args` (docstring above); `why`: the API decision's reason."""
    from verifiers_rl.v1.environment import load_v1_environment
    from verifiers_rl.v1.loading import require_v1

    try:
        require_v1()
    except ModuleNotFoundError as e:
        raise EnvironmentLoadError(f"environment {env_id!r}: {e}") from None
    max_tasks = args.pop("max_tasks", None)  # ours, not the v1 config's: how many tasks of an endless taskset
    warm = args.pop("warm_programs", True)  # ours: harness programs forked warm (v1/warm_programs.py)
    renderer = args.pop("renderer", None)  # ours: verifiers' TrainClientConfig.renderer (a tool-capable one)
    if renderer is not None and not isinstance(renderer, dict):
        raise EnvironmentArgsError(f"environment {env_id!r}: args.renderer must be a table of verifiers' "
                                   f"renderer config (TrainClientConfig.renderer), got {renderer!r}")
    if not isinstance(warm, bool):
        raise EnvironmentArgsError(f"environment {env_id!r}: args.warm_programs = {warm!r} must be true or false")
    if max_tasks is not None and (isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1):
        raise EnvironmentArgsError(f"environment {env_id!r}: args.max_tasks = {max_tasks!r} must be a whole number "
                                   ">= 1 (the first tasks of the taskset)")
    taskset = args.get("taskset") or {}
    if not isinstance(taskset, dict):
        raise EnvironmentArgsError(f"environment {env_id!r}: args.taskset must be a table of the taskset's config "
                                   f"fields, got {taskset!r}")
    tid = module_name_for(env_id) if is_folder_id(env_id) else env_id.strip()
    if taskset.get("id") not in (None, tid):
        raise EnvironmentArgsError(f"environment {env_id!r}: args.taskset.id = {taskset['id']!r}: the taskset is "
                                   f"the [env] id (vf-eval: the env id); drop args.taskset.id")
    data = {**args, "taskset": {**taskset, "id": tid}}
    if is_folder_id(env_id):
        path = Path(env_id.strip()).expanduser()
    try:
        return load_v1_environment(data, path=path, api_note=why, max_tasks=max_tasks, warm_programs=warm,
                                   renderer=renderer, endless_tasks=endless_tasks)
    except (EnvironmentArgsError, EnvironmentLoadError):
        raise
    except Exception as e:
        errors = getattr(e, "errors", None)
        if callable(errors) and errors():  # pydantic: the first error, at its config key
            err = errors()[0]
            key = ".".join(str(p) for p in err.get("loc", ()))
            raise EnvironmentArgsError(f"environment {env_id!r}: v1 config args.{key}: {err.get('msg')}") from e
        if "exports no Taskset" in str(e) and "Harness" in str(e):  # a harness package given as the env
            raise EnvironmentLoadError(
                f"environment {env_id!r} is a verifiers v1 harness, not a taskset: run a taskset with it as a seat's "
                f"harness (args.agent.harness.id = {module_name_for(env_id)!r})") from e
        raise EnvironmentLoadError(f"environment {env_id!r}: loading it as a verifiers v1 environment failed: "
                                   f"{first_line(e)}") from e
