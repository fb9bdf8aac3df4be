"""verifiers' own vf-eval flags (0.3's `verifiers/scripts/eval.py`) that vf-eval has no flag of its own for: those
it honours under verifiers' name are aliases in `cli/eval.py`; here, those that change nothing here (display,
scheduling: a note) and those it cannot honour (one line naming what to do instead), so a verifiers command line
runs, or stops in one line, instead of argparse's "unrecognized arguments"."""

from __future__ import annotations

import argparse
import os

from verifiers_rl.verbosity import VERBOSE_ENV

# (flags, the value it takes: False none, True one, "?" an optional one, "append" repeated; what it means here)
NO_EFFECT = [  # display and scheduling: nothing measured changes
    (("-N", "--no-interleave-scoring"), False, "rollouts are scored as they finish either way"),
    (("-f", "--fullscreen"), False, "no live display here"),
    (("-d", "--disable-tui"), False, "no live display here"),
    (("-A", "--abbreviated-summary"), False, "the summary here is short already"),
    (("--disable-env-server",), False, "environments run in this process"),
    (("-w", "--num-workers"), True, "environments run in this process"),
]
REFUSED = [
    (("-R", "--resume"), "?", "each evaluation here starts afresh; run it again"),
    (("-i", "--independent-scoring"), False, "rollouts are scored by group, as the environment's rubric asks"),
    (("-H", "--save-to-hf-hub"), False, "save with -s, then upload the folder with `hf upload`"),
    (("-D", "--hf-hub-dataset-name"), True, "save with -s, then upload the folder with `hf upload`"),
    (("-x", "--extra-env-kwargs"), True, "give them in -a/--env-args when load_environment passes them on"),
    (("--timeout",), True, "give the environment its own timeout in -a/--env-args where it takes one"),
    (("--max-retries",), True, "a failed request is counted as the rollout's error, not retried"),
    (("--header",), "append", "an API key goes in the variable -k/--api-key-var names; other headers are not sent"),
    (("--header-from-state",), "append", "no headers are sent from the rollout's state"),
    (("-p", "--provider"), True, "give the server's URL with -b/--base-url and its key with -k/--api-key-var"),
    (("-e", "--endpoints-path"), True, "-m NAME reads configs/endpoints.py in the current folder"),
    (("--api-client-type",), True, "requests go to the OpenAI chat completions API"),
    (("--heartbeat-url",), True, "no heartbeat is sent"),
]


def _dest(flags: tuple[str, ...]) -> str:
    return "vf_" + flags[-1].lstrip("-").replace("-", "_")


def add_verifiers_flags(p: argparse.ArgumentParser) -> None:
    """verifiers' flags, hidden from --help (read by `apply_verifiers_flags`)."""
    for flags, value, _ in NO_EFFECT + REFUSED:
        if value == "append":
            p.add_argument(*flags, dest=_dest(flags), action="append", default=None, help=argparse.SUPPRESS)
        elif value == "?":
            p.add_argument(*flags, dest=_dest(flags), nargs="?", const=True, default=None, help=argparse.SUPPRESS)
        elif value:
            p.add_argument(*flags, dest=_dest(flags), default=None, help=argparse.SUPPRESS)
        else:
            p.add_argument(*flags, dest=_dest(flags), action="store_true", default=None, help=argparse.SUPPRESS)


def apply_verifiers_flags(args: argparse.Namespace) -> tuple[list[str], str | None]:
    """verifiers' --shuffle (its seed --shuffle-seed, else 0) and -v (VF_VERBOSE=1) applied to `args`; returns (a
    note per verifiers flag given that changes nothing here, one line for the first one that cannot be honoured,
    or None)."""
    if args.shuffle and args.seed is None:
        args.seed = args.shuffle_seed or 0
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"
    given = [(flags, why) for flags, _, why in NO_EFFECT if getattr(args, _dest(flags), None) is not None]
    notes = [f"note: {'/'.join(flags)} (verifiers' vf-eval) changes nothing here: {why}" for flags, why in given]
    for flags, _, fix in REFUSED:
        if getattr(args, _dest(flags), None) is not None:
            return notes, f"{'/'.join(flags)}: verifiers' vf-eval flag, not supported by this vf-eval; {fix}"
    return notes, None
