"""Helpers shared by the console scripts: one-line failures (tracebacks with --debug), the hub probe."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from verifiers_rl.verbosity import debug, quiet_library_bars, take_debug_flag

__all__ = ["NAMES", "fail", "note_offline_hub", "program_name", "quiet_library_bars", "take_debug_flag"]

# Each console script's historical name -> the name no verifiers release installs: verifiers installs vf-eval,
# vf-setup and vf-install too, and in a venv with both, bin/vf-eval is whichever package was installed last.
NAMES = {"vf-rl": "vfrl", "vf-eval": "vfrl-eval", "vf-sft": "vfrl-sft", "vf-tiny-model": "vfrl-tiny-model",
         "vf-setup": "vfrl-setup", "vf-install": "vfrl-install"}
# The distributions known to install console scripts of our names (read only when a historical name runs: scanning
# every distribution's entry points is slow).
SHARE_NAMES = ("verifiers",)


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


def program_name(name: str) -> str:
    """The name this command runs as, for its usage lines (`name` under `python -m`); under a historical name an
    installed verifiers also uses, one stderr line says which name is always verifiers-rl's."""
    invoked = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if invoked not in (name, NAMES[name]):
        return name
    if invoked == name:
        others = _also_defined_by(invoked)
        if others:
            print(f"note: this {invoked} is verifiers-rl's; {' and '.join(others)} installs a {invoked} of its own "
                  f"(a venv keeps whichever was installed last); {NAMES[name]} always runs verifiers-rl's",
                  file=sys.stderr)
    return invoked


def _also_defined_by(script: str) -> list[str]:
    from importlib.metadata import PackageNotFoundError, distribution

    found = []
    for dist_name in SHARE_NAMES:
        try:
            dist = distribution(dist_name)
        except PackageNotFoundError:
            continue
        if any(ep.group == "console_scripts" and ep.name == script for ep in dist.entry_points):
            found.append(f"{dist.metadata['Name']} {dist.version}")
    return found
