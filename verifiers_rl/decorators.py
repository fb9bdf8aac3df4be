"""Method markers: `@vf.stop` (a stop condition `(self, state) -> bool`), `@vf.cleanup` (runs when a rollout
ends, `(self, state)`), `@vf.teardown` (runs when the environment is torn down, `(self)`).

Each takes an optional `priority` (higher first; ties by method name); the marks are plain attributes, as in
verifiers. Handlers receive the objects they name (`call_marked`)."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Mapping
from typing import Any, Callable


def _marker(kind: str) -> Callable[..., Any]:
    def decorator_factory(func: Callable | None = None, *, priority: int = 0) -> Any:
        def mark(f: Callable) -> Callable:
            setattr(f, kind, True)
            setattr(f, f"{kind}_priority", priority)
            return f

        return mark if func is None else mark(func)

    decorator_factory.__name__ = kind
    return decorator_factory


stop = _marker("stop")
cleanup = _marker("cleanup")
teardown = _marker("teardown")


def marked_methods(obj: Any, kind: str) -> list[Callable]:
    """The bound methods of `obj` marked with `kind`, highest priority first, ties by name."""
    found = []
    for name in dir(type(obj)):
        attr = getattr(type(obj), name, None)
        if callable(attr) and getattr(attr, kind, False) is True:
            found.append((-getattr(attr, f"{kind}_priority", 0), name))
    return [getattr(obj, name) for _, name in sorted(found)]


# function → its signature, for bound methods and for plain callables; weak, so a handler made per rollout (a
# closure) does not pile up
_SIGNATURES = {True: weakref.WeakKeyDictionary(), False: weakref.WeakKeyDictionary()}


def signature_of(func: Callable) -> inspect.Signature | None:
    """`inspect.signature(func)` (None for a builtin without one), read once per function: stop conditions run
    every turn and reward functions every rollout, and `inspect.signature` costs ~30 us a call."""
    cache, key = _SIGNATURES[inspect.ismethod(func)], getattr(func, "__func__", func)
    try:
        return cache[key]
    except (KeyError, TypeError):  # TypeError: not weakly referable, read each time
        pass
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    try:
        cache[key] = sig
    except TypeError:
        pass
    return sig


def _params(handler: Callable) -> tuple[Mapping[str, inspect.Parameter], bool]:
    """The parameters `handler` takes (the cached signature's own mapping, not a copy: this runs every turn) and
    whether it takes `**kwargs`."""
    params = getattr(signature_of(handler), "parameters", {})
    return params, any(p.kind == p.VAR_KEYWORD for p in params.values())


async def call_marked(handler: Callable, state: Any, **objects: Any) -> Any:
    """Call a stop condition / cleanup handler with the objects it names (all of them for `**kwargs`); one
    naming none of them gets the state as its one positional argument (how verifiers 0.1.11 called it)."""
    objects["state"] = state
    params, var_keyword = _params(handler)
    if var_keyword:
        result = handler(**objects)
    elif any(name in params for name in objects):
        result = handler(**{k: v for k, v in objects.items() if k in params})
    else:
        result = handler(state)
    return await result if inspect.isawaitable(result) else result
