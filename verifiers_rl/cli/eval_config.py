"""vf-eval's config files, in the two shapes verifiers' evaluators read (docs/evaluation.md): `prime eval run`'s
(`[[eval]]` tables) and verifiers v1's `eval` format (`[env]`), and verifiers 0.4's flags for the latter's keys
(`--num-rollouts 4 --sampling.temperature 0.7 --env.taskset.split test`). Each evaluation becomes the namespace
vf-eval's flags would give, a flag on the command line winning; a key vf-eval cannot honour is one line naming it."""

from __future__ import annotations

import argparse
import json
import tomllib
from typing import Any

from verifiers_rl.config.loading import deep_merge

# a config key → vf-eval's argument
CLASSIC = {"id": "env_id", "env_id": "env_id", "args": "env_args", "env_args": "env_args", "name": "name",
           "num_examples": "num_examples", "rollouts_per_example": "rollouts_per_example", "model": "model",
           "max_tokens": "max_tokens", "temperature": "temperature", "max_concurrent": "max_concurrent",
           "sampling": "sampling_args", "sampling_args": "sampling_args", "seed": "seed", "shuffle_seed": "seed",
           "base_url": "base_url", "api_base_url": "base_url", "api_key_var": "api_key_var",
           "save_results": "save_results", "output_dir": "output_dir"}
# verifiers' v1 EvalConfig keys with their aliases, 0.4's and 0.3's (0.4 bounds the tasks by [select] limit / n)
V1 = {"model": "model", "m": "model", "num_tasks": "num_examples", "num_examples": "num_examples",
      "batch_size": "num_examples", "n": "num_examples", "num_rollouts": "rollouts_per_example",
      "rollouts_per_example": "rollouts_per_example", "group_size": "rollouts_per_example", "r": "rollouts_per_example",
      "max_concurrent": "max_concurrent", "c": "max_concurrent", "sampling": "sampling_args"}
V1_SELECT = {"limit": "num_examples", "n": "num_examples", "shuffle": "shuffle", "s": "shuffle", "seed": "shuffle_seed"}
# verifiers 0.4's vf-eval flags that are keys of its config: dotted ones (--sampling.temperature) and these
V1_FLAGS = ("num-rollouts", "num_rollouts", "dry-run", "dry_run", "clean", "resume", "push", "no-push")
V1_SWITCHES = ("dry-run", "dry_run", "clean", "resume", "push")  # take no value
CLIENT = {"base_url": "base_url", "api_key_var": "api_key_var"}
# vf-eval's argument → the type a config file gives it (its flags' types; a table or its JSON string)
ARG_TYPES: dict[str, Any] = {"num_examples": int, "rollouts_per_example": int, "max_tokens": int, "temperature": float,
                             "max_concurrent": int, "seed": int, "env_args": dict | str, "sampling_args": dict | str,
                             "env_id": str, "name": str, "model": str, "base_url": str, "api_key_var": str,
                             "save_results": bool, "output_dir": str, "shuffle": bool, "shuffle_seed": int}
IGNORED = ("shuffle", "verbose", "rich", "push", "run", "serve", "clean", "endpoints_path")


class EvalConfigError(ValueError):
    """A config file vf-eval cannot read, in one line."""


def config_path(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the config file, the other arguments): `@ file.toml`, or a .toml path where the environment id goes."""
    if len(argv) >= 2 and argv[0] == "@":
        return argv[1], argv[2:]
    for i, a in enumerate(argv):
        if a.endswith(".toml") and not a.startswith("-") and (i == 0 or not argv[i - 1].startswith("-")):
            return a, argv[:i] + argv[i + 1:]
    return None, argv


def _take(table: dict[str, Any], keys: dict[str, str], where: str) -> dict[str, Any]:
    """The table's keys as vf-eval's arguments: a misspelt key, one vf-eval cannot honour and a value of the wrong
    type are one line naming the key."""
    from verifiers_rl.value_check import type_error

    out = {}
    for key, value in table.items():
        if key in keys:
            bad = type_error(value, ARG_TYPES[keys[key]])
            if bad:
                raise EvalConfigError(f"{where}{key}: {bad}")
            out[keys[key]] = value
        elif key not in IGNORED:
            # a misspelling is near one of vf-eval's keys; verifiers' own keys it cannot honour (extra_env_kwargs)
            # are not
            from verifiers_rl.config.sections import close_match

            close = close_match(key, list(keys), cutoff=0.8)
            raise EvalConfigError(f"{where}{key}: unknown key (did you mean {where}{close}?)" if close
                                  else f"{where}{key}: not supported by vf-eval")
    return out


def _scalar(text: str) -> Any:
    """A flag's value as verifiers' config parser reads it: a number, true/false, a JSON table or list, else text
    ("null" too: the null harness's id)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return text if value is None else value


def v1_flags(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """verifiers 0.4's vf-eval flags for its config's keys, as the table an `@ eval.toml` gives, and the rest of
    `argv`: `--sampling.max-tokens 64` (or `=64`) is {"sampling": {"max_tokens": 64}}, `--no-push` {"push": false}."""
    tree: dict[str, Any] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        name = flag[2:]
        if not flag.startswith("--") or ("." not in name and name not in V1_FLAGS):
            rest.append(argv[i])
            i += 1
            continue
        if not eq:
            takes = name not in V1_SWITCHES and not name.startswith("no-")
            if takes and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value, i = argv[i + 1], i + 1
            else:
                value = "false" if name.startswith("no-") else "true"
        *path, last = name.removeprefix("no-").replace("-", "_").split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise EvalConfigError(f"--{name}: {'.'.join(path)} is given a value and keys")
        node[last] = _scalar(value)
        i += 1
    return tree, rest


def _v1_entry(raw: dict[str, Any]) -> dict[str, Any]:
    """verifiers v1's eval config (or its flags) as vf-eval's arguments; without an [env] block (flags beside an
    environment id) the environment is loaded as vf-eval loads one."""
    rest = {k: v for k, v in raw.items() if k not in ("env", "client", "select")}
    entry = {**_take(rest, V1, ""), **_take(raw.get("select") or {}, V1_SELECT, "select."),
             **_take(raw.get("client") or {}, CLIENT, "client.")}
    if "env" not in raw:
        return entry
    env = dict(raw["env"])
    taskset = env.get("taskset") or {}
    env_id = env.get("id") or taskset.get("id")
    if not env_id:
        raise EvalConfigError("env.taskset.id: required (the taskset to evaluate)")
    return {**entry, "env_id": env_id, "env_args": env, "api": "v1"}


def _entries(raw: dict[str, Any], v1_flags_given: bool = False) -> list[dict[str, Any]]:
    """One dict of vf-eval arguments per evaluation the file (and verifiers 0.4's flags) ask for."""
    if "eval" not in raw and ("env" in raw or v1_flags_given):  # verifiers v1's eval config, or its flags
        return [_v1_entry(raw)]
    evals = raw.get("eval")
    if not isinstance(evals, list) or not evals:
        raise EvalConfigError("eval: no [[eval]] table (one per environment: id = \"...\"), and no v1 [env] block")
    defaults = _take({k: v for k, v in raw.items() if k != "eval"}, CLASSIC, "")
    out = []
    for i, e in enumerate(evals):
        entry = {**defaults, **_take(e, CLASSIC, f"eval.{i}.")}
        if not entry.get("env_id"):
            raise EvalConfigError(f"eval.{i}.id: required (the environment to evaluate)")
        out.append(entry)
    return out


def eval_runs(argv: list[str], parser: argparse.ArgumentParser) -> list[argparse.Namespace]:
    """vf-eval's arguments, one namespace per evaluation (one without a config file)."""
    path, rest = config_path(argv)
    flags, rest = v1_flags(rest)
    if path is None and not flags:
        return [parser.parse_args(argv)]
    raw: dict[str, Any] = {}
    try:
        if path is not None:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise EvalConfigError(f"{path}: {e}") from None
    on_command_line = parser.parse_args(rest)
    if flags:
        if "eval" in raw:
            raise EvalConfigError(f"{path}: an [[eval]] file, with verifiers v1's flags (--num-rollouts, --sampling.*, "
                                  "--env.*), which go with a v1 config or an environment id; give vf-eval's flags")
        raw = deep_merge(raw, flags)
        env_id = on_command_line.env_id
        if env_id and "env" in raw and not (raw["env"].get("id") or (raw["env"].get("taskset") or {}).get("id")):
            raw["env"] = deep_merge(raw["env"], {"taskset": {"id": env_id}})  # verifiers: a bare id is the taskset's
    defaults = vars(parser.parse_args([]))
    given = {k: v for k, v in vars(on_command_line).items() if v != defaults[k]}
    runs = []
    for entry in _entries(raw, bool(flags)):
        for key in ("env_args", "sampling_args"):
            if isinstance(entry.get(key), dict):
                entry[key] = json.dumps(entry[key])
        if "output_dir" in entry:  # verifiers' directory to save under: naming it asks for the results there
            entry.update(output=entry.pop("output_dir"), save_results=True)
        runs.append(argparse.Namespace(**{**defaults, **entry, **given}))
    return runs
