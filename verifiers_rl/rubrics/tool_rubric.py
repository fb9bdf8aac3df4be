"""ToolRubric: tool-call count metrics (weight 0), as the rubric verifiers 0.1.11's ToolEnv adds to itself
(there it is `ToolMonitorRubric` in envs/tool_env.py; this module offers it under both names).

Metrics: `total_tool_calls` and one `<tool name>_calls` per tool; messages and tool calls may be dicts or records.
"""

from __future__ import annotations

from typing import Any, Callable

from verifiers_rl.record import get_field
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages


def _tool_call_name(call: Any) -> str | None:
    function = get_field(call, "function")
    if function is not None:
        name = get_field(function, "name")
        if isinstance(name, str):
            return name
    name = get_field(call, "name")
    return name if isinstance(name, str) else None


def tool_calls_in(completion: Messages) -> list[Any]:
    """Every tool call of the assistant messages of a completion (none for a plain-text completion)."""
    if not isinstance(completion, list):
        return []
    per_message = [get_field(msg, "tool_calls") for msg in completion if get_field(msg, "role") == "assistant"]
    return [call for calls in per_message if isinstance(calls, list) for call in calls]


class ToolRubric(Rubric):
    def __init__(self, tools: list[Callable] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.tools = list(tools or [])
        self.tool_names: list[str] = [t.__name__ for t in self.tools]  # type: ignore[union-attr]
        self.add_metric(self.total_tool_calls)
        for name in self.tool_names:
            self.add_metric(self.get_tool_call_count_func(name))

    def add_tool_metric(self, tool: Callable) -> None:
        name = tool.__name__  # type: ignore[union-attr]
        if name not in self.tool_names:
            self.tool_names.append(name)
            self.add_metric(self.get_tool_call_count_func(name))

    def remove_tool_metric(self, tool: Callable) -> None:
        name = tool.__name__  # type: ignore[union-attr]
        if name not in self.tool_names:
            return
        self.tool_names.remove(name)
        for i, func in enumerate(self.funcs):
            if getattr(func, "__name__", None) == f"{name}_calls":
                del self.funcs[i]
                del self.weights[i]
                break

    async def total_tool_calls(self, completion: Messages) -> float:
        """How many tool calls the model made in this rollout."""
        return float(len(tool_calls_in(completion)))

    def get_tool_call_count_func(self, tool_name: str) -> Callable:
        """A metric named `<tool_name>_calls`: how many calls to that tool the model made."""

        async def count_calls(completion: Messages) -> float:
            return float(sum(1 for c in tool_calls_in(completion) if _tool_call_name(c) == tool_name))

        count_calls.__name__ = count_calls.__qualname__ = f"{tool_name}_calls"
        return count_calls


ToolMonitorRubric = ToolRubric
