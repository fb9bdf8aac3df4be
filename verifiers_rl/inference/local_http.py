"""The local engine served as an OpenAI-compatible HTTP endpoint on 127.0.0.1, for code that can only take a URL.

Routes: chat completions, `/inference/v1/generate` (`generate_route`), `/v1/models` (with `max_model_len`), `/health`.
Bad requests answer 400 with OpenAI's error body, so the openai client raises `BadRequestError` as against vLLM. No
streaming. Requests run on one private event loop (the engine batches per loop), except as `_generate_loop` says.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from verifiers_rl import policy_servers
from verifiers_rl.inference.generate_proxy import JSONHandler, JSONServer, json_error
from verifiers_rl.utils.async_utils import cancel_other_tasks


class LocalHTTPServer(JSONServer):
    """`with LocalHTTPServer(engine) as srv: AsyncOpenAI(base_url=srv.base_url, api_key="local")`."""

    def __init__(self, engine: Any, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 600.0,
                 policy: bool = True):
        self.engine = engine
        self.policy = policy  # the policy's engine: a judge from OPENAI_BASE_URL may not call it (policy_servers)
        self.timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="vf-local-http-loop", daemon=True)
        super().__init__(_handler(self), "vf-local-http", host, port)

    def start(self) -> "LocalHTTPServer":
        if not self._loop_thread.is_alive():
            self._loop_thread.start()
            self._http_thread.start()
            if self.policy:
                policy_servers.add(self.base_url)
        return self

    def stop(self) -> None:
        if not self._loop_thread.is_alive():
            return
        policy_servers.remove(self.base_url)
        self._httpd.shutdown()
        self._httpd.server_close()
        # the engine's batching worker lives on this loop: end it cleanly
        asyncio.run_coroutine_threadsafe(cancel_other_tasks(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> "LocalHTTPServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def complete(self, body: dict) -> dict:
        """One chat completion on the engine, from the HTTP thread (blocks it, not the loop)."""
        body = dict(body)
        body.pop("stream_options", None)
        fut = asyncio.run_coroutine_threadsafe(self.engine.chat_completion(**body), self._loop)
        return fut.result(timeout=self.timeout_s).model_dump(exclude_none=True)

    def generate(self, body: Any, request_id: str | None = None) -> dict:
        """One `/inference/v1/generate` call (token ids in, sampled token ids and logprobs out)."""
        from verifiers_rl.inference.generate_route import generate

        fut = asyncio.run_coroutine_threadsafe(generate(self.engine, body, request_id), self._generate_loop())
        return fut.result(timeout=self.timeout_s)

    def _generate_loop(self) -> asyncio.AbstractEventLoop:
        """The rollout driver's loop (the trainer's) while it runs rollouts on this engine, else this server's own:
        torch ops on a second thread get an OpenMP team of their own, which slows every small op of the trainer's.
        Only this route: a chat completion may come from a blocking client on the driver's own thread (a judge)."""
        loop = getattr(self.engine, "driver_loop", None)
        if (loop is not None and getattr(self.engine, "rollouts_in_flight", 0) > 0 and loop.is_running()
                and not loop.is_closed()):
            return loop
        return self._loop

    def models(self) -> dict:
        from verifiers_rl.inference.local_openai import engine_context

        card: dict[str, Any] = {"id": self.engine.model_name, "object": "model", "owned_by": "verifiers-rl"}
        ctx = engine_context(self.engine)
        if ctx:
            card["max_model_len"] = int(ctx)
        return {"object": "list", "data": [card]}


ROUTES = {"/v1/chat/completions": "complete", "/inference/v1/generate": "generate"}


def _handler(server: LocalHTTPServer) -> type:
    class Handler(JSONHandler):
        def do_GET(self) -> None:
            path = self._request()[0]
            if path == "/health":
                self._reply(200, {"status": "ok"})
            elif path == "/v1/models":
                self._reply(200, server.models())
            else:
                self._reply(404, json_error(404, f"no route {self.path}", "NotFoundError"))

        def do_POST(self) -> None:
            path, raw = self._request()
            route = ROUTES.get(path)
            if route is None:
                self._reply(404, json_error(404, f"no route {self.path}; the local engine serves "
                                            f"{', '.join(ROUTES)}", "NotFoundError"))
                return
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the request body must be a JSON object")
                if route == "generate":
                    self._reply(200, server.generate(body, self.headers.get("X-Request-Id")))
                else:
                    self._reply(200, server.complete(body))
            except Exception as e:
                # the engine's BadRequestError (status 400), bad JSON or arguments: 400; anything else: 500
                status = getattr(e, "status_code", None) or (400 if isinstance(e, (ValueError, TypeError)) else 500)
                kind = "BadRequestError" if status == 400 else "InternalServerError"
                self._reply(status, json_error(status, str(getattr(e, "message", None) or e), kind))

    return Handler


def serve_local_engine(engine: Any, port: int = 0) -> LocalHTTPServer:
    """Start serving `engine` on 127.0.0.1 (port 0: a free one); `.base_url` is what to hand out; `.stop()`."""
    return LocalHTTPServer(engine, port=port).start()
