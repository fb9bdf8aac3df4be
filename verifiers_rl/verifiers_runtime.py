"""Who answers `import verifiers`: this package's classic-API runtime ("ours") or the real package ("real").

Decided in ONE function, `resolve_runtime` (docs/verifiers-runtime.md). For `ours` an import hook (`VerifiersAlias`)
makes `verifiers.<path>` the SAME module objects as `verifiers_rl.<path>`, so `isinstance` holds across both names, and
no `verifiers` package is shipped to shadow a real one. `REAL_ONLY` paths (`verifiers.v1`) are never aliased.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterable

SETTING = "VF_VERIFIERS_RUNTIME"
CHOICES = ("auto", "ours", "real")
CLASSIC_RANGE = ">=0.2.1,<0.4"  # verifiers releases with the classic API that the real path drives
V1_ONLY_RANGE = ">=0.4"  # verifiers releases whose `import verifiers` has no classic API: everything is verifiers.v1
# verifiers' module paths that only the real package answers, never ours (its v1 stack; 0.4.0's wheel holds nothing
# else but the root's __version__). A path below one of them (verifiers.v1.x) is found by the normal machinery.
REAL_ONLY = ("verifiers.v1",)
V1_INSTALL = "`uv sync --extra verifiers-v1` (pip: `pip install 'verifiers-rl[verifiers-v1]'`)"
V1_RANGE = ">=0.4,<0.5"  # the verifiers releases whose v1 API verifiers_rl.v1 drives


@dataclass(frozen=True)
class Runtime:
    name: str           # "ours" or "real"
    reason: str         # why, for the console line
    version: str | None = None  # the real package's version when it answers
    v1: str | None = None  # with "ours": the version of an installed v1-only verifiers (it answers verifiers.v1)

    def describe(self) -> str:
        if self.name == "real":
            return f"verifiers runtime: real verifiers {self.version} ({self.reason})"
        v1 = f"; installed verifiers {self.v1} answers `import verifiers.v1`" if self.v1 else ""
        v1 = "" if self.v1 and self.v1 in self.reason else v1
        return f"verifiers runtime: ours, verifiers-rl's classic API ({self.reason}{v1})"


class RuntimeSettingError(ValueError):
    pass


def installed_verifiers_version() -> str | None:
    """The version of an installed real `verifiers` distribution, or None."""
    try:
        return importlib.metadata.version("verifiers")
    except importlib.metadata.PackageNotFoundError:
        return None


def v1_version() -> str | None:
    """The installed verifiers version when it has the v1 API verifiers_rl.v1 drives (V1_RANGE), else None."""
    version = installed_verifiers_version()
    return version if version is not None and _in_range(version, V1_RANGE) else None


def _in_range(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(spec)
    except InvalidVersion:
        return False


def resolve_runtime(setting: str | None = None, env_requirements: Iterable[str] = ()) -> Runtime:
    """THE decision. `setting` defaults to $VF_VERIFIERS_RUNTIME (else "auto"); `env_requirements` are the
    environment distribution's requirement strings (e.g. "verifiers>=0.1.9")."""
    choice = (setting or os.environ.get(SETTING) or "auto").strip().lower()
    if choice not in CHOICES:
        raise RuntimeSettingError(f"{SETTING}={choice!r}: choose one of {', '.join(CHOICES)}")
    version = installed_verifiers_version()
    v1 = version if version is not None and _in_range(version, V1_ONLY_RANGE) else None
    if choice == "ours":
        return Runtime("ours", f"{SETTING}=ours" if not setting else "asked for", v1=v1)
    if version is None:
        reason = "the real verifiers package is not installed"
    elif v1:
        reason = (f"installed verifiers {version} is v1-only, outside {CLASSIC_RANGE}: it answers "
                  f"`import verifiers.v1`, classic `import verifiers` gets ours")
    elif not _in_range(version, CLASSIC_RANGE):
        reason = f"installed verifiers {version} is outside {CLASSIC_RANGE} (0.4+ has no classic API)"
    else:
        bad = _requirement_refusing(version, env_requirements)
        reason = f"the environment requires {bad}, installed is {version}" if bad else ""
    if choice == "real":
        if reason:
            raise RuntimeSettingError(f"{SETTING}=real but {reason}; install it with "
                                      f"`uv pip install 'verifiers{CLASSIC_RANGE}'` or use auto/ours")
        return Runtime("real", "asked for", version)
    if reason:
        return Runtime("ours", reason, v1=v1)
    return Runtime("real", f"installed, within {CLASSIC_RANGE}", version)


def _requirement_refusing(version: str, requirements: Iterable[str]) -> str | None:
    from packaging.requirements import InvalidRequirement, Requirement

    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower() == "verifiers" and req.specifier and not req.specifier.contains(version, prereleases=True):
            return f"verifiers{req.specifier}"
    return None


# --- the import hook ---------------------------------------------------------------------------------------
class _AliasLoader(importlib.abc.Loader):
    def __init__(self, module: Any):
        self.module = module

    def create_module(self, spec: Any) -> Any:
        return self.module  # the already-imported verifiers_rl module: one object under both names

    def exec_module(self, module: Any) -> None:
        pass


# verifiers' module paths whose contents live elsewhere here (kept out of `utils` to keep the layers acyclic).
MOVED = {"verifiers.utils.env_utils": "verifiers_rl.envs.loading"}


class VerifiersAlias(importlib.abc.MetaPathFinder):
    """Answers `verifiers[.x.y]` with `verifiers_rl[.x.y]` (or the module MOVED names)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "verifiers" and not fullname.startswith("verifiers."):
            return None
        if _real_only(fullname):
            return _real_spec(fullname)
        runtime = _state["runtime"] or _decide_on_first_import()
        if runtime is None or runtime.name != "ours":
            return None  # the real package (or the normal "No module named") answers
        ours = MOVED.get(fullname) or "verifiers_rl" + fullname[len("verifiers"):]
        try:
            module = importlib.import_module(ours)
        except ModuleNotFoundError as e:
            if e.name and (e.name == ours or ours.startswith(e.name + ".")):
                return None  # a path we do not provide: the normal "No module named" follows
            raise
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package=hasattr(module, "__path__"))


def _real_only(fullname: str) -> bool:
    return any(fullname == p or fullname.startswith(p + ".") for p in REAL_ONLY)


def _ours(module: Any) -> bool:
    return getattr(module, "__name__", "").startswith("verifiers_rl")


def _real_spec(fullname: str) -> Any:
    """A REAL_ONLY path: the real package's module, never ours, found on sys.path without running its __init__ (None
    under a real root: the normal machinery finds it). Not there: one line naming the fix."""
    parent = sys.modules.get(fullname.rpartition(".")[0])
    if parent is not None and not _ours(parent):
        return None
    root = importlib.machinery.PathFinder.find_spec("verifiers")  # sys.path only: this hook is not consulted
    places = root.submodule_search_locations if root is not None else None
    spec = importlib.machinery.PathFinder.find_spec(fullname, list(places)) if places else None
    if spec is None:
        version = installed_verifiers_version()
        where = (f"the installed verifiers {version} has none" if version else "the real verifiers package is not "
                 "installed (verifiers-rl answers only the classic `import verifiers`)")
        raise ModuleNotFoundError(f"No module named {fullname!r}: it is the real verifiers' v1 API "
                                  f"(verifiers{V1_ONLY_RANGE}) and {where}; install it with {V1_INSTALL}",
                                  name=fullname)
    return spec


_state: dict[str, Any] = {"runtime": None, "announced": False}


def _decide_on_first_import() -> Runtime | None:
    """The decision at the first `import verifiers` when nothing decided earlier (importing verifiers_rl reads no
    metadata); an invalid setting is left to be reported where an environment is loaded."""
    try:
        _state["runtime"] = resolve_runtime()
    except RuntimeSettingError:
        return None
    return _state["runtime"]


def alias_installed() -> bool:
    return any(isinstance(f, VerifiersAlias) for f in sys.meta_path)


def install_alias() -> None:
    if not alias_installed():
        sys.meta_path.insert(0, VerifiersAlias())


def uninstall_alias() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, VerifiersAlias)]
    for name in [n for n in sys.modules if n == "verifiers" or n.startswith("verifiers.")]:
        if getattr(sys.modules[name], "__name__", "").startswith("verifiers_rl"):
            del sys.modules[name]


def activate(setting: str | None = None, env_requirements: Iterable[str] = ()) -> Runtime:
    """Apply the decision for this process: install the hook for `ours`. Once a real `verifiers` module has been
    imported it stays (a process cannot hold both); the decision then reports it."""
    runtime = resolve_runtime(setting, env_requirements)
    loaded = sys.modules.get("verifiers")
    if loaded is not None and not _ours(loaded) and runtime.name == "ours" and runtime.v1:
        _replace_v1_only_root()  # a v1-only root (`import verifiers.v1` came first): no classic API to keep
        install_alias()
    elif loaded is not None and not _ours(loaded):
        if runtime.name == "ours":
            runtime = Runtime("real", "already imported in this process", installed_verifiers_version())
    elif runtime.name == "ours":
        install_alias()
    elif alias_installed():
        uninstall_alias()
    _state["runtime"] = runtime
    return runtime


def _replace_v1_only_root() -> None:
    """Our classic root in place of an imported v1-only real root (0.4's holds only `__version__`); the imported
    `verifiers.v1` modules stay, reachable as attributes of ours too."""
    del sys.modules["verifiers"]
    ours = sys.modules["verifiers_rl"]
    for name in REAL_ONLY:
        module = sys.modules.get(name)
        if module is not None and name.count(".") == 1:
            setattr(ours, name.rpartition(".")[2], module)


def current() -> Runtime:
    return _state["runtime"] or activate()


def announce(runtime: Runtime | None = None, stream: Any = None) -> None:
    """The one console line saying which runtime answers, printed once per process."""
    runtime = runtime or current()
    if _state["announced"] == runtime:
        return
    _state["announced"] = runtime
    print(runtime.describe(), file=stream or sys.stderr)
