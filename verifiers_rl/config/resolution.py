"""A raw `vf-rl` config → a `ResolvedRun`, in one place: the command line's shorthands and renamed keys, the
format (a hosted one is translated), the sections checked, and the RLConfig built from them. Reading files and the
command line is config/loading.py; checks across sections and of the environments, config/validation.py; the
resolved config as TOML, config/resolved_toml.py."""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from verifiers_rl.config import hosted as hosted_mod
from verifiers_rl.config import prime_train
from verifiers_rl.config.loading import ConfigError, deep_merge, load_env_files, parse_args, pop_path, set_path
from verifiers_rl.config.sections import OPTIONAL_SECTIONS, EnvSection, RunConfig, close_match, one_line
from verifiers_rl.config.trainer_args import preview_class, rl_field_info
from verifiers_rl.config.validation import check_envs, cross_checks, rl_config_kwargs
from verifiers_rl.plan.gpus import asked_world_size, batch_split_problem, several_processes_problem
from verifiers_rl.trainer.typed_table import DEPRECATED_KEYS
from verifiers_rl.value_check import type_error


# --- the command line's shorthands and renamed keys, the format ----------------------------------------------------

# old dotted key → new dotted key: TrainingArguments names transformers 5 removed (configs written for transformers
# 4 still carry them), and the top-level spellings of loss and estimator keys (RLConfig warns of them too).
RENAMED: dict[str, str] = {
    "trainer.args.no_cuda": "trainer.args.use_cpu",
    "trainer.args.evaluation_strategy": "trainer.args.eval_strategy",
    "trainer.args.push_to_hub_token": "trainer.args.hub_token",
    **{f"trainer.args.{k}": f"trainer.args.{section}.{k}" for k, section in DEPRECATED_KEYS.items()},
}


def _wandb_value(value: Any) -> Any:
    """A bare `--wandb` is W&B with its defaults, `--no-wandb` none."""
    return {} if value is True else None if value is False else value


def normalize_wandb(raw: dict[str, Any], hosted: bool) -> dict[str, Any]:
    """`wandb` at the top of a vf-rl config (the command line's `--wandb ...`) goes to trainer.args.wandb; a bare
    flag becomes a table (on) or None (off), in either format. `--no-wandb` also drops 'wandb' from report_to."""
    raw = dict(raw)
    if hosted:
        if "wandb" in raw:
            raw["wandb"] = _wandb_value(raw["wandb"])
        return raw
    if not isinstance(raw.get("trainer", {}), dict) or not isinstance((raw.get("trainer") or {}).get("args", {}), dict):
        return raw  # the schema reports the type error
    trainer = dict(raw.get("trainer") or {})
    args = dict(trainer.get("args") or {})
    if "wandb" in raw:
        top = _wandb_value(raw.pop("wandb"))
        inner = args.get("wandb")
        args["wandb"] = deep_merge(inner, top) if isinstance(inner, dict) and isinstance(top, dict) else top
    if "wandb" not in args:
        return raw
    args["wandb"] = _wandb_value(args["wandb"])
    if args["wandb"] is None:
        report = args.get("report_to")
        if report == "wandb":
            args["report_to"] = "none"
        elif isinstance(report, list):
            args["report_to"] = [r for r in report if r != "wandb"] or "none"
    raw["trainer"] = {**trainer, "args": args}
    return raw


def apply_renames(raw: dict[str, Any]) -> dict[str, Any]:
    """Each deprecated key moves to its new name with one warning line; both given is an error."""
    raw = copy.deepcopy(raw)
    for old, new in RENAMED.items():
        found, value = pop_path(raw, old)
        if not found:
            continue
        if pop_path(raw, new, keep=True)[0]:
            raise ConfigError(f"{old}: renamed {new}, which is set too; keep only {new}")
        print(f"warning: {old} is deprecated: it is now {new} (set that instead)", file=sys.stderr, flush=True)
        set_path(raw, new, value)
    return raw


HOSTED_ONLY_KEYS = ("name", "max_steps", "batch_size", "rollouts_per_example", "learning_rate", "lora_alpha",
                    "oversampling_factor", "max_async_level", "trajectory_strategy", "sampling", "val", "buffer",
                    "wandb")
VF_RL_ONLY_KEYS = ("trainer", "inference", "tiny_model", "warmup")


def is_prime_sft(raw: dict[str, Any]) -> bool:
    """prime-rl's SFT config (config/prime_sft.py): a `[model]` table (vf-sft and vf-rl name the model as a string)
    without prime-rl's RL `[orchestrator]`; an error for prime-rl's orchestrator config, which has that shape too."""
    if not isinstance(raw.get("model"), dict) or "orchestrator" in raw:
        return False
    found = "train" if isinstance(raw.get("train"), dict) else "group_size" if "group_size" in raw else None
    if found:  # top-level keys only prime-rl's orchestrator config has (a run split into trainer, orchestrator, ...)
        raise ConfigError(f"{found}: a key of prime-rl's orchestrator config, one part of a run split into trainer, "
                          "orchestrator and inference; vf-rl takes the whole run in one file (prime-rl's rl config): "
                          "put this file's keys under [orchestrator], the trainer's under [trainer]")
    return True


def config_format(raw: dict[str, Any]) -> str:
    """'prime-train' (prime-rl's RL config: an `[orchestrator]` table), 'prime-rl' (the retired hosted format) or
    'vf-rl'; an error for prime-rl's SFT config, or one that mixes the retired format with vf-rl's."""
    if isinstance(raw.get("orchestrator"), dict):
        return "prime-train"
    if is_prime_sft(raw):
        raise ConfigError("model: a table, without [orchestrator]: this is prime-rl's SFT config, which vf-sft trains "
                          "(vf-sft @ the same file); vf-rl trains RL")
    hosted_keys = [k for k in HOSTED_ONLY_KEYS if k in raw]
    env = raw.get("env")
    hosted_env = isinstance(env, list) and all(isinstance(e, dict) and "ratio" not in e for e in env)
    vf_keys = [k for k in VF_RL_ONLY_KEYS if k in raw]
    if hosted_keys and vf_keys:
        k = hosted_keys[0]
        where = {"name": "trainer.args.run_name", "sampling": "trainer.args.max_tokens / temperature",
                 "val": "trainer.args.eval_steps", "wandb": "trainer.args.wandb", "buffer": "trainer.args"}.get(
                     k, f"trainer.args.{k}")
        raise ConfigError(f"{k}: a hosted-format key in a vf-rl config (it has [{vf_keys[0]}]); use one format "
                          f"(in vf-rl: {where})")
    return "prime-rl" if hosted_keys or (hosted_env and not vf_keys) else "vf-rl"


def compose(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A merged config with the command line's shorthands applied, and its format (`config_format`, decided once,
    `wandb` aside: the command line's --wandb fits either format)."""
    raw = apply_renames(raw)
    fmt = config_format({k: v for k, v in raw.items() if k != "wandb"})
    return normalize_wandb(raw, fmt != "vf-rl"), fmt


# --- the sections and RLConfig --------------------------------------------------------------------------------------


def _normalize_sections(raw: dict[str, Any]) -> dict[str, Any]:
    """Bare `--eval` / `--no-eval` on the command line: true enables an optional section with its defaults."""
    flags = {name: {} if raw[name] else None for name in OPTIONAL_SECTIONS if isinstance(raw.get(name), bool)}
    return {**raw, **flags}


def _check_env_list(raw: dict[str, Any]) -> dict[str, Any]:
    env = raw.get("env")
    if not isinstance(env, list):
        return raw
    for i, item in enumerate(env):
        try:
            EnvSection.model_validate(item)
        except ValidationError as e:
            raise ConfigError(one_line(e, EnvSection, prefix=f"env.{i}.")) from None
    if len(env) == 0:
        raise ConfigError("env: required key is missing (an [env] table or at least one [[env]])")
    names = [e.get("name") or str(e.get("id")).split("/")[-1] for e in env]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ConfigError(f"env: two [[env]] entries are named {dup!r}; give them distinct `name`s")
    return raw


def validate_run_config(raw: dict[str, Any]) -> RunConfig:
    raw = _check_env_list(_normalize_sections(raw))
    if isinstance(raw.get("env_file"), str):
        raw = {**raw, "env_file": [raw["env_file"]]}
    sections = list(RunConfig.model_fields)
    for k in raw:  # a top-level key that is an RLConfig field, and no section's misspelling, belongs in [trainer.args]
        if k not in sections and not close_match(k, sections) and k in rl_field_info().types:
            raise ConfigError(f"{k}: unknown key (did you mean trainer.args.{k}?)")
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(one_line(e)) from None
    if cfg.model is None and cfg.warmup is None and cfg.tiny_model is None:
        raise ConfigError("model: required key is missing (a model dir, hub id or PEFT adapter dir)")
    cross_checks(cfg)
    return cfg


def check_trainer_args(args: dict[str, Any]) -> None:
    """Unknown keys (did you mean) and wrong types in [trainer.args], before RLConfig sees them."""
    info = rl_field_info()
    for k, v in args.items():
        if k in ("loss", "advantage"):
            continue  # typed tables: their type, keys and values are checked where they are built (typed_table)
        if k not in info.types:
            from verifiers_rl.trainer.trl_names import TRL_NAMES

            close = close_match(k, info.own) or close_match(k, info.names)
            hint = (f" (TRL's GRPOConfig name: set {TRL_NAMES[k]})" if k in TRL_NAMES
                    else f" (did you mean trainer.args.{close}?)" if close else "")
            raise ConfigError(f"trainer.args.{k}: unknown key{hint}")
        bad = type_error(v, info.types[k])
        if bad:
            raise ConfigError(f"trainer.args.{k}: {bad}")


def build_rl_config(kwargs: dict[str, Any], *, preview: bool = False) -> Any:
    """RLConfig(**kwargs) after `check_trainer_args`; a `SettingError` becomes `trainer.args.<key>: ...`, anything
    else (transformers' checks) `trainer.args: ...`. `preview`: without transformers (`preview_class`)."""
    from verifiers_rl.errors import SettingError

    check_trainer_args(kwargs)
    cls = preview_class() if preview else None
    if cls is None:
        from verifiers_rl.trainer.config import RLConfig as cls
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except SettingError as e:
        raise ConfigError(f"trainer.args.{e.key}: {e}") from None
    except Exception as e:  # transformers' TrainingArguments checks: they name the flags in their message
        lines = str(e).strip().splitlines()
        msg = lines[0] if lines else type(e).__name__
        if not isinstance(e, (ValueError, TypeError)):
            msg = f"{type(e).__name__}: {msg}"
        raise ConfigError(f"trainer.args: {msg}") from None


# --- resolution ------------------------------------------------------------------------------------------------------


@dataclass
class ResolvedRun:
    """A validated run: the schema object, RLConfig kwargs, the constructed RLConfig, and where it lives."""
    cfg: RunConfig
    rl_kwargs: dict[str, Any]
    args: Any
    hosted: bool = False
    origin: dict[str, str] = field(default_factory=dict)
    config_files: list[Path] = field(default_factory=list)

    @property
    def output_dir(self) -> str:
        return str(self.args.output_dir)

    @property
    def run_name(self) -> str:
        return str(self.args.run_name)


def _check_world(cfg: RunConfig, args: Any) -> None:
    """The batch splits evenly over the training processes asked for, which support the settings (each rank checks
    again once torch.distributed is up)."""
    world, key = asked_world_size(cfg.trainer)
    problem = batch_split_problem(args.batch_size, args.micro_batch_size, world, key) if world > 1 else None
    if problem:
        raise ConfigError(f"trainer.args.batch_size: {problem}")
    problem = several_processes_problem(args) if world > 1 else None
    if problem:
        raise ConfigError(f"trainer.args.{problem}")


def _check_report_to(args: Any) -> None:
    """report_to names integrations transformers has, whose packages are installed: its Trainer refuses the others
    only once the model and the data have loaded, with a traceback."""
    from verifiers_rl.config.hf_fields import report_to_problem

    problem = report_to_problem(args.report_to)
    if problem:  # W&B turned on by a wandb table (--wandb, a hosted [wandb]) is named by that table
        key = "wandb" if args.wandb is not None and problem.startswith("'wandb' needs") else "report_to"
        raise ConfigError(f"trainer.args.{key}: {problem}")


def _check_resume(args: Any) -> None:
    """resume_from_checkpoint (True / a step / a path) names a complete checkpoint, before anything launches."""
    from verifiers_rl.trainer.checkpoints import resolve_resume

    try:
        resolve_resume(args.output_dir, args.resume_from_checkpoint)
    except ValueError as e:
        raise ConfigError(f"trainer.args.{e}") from None


def map_origin(message: str, origin: dict[str, str]) -> str:
    """Rename the leading key of an error by where it came from in a hosted-format config."""
    key, sep, rest = message.partition(":")
    best = max((p for p in origin if key == p or key.startswith(p + ".")), key=len, default=None)
    if not sep or best is None:
        return message
    new_key = origin[best] + key[len(best):]
    if rest.strip() == "unknown key" or rest.startswith(" unknown key"):
        return f"{new_key}: not supported yet by the local trainer"
    return new_key + sep + rest


def resolve_run(raw: dict[str, Any], options: dict[str, Any] | None = None, *, check_environments: bool = True,
                preview: bool = False) -> ResolvedRun:
    """raw merged config (+ --output-dir) → ResolvedRun, or a one-line ConfigError. `preview`: its RLConfig as vf-rl's
    own process checks it, without transformers (`build_rl_config`)."""
    options = options or {}
    origin: dict[str, str] = {}
    raw, fmt = compose(raw)  # --wandb / --no-wandb, renamed keys (one warning each), the format
    if fmt != "vf-rl":
        raw, origin = (prime_train if fmt == "prime-train" else hosted_mod).translate(raw)
    try:
        cfg = validate_run_config(raw)
        load_env_files(cfg.env_file, environ={})  # syntax only: values go to os.environ at launch, never here
        kwargs = rl_config_kwargs(cfg, options.get("output_dir"))
        args = build_rl_config(kwargs, preview=preview)
        _check_world(cfg, args)
        _check_report_to(args)
        _check_resume(args)
        if check_environments:
            check_envs(cfg)
    except ConfigError as e:
        raise ConfigError(map_origin(str(e), origin)) from None
    return ResolvedRun(cfg, kwargs, args, fmt != "vf-rl", origin, list(options.get("config_files") or []))


def load_run(argv: list[str], *, check_environments: bool = True, preview: bool = False
             ) -> tuple[ResolvedRun, dict[str, Any]]:
    """`@ a.toml [@ b.toml] [--key VALUE ...]` → (ResolvedRun, options)."""
    files, raw, options = parse_args(argv)
    if not files:
        raise ConfigError("no config file: run vf-rl @ path/to/config.toml")
    return resolve_run(raw, options, check_environments=check_environments, preview=preview), options
