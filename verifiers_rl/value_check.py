"""Whether a config value (TOML, the command line, a notebook's table) fits a field's annotation, the annotation's
short name and a misspelt name's closest match for the one-line error: every one-line error shares these."""

from __future__ import annotations

import difflib
import enum
import functools
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel


def close_match(name: str, candidates: list[str], cutoff: float = 0.6) -> str | None:
    """The candidate closest to a misspelt `name` (difflib's ratio >= cutoff), or None."""
    m = difflib.get_close_matches(name, candidates, n=1, cutoff=cutoff)
    return m[0] if m else None


def describe_type(tp: Any) -> str:
    """A short human name for a type annotation: 'int', 'int or list of int', 'str or None'."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return "any value"
    if origin in (typing.Union, types.UnionType):
        parts = [describe_type(a) for a in args if a is not type(None)]
        s = " or ".join(dict.fromkeys(parts))
        return s + ' or "None"' if type(None) in args else s
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if tp is bool:
        return "bool (true/false)"
    if tp in (int, float, str):
        return tp.__name__
    if origin is list or tp is list:
        return f"list of {describe_type(args[0])}" if args else "list"
    if origin is dict or tp is dict:
        return "table"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "table"
    return getattr(tp, "__name__", str(tp))


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


def type_error(value: Any, tp: Any) -> str | None:
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
