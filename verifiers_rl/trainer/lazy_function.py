"""A registered spec's function by import path, imported at its first call, so the loss and advantage specs and
their configs import no torch (vf-rl's own process checks them)."""

from __future__ import annotations

import importlib
from typing import Any


def imported(path: str, default_attr: str = "") -> Any:
    """The attribute ``"package.module:attribute"`` names (``default_attr`` when the path has no ``:attribute``)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr or default_attr)


class LazyFunction:
    """A registered spec's function by import path (``"package.module:function"``), imported at its first call: the
    specs and their configs are read where a config is checked (vf-rl's own process), which imports no torch."""

    def __init__(self, path: str) -> None:
        self.path, self._fn = path, None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._fn is None:
            self._fn = imported(self.path)
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self.path}>"
