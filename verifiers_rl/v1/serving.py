"""Where a v1 env's episodes run: its `serving()` held open on a loop thread of its own, and the policy over HTTP.

`Env.serving()` is an async context meant to wrap a whole run, but the orchestrator generates each step on a loop of its
own, so the context lives on a private loop thread, left by `close()`. verifiers' `TrainClient` speaks only HTTP: the
local engine is served over HTTP, an HTTP policy through `inference.generate_proxy`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from typing import Any, Awaitable, Callable


class _SharedLoop:
    """The one loop thread every v1 env's `serving()` and episodes run on in this process: verifiers binds asyncio
    objects of its harnesses to the loop that first uses them, so two envs on two loops (several [[env]], a train
    and an eval env) would meet a lock "bound to a different event loop". Started by the first user, stopped when
    the last one leaves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._users = 0

    def acquire(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="vf-v1-env", daemon=True)
                self._thread.start()
            self._users += 1
            return self._loop

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._loop is None:
                return
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)


_SHARED = _SharedLoop()


class EnvServing:
    """`serving = EnvServing(env).start(); await serving.call(lambda: env.run_slot(...)); serving.close()`."""

    def __init__(self, env: Any, timeout_s: float = 300.0):
        self.env = env
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._held: Any = None
        self._lock = threading.Lock()

    async def _hold(self, ready: Any) -> None:
        self._stop = asyncio.Event()
        try:
            async with self.env.serving():
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e)
            raise

    def start(self) -> "EnvServing":
        with self._lock:
            if self._loop is not None:
                return self
            loop = _SHARED.acquire()
            ready: Any = __import__("concurrent.futures").futures.Future()
            self._held = asyncio.run_coroutine_threadsafe(self._hold(ready), loop)
            try:
                ready.result(timeout=self.timeout_s)
            except BaseException:
                _SHARED.release()
                raise
            self._loop = loop
            atexit.register(self.close)
        return self

    async def call(self, make: Callable[[], Awaitable[Any]]) -> Any:
        """Run `make()` on the serving loop; awaited (and cancelled with) the caller."""
        self.start()
        assert self._loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), self._loop))

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._stop is not None:
            loop.call_soon_threadsafe(self._stop.set)
        with contextlib.suppress(BaseException):
            self._held.result(timeout=60)
        _SHARED.release()


class PolicyEndpoint:
    """The base URL the env's TrainClient calls for `client` (the run's client object), started on first use."""

    def __init__(self) -> None:
        self._servers: dict[int, Any] = {}
        self._lock = threading.Lock()

    def base_url(self, client: Any) -> tuple[str, Any]:
        """(base URL, the engine or None) for the run's client: the local engine served over HTTP once, any HTTP
        policy through the generate proxy."""

        inner = getattr(client, "client", client)
        engine = getattr(inner, "engine", None)
        if engine is None:
            roots = list(getattr(inner, "roots", None) or [])  # the run's vLLM servers (inference.vllm_client)
            if not roots:
                url = str(getattr(inner, "base_url", "") or "")
                if not url.startswith("http"):
                    raise TypeError("a v1 environment needs an HTTP policy endpoint or the local engine, "
                                    f"got {inner!r}")
                roots = [url.rstrip("/")]
            from verifiers_rl.inference.generate_proxy import GenerateProxy

            timeout = getattr(inner, "timeout", None)
            timeout = float(timeout) if isinstance(timeout, (int, float)) else 600.0
            proxy = self._once(inner, lambda: GenerateProxy(roots, getattr(inner, "api_key", None),
                                                             timeout_s=timeout).start())
            return proxy.base_url, None
        from verifiers_rl.inference.local_http import serve_local_engine

        return self._once(engine, lambda: serve_local_engine(engine)).base_url, engine

    def _once(self, owner: Any, start: Any) -> Any:
        """The server `start()` made for `owner` (a client: its generate proxy; an engine: its HTTP server)."""
        with self._lock:
            srv = self._servers.get(id(owner))
            if srv is None:
                srv = self._servers[id(owner)] = start()
        return srv

    def upstream(self, base_url: str) -> str:
        """" (proxy to <servers>)" when `base_url` is a generate proxy of ours, else ""."""
        with self._lock:
            roots = [p.roots for p in self._servers.values() if getattr(p, "roots", None) and p.base_url == base_url]
        return f" (proxy to {', '.join(roots[0])})" if roots else ""

    def close(self) -> None:
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for srv in servers:
            srv.stop()
