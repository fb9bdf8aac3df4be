"""`[trainer.args]`: RLConfig's fields (names, types, defaults, help), checks of the user's values against them,
and RLConfig's own errors mapped to `trainer.args.<field>`."""

from __future__ import annotations

import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.sections import close_match, describe_type


def _toml_type(tp: Any) -> Any:
    """The annotation as a TOML/CLI value must match it (pydantic validates against this, strictly): an enum takes
    its values (strings; `Enum | str` only those); a table's values and a class that is not a builtin (accelerate's
    ParallelismConfig) are left to RLConfig itself."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return Literal[tuple(m.value for m in tp)]
    if origin in (typing.Union, types.UnionType):
        if str in args and any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):
            args = tuple(a for a in args if a is not str)
        return typing.Union[tuple(_toml_type(a) for a in args)]
    if origin is list and args:
        return list[_toml_type(args[0])]  # type: ignore[misc]
    if origin is dict:
        return dict  # any table: RLConfig checks what it reads from one (wandb's keys)
    if isinstance(tp, type) and tp.__module__ != "builtins":
        return Any
    return tp


@functools.lru_cache(maxsize=None)
def _adapter(tp: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(_toml_type(tp))


def _type_error(value: Any, tp: Any) -> str | None:
    """What is wrong with a TOML/CLI value for a field annotated `tp` (None: nothing)."""
    from pydantic import ValidationError

    try:
        _adapter(tp).validate_python(value, strict=True)
    except ValidationError:
        enums = [a for a in typing.get_args(tp) if isinstance(a, type) and issubclass(a, enum.Enum)]
        if isinstance(value, str) and len(enums) == 1 and str in typing.get_args(tp):  # `Enum | str`
            return f"{value!r} is not one of {', '.join(repr(m.value) for m in enums[0])}"
        return f"expected {describe_type(tp)}, got {value!r}"
    return None


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
        bad = _type_error(v, info.types[k])
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


