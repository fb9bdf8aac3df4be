"""A run's loss and advantage estimator from their settings tables, ``RLConfig.loss`` and ``RLConfig.advantage``:
each a ``type`` (a registered name, or an import path) and that type's keys. The one module that reads them; it
builds each config once and keeps it beside the RLConfig. Deprecated top-level spellings (``kl_tau``, ...) fill
the chosen type's key with one warning."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import warnings
import weakref
from typing import Any, Callable

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.advantage_types import ADVANTAGES, DEFAULT_ADVANTAGE, AdvantageSpec
from verifiers_rl.trainer.lazy_function import imported
from verifiers_rl.trainer.losses import LOSSES, MODE_LOSS, LossSpec

# deprecated top-level spelling → its section; RLConfig's fields, vf-rl's renames (config/resolution.py) read it too
DEPRECATED_KEYS: dict[str, str] = {"mask_ratio_low": "loss", "mask_ratio_high": "loss", "kl_tau": "loss",
                                   "beta": "loss", "scale_rewards": "advantage"}


def build_config(section: str, name: str, config: type, table: dict[str, Any], c: Any) -> Any:
    """Type ``name``'s ``config`` built from ``table`` (``type`` removed) and the section's deprecated top-level
    keys on ``c``. An unknown key, or one key set twice differently: one line."""
    own = [f.name for f in dataclasses.fields(config)]
    for key in table:
        if key not in own:
            raise SettingError(section, f"{section}.{key} is not a key of {section} type {name!r}; its keys: "
                             f"{', '.join(own) or 'none'}")
    values = dict(table)
    for key in deprecated_keys(section):
        top = getattr(c, key, None)
        if top is None:
            continue
        deprecated_spelling(section, key)
        if key not in own:
            users = [n for n in _REGISTRIES[section]
                     if key in {f.name for f in dataclasses.fields(_SPEC_OF[section](n).config)}]
            which = repr(users[0]) if len(users) == 1 else f"one of {', '.join(users)}"
            raise SettingError(key, f"{key}={top!r} applies to {section}.type {which}, not {name!r}; remove it")
        if key in table and top != table[key]:
            raise SettingError(key, f"{key}={top!r} and {section}.{key}={table[key]!r} are both set; keep one")
        values[key] = top
    _check_types(section, config, values)
    try:
        return config(**values)
    except SettingError:
        raise
    except (ValueError, TypeError) as e:  # a config's own check (one from outside the package too): the table's
        raise SettingError(section, str(e)) from None


def _check_types(section: str, config: type, values: dict[str, Any]) -> None:
    """Each value against its field's annotation, as [trainer.args] values are checked (config/trainer_args.py)."""
    import typing

    from verifiers_rl.value_check import type_error

    try:
        hints = typing.get_type_hints(config)
    except Exception:  # an annotation that cannot be evaluated (a config from outside): its own checks decide
        return
    for key, value in values.items():
        bad = type_error(value, hints.get(key, Any))
        if bad:
            raise SettingError(section, f"{section}.{key}: {bad}")


def deprecated_keys(section: str) -> tuple[str, ...]:
    """RLConfig's deprecated top-level spellings of ``section``'s keys."""
    return tuple(k for k, s in DEPRECATED_KEYS.items() if s == section)


_WARNED: set[str] = set()


def deprecated_spelling(section: str, key: str) -> None:
    """One FutureWarning per process for RLConfig's deprecated top-level ``key`` (vf-rl renames it before its
    workers see it: config/resolution.py)."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(f"RLConfig's {key} is deprecated: set {section}.{key} instead ({section}={{{key!r}: ...}}, "
                  f"[trainer.args.{section}] {key} = ... in a vf-rl config); it keeps working for this release",
                  FutureWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The stack level of the line that built the RLConfig: the first frame outside this package and dataclasses'
    generated ``__init__``."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(2), 2  # the frame warn()'s stacklevel=2 names
    while frame is not None and (frame.f_code.co_filename.startswith(package)
                                 or frame.f_code.co_filename == "<string>"):
        frame, level = frame.f_back, level + 1
    return level


def table_of(value: Any, configs: Callable[[], dict[str, type]]) -> dict[str, Any] | None:
    """A settings value as a table: None -> {}, a type alone (``"dapo"``, as TRL's ``loss_type``) -> ``{"type":
    ...}``, a dict -> a copy, an instance of one of ``configs()`` (name -> config class, e.g. ``DAPOLossConfig(...)``
    in a notebook) -> its type and fields; else None."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"type": value}
    if isinstance(value, dict):
        return dict(value)
    names = [n for n, config in configs().items() if type(value) is config]
    if names and dataclasses.is_dataclass(value):
        return {"type": names[0], **dataclasses.asdict(value)}
    return None


def as_table(name: str, config: Any) -> dict[str, Any]:
    """Type ``name``'s built ``config`` as a settings table; a None left at its None default is omitted (TOML has
    no null)."""
    unset = {f.name for f in dataclasses.fields(config) if f.default is None and getattr(config, f.name) is None}
    return {"type": name, **{k: v for k, v in dataclasses.asdict(config).items() if k not in unset}}


def registered(section: str, name: Any, registry: dict[str, str], spec_type: type, default_attr: str) -> Any:
    """The spec ``name`` names: a registered one (``registry``: name -> "module[:attribute]"), or a ``spec_type``
    by import path ``"package.module:ATTRIBUTE"`` (as prime-rl's ``import_path``). Anything else is one line."""
    if isinstance(name, str) and name in registry:
        return imported(registry[name], default_attr)
    if not isinstance(name, str) or ":" not in name:
        raise SettingError(section,
                           f"{section}.type={name!r} is not one of {', '.join(registry)}; set {section}.type to one "
                           "of them, or to an import path 'package.module:SPEC'")
    module, _, attr = name.partition(":")
    try:
        spec = getattr(_import_from_cwd(module), attr)
    except ImportError as e:
        raise SettingError(section,
                           f"{section}.type={name!r}: cannot import {module!r} ({type(e).__name__}: {e})") from None
    except AttributeError:
        raise SettingError(section, f"{section}.type={name!r}: module {module!r} has no {attr!r}") from None
    if not isinstance(spec, spec_type):
        raise SettingError(section, f"{section}.type={name!r} is a {type(spec).__name__}, not a "
                                    f"{spec_type.__name__} ({section} docs: docs/training.md)")
    return spec


def _import_from_cwd(module: str) -> Any:
    """`module`, found as the trainer's worker (`python -m`) finds it: the working directory on the path too, which a
    console script's `sys.path` lacks (a `my_losses.py` beside the config one runs vf-rl from)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        cwd = os.getcwd()
        if e.name != module.partition(".")[0] or cwd in sys.path or "" in sys.path:
            raise
    sys.path.append(cwd)
    return importlib.import_module(module)


def get_loss(name: str) -> LossSpec:
    """The registered loss ``name`` (``losses.LOSSES``), or a :class:`LossSpec` by import path."""
    return registered("loss", name, LOSSES, LossSpec, "LOSS")


def loss_types(mode: str | None = None) -> list[str]:
    """The registered loss names (those whose inputs ``mode`` builds, when given)."""
    return [n for n in LOSSES if mode is None or get_loss(n).mode == mode]


def get_advantage(name: str) -> AdvantageSpec:
    """As ``get_loss``, for ``advantage_types.ADVANTAGES`` (or ``"my_pkg.advantages:ADVANTAGE"``)."""
    return registered("advantage", name, ADVANTAGES, AdvantageSpec, "ADVANTAGE")


_REGISTRIES = {"loss": LOSSES, "advantage": ADVANTAGES}
_SPEC_OF = {"loss": get_loss, "advantage": get_advantage}


# (id(config), slot) -> (weakref to the config, its inputs' repr, the result): kept beside the config, not on it, so
# the config still pickles (HF's Trainer torch.saves its args)
_BUILT: dict[tuple[int, str], tuple[Any, str, Any]] = {}


def built_once(c: Any, slot: str, inputs: Any, build: Callable[[], Any]) -> Any:
    """``build()``'s result for ``c``, kept while ``inputs`` stay equal (a notebook may change a setting later)."""
    entry = _BUILT.get((id(c), slot))
    if entry is not None and entry[0]() is c and entry[1] == repr(inputs):
        return entry[2]
    result = build()
    keep(c, slot, inputs, result)
    return result


def keep(c: Any, slot: str, inputs: Any, result: Any) -> None:
    key = (id(c), slot)
    try:
        ref = weakref.ref(c, lambda _ref: _BUILT.pop(key, None))
    except TypeError:  # an object without weak references (a plain namespace in a test): not kept
        return
    _BUILT[key] = (ref, repr(inputs), result)


def _inputs(c: Any, section: str) -> tuple:
    """What building ``c``'s ``section`` reads: the build is kept while these stay equal."""
    return (getattr(c, "training_mode", "rl"), getattr(c, section, None),
            [getattr(c, k, None) for k in deprecated_keys(section)])


def _resolve(c: Any, section: str) -> Any:
    build = _build_loss if section == "loss" else _build_advantage
    return built_once(c, f"_built_{section}", _inputs(c, section), lambda: build(c))


def _check(c: Any, section: str) -> Any:
    """Build ``c``'s ``section`` config once (one line on a bad type, key or value); a config object given as
    ``c.<section>`` is kept as its table (JSON, TOML), which builds the same. Returns the spec."""
    spec, config = _resolve(c, section)
    if getattr(c, section) is not None and not isinstance(getattr(c, section), dict):
        setattr(c, section, as_table(spec.name, config))
    keep(c, f"_built_{section}", _inputs(c, section), (spec, config))
    return spec


# --- the loss ------------------------------------------------------------------------------------------------------


def loss_table(loss: Any, mode: str = "rl") -> dict[str, Any]:
    """``RLConfig.loss`` (None, a table, or the config object of a loss ``mode`` trains with) as a table."""
    table = table_of(loss, lambda: {n: get_loss(n).config for n in loss_types(mode)})
    if table is not None:
        return table
    raise SettingError("loss",
                       f"loss={loss!r} must be a type (one of {', '.join(LOSSES)}), a table with a 'type' key or "
                       f"the config of a loss training_mode={mode!r} trains with ({', '.join(loss_types(mode))})")


def resolve_loss(c: Any) -> tuple[LossSpec, Any]:
    """The chosen loss and its config, built (so checked) from ``c`` once while its loss settings stay the same."""

    return _resolve(c, "loss")


def reference_beta(c: Any) -> float:
    """The weight of the KL to the reference (initial) policy in ``c``'s loss: > 0 needs the reference model."""
    return float(getattr(resolve_loss(c)[1], "beta", 0) or 0)


def _build_loss(c: Any) -> tuple[LossSpec, Any]:
    mode = getattr(c, "training_mode", "rl")
    table = loss_table(getattr(c, "loss", None), mode)
    kind = table.pop("type", None) or MODE_LOSS.get(mode, "default")  # a name, or an import path
    spec = get_loss(kind)
    if spec.mode != mode:
        fits = ", ".join(loss_types(mode)) or "none"
        raise SettingError("loss", f"loss.type={kind!r} trains training_mode={spec.mode!r}, not {mode!r}; set "
                                   f"training_mode={spec.mode!r} or loss.type to one of {fits}")
    return spec, build_config("loss", kind, spec.config, table, c)


def check_loss(c: Any) -> None:
    """Build the run's loss config once (``_check``)."""
    _check(c, "loss")


# --- the advantage estimator ---------------------------------------------------------------------------------------


def resolve_advantage(c: Any) -> tuple[AdvantageSpec, Any]:
    """The chosen estimator and its config, as ``resolve_loss``."""
    return _resolve(c, "advantage")


def _build_advantage(c: Any) -> tuple[AdvantageSpec, Any]:
    advantage = getattr(c, "advantage", None)
    table = table_of(advantage, lambda: {n: get_advantage(n).config for n in ADVANTAGES})
    if table is None:
        raise SettingError("advantage", f"advantage={advantage!r} must be a type (one of {', '.join(ADVANTAGES)}), a "
                                        "table with a 'type' key or an estimator's config object")
    kind = table.pop("type", None) or DEFAULT_ADVANTAGE  # a name, or an import path
    spec = get_advantage(kind)
    return spec, build_config("advantage", kind, spec.config, table, c)


def learns_alone(c: Any) -> bool:
    """Whether the run's estimator learns from a group of one rollout (its baseline is not the group's: rae)."""
    try:
        return not resolve_advantage(c)[0].group_baseline
    except (SettingError, ValueError, TypeError):  # check_advantage names the problem
        return False


def check_advantage(c: Any) -> None:
    """Build the run's estimator config once (``_check``); a group too small for it is one line."""
    spec = _check(c, "advantage")
    group = getattr(c, "rollouts_per_example", spec.min_group_size)
    if group < spec.min_group_size:
        raise SettingError("advantage",
                           f"advantage.type={spec.name!r} needs rollouts_per_example >= {spec.min_group_size}, got "
                           f"{group}; raise rollouts_per_example or set advantage.type='grpo'")
