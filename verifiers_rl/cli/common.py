"""Helpers shared by the console scripts: one-line failures, --debug, quiet third-party progress bars."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

DEBUG_ENV = "VF_DEBUG"      # 1: a failure also prints its traceback (vf-rl / vf-eval / vf-sft --debug set it)
VERBOSE_ENV = "VF_VERBOSE"  # 1: keep the libraries' weight-loading / shard-writing progress bars
_TRUE = {"1", "true", "yes", "on"}


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() in _TRUE


def take_debug_flag(argv: list[str]) -> list[str]:
    """`--debug` anywhere in argv: sets VF_DEBUG=1 (inherited by the processes a run starts); argv without it."""
    if "--debug" in argv:
        os.environ[DEBUG_ENV] = "1"
    return [a for a in argv if a != "--debug"]


def fail(message: str, code: int = 2) -> NoReturn:
    """One clear line on stderr, no traceback (with VF_DEBUG=1, the traceback of the error being handled first)."""
    if debug() and sys.exc_info()[0] is not None:
        import traceback

        traceback.print_exc()
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def note_offline_hub() -> None:
    """Probe the model hub once, before transformers / datasets are imported; unreachable → HF_HUB_OFFLINE=1 and
    a note on stderr (a few seconds at most, instead of minutes of the libraries' retries)."""
    from verifiers_rl.network import go_offline_if_hub_unreachable

    note = go_offline_if_hub_unreachable()
    if note:
        print(f"note: {note}", file=sys.stderr, flush=True)


def quiet_library_bars() -> None:
    """transformers' "Loading weights" / "Writing model shards" bars off unless VF_VERBOSE=1 (download bars stay)."""
    if os.environ.get(VERBOSE_ENV, "").strip().lower() in _TRUE:
        return
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as hf_logging

    downloads_off = are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # also turns off the hub's download bars: put those back
    if not downloads_off:
        enable_progress_bars()
