"""`[trainer.args]`: RLConfig's fields (names, types, defaults, help), checks of the user's values against them,
and RLConfig's own errors mapped to `trainer.args.<field>`."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.sections import close_match
from verifiers_rl.value_check import type_error


@dataclass
class RLFieldInfo:
    names: list[str]
    own: list[str]             # fields declared by RLConfig itself (not TrainingArguments)
    types: dict[str, Any]
    defaults: dict[str, Any]
    help: dict[str, str]


_RL_INFO: RLFieldInfo | None = None


def rl_field_info() -> RLFieldInfo:
    """RLConfig's init fields, their types, defaults and help (imports transformers: ~9 s the first time)."""
    global _RL_INFO
    if _RL_INFO is None:
        import dataclasses

        from verifiers_rl.trainer.config import RLConfig

        try:
            hints = typing.get_type_hints(RLConfig)
        except Exception:  # pragma: no cover - an annotation that cannot be evaluated: check nothing
            hints = {}
        fields = [f for f in dataclasses.fields(RLConfig) if f.init]
        # RLConfig's own fields, those of its mixins (trainer/checkpoints.py) included
        own_ann = [n for c in RLConfig.__mro__ if c.__module__.startswith("verifiers_rl.")
                   for n in c.__dict__.get("__annotations__", {})]
        defaults: dict[str, Any] = {}
        for f in fields:
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                defaults[f.name] = f.default_factory()  # type: ignore[misc]
        types = {f.name: hints.get(f.name, Any) for f in fields}
        if "fsdp" in types:  # annotated str, but True / a list of options is how transformers documents it
            types["fsdp"] = bool | str | list[str] | None
        if "lr_scheduler_type" in types:  # annotated str in transformers 5; its values are SchedulerType's
            from transformers.trainer_utils import SchedulerType

            types["lr_scheduler_type"] = SchedulerType | str
        if "resume_from_checkpoint" in types:  # True (the latest) and a step number too (trainer/checkpoints.py)
            types["resume_from_checkpoint"] = bool | int | str | None
        helps = {f.name: str(f.metadata.get("help", "")) for f in fields}
        if "resume_from_checkpoint" in helps:  # transformers': "not directly used by Trainer"; vf-rl resumes with it
            from verifiers_rl.trainer.checkpoints import RESUME_HELP

            helps["resume_from_checkpoint"] = RESUME_HELP
        _RL_INFO = RLFieldInfo(
            names=[f.name for f in fields], own=[n for n in own_ann if n in {f.name for f in fields}],
            types=types, defaults=defaults, help=helps)
    return _RL_INFO


def check_trainer_args(args: dict[str, Any]) -> None:
    """Unknown keys (did you mean) and wrong types in [trainer.args], before RLConfig sees them."""
    info = rl_field_info()
    for k, v in args.items():
        if k not in info.types:
            close = close_match(k, info.own) or close_match(k, info.names)
            hint = f" (did you mean trainer.args.{close}?)" if close else ""
            raise ConfigError(f"trainer.args.{k}: unknown key{hint}")
        bad = type_error(v, info.types[k])
        if bad:
            raise ConfigError(f"trainer.args.{k}: {bad}")


def build_rl_config(kwargs: dict[str, Any]) -> Any:
    """RLConfig(**kwargs); a `SettingError` (RLConfig's and the loss/estimator configs' checks name their key)
    becomes `trainer.args.<key>: ...`; anything else (transformers' own checks) `trainer.args: ...`."""
    from verifiers_rl.errors import SettingError
    from verifiers_rl.trainer.config import RLConfig

    try:
        return RLConfig(**kwargs)
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


