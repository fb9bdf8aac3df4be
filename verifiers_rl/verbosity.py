"""Process-wide console settings: --debug / VF_DEBUG (tracebacks behind one-line errors) and VF_VERBOSE (the
libraries' weight-loading bars). Light: the console scripts read it before anything heavy is imported."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

DEBUG_ENV = "VF_DEBUG"      # 1: a failure also prints its traceback (vf-rl / vf-eval / vf-sft --debug set it)
VERBOSE_ENV = "VF_VERBOSE"  # 1: keep the libraries' weight-loading / shard-writing progress bars
_TRUE = {"1", "true", "yes", "on"}


def env_flag(name: str) -> bool:
    """An environment variable set to a true value (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in _TRUE


def debug() -> bool:
    return env_flag(DEBUG_ENV)


def take_debug_flag(argv: list[str]) -> list[str]:
    """`--debug` anywhere in argv: sets VF_DEBUG=1 (inherited by the processes a run starts); argv without it."""
    if "--debug" in argv:
        os.environ[DEBUG_ENV] = "1"
    return [a for a in argv if a != "--debug"]


def quiet_library_bars() -> None:
    """transformers' "Loading weights" / "Writing model shards" bars off unless VF_VERBOSE=1 (download bars stay)."""
    if env_flag(VERBOSE_ENV):
        return
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as hf_logging

    downloads_off = are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # also turns off the hub's download bars: put those back
    if not downloads_off:
        enable_progress_bars()


def quiet_bars_begin() -> bool | None:
    """Scoped quiet_library_bars for library calls (a notebook's process is the user's): returns what to pass to
    quiet_bars_end, which puts transformers' bars back as they were."""
    if env_flag(VERBOSE_ENV):
        return None
    from transformers.utils import logging as hf_logging

    if not hf_logging.is_progress_bar_enabled():
        return None
    quiet_library_bars()
    return True


def quiet_bars_end(token: bool | None) -> None:
    if token:
        from transformers.utils import logging as hf_logging

        hf_logging.enable_progress_bar()


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """`datasets`' progress bars off inside the block (passes over rows that are instant), back as they were after."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    quiet = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not quiet:
            enable_progress_bars()
