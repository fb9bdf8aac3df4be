"""An AsyncOpenAI-compatible client whose replies are scripted.

It stands in for a model where the test is about the harness (turn loop, tools, scoring), not about
generation; tests of token ids and logprobs use the real local engine instead.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable

from openai.types.chat import ChatCompletion

_ids = itertools.count()


def completion(content: str | None = None, tool_calls: list[tuple[str, Any]] | None = None,
               finish_reason: str = "stop", prompt_ids: list[int] | None = None,
               token_ids: list[int] | None = None) -> ChatCompletion:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{next(_ids)}", "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for name, args in tool_calls]
    toks = token_ids if token_ids is not None else list(range(len(content or "") or 1))
    choice = {"index": 0, "message": message, "finish_reason": finish_reason, "token_ids": toks,
              "logprobs": {"content": [{"token": str(t), "logprob": -0.5, "bytes": [], "top_logprobs": []}
                                       for t in toks]}}
    return ChatCompletion.model_validate({
        "id": f"cmpl-{next(_ids)}", "object": "chat.completion", "created": 0, "model": "scripted",
        "choices": [choice], "prompt_token_ids": prompt_ids if prompt_ids is not None else [1, 2, 3]})


class ScriptedClient:
    """`reply(messages, **kwargs) -> ChatCompletion` decides each answer; every request is recorded."""

    def __init__(self, reply: Callable[..., ChatCompletion]):
        self.requests: list[dict[str, Any]] = []
        client = self

        class _Completions:
            async def create(self, **kwargs: Any) -> ChatCompletion:
                client.requests.append(kwargs)
                return reply(**kwargs)

        class _Chat:
            completions = _Completions()

        self.chat = _Chat()


class HostedAPI:
    """A scripted chat-completions HTTP server (a thread on port 0) that answers a request carrying a field in `refuse`
    with a 400, as OpenAI's API refuses vLLM's `return_token_ids` (a field it does not know) and, for its reasoning
    models, `max_tokens`; it stands in for a hosted API the tests cannot reach. The first `hold` refusals are
    answered together, once that many requests are in flight (rollouts run at once); every request body is
    recorded. Use as a context manager; `base_url` is its /v1."""

    def __init__(self, text: str = "ok", hold: int = 1, refuse: tuple[str, ...] = ("return_token_ids",)):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[dict[str, Any]] = []
        refused, all_in, lock = [0], threading.Event(), threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append(body)
                refused_field = next((f for f in refuse if f in body), None)
                if refused_field is not None:
                    with lock:
                        refused[0] += 1
                        n = refused[0]
                    if n >= hold:
                        all_in.set()
                    if n <= hold:
                        all_in.wait(30)
                    message = (f"Unsupported parameter: '{refused_field}' is not supported with this model."
                               if refused_field == "max_tokens" else
                               f"Unrecognized request argument supplied: {refused_field}")
                    code, out = 400, {"error": {"message": message, "type": "invalid_request_error",
                                                "param": refused_field, "code": None}}
                else:
                    code, out = 200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": text}}],
                                      "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "HostedAPI":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
