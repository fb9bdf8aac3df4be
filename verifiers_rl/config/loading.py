"""TOML loading for `vf-rl`: `@ a.toml @ b.toml` deep-merged left to right, then `--section.key VALUE` overrides,
`--trainer @ trainer.toml` scoped files and `-e VAR[=value]` / `--wandb-api-key KEY` (never written anywhere). The
rules: docs/configuration.md#loading-rules (tested in tests/test_cli_config.py).
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from verifiers_rl.errors import ConfigError  # noqa: F401  (defined with the other errors; re-exported)


# Options of the command itself, not config keys.
RUN_OPTIONS = ("dry-run", "output-dir", "detach", "allow-cpu", "gpus", "gpu-memory-gb", "clean-output-dir")
# Options that put a variable into the run's environment (`apply_env_vars`; values never logged).
ENV_OPTIONS = ("-e", "--env-var", "--wandb-api-key")


@dataclass(frozen=True)
class ScopedFile:
    """`--trainer @ trainer.toml`: a file that is the table at `scope`, merged in file order."""
    scope: str
    path: Path

    def __str__(self) -> str:
        return f"--{self.scope} @ {self.path}"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Tables merge recursively; anything else (lists included) is replaced."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def map_leaves(value: Any, fn: Callable[[Any], Any]) -> Any:
    """`fn` applied to each value in nested tables and lists that is neither."""
    if isinstance(value, dict):
        return {k: map_leaves(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [map_leaves(v, fn) for v in value]
    return fn(value)


def none_strings(value: Any) -> Any:
    """TOML has no null: the string "None" stands for it."""
    return map_leaves(value, lambda v: None if v == "None" else v)


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    return _absolute_paths(data, path)


def _absolute_paths(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """`env_file` entries and `[env] path` / `[[eval.env]] path` are relative to the config file that names them:
    make them absolute here."""
    base = path.resolve().parent

    def absolute(p: str) -> str:
        return p if Path(p).is_absolute() else str((base / p).resolve())

    def fix(table: Any) -> Any:
        p = table.get("path") if isinstance(table, dict) else None
        if isinstance(p, str) and p != "None":  # "None": None (written configs)
            return {**table, "path": absolute(p)}
        return table

    data = dict(data)
    ef = data.get("env_file")
    items = [ef] if isinstance(ef, str) and ef != "None" else ef
    if isinstance(items, list) and all(isinstance(p, str) for p in items):  # else the schema reports the type
        data["env_file"] = [absolute(p) for p in items]
    if "env" in data:
        data["env"] = [fix(t) for t in data["env"]] if isinstance(data["env"], list) else fix(data["env"])
    ev = data.get("eval")
    if isinstance(ev, dict) and isinstance(ev.get("env"), list):
        data["eval"] = {**ev, "env": [fix(t) for t in ev["env"]]}
    return data


def parse_value(raw: str) -> Any:
    """A command-line value: "None" → None, JSON when it parses, else the string itself."""
    if raw == "None":
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # a bare string


def _key_parts(dotted: str) -> list[str]:
    parts = [k.replace("-", "_") for k in dotted.split(".")]
    if not dotted or any(not p for p in parts):
        raise ConfigError(f"--{dotted}: not a valid key path (use --section.key VALUE)")
    return parts


def set_path(cfg: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested tables; digits index lists (the list's length appends)."""
    keys = _key_parts(dotted)
    node: Any = cfg
    for i, k in enumerate(keys):
        key: Any = k
        if isinstance(node, list):
            if not k.isdigit():
                where = ".".join(keys[:i])
                raise ConfigError(f"{where}: is a list; index it with a number (--{where}.0...)")
            key = int(k)
            if key > len(node):
                raise ConfigError(f"{'.'.join(keys[:i + 1])}: index {key} is past the end of a list of {len(node)}")
            if key == len(node):
                node.append(None)
        elif not isinstance(node, dict):
            raise ConfigError(f"{'.'.join(keys[:i])}: is not a table, cannot set {dotted}")
        old = node[key] if isinstance(node, list) else node.get(key)
        if i == len(keys) - 1:
            # a table given on the command line merges into the table it overrides (like a later @ file would)
            node[key] = deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
            return
        if not isinstance(old, (dict, list)):
            node[key] = [] if keys[i + 1].isdigit() else {}
        node = node[key]


def pop_path(cfg: dict[str, Any], dotted: str, *, keep: bool = False) -> tuple[bool, Any]:
    """(whether `a.b.c` is in the nested tables, its value), removing it unless `keep`."""
    *parents, last = dotted.split(".")
    node: Any = cfg
    for k in parents:
        node = node.get(k) if isinstance(node, dict) else None
    if isinstance(node, dict) and last in node:
        return True, node[last] if keep else node.pop(last)
    return False, None


def _file_or_env_option(argv: list[str], i: int, files: list[Any], options: dict[str, Any]) -> int:
    """A config file (`@ a.toml`, `@a.toml`, `a.toml`, `--trainer @ trainer.toml`: a ScopedFile) or `-e VAR[=value]`
    / `--wandb-api-key KEY` (into options' env_vars) at argv[i]: how many arguments it took (0: none of those)."""
    a = argv[i]
    nxt = argv[i + 1] if i + 1 < len(argv) else ""
    if a == "@":
        if i + 1 >= len(argv):
            raise ConfigError("'@' must be followed by a config file path")
        files.append(Path(nxt))
        return 2
    if a.startswith("@"):
        files.append(Path(a[1:]))
        return 1
    if a in ENV_OPTIONS:
        if i + 1 >= len(argv):
            raise ConfigError(f"{a} needs a value ({'KEY' if a == '--wandb-api-key' else 'VAR or VAR=value'})")
        options.setdefault("env_vars", []).append(f"WANDB_API_KEY={nxt}" if a == "--wandb-api-key" else nxt)
        return 2
    if a.startswith("--") and "=" not in a and nxt.startswith("@"):
        path = (argv[i + 2] if i + 2 < len(argv) else "") if nxt == "@" else nxt[1:]
        if not path:
            raise ConfigError(f"{a} @ must be followed by a config file path")
        files.append(ScopedFile(".".join(_key_parts(a[2:])), Path(path)))
        return 3 if nxt == "@" else 2
    if a.endswith(".toml") and not a.startswith("-"):  # `vf-rl run config.toml`: the @ is implied
        files.append(Path(a))
        return 1
    return 0


# Run options that are switches: `vf-rl run --detach config.toml` reads config.toml, not detach = "config.toml".
SWITCH_OPTIONS = ("dry-run", "detach", "allow-cpu", "clean-output-dir")


def _takes_value(key: str, nxt: str) -> bool:
    """Whether `--key` takes the argument after it as its value: not another option (`--x`, `-e VAR`, a file after
    `@`), and after a switch only true / false."""
    if nxt.startswith(("--", "@")) or nxt in ENV_OPTIONS:
        return False
    return key not in SWITCH_OPTIONS or nxt.lower() in ("true", "false")


def split_argv(argv: list[str]) -> tuple[list[Any], list[tuple[str, Any]], dict[str, Any]]:
    """argv → (config files after `@` (Path, or ScopedFile for `--section @ file`), ordered key overrides, run
    options such as dry_run / output_dir / env_vars)."""
    files: list[Any] = []
    overrides: list[tuple[str, Any]] = []
    options: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        used = _file_or_env_option(argv, i, files, options)
        if used:
            i += used
            continue
        if not a.startswith("--") or a == "--":
            raise ConfigError(f"unexpected argument {a!r}; give config files as '@ file.toml' and keys as "
                              "--section.key VALUE")
        key = a[2:]
        value: Any
        if "=" in key:
            key, raw = key.split("=", 1)
            value = parse_value(raw)
        elif i + 1 < len(argv) and _takes_value(key, argv[i + 1]):
            value = parse_value(argv[i + 1])
            i += 1
        elif key.startswith("no-") or ".no-" in key:
            head, _, tail = key.rpartition("no-")
            key, value = head + tail, False
        else:
            value = True
        if key in RUN_OPTIONS:
            if key == "output-dir" and (value is True or value is False or value is None):
                raise ConfigError("--output-dir needs a directory")
            if key in ("gpus", "gpu-memory-gb") and (isinstance(value, bool) or not isinstance(value, (int, float))
                                                     or value < (0 if key == "gpus" else 1)):
                raise ConfigError(f"--{key} needs a number (--dry-run --gpus 4 [--gpu-memory-gb 80]: the plan for "
                                  "4 GPUs of 80 GB)")
            options[key.replace("-", "_")] = str(value) if key == "output-dir" else value
        else:
            overrides.append((key, value))
        i += 1
    return files, overrides, options


def parse_args(argv: list[str]) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Split argv into config files (after `@`), the merged raw config, and run options (dry_run, output_dir, ...)."""
    files, overrides, options = split_argv(argv)
    raw: dict[str, Any] = {}
    for f in files:
        if isinstance(f, ScopedFile):
            scoped: dict[str, Any] = {}
            set_path(scoped, f.scope, read_toml(f.path))
            raw = deep_merge(raw, scoped)
        else:
            raw = deep_merge(raw, read_toml(f))
    for key, value in overrides:
        set_path(raw, key, value)
    options["config_files"] = files
    return files, none_strings(raw), options


# --- .env files ------------------------------------------------------------------------------------------------------


def read_env_file(path: str | Path) -> dict[str, str]:
    """KEY=VALUE lines (`export ` prefix, quotes and `#` comments allowed). Values are never logged."""
    out: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        if "=" not in line:
            raise ConfigError(f"env_file: {path}, line {n}: expected KEY=VALUE")
        k, v = line.split("=", 1)
        k, v = k.strip(), v.strip()
        if not k.replace("_", "").isalnum():
            raise ConfigError(f"env_file: {path}, line {n}: {k!r} is not a variable name")
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            v = v[1:-1]
        elif " #" in v:
            v = v.split(" #", 1)[0].rstrip()
        out[k] = v
    return out


def load_env_files(paths: list[str], environ: Any = None) -> list[str]:
    """Put each file's variables into `environ` without overriding ones already set; their names (never values)."""
    environ = os.environ if environ is None else environ
    names: list[str] = []
    for p in paths:
        if not Path(p).is_file():
            raise ConfigError(f"env_file: {p} not found (paths are relative to the config file that names them)")
        for k, v in read_env_file(p).items():
            environ.setdefault(k, v)
            names.append(k)
    return names


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
