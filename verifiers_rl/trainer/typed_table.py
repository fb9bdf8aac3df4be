"""A registered kind's config from its settings table: the one rule ``loss`` and ``advantage`` share. The table
holds the chosen type's own keys; RLConfig's older top-level keys fill the same-named key of the chosen type."""

from __future__ import annotations

import dataclasses
import importlib
import weakref
from typing import Any, Callable, Iterable

from verifiers_rl.errors import SettingError


def build_config(section: str, name: str, table: dict[str, Any], c: Any, shared: dict[str, Any],
                 names: Iterable[str], config_of: Callable[[str], type]) -> Any:
    """Type ``name``'s config (``config_of(name)``; ``section`` e.g. loss, type dapo) built from ``table`` (its keys,
    ``type`` removed) and the top-level keys ``shared`` (key -> default) read from ``c``; ``names``: the registered
    types. An unknown key, a top-level key the type lacks, or one key set twice differently: one line."""
    config = config_of(name)
    own = [f.name for f in dataclasses.fields(config)]
    for key in table:
        if key not in own:
            raise SettingError(section, f"{section}.{key} is not a key of {section} type {name!r}; its keys: "
                             f"{', '.join(own) or 'none'}")
    values = {}
    for key, default in shared.items():
        top = getattr(c, key, default)
        if key in own:
            if key in table and top != default and top != table[key]:
                raise SettingError(key, f"{key}={top!r} and {section}.{key}={table[key]!r} are both set; keep one")
            values[key] = table.get(key, top)
        elif top != default:
            users = [n for n in names if key in {f.name for f in dataclasses.fields(config_of(n))}]
            which = repr(users[0]) if len(users) == 1 else f"one of {', '.join(users)}"
            raise SettingError(key, f"{key}={top!r} applies to {section}.type {which}, not {name!r}; remove it")
    values.update(table)
    try:
        return config(**values)
    except SettingError:
        raise
    except (ValueError, TypeError) as e:  # a config's own check (one from outside the package too): the table's
        raise SettingError(section, str(e)) from None


def table_of(value: Any, configs: dict[str, type]) -> dict[str, Any] | None:
    """A settings value as a table: None -> {}, a dict -> a copy, an instance of one of ``configs`` (type name ->
    config class, e.g. ``DAPOLossConfig(epsilon_high=0.3)`` in a notebook) -> its type and fields; None when it is
    neither (the caller raises its own line)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    names = [n for n, config in configs.items() if type(value) is config]
    if names and dataclasses.is_dataclass(value):
        return {"type": names[0], **dataclasses.asdict(value)}
    return None


def store_back(c: Any, section: str, name: str, config: Any, shared: Iterable[str]) -> None:
    """After the check: a config object given as ``c.<section>`` is kept as its table (JSON, TOML), and the top-level
    keys take the chosen type's values, so whoever reads them (``c.beta``: the reference model) sees those."""
    if getattr(c, section) is not None and not isinstance(getattr(c, section), dict):
        # a None left at its None default is omitted: TOML has no null
        unset = {f.name for f in dataclasses.fields(config) if f.default is None and getattr(config, f.name) is None}
        setattr(c, section, {"type": name, **{k: v for k, v in dataclasses.asdict(config).items() if k not in unset}})
    for key in shared:
        if hasattr(config, key):
            setattr(c, key, getattr(config, key))


def registered(section: str, name: Any, registry: dict[str, str], spec_type: type, default_attr: str) -> Any:
    """The spec ``name`` names: a registered one (``registry``: name -> "module[:attribute]", ``default_attr`` when
    omitted), or one outside the package by import path, ``"package.module:ATTRIBUTE"`` (as prime-rl's
    ``import_path``), which must be a ``spec_type``. Anything else is one line."""
    if isinstance(name, str) and name in registry:
        module, _, attr = registry[name].partition(":")
        return getattr(importlib.import_module(module), attr or default_attr)
    if not isinstance(name, str) or ":" not in name:
        raise SettingError(section,
                           f"{section}.type={name!r} is not one of {', '.join(registry)}; set {section}.type to one "
                           "of them, or to an import path 'package.module:SPEC'")
    module, _, attr = name.partition(":")
    try:
        spec = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise SettingError(section,
                           f"{section}.type={name!r}: cannot import {module!r} ({type(e).__name__}: {e})") from None
    except AttributeError:
        raise SettingError(section, f"{section}.type={name!r}: module {module!r} has no {attr!r}") from None
    if not isinstance(spec, spec_type):
        raise SettingError(section, f"{section}.type={name!r} is a {type(spec).__name__}, not a "
                                    f"{spec_type.__name__} ({section} docs: docs/training.md)")
    return spec


# (id(config), slot) -> (a weak reference to the config, its inputs' repr, the result): beside the config, not on
# it, so the config still pickles (HF's Trainer saves its args with torch.save) whatever the result holds
_BUILT: dict[tuple[int, str], tuple[Any, str, Any]] = {}


def built_once(c: Any, slot: str, inputs: Any, build: Callable[[], Any]) -> Any:
    """``build()``'s result for ``c``, kept while ``inputs`` (what it reads) stay equal: a run's loss and estimator
    are built once, however many places ask, and rebuilt if a notebook changes a setting afterwards."""
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
