"""The environments' chat-completions client for one or more vLLM servers.

`VLLMClient` looks like an `AsyncOpenAI`; it spreads requests least-loaded by group (a prompt's requests stay on
one server, whose prefix cache serves them), retries transient failures, and turns a dead server into one
`ModelServerError` line, never a hang (docs/vllm.md). `post_all` posts admin requests to every server.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import random
import time
import weakref
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any, Callable

from verifiers_rl.errors import ModelServerError
from verifiers_rl.record import get_field


def split_url(url: str) -> tuple[str, str]:
    """(server root, OpenAI base URL) for `http://host:port` or `http://host:port/v1`."""
    root = url.rstrip("/").removesuffix("/v1")
    if "://" not in root:
        root = "http://" + root
    return root, root + "/v1"


def _one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def group_key(messages: Any) -> str:
    """The prompt a request continues: its messages before the first assistant turn."""
    head = []
    for m in messages or []:
        role = get_field(m, "role")
        if role == "assistant":
            break
        head.append(m if isinstance(m, dict) else str(m))
    return hashlib.sha1(json.dumps(head, sort_keys=True, default=str).encode()).hexdigest()


class VLLMClient:
    def __init__(self, urls: list[str], api_key: str | None = None, timeout: float = 600.0, max_retries: int = 3,
                 backoff_s: float = 0.5, max_backoff_s: float = 8.0,
                 server_status: Callable[[int], str | None] | None = None, affinity_size: int = 8192):
        if not urls:
            raise ValueError("VLLMClient needs at least one server URL")
        pairs = [split_url(u) for u in urls]
        self.roots = [r for r, _ in pairs]
        self.base_urls = [b for _, b in pairs]
        self.api_key = api_key or "EMPTY"
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.server_status = server_status
        # per server: the max_tokens of a request that names none (None: the server's own context limit applies);
        # VLLMBackend sets them from each server's /v1/models
        self.max_tokens_caps: list[int | None] = [None] * len(urls)
        self.inflight = [0] * len(urls)
        self.requests = [0] * len(urls)
        self._affinity: OrderedDict[str, int] = OrderedDict()
        self._affinity_size = affinity_size
        self._rr = 0
        # One AsyncOpenAI per server and event loop: httpx connection pools belong to the loop that opened them.
        self._clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _pick(self, messages: Any) -> int:
        if len(self.roots) == 1:
            return 0
        key = group_key(messages)
        idx = self._affinity.get(key)
        if idx is not None:
            self._affinity.move_to_end(key)
            return idx
        n = len(self.roots)
        order = [(self._rr + i) % n for i in range(n)]
        self._rr = (self._rr + 1) % n
        idx = min(order, key=lambda i: self.inflight[i])
        self._affinity[key] = idx
        if len(self._affinity) > self._affinity_size:
            self._affinity.popitem(last=False)
        return idx

    def _client(self, idx: int) -> Any:
        from openai import AsyncOpenAI

        loop = asyncio.get_running_loop()
        clients = self._clients.get(loop)
        if clients is None:
            clients = [AsyncOpenAI(base_url=b, api_key=self.api_key, timeout=self.timeout, max_retries=0)
                       for b in self.base_urls]
            self._clients[loop] = clients
        return clients[idx]

    def server_note(self, idx: int) -> str | None:
        """What the server process behind `idx` says about itself (e.g. it exited), or None when unknown."""
        if self.server_status is None:
            return None
        try:
            return self.server_status(idx)
        except Exception:
            return None

    def _backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * (0.75 + 0.5 * random.random())

    async def _create(self, **kwargs: Any) -> Any:
        import openai

        idx = self._pick(kwargs.get("messages"))
        cap = self.max_tokens_caps[idx]
        if cap is not None and kwargs.get("max_tokens") is None and kwargs.get("max_completion_tokens") is None:
            kwargs = {**kwargs, "max_completion_tokens": cap}
        self.inflight[idx] += 1
        self.requests[idx] += 1
        try:
            for attempt in itertools.count():
                try:
                    return await self._client(idx).chat.completions.create(**kwargs)
                except (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError) as e:
                    note = self.server_note(idx)
                    if note is not None or attempt >= self.max_retries:
                        what = f"{type(e).__name__}: {_one_line(getattr(e, 'message', e), 160)}"
                        raise ModelServerError(f"vLLM server {self.roots[idx]} failed after {attempt + 1} attempt(s) "
                                               f"({what})" + (f"; {note}" if note else "")) from None
                    await asyncio.sleep(self._backoff(attempt))
                except openai.NotFoundError as e:
                    # A model/adapter name the server doesn't serve fails every rollout: stop, don't score zeros.
                    raise ModelServerError(
                        f"vLLM server {self.roots[idx]} does not serve model {kwargs.get('model')!r}: "
                        f"{_one_line(getattr(e, 'message', e))}") from None
        finally:
            self.inflight[idx] -= 1

    def post_all(self, path: str, payload: dict[str, Any] | None = None, what: str = "request",
                 timeout: float = 300.0, retries: int = 2) -> list[Any]:
        """POST `path` to every server (in order); returns each one's JSON answer (None if not JSON).
        Raises ModelServerError naming the server, the route and the server's answer."""
        return [self.post(idx, path, payload, what, timeout, retries) for idx in range(len(self.roots))]

    def post(self, idx: int, path: str, payload: dict[str, Any] | None = None, what: str = "request",
             timeout: float = 300.0, retries: int = 2) -> Any:
        """POST `path` (may carry a query string) to server `idx`; retries connection errors and 5xx `retries`
        times (pass 0 for requests that must not run twice); returns the JSON answer (None if not JSON)."""
        import httpx

        root = self.roots[idx]
        for attempt in range(retries + 1):
            try:
                with httpx.Client(timeout=timeout) as http:
                    r = http.post(root + path, json=payload) if payload is not None else http.post(root + path)
            except httpx.HTTPError as e:
                note = self.server_note(idx)
                if note is None and attempt < retries:
                    time.sleep(self._backoff(attempt))
                    continue
                raise ModelServerError(
                    f"{what}: POST {root}{path} failed ({type(e).__name__}: {_one_line(e, 160)})"
                    + (f"; {note}" if note else "")) from None
            if r.status_code >= 500 and attempt < retries and self.server_note(idx) is None:
                time.sleep(self._backoff(attempt))
                continue
            if r.status_code >= 400:
                raise ModelServerError(f"{what}: POST {root}{path} answered {r.status_code}: {_one_line(r.text)}")
            try:
                return r.json()
            except ValueError:
                return None

    def get_json(self, idx: int, path: str, timeout: float = 30.0) -> Any:
        import httpx

        r = httpx.get(self.roots[idx] + path, timeout=timeout)
        r.raise_for_status()
        return r.json()
