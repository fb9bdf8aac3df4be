"""ToolEnv: the model calls Python functions as tools until it answers without calling one (verifiers 0.1.11).

Each tool call gets one `tool` message, the result or the error; a failing call is counted (`env.tool_errors`) and the
rollout goes on unless the error is in `stop_errors`. Sync tools run on a worker thread so a slow tool does not stall
the other rollouts.
"""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any, Callable

from verifiers_rl.decorators import stop
from verifiers_rl.envs.multiturn_env import MultiTurnEnv
from verifiers_rl.utils.tool_schema import tool_name
from verifiers_rl.errors import ToolCallError, ToolParseError
from verifiers_rl.record import get_field
from verifiers_rl.rubrics.tool_rubric import ToolMonitorRubric
from verifiers_rl.types import Messages, State, Tool, ToolCall, ToolMessage
from verifiers_rl.utils.tool_utils import convert_func_to_tool_def, is_valid_tool_content_parts

logger = logging.getLogger(__name__)

__all__ = ["ToolEnv", "ToolMonitorRubric"]


async def run_tool(func: Callable, args: dict[str, Any]) -> Any:
    """Call a tool with keyword arguments as verifiers does: a sync one on the event loop's thread (tools may hold
    thread-bound objects made at load time, such as a sqlite connection, or time out by `signal.alarm`), its
    result awaited when it is awaitable."""
    result = func(**args)
    return await result if inspect.isawaitable(result) else result


def tool_calls_of(message: Any) -> list[ToolCall] | None:
    """An assistant message's tool calls as `ToolCall` records (id, name, arguments), whatever form they came in."""
    calls = get_field(message, "tool_calls")
    if calls is None:
        return None
    return [c if isinstance(c, ToolCall) else ToolCall.model_validate(c) for c in calls]


class ToolEnv(MultiTurnEnv):
    def __init__(self, tools: list[Callable] | None = None, max_turns: int = 10,
                 error_formatter: Callable[[Exception], str] = lambda e: f"{e}",
                 stop_errors: list[type[Exception]] | None = None, **kwargs: Any):
        self.tools: list[Callable] = list(tools or [])
        self.max_turns = max_turns
        self.error_formatter = error_formatter
        self.stop_errors: list[type[Exception]] = list(stop_errors or [])
        self.tool_defs = [convert_func_to_tool_def(t) for t in self.tools]
        self.tool_map: dict[str, Callable] = {tool_name(t): t for t in self.tools}
        self.tool_errors = 0  # failed tool calls over this environment's lifetime (contained or not)
        super().__init__(tool_defs=self.tool_defs, max_turns=max_turns, **kwargs)
        self.tool_monitor_rubric = ToolMonitorRubric(tools=self.tools)
        self.add_rubric(self.tool_monitor_rubric)

    def _should_stop_for_error(self, err: Exception) -> bool:
        return any(isinstance(err, kind) for kind in self.stop_errors)

    # --- the tool set ---------------------------------------------------------------------------------
    def add_tool(self, tool: Callable) -> None:
        self._register_tool(tool, convert_func_to_tool_def(tool))

    def _register_tool(self, tool: Callable, tool_def: Tool) -> None:
        self.tools.append(tool)
        if self.tool_defs is None:
            self.tool_defs = []
        self.tool_defs.append(tool_def)
        self.tool_map[tool_name(tool)] = tool
        self.tool_monitor_rubric.add_tool_metric(tool)

    def remove_tool(self, tool: Callable) -> None:
        self.tools.remove(tool)  # ValueError for a tool this environment does not have
        name = tool_name(tool)
        self.tool_defs = [d for d in self.tool_defs or [] if d["name"] != name]
        self.tool_map.pop(name, None)
        self.tool_monitor_rubric.remove_tool_metric(tool)

    # --- the loop ---------------------------------------------------------------------------------------
    @stop
    async def no_tools_called(self, state: State) -> bool:
        """The model's last turn called no tool: it has answered."""
        if not state["trajectory"]:
            return False
        last = state["trajectory"][-1]["completion"][-1]
        return last.get("role") == "assistant" and not last.get("tool_calls")

    async def call_tool(self, tool_name: str, tool_args: dict, tool_call_id: str, **kwargs: Any) -> ToolMessage:
        """Run one tool; raises what the tool raises (KeyError for an unknown tool)."""
        result = await run_tool(self.tool_map[tool_name], tool_args)
        content = result if is_valid_tool_content_parts(result) else str(result)
        return ToolMessage(role="tool", content=content, tool_call_id=tool_call_id)

    def _parse_tool_args(self, arguments: str) -> Any:
        """The call's arguments from their JSON text (a non-object fails later, when the tool is called)."""
        return json.loads(arguments)

    async def _prepare_tool_args(self, tool_name: str, tool_args: dict, messages: Messages, state: State,
                                **kwargs: Any) -> dict:
        """Hook between parsing and calling (StatefulToolEnv injects state here)."""
        return tool_args

    def _tool_failure(self, err: Exception, wrapper: type[Exception], tool_call_id: str) -> ToolMessage:
        """A failed call: raise `wrapper` for a stop error, else tell the model what went wrong."""
        self.tool_errors += 1
        if self._should_stop_for_error(err):
            raise wrapper from err
        logger.debug("Tool call %s failed (%s: %s); the error goes back to the model",
                     tool_call_id, type(err).__name__, err)
        return ToolMessage(role="tool", content=self.error_formatter(err), tool_call_id=tool_call_id)

    async def _answer_tool_call(self, call: ToolCall, messages: Messages, state: State,
                               **kwargs: Any) -> ToolMessage:
        try:
            name, args = call.name, self._parse_tool_args(call.arguments)
        except Exception as e:
            return self._tool_failure(e, ToolParseError, call.id)
        args = await self._prepare_tool_args(name, args, messages, state, **kwargs)
        try:
            return await self.call_tool(name, args, call.id)
        except Exception as e:
            return self._tool_failure(e, ToolCallError, call.id)

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        """One `tool` message per tool call of the last assistant turn, in the order of the calls."""
        calls = tool_calls_of(messages[-1])
        assert calls is not None, "env_response is asked only after a turn that called tools"
        return [await self._answer_tool_call(call, messages, state, **kwargs) for call in calls]
