"""What the command line adds to a merged config before it is checked: `--wandb` / `--no-wandb` / `--wandb.project
x` in either format, keys renamed since (kept as deprecated aliases: one warning line naming the new key), and
`-e VAR[=value]` / `--wandb-api-key KEY` for the run's environment (values never printed or written)."""

from __future__ import annotations

import os
import sys
from typing import Any

from verifiers_rl.config.loading import ConfigError, deep_merge
from verifiers_rl.trainer.typed_table import DEPRECATED_KEYS

# old dotted key → new dotted key: TrainingArguments names transformers 5 removed (configs written for transformers
# 4 still carry them), and the top-level spellings of loss and estimator keys (RLConfig warns of them too).
RENAMED: dict[str, str] = {
    "trainer.args.no_cuda": "trainer.args.use_cpu",
    "trainer.args.evaluation_strategy": "trainer.args.eval_strategy",
    "trainer.args.push_to_hub_token": "trainer.args.hub_token",
    **{f"trainer.args.{k}": f"trainer.args.{section}.{k}" for k, section in DEPRECATED_KEYS.items()},
}


def _wandb_value(value: Any) -> Any:
    """A bare `--wandb` is W&B with its defaults, `--no-wandb` none."""
    return {} if value is True else None if value is False else value


def normalize_wandb(raw: dict[str, Any], hosted: bool) -> dict[str, Any]:
    """`wandb` at the top of a vf-rl config (the command line's `--wandb ...`) goes to trainer.args.wandb; a bare
    flag becomes a table (on) or None (off), in either format. `--no-wandb` also drops 'wandb' from report_to."""
    raw = dict(raw)
    if hosted:
        if "wandb" in raw:
            raw["wandb"] = _wandb_value(raw["wandb"])
        return raw
    if not isinstance(raw.get("trainer", {}), dict) or not isinstance((raw.get("trainer") or {}).get("args", {}), dict):
        return raw  # the schema reports the type error
    trainer = dict(raw.get("trainer") or {})
    args = dict(trainer.get("args") or {})
    if "wandb" in raw:
        top = _wandb_value(raw.pop("wandb"))
        inner = args.get("wandb")
        args["wandb"] = deep_merge(inner, top) if isinstance(inner, dict) and isinstance(top, dict) else top
    if "wandb" not in args:
        return raw
    args["wandb"] = _wandb_value(args["wandb"])
    if args["wandb"] is None:
        report = args.get("report_to")
        if report == "wandb":
            args["report_to"] = "none"
        elif isinstance(report, list):
            args["report_to"] = [r for r in report if r != "wandb"] or "none"
    raw["trainer"] = {**trainer, "args": args}
    return raw


def _pop_path(raw: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = raw
    keys = dotted.split(".")
    for k in keys[:-1]:
        node = node.get(k) if isinstance(node, dict) else None
    if isinstance(node, dict) and keys[-1] in node:
        return True, node.pop(keys[-1])
    return False, None


def apply_renames(raw: dict[str, Any]) -> dict[str, Any]:
    """Each deprecated key moves to its new name with one warning line; both given is an error."""
    import copy

    from verifiers_rl.config.loading import set_path

    raw = copy.deepcopy(raw)
    for old, new in RENAMED.items():
        found, value = _pop_path(raw, old)
        if not found:
            continue
        there, _ = _pop_path(copy.deepcopy(raw), new)
        if there:
            raise ConfigError(f"{old}: renamed {new}, which is set too; keep only {new}")
        print(f"warning: {old} is deprecated: it is now {new} (set that instead)", file=sys.stderr, flush=True)
        set_path(raw, new, value)
    return raw


def apply_env_vars(items: list[str], environ: Any = None) -> list[str]:
    """`-e VAR=value` sets VAR for this run and its children; `-e VAR` requires it set already. Returns the names."""
    environ = os.environ if environ is None else environ
    names = []
    for item in items:
        name, sep, value = item.partition("=")
        if not name or not name.replace("_", "").isalnum() or name[0].isdigit():
            raise ConfigError(f"-e {name or item!r}: not a variable name (use -e VAR or -e VAR=value)")
        if sep:
            environ[name] = value
        elif name not in environ:
            raise ConfigError(f"-e {name}: not set in this environment; export it, or give -e {name}=value")
        names.append(name)
    return names


def redact_argv(argv: list[str]) -> list[str]:
    """argv as run.json records it: the values of -e VAR=value and --wandb-api-key replaced by ***."""
    out: list[str] = []
    for i, a in enumerate(argv):
        prev = argv[i - 1] if i else ""
        if prev == "--wandb-api-key":
            a = "***"
        elif prev in ("-e", "--env-var") and "=" in a:
            a = a.split("=", 1)[0] + "=***"
        out.append(a)
    return out


def compose(raw: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A merged config with the command line's shorthands applied, and whether it is in the hosted format (decided
    once, `wandb` aside: the command line's --wandb fits either format)."""
    from verifiers_rl.config.hosted import is_hosted

    raw = apply_renames(raw)
    hosted = is_hosted({k: v for k, v in raw.items() if k != "wandb"})
    return normalize_wandb(raw, hosted), hosted
