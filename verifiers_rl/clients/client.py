"""`Client`: the provider-agnostic model client environments call (verifiers' `vf.Client`).

`get_response(...)` returns a `vf.Response`; a subclass implements the native steps. A failure that is not a
`vf.Error`, a dead server or an authentication error (those stop a run) becomes `vf.ModelError`, recorded by the
rollout instead of crashing it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from verifiers_rl.errors import Error, ModelError, ModelServerError
from verifiers_rl.types import ClientConfig, Messages, Response, SamplingArgs, Tool

ClientT = TypeVar("ClientT")
MessagesT = TypeVar("MessagesT")
ResponseT = TypeVar("ResponseT")
ToolT = TypeVar("ToolT")


def _auth_errors() -> tuple[type[BaseException], ...]:
    from openai import AuthenticationError, PermissionDeniedError

    return (AuthenticationError, PermissionDeniedError)


class Client(ABC, Generic[ClientT, MessagesT, ResponseT, ToolT]):
    def __init__(self, client_or_config: Any) -> None:
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")
        self._client = self.setup_client(client_or_config) if isinstance(client_or_config, ClientConfig) \
            else client_or_config

    @property
    def client(self) -> ClientT:
        return self._client

    @abstractmethod
    def setup_client(self, config: ClientConfig) -> ClientT: ...

    @abstractmethod
    async def to_native_tool(self, tool: Tool) -> ToolT: ...

    @abstractmethod
    async def to_native_prompt(self, messages: Messages) -> tuple[MessagesT, dict]: ...

    @abstractmethod
    async def get_native_response(self, prompt: MessagesT, model: str, sampling_args: SamplingArgs,
                                  tools: list[ToolT] | None = None, **kwargs: Any) -> ResponseT: ...

    @abstractmethod
    async def raise_from_native_response(self, response: ResponseT) -> None: ...

    @abstractmethod
    async def from_native_response(self, response: ResponseT) -> Response: ...

    @abstractmethod
    async def close(self) -> None: ...

    async def to_native_tools(self, tools: list[Tool] | None) -> list[ToolT] | None:
        if tools is None:
            return None
        return [await self.to_native_tool(t) for t in tools]

    async def get_response(self, prompt: Messages, model: str, sampling_args: SamplingArgs,
                           tools: list[Tool] | None = None, **kwargs: Any) -> Response:
        try:
            native_prompt, extra = await self.to_native_prompt(prompt)
            native_tools = await self.to_native_tools(tools)
            native = await self.get_native_response(native_prompt, model, sampling_args, native_tools,
                                                    **extra, **kwargs)
            await self.raise_from_native_response(native)
            return await self.from_native_response(native)
        except (Error, ModelServerError):  # a dead inference server ends the run, not one rollout
            raise
        except _auth_errors():
            raise
        except Exception as e:
            raise ModelError(f"{type(e).__name__}: {e}") from e
