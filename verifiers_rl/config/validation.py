"""Checks of a parsed `RunConfig` across its sections (GPUs, backends, the mode and its teacher, eval), the RLConfig
kwargs it gives, and the environments it names (config/resolution.py parses the raw config)."""

from __future__ import annotations

from typing import Any

from verifiers_rl.config.hf_fields import scheduler_problem
from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.sections import TEACHER_ARGS, RunConfig, close_match
from verifiers_rl.models.tiny import shape_problem
from verifiers_rl.plan.gpus import gpu_ids
from verifiers_rl.plan.inference import STARTED_SERVER_KEYS


def completion_format_problem(fmt: str) -> str | None:
    """What `fmt.format(answer=...)` (the SFT rows of [warmup] and vf-sft's env data) would fail on or ignore, as a
    line; None when it places the answer."""
    try:
        probe = fmt.format(answer="\x00")
    except (KeyError, IndexError, ValueError) as e:
        return (f"{fmt!r} has a field other than {{answer}} ({type(e).__name__}: {e}); write a literal brace "
                "twice: {{ or }}")
    if "\x00" not in probe:
        return f"{fmt!r} must contain {{answer}}"
    return None


def cross_checks(cfg: RunConfig) -> None:
    """Rules across sections, after each section's own (config/resolution.py validate_run_config)."""
    gpu_ids(cfg.inference.gpus, "inference.gpus")
    gpu_ids(cfg.trainer.gpus, "trainer.gpus")
    inf, targs = cfg.inference, cfg.trainer.args
    if inf.backend == "local" and inf.urls:
        raise ConfigError("inference.urls: set, but inference.backend is 'local'; drop urls or use backend 'vllm'")
    tb = targs.get("inference_backend")
    if tb not in (None, "auto") and inf.backend != "auto" and tb != inf.backend:
        raise ConfigError(f"trainer.args.inference_backend: {tb!r} conflicts with inference.backend="
                          f"{inf.backend!r}; set only [inference] backend")
    tu = targs.get("vllm_server_urls")
    if tu is not None and inf.urls and (tu if isinstance(tu, list) else [tu]) != inf.urls:
        raise ConfigError("trainer.args.vllm_server_urls: conflicts with inference.urls; set only inference.urls")
    for_started = next((k for k in STARTED_SERVER_KEYS if getattr(inf, k)), None)
    if for_started and (inf.urls or tu):
        raise ConfigError(f"inference.{for_started}: is for the server vf-rl starts, and with inference.urls none is "
                          "started (those servers keep the flags they were started with); drop it, or drop urls")
    _check_mode(cfg)
    tm = cfg.tiny_model
    problem = tm and shape_problem(tm.layers, tm.hidden, tm.heads, tm.kv_heads, tm.intermediate)
    if problem:
        raise ConfigError(f"tiny_model.{problem[0]}: {problem[1]}")
    problem = cfg.warmup and completion_format_problem(cfg.warmup.completion_format)
    if problem:
        raise ConfigError(f"warmup.completion_format: {problem}")
    problem = cfg.warmup and scheduler_problem(cfg.warmup.lr_scheduler_type)
    if problem:
        raise ConfigError(f"warmup.lr_scheduler_type: {problem}")
    ev = cfg.eval
    if ev is not None:
        if ev.interval is not None and ev.interval < 1:
            raise ConfigError(f"eval.interval: {ev.interval} must be >= 1 (or \"None\": never)")
        if ev.temperature is not None and ev.temperature < 0:
            raise ConfigError(f"eval.temperature: {ev.temperature} must be >= 0 (0: greedy)")
        for key, n in [("eval", ev.num_examples), *((f"eval.env.{i}", e.num_examples) for i, e in enumerate(ev.env))]:
            if n is not None and (n == 0 or n < -1):
                raise ConfigError(f"{key}.num_examples: {n} must be >= 1 or -1 (all)")
        names = [e.name or e.id.split("/")[-1] for e in ev.env]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise ConfigError(f"eval.env: two eval envs are named {dup!r}; give them distinct `name`s")


def mode_settings(cfg: RunConfig) -> dict[str, Any]:
    """The RLConfig mode fields the config sets: top-level training_mode and [teacher], or the same fields in
    [trainer.args] (one place per key)."""
    targs = cfg.trainer.args
    out = {k: targs[k] for k in ("training_mode", *TEACHER_ARGS.values()) if targs.get(k) is not None}
    top = {"training_mode": cfg.training_mode} if cfg.training_mode is not None else {}
    if cfg.teacher is not None:
        top.update({arg: v for key, arg in TEACHER_ARGS.items() if (v := getattr(cfg.teacher, key)) is not None})
    for key in top:
        if key in out:
            where = "training_mode" if key == "training_mode" else "[teacher] " + next(
                k for k, v in TEACHER_ARGS.items() if v == key)
            raise ConfigError(f"trainer.args.{key}: also set as {where}; set it in one place")
    return {**out, **top}


def _check_mode(cfg: RunConfig) -> None:
    """training_mode and its teacher: RLConfig's own rule (trainer/modes.py), its keys named as the config spells
    them ([teacher] model → teacher.model)."""
    from types import SimpleNamespace

    from verifiers_rl.trainer.modes import mode_problem

    m = mode_settings(cfg)
    spelled = {arg: f"teacher.{key}" for key, arg in TEACHER_ARGS.items()}
    c = SimpleNamespace(training_mode=m.get("training_mode", "rl"), beta=0, online_difficulty_filtering=False,
                        filter_zero_advantages=False,
                        **{arg: m.get(arg) for arg in TEACHER_ARGS.values()})
    problem = mode_problem(c, lambda f: spelled.get(f, f))
    if problem:
        raise ConfigError(problem[1])


def teacher_problem(cfg: RunConfig) -> str | None:
    """Before launch, one line or None: the teacher server answers, or an in-process teacher exists (and for opd has
    the policy's vocabulary, when both are model dirs on disk)."""
    import os

    m = mode_settings(cfg)
    mode, url, model = m.get("training_mode", "rl"), m.get("teacher_url"), m.get("teacher_model")
    if mode == "rl":
        return None
    if url is not None:
        from verifiers_rl.network import check_server

        problem = check_server(url)
        return f"teacher.url: {problem}" if problem else None
    built = {str(s) for s in (cfg.tiny_model and cfg.tiny_model.path, cfg.warmup and cfg.warmup.output_dir) if s}
    if model is not None and str(model) not in built:  # a model the launch builds is not there yet
        from verifiers_rl.errors import ModelNotFoundError, NetworkError
        from verifiers_rl.network import check_model_reachable

        try:
            check_model_reachable(str(model))
        except (ModelNotFoundError, NetworkError) as e:
            return f"teacher.{e}"  # "model '<name>': ..." as the policy's, named as the config spells it
    if mode != "opd" or not (cfg.model and model and os.path.isdir(cfg.model) and os.path.isdir(model)):
        return None  # a policy built at launch (tiny model, warm-up) is checked when the trainer loads the teacher
    from transformers import AutoTokenizer

    from verifiers_rl.trainer.teacher import vocab_problem

    problem = vocab_problem(AutoTokenizer.from_pretrained(cfg.model), AutoTokenizer.from_pretrained(model), model)
    return problem.replace("teacher_model:", "teacher.model:", 1) if problem else None


def rl_config_kwargs(cfg: RunConfig, output_dir: str | None = None) -> dict[str, Any]:
    """RLConfig's kwargs: `[trainer.args]`, plus what [inference] and the mode's sections pass through (checked
    against RLConfig's fields where they are built: `trainer_args.build_rl_config`)."""
    kwargs = dict(cfg.trainer.args)
    if output_dir is not None:
        kwargs["output_dir"] = output_dir
    if cfg.inference.urls:
        kwargs["vllm_server_urls"] = list(cfg.inference.urls)
    if cfg.inference.backend != "auto":
        kwargs["inference_backend"] = cfg.inference.backend
    kwargs.update(mode_settings(cfg))
    return kwargs


# --- environments ----------------------------------------------------------------------------------------------------


def check_env(key: str, env_id: str, env_args: dict[str, Any], api: str = "auto", path: str | None = None) -> str:
    """The env module imports and its load_environment() takes these args (nothing is loaded); a v1 environment:
    verifiers 0.4 and its taskset are installed (its config is checked when it loads). Returns the API it speaks."""
    import inspect

    from verifiers_rl.envs.loading import (EnvironmentLoadError, EnvironmentNotFound, environment_api, first_line,
                                           import_env_module, v1_module, v1_module_name)
    from verifiers_rl.verifiers_runtime import V1_INSTALL, V1_RANGE, v1_version

    try:
        v1 = environment_api(env_id, api, path)[0] == "v1"
        module = None if v1 else import_env_module(env_id)
    except (EnvironmentNotFound, EnvironmentLoadError) as e:
        raise ConfigError(f"{key}.id: {e}") from None
    except Exception as e:
        raise ConfigError(f"{key}.id: importing environment {env_id!r} failed: {first_line(e)}") from None
    if module is None:
        if v1_version() is None:
            raise ConfigError(f"{key}.api: a verifiers v1 environment needs verifiers{V1_RANGE}: install it with "
                              f"{V1_INSTALL}")
        if v1_module(env_id) is None:  # before launch, not once the trainer has loaded the model
            raise ConfigError(f"{key}.id: v1 taskset {env_id!r} is not installed (no module "
                              f"{v1_module_name(env_id)!r}, nor one in verifiers): install its package, or set path "
                              "to the folder holding it")
        return "v1"
    loader = getattr(module, "load_environment", None)
    if loader is None:
        raise ConfigError(f"{key}.id: module {module.__name__!r} has no load_environment() function")
    try:
        params = inspect.signature(loader).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return "classic"
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return "classic"
    for k in env_args:
        if k not in params:
            close = close_match(k, list(params))
            hint = f" (did you mean {key}.args.{close}?)" if close else f"; it takes: {', '.join(params) or '(none)'}"
            raise ConfigError(f"{key}.args.{k}: unknown argument of {env_id!r}'s load_environment(){hint}")
    return "classic"


def check_envs(cfg: RunConfig) -> None:
    """Each environment loads as the trainer will load it: with the config's verifiers_runtime, which the launch
    puts into the process environment (launching/prepare.py apply_process_settings), in force here too."""
    import os

    from verifiers_rl.verifiers_runtime import SETTING

    before = os.environ.get(SETTING)
    if cfg.verifiers_runtime:
        os.environ[SETTING] = cfg.verifiers_runtime
    try:
        _check_envs(cfg)
    finally:
        if before is None:
            os.environ.pop(SETTING, None)
        else:
            os.environ[SETTING] = before


def _check_envs(cfg: RunConfig) -> None:
    keys = ["env" if not isinstance(cfg.env, list) else f"env.{i}" for i in range(len(cfg.envs))]
    apis = [check_env(key, e.id, e.args, e.api, e.path) for key, e in zip(keys, cfg.envs)]
    if len(set(apis)) > 1:  # several [[env]] train as one group: envs.EnvGroup (classic) or v1.V1EnvGroup
        raise ConfigError(f"{keys[apis.index('v1')]}.api: a verifiers v1 environment among classic ones: several "
                          "[[env]] train together when all are classic or all are v1; give the v1 ones a run of "
                          "their own")
    if cfg.eval is not None:
        for i, e in enumerate(cfg.eval.env):
            check_env(f"eval.env.{i}", e.id, e.args, e.api, e.path)
