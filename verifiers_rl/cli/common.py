"""Helpers shared by the console scripts: one-line failures (tracebacks with --debug), the hub probe."""

from __future__ import annotations

import sys
from typing import NoReturn

from verifiers_rl.verbosity import debug, quiet_library_bars, take_debug_flag

__all__ = ["fail", "note_offline_hub", "quiet_library_bars", "take_debug_flag"]


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
