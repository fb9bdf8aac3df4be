"""StatefulToolEnv: a ToolEnv whose tool arguments are completed from the rollout (verifiers 0.1.11).

Subclasses implement `update_tool_args`, called before every tool call; `add_tool(tool, args_to_skip=[...])` hides
the arguments it injects (a sandbox id, a handle) from the schema the model sees, leaving the function unchanged.
Arguments that are valid JSON but not an object are a parse error here.
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from typing import Any, Callable, Iterable

from verifiers_rl.envs.tool_env import ToolEnv
from verifiers_rl.utils.tool_schema import function_tool_def, tool_name
from verifiers_rl.types import Messages, State
from verifiers_rl.utils.async_utils import maybe_await

__all__ = ["StatefulToolEnv", "filter_signature"]


def filter_signature(func: Callable, args_to_skip: Iterable[str]) -> Callable:
    """A stand-in for `func` whose signature and annotations lack `args_to_skip` (and `self`), for building a
    schema; calling it calls `func`. `func` is returned as is when nothing is skipped, and never modified."""
    skip = set(args_to_skip or ())
    if not skip:
        return func
    signature = inspect.signature(func)
    kept = [p for name, p in signature.parameters.items() if name not in skip and name != "self"]

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    stand_in.__name__ = getattr(func, "__name__", "unknown")
    stand_in.__doc__ = getattr(func, "__doc__", None)
    stand_in.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
    stand_in.__annotations__ = {k: v for k, v in getattr(func, "__annotations__", {}).items() if k not in skip}
    return stand_in


class StatefulToolEnv(ToolEnv):
    def __init__(self, tools: list[Callable] | None = None, max_turns: int = 10,
                 error_formatter: Callable[[Exception], str] = lambda e: f"{e}",
                 stop_errors: list[type[Exception]] | None = None, **kwargs: Any):
        super().__init__(tools=tools, max_turns=max_turns, error_formatter=error_formatter,
                         stop_errors=stop_errors, **kwargs)
        self.skipped_args: dict[str, list[str]] = {}  # tool name -> arguments hidden from the model

    def add_tool(self, tool: Callable, args_to_skip: list[str] | None = None) -> None:  # type: ignore[override]
        skip = list(args_to_skip or [])
        # built from the original function minus the hidden parameters: their types never reach the schema
        self._register_tool(tool, function_tool_def(tool, skip=skip))
        self.skipped_args[tool_name(tool)] = skip

    def remove_tool(self, tool: Callable) -> None:
        super().remove_tool(tool)
        self.skipped_args.pop(tool_name(tool), None)

    @abstractmethod
    def update_tool_args(self, tool_name: str, tool_args: dict, messages: Messages, state: State,
                         **kwargs: Any) -> dict:
        """The arguments `tool_name` is called with, given the model's; may update `state` in place."""

    def _parse_tool_args(self, arguments: str) -> Any:
        args = super()._parse_tool_args(arguments)
        if not isinstance(args, dict):
            raise ValueError(f"Expected tool arguments to be a dict, got {type(args).__name__}: {args}")
        return args

    async def _prepare_tool_args(self, tool_name: str, tool_args: dict, messages: Messages, state: State,
                                 **kwargs: Any) -> dict:
        # an async override works too
        return await maybe_await(self.update_tool_args, tool_name, tool_args, messages, state, **kwargs)
