"""vLLM's `/inference/v1/generate` as verifiers 0.4's `TrainClient` reads it, in front of the run's vLLM servers.

renderers 0.1.x checks each logprob entry's `token` against `"token_id:N"`, but vLLM 0.32/0.33 write only `token_id`;
this proxy adds `token` and nothing else. An `X-Session-ID` goes where its session went (its prefix is cached there).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SESSION_HEADER = "X-Session-ID"
FORWARDED_HEADERS = ("Content-Type", SESSION_HEADER, "X-Request-Id")


def add_token_fields(reply: Any) -> Any:
    """vLLM's generate reply with `token: "token_id:N"` beside each logprob's `token_id` (in place)."""
    for choice in (reply.get("choices") or []) if isinstance(reply, dict) else []:
        content = (choice.get("logprobs") or {}).get("content") if isinstance(choice, dict) else None
        for entry in content or []:
            for item in [entry, *(entry.get("top_logprobs") or [])]:
                if isinstance(item, dict) and "token_id" in item and not item.get("token"):
                    item["token"] = f"token_id:{item['token_id']}"
    return reply


class JSONServer:
    """A stdlib threading HTTP server (of `handler`) on its own daemon thread; also the local engine's endpoint's
    (`local_http`)."""

    def __init__(self, handler: type, name: str, host: str = "127.0.0.1", port: int = 0):
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._http_thread = threading.Thread(target=self._httpd.serve_forever, name=name, daemon=True)
        self.host, self.port = self._httpd.server_address[:2]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


class GenerateProxy(JSONServer):
    """`proxy = GenerateProxy(["http://127.0.0.1:8000"]).start()`; hand out `proxy.base_url`; `proxy.stop()`."""

    def __init__(self, roots: list[str], api_key: str | None = None, timeout_s: float = 600.0,
                 retries: int = 3, affinity_size: int = 8192):
        import httpx

        if not roots:
            raise ValueError("GenerateProxy needs at least one vLLM server root URL")
        self.roots = [r.rstrip("/").removesuffix("/v1") for r in roots]
        self.retries = retries
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout_s, headers=auth)
        self._inflight = [0] * len(self.roots)
        self._sessions: OrderedDict[str, int] = OrderedDict()
        self._affinity_size = affinity_size
        self._lock = threading.Lock()
        self.requests = 0
        super().__init__(_handler(self), "vf-generate-proxy")

    def start(self) -> "GenerateProxy":
        if not self._http_thread.is_alive():
            self._http_thread.start()
        return self

    def stop(self) -> None:
        if self._http_thread.is_alive():
            self._httpd.shutdown()
            self._http_thread.join(timeout=10)
        self._httpd.server_close()
        self._http.close()

    def _pick(self, session: str | None) -> int:
        with self._lock:
            if session and session in self._sessions:
                self._sessions.move_to_end(session)
                idx = self._sessions[session]
            else:
                idx = min(range(len(self.roots)), key=lambda i: self._inflight[i])
                if session:
                    self._sessions[session] = idx
                    if len(self._sessions) > self._affinity_size:
                        self._sessions.popitem(last=False)
            self._inflight[idx] += 1
            self.requests += 1
        return idx

    def forward(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body) of `method path` on a server; the generate reply with its `token` fields added."""
        import httpx

        idx = self._pick(headers.get(SESSION_HEADER) if path.endswith("/generate") else None)
        try:
            for attempt in range(self.retries + 1):
                root = self.roots[(idx + attempt) % len(self.roots)]
                try:
                    r = self._http.request(method, root + path, content=body, headers=headers)
                    break
                except httpx.TransportError as e:
                    if attempt == self.retries:
                        msg = f"vLLM server {root} unreachable from the generate proxy: {type(e).__name__}: {e}"
                        return 502, json.dumps(json_error(502, msg, "BadGateway")).encode()
                    time.sleep(min(4.0, 0.5 * 2 ** attempt))
        finally:
            with self._lock:
                self._inflight[idx] -= 1
        if r.status_code != 200 or not path.endswith("/generate"):
            return r.status_code, r.content
        return 200, json.dumps(add_token_fields(r.json())).encode()


def json_error(status: int, message: str, kind: str) -> dict:
    """OpenAI's error body, its message on one line whatever raised it."""
    message = " ".join(str(message).splitlines()).strip()
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


ROUTES = {("POST", "/inference/v1/generate"), ("POST", "/inference/v1/abort_requests"), ("GET", "/v1/models"),
          ("GET", "/health")}


class JSONHandler(BaseHTTPRequestHandler):
    """Answers JSON bodies over kept-alive connections (clients reuse them); logs nothing (a line per request would
    drown the run's console). Also the local engine's endpoint's (`local_http`)."""

    protocol_version = "HTTP/1.1"

    def _request(self) -> tuple[str, bytes]:
        length = int(self.headers.get("Content-Length") or 0)
        return self.path.split("?")[0].rstrip("/"), self.rfile.read(length) if length else b""

    def _reply(self, status: int, data: bytes | dict) -> None:
        data = json.dumps(data).encode() if isinstance(data, dict) else data
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return None


def _handler(proxy: GenerateProxy) -> type:
    class Handler(JSONHandler):
        def _route(self, method: str) -> None:
            path, body = self._request()
            if (method, path) not in ROUTES:
                routes = ", ".join(sorted(p for _, p in ROUTES))
                self._reply(404, json_error(404, f"no route {self.path}; the proxy serves {routes}", "NotFoundError"))
                return
            headers = {k: v for k in FORWARDED_HEADERS if (v := self.headers.get(k))}
            self._reply(*proxy.forward(method, path, body or None, headers))

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

    return Handler
