"""Resolution of a `vf-rl` run: raw config (either format) → `ResolvedRun`, and the resolved config as TOML."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers_rl.config import hosted as hosted_mod
from verifiers_rl.config.composition import compose
from verifiers_rl.config.loading import ConfigError, load_env_files, parse_args
from verifiers_rl.config.sections import OPTIONAL_SECTIONS, RunConfig
from verifiers_rl.config.trainer_args import build_rl_config, rl_field_info
from verifiers_rl.config.validation import check_envs, rl_config_kwargs, validate_run_config
from verifiers_rl.plan.gpus import asked_world_size, batch_split_problem, several_processes_problem
from verifiers_rl.trainer.typed_table import DEPRECATED_KEYS


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
    own process checks it, without transformers (`trainer_args.build_rl_config`)."""
    options = options or {}
    origin: dict[str, str] = {}
    raw, is_hosted = compose(raw)  # --wandb / --no-wandb, renamed keys (one warning each), the format
    if is_hosted:
        raw, origin = hosted_mod.translate(raw)
    try:
        cfg = validate_run_config(raw)
        load_env_files(cfg.env_file, environ={})  # syntax only: values go to os.environ at launch, never here
        kwargs = rl_config_kwargs(cfg, options.get("output_dir"))
        args = build_rl_config(kwargs, preview=preview)
        _check_world(cfg, args)
        _check_resume(args)
        if check_environments:
            check_envs(cfg)
    except ConfigError as e:
        raise ConfigError(map_origin(str(e), origin)) from None
    return ResolvedRun(cfg, kwargs, args, is_hosted, origin, list(options.get("config_files") or []))


def load_run(argv: list[str], *, check_environments: bool = True, preview: bool = False
             ) -> tuple[ResolvedRun, dict[str, Any]]:
    """`@ a.toml [@ b.toml] [--key VALUE ...]` → (ResolvedRun, options)."""
    files, raw, options = parse_args(argv)
    if not files:
        raise ConfigError("no config file: run vf-rl @ path/to/config.toml")
    return resolve_run(raw, options, check_environments=check_environments, preview=preview), options


# --- the resolved config as TOML -------------------------------------------------------------------------------------

# Not written: secrets and per-process internals; fields set from another one (written only when the user set them).
_SKIP_FIELDS = {"hub_token", "local_rank"}
_DERIVED_FIELDS = {"per_device_train_batch_size", "activation_checkpointing", "activation_checkpointing_kwargs"}
# Resolved from the hardware or from [inference] at launch: written as the user's value or the default.
_UNRESOLVED_FIELDS = {"use_cpu", "dataloader_pin_memory", "inference_backend", "vllm_server_urls"}
_SKIP = object()


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _SKIP
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return _SKIP if any(i is _SKIP for i in items) else items
    if isinstance(value, dict):
        items = {str(k): _plain(v) for k, v in value.items()}
        return _SKIP if any(i is _SKIP for i in items.values()) else items
    return _SKIP


def resolved_trainer_args(args: Any, user: dict[str, Any]) -> dict[str, Any]:
    """Every RLConfig field's resolved value (RLConfig's own fields first), as TOML-able data."""
    info = rl_field_info()
    out: dict[str, Any] = {}
    order = info.own + [n for n in info.names if n not in info.own]
    for name in order:
        if name in _SKIP_FIELDS or (name in _DERIVED_FIELDS and name not in user):
            continue
        if name in DEPRECATED_KEYS and getattr(args, name, None) is None:
            continue  # a deprecated spelling, unset
        if name in _UNRESOLVED_FIELDS:
            value = user.get(name, info.defaults.get(name))
        elif name in ("loss", "advantage"):
            value = _built_table(args, name)
        else:
            value = getattr(args, name, _SKIP)
        value = _plain(value)
        if value is _SKIP:
            continue
        out[name] = value
    return out


def _built_table(args: Any, section: str) -> dict[str, Any]:
    """The run's loss or estimator as the table it was built from, every key filled in (a type given by import
    path keeps its path)."""
    from verifiers_rl.trainer.typed_table import as_table, resolve_advantage, resolve_loss

    spec, config = (resolve_loss if section == "loss" else resolve_advantage)(args)
    given = getattr(args, section)
    return as_table((given.get("type") or spec.name) if isinstance(given, dict) else spec.name, config)


def resolved_dict(run: ResolvedRun) -> dict[str, Any]:
    """The whole run with every default filled in (the GPU counts only where the config states them): what
    `--dry-run` writes and `vf-rl @` accepts back, on the same machines."""
    d = run.cfg.model_dump(mode="python")
    for name in ("training_mode", "teacher"):  # folded into trainer.args (RLConfig's training_mode, teacher_*)
        d.pop(name, None)
    for name in OPTIONAL_SECTIONS:
        if d.get(name) is None:
            d.pop(name, None)
    if d.get("model") is None:
        d.pop("model")
    for name in ("inference", "trainer"):  # a GPU count is a request only as the user states it (plan.gpus_asked)
        if "gpus" not in getattr(run.cfg, name).model_fields_set:
            d[name].pop("gpus", None)
    d["trainer"]["args"] = resolved_trainer_args(run.args, run.cfg.trainer.args)
    return d


def to_toml_data(value: Any) -> Any:
    """None → "None" (TOML has no null)."""
    if value is None:
        return "None"
    if isinstance(value, dict):
        return {k: to_toml_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_toml_data(v) for v in value]
    return value


def dumps_toml(data: dict[str, Any], header: str = "") -> str:
    import tomli_w

    body = tomli_w.dumps(to_toml_data(data))
    return (header.rstrip() + "\n\n" if header else "") + body


def write_resolved(run: ResolvedRun, directory: str | Path | None = None, name: str = "rl.toml",
                   data: dict[str, Any] | None = None) -> Path:
    out = Path(directory) if directory is not None else Path(run.output_dir) / "configs"
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    sources = ", ".join(str(p) for p in run.config_files) or "(command line)"
    header = (f"# Resolved vf-rl config (every default filled in) from {sources}"
              + (" [hosted format, translated]" if run.hosted else "")
              + f"\n# Run it again with: vf-rl @ {path}")
    path.write_text(dumps_toml(data if data is not None else resolved_dict(run), header))
    return path
