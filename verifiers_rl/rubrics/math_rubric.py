"""MathRubric: `correct_answer` checks the parsed final answer against the reference with math-verify.

math-verify's own timeouts use SIGALRM, which works only on the main thread, so they are off and the work runs on a
pool of daemon threads with our limit: a verification past `timeout_seconds` (counted from when a worker picks it up)
scores 0. Python cannot stop a thread, so it finishes in the background; daemons cannot hold up exit.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from verifiers_rl.parsers.maybe_think_parser import MaybeThinkParser
from verifiers_rl.parsers.parser import Parser
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages
from verifiers_rl.utils.data_utils import extract_boxed_answer


def boxed_or_text(text: str) -> str:
    """The last \\boxed{...} content, or the whole text when there is none (verifiers' extraction rule)."""
    found = extract_boxed_answer(text)
    return text if found is None else found


class DaemonThreadPool:
    """A minimal executor on daemon threads (at most `max_workers`, started on demand)."""

    def __init__(self, max_workers: int, name: str):
        self._max = max(1, int(max_workers))
        self._name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name}: pool is shut down")
            self._jobs.put((fut, fn, args))
            if self._threads < self._max:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
        return fut

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue  # the caller gave up before it started
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)

    def shutdown(self, wait: bool = False) -> None:
        """Stop the workers once the queued jobs are done (`wait` is accepted for executor parity)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in range(self._threads):
                self._jobs.put(None)


def parse(*args: Any, **kwargs: Any) -> Any:
    """math-verify's `parse` (imported on first use: it is slow to import)."""
    from math_verify import parse as math_parse

    return math_parse(*args, **kwargs)


def verify(*args: Any, **kwargs: Any) -> Any:
    from math_verify import verify as math_verify

    return math_verify(*args, **kwargs)


def verify_response(response: str, answer: str, max_verify_chars: int | None,
                    timeout_seconds: float = 5) -> tuple[float, float]:
    """(score, seconds taken) of `response` against `answer` (verifiers 0.3's module function); the caller enforces
    `timeout_seconds`. Unparseable input scores 0; cancellation and Ctrl-C propagate."""
    from math_verify.errors import TimeoutException

    start = time.perf_counter()
    if not response or (max_verify_chars is not None and len(response) > max_verify_chars):
        return 0.0, time.perf_counter() - start
    try:
        gold = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
        pred = parse(f"\\boxed{{{response}}}", parsing_timeout=None)
        ok = verify(gold, pred, timeout_seconds=None)
    except (Exception, TimeoutException):  # TimeoutException is a BaseException
        ok = False
    return float(ok), time.perf_counter() - start


def _set_started(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class MathRubric(Rubric):
    HARD_TIMEOUT_SECONDS: float = 120.0  # the longest a caller waits for a worker to become free
    # verifiers 0.3 scores a parsed answer longer than 50,000 characters 0 unverified; 0.1.11 verified any
    # length, so the limit applies only when an environment asks for one (`max_verify_chars=`).
    MAX_VERIFY_CHARS: int | None = None

    def __init__(self, funcs: list[Callable] | None = None, weights: list[float] | None = None,
                 parser: Parser | None = None, max_workers: int = 50, timeout_seconds: float = 5,
                 max_verify_chars: int | None = MAX_VERIFY_CHARS):
        super().__init__(funcs=funcs, weights=weights, parser=parser or MaybeThinkParser(extract_fn=boxed_or_text))
        self.add_reward_func(self.correct_answer)
        self.timeout_seconds = timeout_seconds
        self.max_verify_chars = max_verify_chars
        self.executor = DaemonThreadPool(max_workers, "math-verify")
        # We time verifications ourselves; its "timeout disabled" notices are noise.
        logging.getLogger("math_verify.parser").setLevel(logging.ERROR)
        logging.getLogger("math_verify.grader").setLevel(logging.ERROR)

    async def correct_answer(self, parser: Parser, completion: Messages, answer: str, **kwargs: Any) -> float:
        """1.0 when the parsed answer is mathematically equal to `answer`, else 0.0 (also on timeout)."""
        response = parser.parse_answer(completion) or ""
        limit = self.max_verify_chars
        if limit is not None and len(response) > limit:
            self.logger.warning("Skipping math verification: parsed response too long (%d chars > %d limit)",
                                len(response), limit)
            return 0.0
        return await self._run_timed(lambda: verify_response(response, answer, limit, self.timeout_seconds))

    async def _run_timed(self, job: Callable[[], tuple[float, float]]) -> float:
        loop = asyncio.get_running_loop()
        started = loop.create_future()

        def work() -> tuple[float, float]:
            try:
                loop.call_soon_threadsafe(_set_started, started)
            except RuntimeError:  # the caller's loop is gone: nobody wants the result
                return 0.0, 0.0
            return job()

        done = asyncio.wrap_future(self.executor.submit(work))
        try:
            await asyncio.wait_for(asyncio.shield(started), self.HARD_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            done.cancel()
            self.logger.warning("math verification waited %.0fs for a free worker (all busy or hung); scoring 0",
                                self.HARD_TIMEOUT_SECONDS)
            return 0.0
        try:
            limit = min(float(self.timeout_seconds), self.HARD_TIMEOUT_SECONDS)
            score, elapsed = await asyncio.wait_for(done, limit)
        except asyncio.TimeoutError:
            self.logger.debug("math verification exceeded %ss; scoring 0", self.timeout_seconds)
            return 0.0
        if elapsed > self.timeout_seconds:  # finished, but too late
            return 0.0
        return score

    async def teardown(self) -> None:
        """The rubric's teardown handlers, then its verification workers stop (verifiers 0.3)."""
        await super().teardown()
        self.executor.shutdown(wait=False)

    def __del__(self) -> None:
        executor = getattr(self, "executor", None)
        if executor is not None:
            executor.shutdown(wait=False)
