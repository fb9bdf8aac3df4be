"""Async helpers that environment code imports as `verifiers.utils.async_utils`."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import threading
from collections.abc import Awaitable, Coroutine, Iterable
from time import perf_counter
from typing import Any, AsyncContextManager, Callable, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


async def maybe_await(func: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call `func`; await the result when it is awaitable (a coroutine function, or a sync one returning one)."""
    result = func(*args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


async def cancel_other_tasks() -> None:
    """Cancel every other task on the running loop and wait for them to end (a private loop closing cleanly)."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def gather_flat(aws: Iterable[Awaitable[list[T]]]) -> list[T]:
    """Run the awaitables together and concatenate their lists in order; when one fails, cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        parts = await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        raise
    return [x for part in parts for x in part]


async def with_sem(sem: AsyncContextManager, coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` while holding `sem`."""
    try:
        async with sem:
            return await coro
    finally:
        coro.close()  # no "never awaited" warning when cancelled while waiting for the semaphore


class NullAsyncContext:
    """An `async with` that does nothing: the semaphore of an unlimited run."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return False


async def maybe_semaphore(limit: int | None = None) -> AsyncContextManager:
    """An asyncio.Semaphore(limit) when limit > 0, else a no-op context."""
    if limit is not None and limit > 0:
        return asyncio.Semaphore(limit)
    return NullAsyncContext()


class EventLoopLagMonitor:
    """Samples how late the event loop wakes from short sleeps: a busy loop shows large lags."""

    def __init__(self, measure_interval: float = 0.1, max_measurements: int = 100_000,
                 logger: Any | None = None):
        if measure_interval <= 0 or max_measurements <= 0:
            raise ValueError("EventLoopLagMonitor: measure_interval and max_measurements must be positive")
        self.measure_interval = measure_interval
        self.max_measurements = max_measurements
        self.logger = logger or logging.getLogger(f"{__name__}.{type(self).__name__}")
        self.lags: list[float] = []

    async def measure_lag(self) -> float:
        due = perf_counter() + self.measure_interval
        await asyncio.sleep(self.measure_interval)
        return perf_counter() - due

    def reset(self) -> None:
        self.lags = []

    async def run(self) -> None:
        while True:
            self.lags.append(await self.measure_lag())
            if len(self.lags) > self.max_measurements:
                del self.lags[0]

    def run_in_background(self) -> asyncio.Task:
        return asyncio.create_task(self.run())


def _retryable_error(result: Any, error_types: tuple[type[BaseException], ...]) -> BaseException | None:
    """The retryable error recorded in a state (or in any state of a list), if any."""
    states = result if isinstance(result, list) else [result]
    from verifiers_rl.utils.error_utils import error_from_data, is_error_data

    for s in states:
        err = s.get("error") if isinstance(s, dict) else None
        if is_error_data(err):  # a serialized error (verifiers 0.3): its class rebuilt, subclasses included
            err = error_from_data(err)
        if isinstance(err, error_types):
            return err
    return None


def maybe_retry(func: Callable[..., Coroutine[Any, Any, T]], max_retries: int = 0, initial: float = 1.0,
                max_wait: float = 60.0, error_types: tuple[type[BaseException], ...] | None = None,
                ) -> Callable[..., Coroutine[Any, Any, T]]:
    """`func` itself when max_retries <= 0; else a wrapper that re-runs it (exponential backoff with jitter)
    while it raises, or returns state(s) recording, one of `error_types` (default: InfraError and
    InvalidModelResponseError). When the retries run out the last result is returned, error and all."""
    if max_retries <= 0:
        return func
    if error_types is None:
        from verifiers_rl.errors import InfraError, InvalidModelResponseError

        error_types = (InfraError, InvalidModelResponseError)
    name = getattr(func, "__name__", "function")

    async def wrapper(*args: Any, **kwargs: Any) -> T:
        last: Any = None
        have_result = False
        for attempt in range(max_retries + 1):
            try:
                last, have_result = await func(*args, **kwargs), True
                err = _retryable_error(last, error_types)
            except error_types as e:  # type: ignore[misc]
                err = e
                if attempt == max_retries and not have_result:
                    raise
            if err is None:
                return last
            if attempt < max_retries:
                wait = min(max_wait, initial * 2 ** attempt) + random.uniform(0, initial)
                logger.warning("%s: %s: %s; retry %d/%d in %.1fs", name, type(err).__name__, err,
                               attempt + 1, max_retries, wait)
                await asyncio.sleep(wait)
        logger.error("%s: retries exhausted after %d attempts; keeping the error in the state", name, max_retries)
        return last

    wrapper.__name__ = name
    wrapper.__qualname__ = getattr(func, "__qualname__", name)
    return wrapper


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, also when this thread already runs an event loop
    (a notebook): then it runs on a fresh loop in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="run-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
