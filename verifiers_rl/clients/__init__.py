"""Model clients environments call: the abstract `Client` and the OpenAI chat-completions client."""

from __future__ import annotations

from typing import Any

from verifiers_rl.clients.client import Client
from verifiers_rl.clients.openai_chat_completions_client import OpenAIChatCompletionsClient
from verifiers_rl.types import ClientConfig

__all__ = ["Client", "OpenAIChatCompletionsClient", "resolve_client"]


def resolve_client(obj: Any) -> Client:
    """A `vf.Client` from what a caller holds: a `Client` as is; a `ClientConfig`, or any AsyncOpenAI-compatible
    object (anything with `.chat.completions.create`, this package's local engine client included), wrapped in
    `OpenAIChatCompletionsClient`."""
    if isinstance(obj, Client):
        return obj
    if isinstance(obj, ClientConfig) and obj.client_type != "openai_chat_completions":
        raise ValueError(f"client_type {obj.client_type!r} is not supported by this runtime; "
                         f"use 'openai_chat_completions'")
    if not isinstance(obj, ClientConfig) and not hasattr(obj, "chat"):
        raise ValueError(f"Unsupported client type: {type(obj)}")
    return OpenAIChatCompletionsClient(obj)
