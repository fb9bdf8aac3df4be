"""MCPEnv: a ToolEnv whose tools come from MCP servers started over stdio (the `mcp` extra; verifiers' classic API).

The servers start once and serve every rollout (verifiers means them for global, read-only tool servers), their sessions
on a background loop of their own so any loop reaches them. They are the environment's own programs, not model code, so
they run as plain processes, not in the jail.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Callable

from verifiers_rl.decorators import teardown
from verifiers_rl.envs.tool_env import ToolEnv
from verifiers_rl.types import Tool, ToolMessage

__all__ = ["MCPEnv", "MCPServerConfig", "MCPServerConnection", "MCPToolWrapper", "MCPServerError"]


class MCPServerError(RuntimeError):
    """An MCP server did not start or answer (one line: which server, its command, why)."""


@dataclass
class MCPServerConfig:
    name: str
    command: str
    args: list[str] | None = None
    env: dict[str, str] | None = None
    description: str = ""

    def describe(self) -> str:
        return " ".join([self.command, *(self.args or [])])


def _mcp() -> Any:
    try:
        import mcp
        from mcp.client.stdio import stdio_client
    except ImportError:
        raise MCPServerError("MCPEnv needs the `mcp` package: `uv sync --extra mcp` (or `pip install mcp`)") from None
    return mcp, stdio_client


class MCPServerConnection:
    """One stdio server and its client session, held open by a task on the environment's background loop."""

    def __init__(self, config: MCPServerConfig, logger: Any = None):
        self.config = config
        self.logger = logger
        self.session: Any = None
        self.tools: dict[str, Any] = {}
        self._ready = asyncio.Event()
        self._closing: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._task: asyncio.Task | None = None

    async def connect(self) -> dict[str, Any]:
        self._closing = asyncio.Event()
        self._task = asyncio.create_task(self._hold())
        await self._ready.wait()
        if self._error is not None:
            raise MCPServerError(f"MCP server {self.config.name!r} ({self.config.describe()}) did not start: "
                                 f"{type(self._error).__name__}: {self._error}") from self._error
        return self.tools

    async def _hold(self) -> None:
        mcp, stdio_client = _mcp()
        params = mcp.StdioServerParameters(command=self.config.command, args=self.config.args or [],
                                           env=self.config.env)
        try:
            async with stdio_client(params) as (read, write), mcp.ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                self.tools = {t.name: t for t in listed.tools}
                self.session = session
                self._ready.set()
                await self._closing.wait()
        except BaseException as e:  # noqa: BLE001 -- any failure to start is reported by connect()
            if not self._ready.is_set():
                self._error = e
            elif not isinstance(e, asyncio.CancelledError) and self.logger is not None:
                self.logger.warning(f"MCP server {self.config.name!r} ended: {e}")
        finally:
            self.session = None
            self._ready.set()

    async def call_tool(self, tool_name: str, arguments: dict) -> str:
        if self.session is None:
            raise MCPServerError(f"MCP server {self.config.name!r} is not connected")
        result = await self.session.call_tool(tool_name, arguments=arguments)
        if not result.content:
            return "No result returned from tool"
        return "\n".join(getattr(item, "text", None) or str(item) for item in result.content)

    async def disconnect(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout=10)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._task.cancel()


class MCPToolWrapper:
    """A server's tool as a callable for ToolEnv; its schema is the server's own input schema."""

    def __init__(self, server_name: str, tool: Any, connection: MCPServerConnection, loop: Any):
        self.server_name, self.tool, self.server_connection, self._loop = server_name, tool, connection, loop
        self.__name__ = tool.name
        self.__doc__ = tool.description or ""

    async def __call__(self, **kwargs: Any) -> str:
        future = asyncio.run_coroutine_threadsafe(self.server_connection.call_tool(self.tool.name, kwargs),
                                                  self._loop)
        return await asyncio.wrap_future(future)

    def to_tool_def(self) -> Tool:
        schema = getattr(self.tool, "input_schema", None) or getattr(self.tool, "inputSchema", None)  # mcp 2 / 1
        return Tool(name=self.__name__, description=self.__doc__ or "",
                    parameters=dict(schema or {"type": "object", "properties": {}}))


class MCPEnv(ToolEnv):
    """Environment for MCP-based tools using the official MCP SDK."""

    def __init__(self, mcp_servers: list[MCPServerConfig | dict] | None = None, max_turns: int = 10,
                 error_formatter: Callable[[Exception], str] = lambda e: f"Error: {str(e)}", **kwargs: Any):
        _mcp()  # the one-line message before any thread or process starts
        self.mcp_servers = [s if isinstance(s, MCPServerConfig) else MCPServerConfig(
            name=s["name"], command=s["command"], args=s.get("args"), env=s.get("env"),
            description=s.get("description", "")) for s in (mcp_servers or [])]
        self.server_connections: dict[str, MCPServerConnection] = {}
        self.mcp_tools: dict[str, MCPToolWrapper] = {}
        super().__init__(tools=[], max_turns=max_turns, error_formatter=error_formatter, **kwargs)
        self._bg_loop = asyncio.new_event_loop()
        self._bg_thread = threading.Thread(target=self._bg_loop.run_forever, daemon=True, name="mcp-env")
        self._bg_thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._connect_servers(), self._bg_loop).result()
        except BaseException:
            self._stop_loop()
            raise

    async def _connect_servers(self) -> None:
        for config in self.mcp_servers:
            connection = MCPServerConnection(config, self.logger)
            self.server_connections[config.name] = connection  # disconnected on failure too
            try:
                tools = await connection.connect()
            except BaseException:
                await self._disconnect_all()
                raise
            for tool in tools.values():
                wrapper = MCPToolWrapper(config.name, tool, connection, self._bg_loop)
                self.mcp_tools[wrapper.__name__] = wrapper
                self.logger.info(f"Registered MCP tool: {wrapper.__name__} from server '{config.name}'")
        self.tools = list(self.mcp_tools.values())
        self.tool_defs = [w.to_tool_def() for w in self.tools]
        self.tool_map = dict(self.mcp_tools)

    async def _disconnect_all(self) -> None:
        for connection in self.server_connections.values():
            await connection.disconnect()
        self.server_connections.clear()
        self.mcp_tools.clear()

    async def call_tool(self, tool_name: str, tool_args: dict, tool_call_id: str, **kwargs: Any) -> ToolMessage:
        wrapper = self.tool_map.get(tool_name)
        if wrapper is None:
            content = f"Error: Tool '{tool_name}' not found"
        else:
            try:
                content = str(await wrapper(**tool_args))
            except Exception as e:  # noqa: BLE001 -- a failing tool answers the model, as in verifiers
                content = self.error_formatter(e)
        return ToolMessage(role="tool", content=content, tool_call_id=tool_call_id)

    def _stop_loop(self) -> None:
        if self._bg_loop.is_running():
            self._bg_loop.call_soon_threadsafe(self._bg_loop.stop)
            self._bg_thread.join(timeout=5)

    @teardown
    async def teardown_mcp_servers(self) -> None:
        if self._bg_loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._disconnect_all(), self._bg_loop)
            await asyncio.wrap_future(future)
        self._stop_loop()
