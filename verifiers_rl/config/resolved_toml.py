"""The resolved `vf-rl` config as TOML: every default filled in, what `--dry-run` writes and `vf-rl @` accepts back."""

from __future__ import annotations

import enum
import math
from pathlib import Path
from typing import Any

from verifiers_rl.config.loading import map_leaves
from verifiers_rl.config.resolution import ResolvedRun
from verifiers_rl.config.sections import OPTIONAL_SECTIONS
from verifiers_rl.config.trainer_args import rl_field_info
from verifiers_rl.trainer.typed_table import DEPRECATED_KEYS

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
    for name in info.own + [n for n in info.names if n not in info.own]:
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
        if (value := _plain(value)) is not _SKIP:
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
    # training_mode and [teacher] are folded into trainer.args (RLConfig's training_mode, teacher_*)
    d = {k: v for k, v in run.cfg.model_dump(mode="python").items()
         if k not in ("training_mode", "teacher") and (v is not None or k not in ("model", *OPTIONAL_SECTIONS))}
    for name in ("inference", "trainer"):  # a GPU count is a request only as the user states it (plan.gpus_asked)
        if "gpus" not in getattr(run.cfg, name).model_fields_set:
            d[name].pop("gpus", None)
    d["trainer"]["args"] = resolved_trainer_args(run.args, run.cfg.trainer.args)
    return d


def to_toml_data(value: Any) -> Any:
    """None → "None" (TOML has no null)."""
    return map_leaves(value, lambda v: "None" if v is None else v)


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
