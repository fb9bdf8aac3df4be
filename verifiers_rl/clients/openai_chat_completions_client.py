"""`OpenAIChatCompletionsClient`: the `vf.Client` over any AsyncOpenAI-compatible object (this package's engine too).

Requests ask for token ids and logprobs (vLLM's `return_token_ids`); a hosted API that refuses them is asked again
without, from then on. A dead server raises `ModelServerError`, NOT a `vf.Error`: it ends the run instead of failing
each rollout quietly.
"""

from __future__ import annotations

import json
from typing import Any

from verifiers_rl.clients.client import Client
from verifiers_rl.errors import (EmptyModelResponseError, InvalidModelResponseError, ModelServerError,
                                 OverlongPromptError)
from verifiers_rl.types import (ClientConfig, Messages, Response, ResponseMessage, ResponseTokens, SamplingArgs,
                                Tool, ToolCall, Usage)
from verifiers_rl.utils.message_utils import message_text

# Sampling keys the OpenAI SDK does not know: they travel in `extra_body` (vLLM reads them there).
EXTRA_BODY_KEYS = ("top_k", "min_p", "repetition_penalty", "min_tokens", "skip_special_tokens",
                   "return_token_ids", "ignore_eos", "spaces_between_special_tokens")
_CONTEXT_PHRASES = ("maximum context length", "longer than the model's context length",
                    "exceeds the model's context length", "exceed the configured limit",
                    "exceeds the configured limit", "exceeded model", "prompt_too_long", "context length")


def pop_extra_body(args: dict[str, Any]) -> dict[str, Any]:
    """Take `extra_body` and vLLM's own keys (EXTRA_BODY_KEYS) out of request `args`: the merged extra body."""
    extra_body = dict(args.pop("extra_body", None) or {})
    for key in EXTRA_BODY_KEYS:
        if key in args:
            extra_body[key] = args.pop(key)
    return extra_body


def chat_completion_args(sampling_args: dict[str, Any] | None) -> dict[str, Any]:
    """Sampling args as a chat-completions request sends them, as verifiers does: None values dropped, `max_tokens`
    sent as `max_completion_tokens` (OpenAI's reasoning models refuse `max_tokens`; vLLM reads either)."""
    args = {k: v for k, v in dict(sampling_args or {}).items() if v is not None}
    if "max_tokens" in args:
        args["max_completion_tokens"] = args.pop("max_tokens")
    return args


def _error_text(error: BaseException) -> str:
    """A server error's body (else its message), lower-cased, to read what it refused."""
    return str(getattr(getattr(error, "response", None), "text", "") or error).lower()


def refuses_token_fields(error: BaseException) -> bool:
    """A server's 400 naming vLLM's `return_token_ids` (a hosted API such as OpenAI's): ask again without the token
    fields, from then on."""
    return "return_token_ids" in _error_text(error)


def without_token_fields(args: dict[str, Any]) -> dict[str, Any]:
    """Request `args` without what a training run asks back: `logprobs` and `extra_body`'s `return_token_ids`."""
    out = {k: v for k, v in args.items() if k not in ("logprobs", "extra_body")}
    extra_body = {k: v for k, v in (args.get("extra_body") or {}).items() if k != "return_token_ids"}
    return {**out, "extra_body": extra_body} if extra_body else out


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    value = getattr(obj, key, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(key)
    return default if value is None else value


def native_message(m: Any) -> dict[str, Any]:
    role = _get(m, "role")
    if role == "text":
        return {"role": "user", "content": _get(m, "content")}
    out: dict[str, Any] = {"role": role, "content": _get(m, "content")}
    calls = _get(m, "tool_calls") if role == "assistant" else None
    if calls:
        out["tool_calls"] = [ToolCall(tc).to_openai() if not isinstance(tc, str) else json.loads(tc) for tc in calls]
    if role == "tool":
        out["tool_call_id"] = _get(m, "tool_call_id")
    if out["content"] is None and not calls:  # an assistant's tool calls may come without content
        out["content"] = ""
    return out


class OpenAIChatCompletionsClient(Client):
    def __init__(self, client_or_config: Any, want_tokens: bool = True, allow_empty: bool = False) -> None:
        super().__init__(client_or_config)
        self.want_tokens = want_tokens
        self.allow_empty = allow_empty  # trainers keep an empty reply as a (bad) sample instead of an error

    def setup_client(self, config: ClientConfig) -> Any:
        import os

        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=config.api_base_url, api_key=os.environ.get(config.api_key_var) or "EMPTY",
                           timeout=config.timeout, max_retries=config.max_retries,
                           default_headers=config.extra_headers or None)

    async def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            result = close()
            if hasattr(result, "__await__"):
                await result

    async def to_native_tool(self, tool: Tool) -> dict[str, Any]:
        fn = {"name": tool["name"], "description": tool.get("description") or "",
              "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        if tool.get("strict") is not None:
            fn["strict"] = tool["strict"]
        return {"type": "function", "function": fn}

    async def to_native_prompt(self, messages: Messages) -> tuple[list[dict[str, Any]], dict]:
        return [native_message(m) for m in messages], {}

    def _request_args(self, sampling_args: SamplingArgs) -> dict[str, Any]:
        args = chat_completion_args(sampling_args)
        extra_body = pop_extra_body(args)
        args.pop("n", None)  # one choice per request: rollouts are separate requests
        if self.want_tokens:
            extra_body["return_token_ids"] = True
            args["logprobs"] = True
        if extra_body:
            args["extra_body"] = extra_body
        return args

    async def get_native_response(self, prompt: list[dict[str, Any]], model: str, sampling_args: SamplingArgs,
                                  tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> Any:
        import openai

        asked_tokens = self.want_tokens  # this request's: rollouts in flight may have asked before it changed
        args = self._request_args(sampling_args)
        if tools:
            args["tools"] = tools
        try:
            return await self._client.chat.completions.create(model=model, messages=prompt, **args)
        except openai.BadRequestError as e:
            if asked_tokens and refuses_token_fields(e):
                self.want_tokens = False  # a hosted API without vLLM's fields
                return await self.get_native_response(prompt, model, sampling_args, tools)
            if any(p in _error_text(e) for p in _CONTEXT_PHRASES):
                raise OverlongPromptError(str(e)) from e
            raise
        except (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError) as e:
            raise ModelServerError(f"inference server failed: {type(e).__name__}: {e}") from e

    async def raise_from_native_response(self, response: Any) -> None:
        choices = None if response is None else _get(response, "choices")
        if not choices:
            raise EmptyModelResponseError("Model returned no response choices")
        if len(choices) != 1:
            raise InvalidModelResponseError(f"Model returned {len(choices)} choices, expected 1")
        msg = _get(choices[0], "message")
        has_text = bool(message_text(msg)) or bool(_get(msg, "reasoning_content"))
        if not (has_text or _get(msg, "tool_calls")) and not self.allow_empty:
            raise EmptyModelResponseError("Model returned no content, reasoning, and did not call any tools")

    async def from_native_response(self, response: Any) -> Response:
        choice = _get(response, "choices")[0]
        msg = _get(choice, "message")
        calls = [ToolCall(id=_get(tc, "id", ""), name=_get(_get(tc, "function"), "name", ""),
                          arguments=_get(_get(tc, "function"), "arguments", "") or "")
                 for tc in (_get(msg, "tool_calls") or [])]
        finish = _get(choice, "finish_reason")
        usage = _get(response, "usage")
        message = ResponseMessage(
            content=_get(msg, "content"), reasoning_content=_get(msg, "reasoning_content"),
            tool_calls=calls or None, finish_reason=finish if finish in ("stop", "length", "tool_calls") else None,
            is_truncated=finish == "length", tokens=self._tokens(response, choice))
        return Response(id=_get(response, "id", ""), created=_get(response, "created", 0),
                        model=_get(response, "model", ""), message=message,
                        usage=None if usage is None else Usage(
                            prompt_tokens=_get(usage, "prompt_tokens", 0),
                            completion_tokens=_get(usage, "completion_tokens", 0),
                            total_tokens=_get(usage, "total_tokens", 0)))

    @staticmethod
    def _tokens(response: Any, choice: Any) -> ResponseTokens | None:
        prompt_ids, completion_ids = _get(response, "prompt_token_ids"), _get(choice, "token_ids")
        content = _get(_get(choice, "logprobs"), "content")
        if prompt_ids is None or completion_ids is None or content is None:
            return None
        return ResponseTokens(prompt_ids=list(prompt_ids), prompt_mask=[0] * len(prompt_ids),
                              completion_ids=list(completion_ids), completion_mask=[1] * len(completion_ids),
                              completion_logprobs=[float(_get(t, "logprob")) for t in content])
