"""`[trainer.args]`: RLConfig's fields (names, types, defaults, help), read without importing transformers, and the
class vf-rl's own process checks them with (`preview_class`; config/resolution.py build_rl_config)."""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import typing
from dataclasses import dataclass
from typing import Any


@dataclass
class RLFieldInfo:
    names: list[str]
    own: list[str]             # fields declared by RLConfig itself (not TrainingArguments)
    types: dict[str, Any]
    defaults: dict[str, Any]
    help: dict[str, str]


# Annotations that undersell what a field takes: fsdp is annotated str, but True / a list of options is how
# transformers documents it; resume_from_checkpoint takes True (the latest) and a step number too (checkpoints.py).
_FIXED_TYPES = {"fsdp": bool | str | list[str] | None, "resume_from_checkpoint": bool | int | str | None}


@functools.lru_cache(maxsize=1)
def rl_field_info() -> RLFieldInfo:
    """RLConfig's init fields, types, defaults and help, transformers' read from its source (config/hf_fields.py);
    by importing RLConfig (slow) when that source does not read."""
    from verifiers_rl.config.hf_fields import training_args_fields

    source = training_args_fields()
    return _info_from_source(source) if source is not None else _info_from_class()


@functools.lru_cache(maxsize=1)
def exact_rl_field_info() -> RLFieldInfo:
    """`rl_field_info` by importing RLConfig: every default as the installed transformers sets it (`optim`'s depends
    on the torch version), for the generated docs."""
    return _info_from_class()


def _own_fields(cls: type) -> list[str]:
    """Fields declared by verifiers_rl's classes (RLConfig's, its mixins'), not transformers'."""
    return [n for c in cls.__mro__ if c.__module__.startswith("verifiers_rl.")
            for n in c.__dict__.get("__annotations__", {})]


def _info(fields: dict[str, Any], own: list[str], scheduler_type: Any) -> RLFieldInfo:
    """RLFieldInfo from the fields (name -> SourceField) in declaration order."""
    from verifiers_rl.config.hf_fields import UNREAD

    types = {n: f.type for n, f in fields.items()}
    types.update({k: v for k, v in _FIXED_TYPES.items() if k in types})
    if "lr_scheduler_type" in types:  # annotated str by RLConfig; its values are transformers' SchedulerType's
        types["lr_scheduler_type"] = scheduler_type | str
    helps = {n: f.help for n, f in fields.items()}
    if "optim" in types:  # transformers' names and ours (trainer/optim_settings.py)
        from verifiers_rl.trainer.optim_settings import EXTRA_OPTIMIZERS, OPTIM_HELP

        names = {m.name: m.value for a in typing.get_args(types["optim"]) if isinstance(a, enum.EnumType) for m in a}
        if names:
            names.update({n.upper(): n for n in EXTRA_OPTIMIZERS})
            types["optim"], helps["optim"] = enum.Enum("OptimizerNames", names) | str, OPTIM_HELP
    if "resume_from_checkpoint" in helps:  # transformers': "not directly used by Trainer"; vf-rl resumes with it
        from verifiers_rl.trainer.checkpoints import RESUME_HELP

        helps["resume_from_checkpoint"] = RESUME_HELP
    defaults = {n: f.default for n, f in fields.items() if f.default not in (UNREAD, dataclasses.MISSING)}
    return RLFieldInfo(names=list(fields), own=[n for n in own if n in types], types=types, defaults=defaults,
                       help=helps)


def _declared(cls: type, hints: dict[str, Any]) -> dict[str, Any]:
    """A dataclass's init fields as SourceFields (name -> field)."""
    from verifiers_rl.config.hf_fields import SourceField
    from verifiers_rl.trainer.config_fields import field_default

    return {f.name: SourceField(f.name, hints.get(f.name, Any), field_default(f), str(f.metadata.get("help", "")))
            for f in dataclasses.fields(cls) if f.init}


def _info_from_source(source: Any) -> RLFieldInfo:
    from verifiers_rl.trainer.config_fields import RLFields

    fields = {s.name: s for s in source}
    hf_scheduler = fields["lr_scheduler_type"].type if "lr_scheduler_type" in fields else None
    scheduler = next((a for a in typing.get_args(hf_scheduler) if a is not str), str)
    fields.update(_declared(RLFields, typing.get_type_hints(RLFields)))  # ours win, in transformers' order
    return _info(fields, _own_fields(RLFields), scheduler)


def _info_from_class() -> RLFieldInfo:
    from transformers.trainer_utils import SchedulerType

    from verifiers_rl.trainer.config import RLConfig

    try:
        hints = typing.get_type_hints(RLConfig)
    except Exception:  # pragma: no cover - an annotation that cannot be evaluated: check nothing
        hints = {}
    return _info(_declared(RLConfig, hints), _own_fields(RLConfig), SchedulerType)


@functools.lru_cache(maxsize=1)
def preview_class() -> type | None:
    """`RLFields` with transformers' other fields (read from its source) and RLConfig's checks of its own fields, not
    transformers' (those run where the trainer builds it). None: that source does not read."""
    from verifiers_rl.config.hf_fields import training_args_fields
    from verifiers_rl.trainer.checkpoints import CheckpointSettings
    from verifiers_rl.trainer.config_fields import RLFields

    source = training_args_fields()
    if source is None:
        return None
    ours = {f.name for f in dataclasses.fields(RLFields)}
    extra = [(s.name, Any, dataclasses.field(default_factory=functools.partial(copy.deepcopy, s.default))
              if isinstance(s.default, (list, dict)) else dataclasses.field(default=s.default))
             for s in source if s.name not in ours]

    def __post_init__(self: Any) -> None:
        self._resolve_rl_fields()
        CheckpointSettings.__post_init__(self)

    return dataclasses.make_dataclass("RLConfigPreview", extra, bases=(RLFields,),
                                      namespace={"__post_init__": __post_init__})
