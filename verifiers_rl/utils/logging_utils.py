"""Logging helpers environments call (`vf.setup_logging`, `vf.log_level`, `vf.quiet_verifiers`,
`vf.print_prompt_completions_sample`). Our modules log under `verifiers_rl`; environment code that logs under
`verifiers` (its own loggers) is configured by the same calls."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator

LOGGER_NAMES = ("verifiers_rl", "verifiers")


def setup_logging(level: str | int | None = "INFO", log_format: str | None = None, date_format: str | None = None,
                  log_file: str | None = None, log_file_level: str | int | None = None,
                  json_logging: bool = False) -> None:
    """Console (and optional file) handlers for our loggers; `level=None` silences them."""
    fmt = logging.Formatter(log_format or "%(asctime)s - %(name)s - %(levelname)s - %(message)s",
                            date_format or "%Y-%m-%d %H:%M:%S")
    for name in LOGGER_NAMES:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = False
        if level is None:
            logger.addHandler(logging.NullHandler())
            continue
        logger.setLevel(level.upper() if isinstance(level, str) else level)
        console = logging.StreamHandler()
        console.setFormatter(fmt)
        logger.addHandler(console)
        if log_file:
            fh = logging.FileHandler(log_file)
            fh.setFormatter(fmt)
            fh.setLevel((log_file_level or level).upper() if isinstance(log_file_level or level, str)
                        else (log_file_level or level))
            logger.addHandler(fh)


@contextmanager
def log_level(level: str | int) -> Iterator[None]:
    """Temporarily set our loggers' level."""
    loggers = [logging.getLogger(n) for n in LOGGER_NAMES]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level.upper() if isinstance(level, str) else level)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, before):
            lg.setLevel(lvl)


def quiet_verifiers() -> Any:
    """Only warnings and errors from our loggers, inside the `with` block."""
    return log_level("WARNING")


def print_prompt_completions_sample(prompts: list, completions: list, errors: list | None = None,
                                    rewards: list | None = None, step: int = 0, num_samples: int = 1,
                                    **_: Any) -> None:
    """A small table of prompt / completion / reward rows (rich)."""
    from rich.console import Console
    from rich.table import Table

    def text(messages: Any) -> str:
        if isinstance(messages, str):
            return messages
        return "\n".join(f"{m.get('role', '')}: {m.get('content') or ''}" for m in messages or [])

    table = Table(title=f"step {step}", show_lines=True)
    for col in ("prompt", "completion", "reward"):
        table.add_column(col)
    rewards = rewards or [None] * len(prompts)
    for p, c, r in list(zip(prompts, completions, rewards))[:max(1, num_samples)]:
        table.add_row(text(p)[-300:], text(c)[:600], "" if r is None else f"{float(r):.3f}")
    Console().print(table)
