"""Environment output apart from the trainer's: in a vf-rl trainer process, what environment code prints while
rollouts run and the environment loggers' records go to `logs/env.log` (`env.rankN.log` for rank N > 0).

How: `generate_states` runs inside `env_output()`, which sets a context variable that rollout tasks and
`asyncio.to_thread` copy, and the sys.stdout / sys.stderr router sends writes made in that context to env.log. Nothing
is routed until `route_env_output` is called (vf-rl's worker does; a notebook keeps its output where it was)."""

from __future__ import annotations

import contextvars
import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, TextIO

ENV_LOGGERS = ("verifiers", "verifiers_rl.envs", "verifiers_rl.rubrics", "verifiers_rl.parsers")

_TARGET: contextvars.ContextVar[TextIO | None] = contextvars.ContextVar("vf_env_output", default=None)
_FILE: TextIO | None = None  # env.log, once route_env_output opened it


class _Router:
    """Stands in for sys.stdout / sys.stderr: a write made inside `env_output()` goes to env.log, any other to the
    stream it replaced; everything else (isatty, fileno, encoding, buffer) is the replaced stream's."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        target = _TARGET.get()
        if target is None:
            return self._stream.write(text)
        n = target.write(text)
        target.flush()  # a crash must not lose the environment's last lines
        return n

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def console_stderr() -> TextIO:
    """sys.stderr as the trainer's own lines need it: the stream the router replaced (a project line printed during
    a rollout, e.g. v1's runtime line, stays on the console and in trainer.log), else sys.stderr itself."""
    stream = sys.stderr
    return stream._stream if isinstance(stream, _Router) else stream


def env_log_name(rank: int) -> str:
    return "env.log" if rank == 0 else f"env.rank{rank}.log"


def route_env_output(logs_dir: Path, rank: int = 0) -> Path:
    """Send environment output to logs_dir/env.log from now on (this process); returns the file's path."""
    global _FILE
    path = Path(logs_dir) / env_log_name(rank)
    if _FILE is not None:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    _FILE = path.open("a", buffering=1, encoding="utf-8")
    handler = logging.StreamHandler(_FILE)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    for name in ENV_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            # INFO reaches env.log; the console still shows warnings only (Python's last-resort handler)
            logger.setLevel(logging.INFO)
    for attr in ("stdout", "stderr"):
        stream = getattr(sys, attr)
        if not isinstance(stream, _Router):
            setattr(sys, attr, _Router(stream))
    return path


@contextmanager
def env_output() -> Iterator[None]:
    """Inside: what this context (and tasks / threads that copy it) prints goes to env.log, when routed."""
    if _FILE is None:
        yield
        return
    token = _TARGET.set(_FILE)
    try:
        yield
    finally:
        _TARGET.reset(token)
