"""Load an environment by id: a folder path, `verifiers-rl/<name>` (the shipped example only) or `[owner/]name` (order:
docs/environments.md); a module hiding another of the same name is said on stderr. Which verifiers API it speaks,
"classic" or "v1", is decided in ONE function, `environment_api`.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import inspect
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifiers_rl import verifiers_runtime
from verifiers_rl.envs.real_runtime import FIX

EXAMPLES_OWNER = "verifiers-rl"
EXAMPLES_PACKAGE = "verifiers_rl.examples"


class EnvironmentNotFound(ValueError):
    pass


class EnvironmentArgsError(TypeError):
    pass


class EnvironmentLoadError(ImportError):
    """The environment's module failed to import (a missing dependency, an error in its code): one line naming
    the environment, the error and what to do."""


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


@dataclass
class EnvSource:
    kind: str                 # "installed", "folder" or "example"
    module: str               # the name it is imported as
    file: Path | None         # its source file (None: not known before import)
    pkg_dir: Path | None      # the folder holding it and its pyproject.toml (folders and examples)
    id: str                   # the id that loads exactly this one

    def describe(self) -> str:
        what = {"installed": "installed module", "folder": "folder", "example": "example shipped with verifiers-rl"}
        return f"{self.file or self.module} ({what[self.kind]})"


def module_name_for(env_id: str) -> str:
    return env_id.strip().rstrip("/").split("/")[-1].replace("-", "_")


def _example_dirs() -> dict[str, Path]:
    from verifiers_rl.examples import example_dirs

    return example_dirs()


def available_environments() -> list[str]:
    """Ids of the environments found without installing anything: `environments/<name>/` here and the examples."""
    names = set(n.replace("_", "-") for n in _example_dirs())
    d = Path.cwd() / "environments"
    if d.is_dir():
        names |= {s.name.replace("_", "-") for s in d.iterdir() if _folder_file(s, s.name) is not None}
    return sorted(names)


def _folder_file(folder: Path, name: str) -> Path | None:
    for f in (folder / f"{name}.py", folder / name / "__init__.py"):
        if f.is_file():
            return f
    return None


def _folder_source(folder: Path, name: str, env_id: str) -> EnvSource | None:
    f = _folder_file(folder, name)
    return None if f is None else EnvSource("folder", name, f, folder, env_id)


def _example_source(name: str) -> EnvSource | None:
    d = _example_dirs().get(name)
    if d is None:
        return None
    return EnvSource("example", f"{EXAMPLES_PACKAGE}.{name}", d / f"{name}.py", d,
                     f"{EXAMPLES_OWNER}/{name.replace('_', '-')}")


def _importable_source(name: str) -> EnvSource | None:
    """An importable module `name` (installed, or already imported): where it is, without importing it."""
    mod = sys.modules.get(name)
    if mod is not None:
        origin = getattr(mod, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        if spec is None or spec.origin in (None, "namespace", "built-in", "frozen"):
            return None  # a bare folder of that name on sys.path is not an environment module
        origin = spec.origin
    return EnvSource("installed", name, Path(origin) if origin else None, None, name.replace("_", "-"))


def _same_file(a: EnvSource, b: EnvSource) -> bool:
    if a.file is None or b.file is None:
        return False
    try:
        return a.file.resolve() == b.file.resolve() or a.file.read_bytes() == b.file.read_bytes()
    except OSError:
        return False


def find_environment(env_id: str) -> tuple[EnvSource | None, list[EnvSource]]:
    """(the source this id loads, the other sources of the same name it hides), in the module docstring's order."""
    name = module_name_for(env_id)
    if not name.isidentifier():
        raise EnvironmentNotFound(f"environment id {env_id!r} is not a valid name")
    raw = env_id.strip()
    if is_folder_id(raw):
        path = Path(raw).expanduser()
        src = _folder_source(path, name, raw) if path.is_dir() else None
        if src is None:
            raise EnvironmentNotFound(f"environment {env_id!r}: {path} has no {name}.py (a folder id names the "
                                      f"folder holding <name>.py)")
        return src, []
    if "/" in raw and raw.split("/")[0].lower() == EXAMPLES_OWNER:
        return _example_source(name), []
    candidates = [_importable_source(name),
                  _folder_source(Path.cwd() / "environments" / name, name, f"./environments/{name}"),
                  _example_source(name)]
    found = [c for c in candidates if c is not None]
    if found and found[0].kind == "installed" and len(found) > 1 and _same_file(found[0], found[1]):
        found.pop(0)  # the folder itself, already on sys.path from an earlier load: it is the folder
    if not found:
        return None, []
    chosen = found[0]
    return chosen, [c for c in found[1:] if not _same_file(c, chosen)]


def environment_requirements(module_name: str, pkg_dir: Path | None = None) -> list[str]:
    """The requirement strings of the environment's package: its `pyproject.toml` in a workspace folder, else
    the installed distribution that provides the module."""
    if pkg_dir is not None and (pkg_dir / "pyproject.toml").exists():
        try:
            data = tomllib.loads((pkg_dir / "pyproject.toml").read_text())
            return list(data.get("project", {}).get("dependencies", []))
        except (OSError, ValueError):
            return []
    for dist in md.packages_distributions().get(module_name, []):
        try:
            return list(md.requires(dist) or [])
        except md.PackageNotFoundError:
            continue
    return []


API_CHOICES = ("auto", "classic", "v1")


def add_env_path(path: str | Path | None) -> None:
    """`[env] path` / vf-eval's `--env-path`: a directory put first on sys.path (holding the environment's module),
    and on PYTHONPATH, so the processes the environment starts (a tool server, a harness program) import it too."""
    if path is None:
        return
    where = str(Path(path).expanduser().resolve())
    if where not in sys.path:
        sys.path.insert(0, where)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if where not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([where, *parts])


def _exports_v1(module: Any) -> bool:
    """Whether `module` exports (`__all__`) a verifiers v1 Taskset or Env subclass, as verifiers' loader wants."""
    v1 = sys.modules.get("verifiers.v1")
    bases = tuple(b for b in (getattr(v1, "Taskset", None), getattr(v1, "Env", None)) if isinstance(b, type))
    return bool(bases) and any(isinstance(o := getattr(module, n, None), type) and issubclass(o, bases)
                               and o not in bases for n in getattr(module, "__all__", ()))


def _shipped_v1_taskset(name: str) -> bool:
    try:
        return importlib.util.find_spec(f"verifiers.v1.tasksets.{name}") is not None
    except (ImportError, ValueError):
        return False


def v1_module_name(env_id: str) -> str:
    """The module name verifiers imports a v1 taskset or Env id as: `owner/name@version` → `name`, '-' → '_'."""
    return env_id.strip().rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def v1_module(env_id: str) -> str | None:
    """The module a v1 taskset or Env id imports (`v1_module_name`; verifiers' own package first), without importing
    it; None: nothing of that name is installed."""
    name = v1_module_name(env_id)
    for module in (f"verifiers.v1.tasksets.{name}", f"verifiers.v1.envs.{name}", name):
        try:
            if importlib.util.find_spec(module) is not None:
                return module
        except (ImportError, ValueError):
            continue
    return None


def environment_api(env_id: str, api: str = "auto", path: str | Path | None = None) -> tuple[str, str]:
    """THE decision: ("classic" | "v1", why). Auto imports the module (the classic loader would import it next)."""
    if api not in API_CHOICES:
        raise EnvironmentNotFound(f"environment {env_id!r}: api {api!r} is not one of {', '.join(API_CHOICES)}")
    add_env_path(path)
    if api != "auto":
        return api, "asked for"
    if verifiers_runtime.v1_version() is None:
        return "classic", f"verifiers{verifiers_runtime.V1_RANGE} (v1) is not installed"
    src, _ = find_environment(env_id)
    name = module_name_for(env_id)
    if src is None:
        if _shipped_v1_taskset(name):
            return "v1", f"verifiers ships the v1 taskset {name!r}"
        return "classic", "no module found"
    if src.kind == "example":
        return "classic", "an example shipped with verifiers-rl"
    module = import_env_module(env_id)
    if hasattr(module, "load_environment"):
        return "classic", f"module {module.__name__!r} has load_environment()"
    if _exports_v1(module):
        return "v1", f"module {module.__name__!r} exports a verifiers v1 Taskset/Env"
    return "classic", f"module {module.__name__!r} exports no v1 Taskset/Env"


def is_folder_id(env_id: str) -> bool:
    raw = env_id.strip()
    return raw.startswith((".", "/", "~")) or os.sep in raw and Path(raw).expanduser().is_dir()


def _activate_runtime(module_name: str, pkg_dir: Path | None) -> None:
    """Decide who answers `import verifiers` for this environment (verifiers_runtime); an error stays one line."""
    try:
        verifiers_runtime.activate(env_requirements=environment_requirements(module_name, pkg_dir))
    except verifiers_runtime.RuntimeSettingError as e:
        raise EnvironmentNotFound(str(e)) from None


_noted: set[str] = set()


def _note_shadowed(env_id: str, chosen: EnvSource, hidden: list[EnvSource]) -> None:
    """One line, once per id and process: which file was loaded and how to load the one it hides."""
    if not hidden or env_id in _noted:
        return
    _noted.add(env_id)
    others = "; ".join(f"{h.describe()}: use id {h.id!r}" for h in hidden)
    print(f"environment {env_id!r}: loaded {chosen.describe()}; not loaded, same name: {others}", file=sys.stderr)


def _not_found(env_id: str) -> EnvironmentNotFound:
    name = module_name_for(env_id)
    avail = available_environments()
    if env_id.split("/")[0].lower() == EXAMPLES_OWNER and "/" in env_id:
        return EnvironmentNotFound(
            f"environment {env_id!r} not found: verifiers-rl ships no example {name!r}. Examples: "
            f"{', '.join(EXAMPLES_OWNER + '/' + n.replace('_', '-') for n in _example_dirs()) or '(none)'}")
    return EnvironmentNotFound(
        f"environment {env_id!r} not found: no module {name!r} is installed, no environments/{name}/ exists here "
        f"and no example of that name ships with verifiers-rl (a folder of your own: [env] path = DIR in vf-rl, "
        f"--env-path DIR in vf-eval). Available: {', '.join(avail) if avail else '(none)'}")


def import_env_module(env_id: str) -> Any:
    src, hidden = find_environment(env_id)
    if src is None:
        raise _not_found(env_id)
    if src.kind == "folder":
        loaded = sys.modules.get(src.module)
        loaded_file = getattr(loaded, "__file__", None)
        if loaded is not None and (not loaded_file or Path(loaded_file).resolve() != src.file.resolve()):
            raise EnvironmentLoadError(
                f"environment {env_id!r}: another module {src.module!r} ({loaded_file}) is already loaded in this "
                f"process; load {src.file} in a new process (or rename its folder and module)")
        if str(src.pkg_dir) not in sys.path:
            sys.path.insert(0, str(src.pkg_dir))
    if src.module not in sys.modules:
        _activate_runtime(src.module.split(".")[-1], src.pkg_dir)
    try:
        module = importlib.import_module(src.module)
    except ModuleNotFoundError as e:
        if e.name not in (src.module, src.module.split(".")[-1]):
            where = src.pkg_dir if src.pkg_dir is not None else src.module
            raise EnvironmentLoadError(
                f"environment {env_id!r} needs the module {e.name!r}, which is not installed: install the "
                f"environment's requirements (`uv run vfrl-install {where}`)") from e
        raise _not_found(env_id) from None
    except (EnvironmentNotFound, EnvironmentArgsError):
        raise
    except Exception as e:
        raise EnvironmentLoadError(f"importing environment {env_id!r} failed: {first_line(e)}{_drift_hint(e)}") from e
    if src.file is None and getattr(module, "__file__", None):
        src.file = Path(module.__file__)
    _note_shadowed(env_id, src, hidden)
    return module


def _drift_hint(e: Exception) -> str:
    """Under the real verifiers, a name the env file imports that this release lacks: how to run it anyway."""
    runtime = verifiers_runtime.current()
    if not isinstance(e, ImportError) or runtime.name != "real":
        return ""
    return f" (verifiers {runtime.version}); the env file may target another verifiers release: {FIX}"


def load_environment(env_id: str, **env_args: Any) -> Any:
    """Import the environment's module and call its `load_environment(**env_args)`."""
    module = import_env_module(env_id)
    loader = getattr(module, "load_environment", None)
    if loader is None:
        raise EnvironmentNotFound(f"module {module.__name__!r} has no load_environment() function")
    params = inspect.signature(loader).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in env_args if k not in params]
        if unknown:
            from verifiers_rl.value_check import close_match

            hints = [f"{k!r}" + (f" (did you mean {m!r}?)" if (m := close_match(k, list(params))) else "")
                     for k in unknown]
            raise EnvironmentArgsError(
                f"environment {env_id!r} does not take argument(s) {', '.join(hints)}; it accepts: "
                f"{', '.join(params) or '(none)'}")
    try:
        env = loader(**env_args)
    except OSError:  # a download or file problem, not version drift: its own message says what
        raise
    except Exception as e:
        runtime = verifiers_runtime.current()
        if runtime.name != "real":
            raise
        raise EnvironmentLoadError(
            f"environment {env_id!r}: load_environment() failed under verifiers {runtime.version}: {first_line(e)}; "
            f"the env file may target another verifiers release: {FIX}") from e
    env.env_id = env_id.strip().rstrip("/").split("/")[-1]

    verifiers_runtime.announce()
    return env


# --- for the CLIs: one line on failure -----------------------------------------------------------------------------


def takes_dataset_source(env_id: str) -> bool:
    """Whether the environment's load_environment() has a `dataset_source` argument."""
    try:
        loader = getattr(import_env_module(env_id), "load_environment", None)
        return loader is not None and "dataset_source" in inspect.signature(loader).parameters
    except Exception:
        return False


def load_environment_or_one_line(env_id: str, **env_args: Any) -> Any:
    """`load_environment` for the CLIs (vf-eval, vf-rl): a dataset the hub could not give raises one
    NetworkError line, the environment's own load_environment() raising one EnvironmentLoadError line."""
    from verifiers_rl.network import dataset_hub_message, hub_failures_as

    with hub_failures_as(lambda: dataset_hub_message(env_id, takes_dataset_source(env_id))):
        try:
            return load_environment(env_id, **env_args)
        except (EnvironmentNotFound, EnvironmentArgsError, EnvironmentLoadError):
            raise
        except Exception as e:  # a hub failure wrapped here is still one: hub_failures_as reads the cause chain
            raise EnvironmentLoadError(f"environment {env_id!r}: load_environment() failed: {first_line(e)}") from e
