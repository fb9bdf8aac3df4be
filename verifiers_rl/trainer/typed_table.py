"""A registered kind's config from its settings table: the one rule ``loss`` and ``advantage`` share. The table
holds the chosen type's own keys; RLConfig's older top-level keys fill the same-named key of the chosen type."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable


def build_config(section: str, name: str, table: dict[str, Any], c: Any, shared: dict[str, Any],
                 names: Iterable[str], config_of: Callable[[str], type]) -> Any:
    """Type ``name``'s config (``config_of(name)``; ``section`` e.g. loss, type dapo) built from ``table`` (its keys,
    ``type`` removed) and the top-level keys ``shared`` (key -> default) read from ``c``; ``names``: the registered
    types. An unknown key, a top-level key the type lacks, or one key set twice differently: one line."""
    config = config_of(name)
    own = [f.name for f in dataclasses.fields(config)]
    for key in table:
        if key not in own:
            raise ValueError(f"{section}.{key} is not a key of {section} type {name!r}; its keys: "
                             f"{', '.join(own) or 'none'}")
    values = {}
    for key, default in shared.items():
        top = getattr(c, key, default)
        if key in own:
            if key in table and top != default and top != table[key]:
                raise ValueError(f"{key}={top!r} and {section}.{key}={table[key]!r} are both set; keep one")
            values[key] = table.get(key, top)
        elif top != default:
            users = " or ".join(repr(n)
                                for n in names if key in {f.name for f in dataclasses.fields(config_of(n))})
            raise ValueError(f"{key}={top!r} applies to {section}.type {users}, not {name!r}; remove it")
    values.update(table)
    return config(**values)
