"""The `vllm` extra: `uv sync --extra vllm` puts a vLLM in the project's venv with the torch and transformers that
vLLM pins, while every other install keeps its own versions.

vLLM pins torch (0.32: torch==2.13.0) and caps transformers, so pyproject's `[tool.uv] conflicts` (vllm against
verifiers, which can't be installed together anyway: mcp) makes uv lock the extra in a fork of its own.

- The lock, read with tomllib (no uv, no network): the project's own dependency edges carry the fork's markers; we
  evaluate them for the default install, `--extra verifiers` and `--extra vllm`.
- `uv sync --frozen --offline --dry-run` into a temporary venv: uv accepts the lock as it is and says what it would
  install. A dry run reads only the lock (no index, no download), so it runs offline; nothing is installed.
  Skips without uv on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
PROJECT = "verifiers-rl"
# What the default install had when the vllm extra came: it may move up with the lock, never down to vLLM's pins.
DEFAULT_AT_LEAST = {"torch": "2.15.0", "transformers": "5.23.0"}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _lock() -> dict:
    return tomllib.loads((REPO / "uv.lock").read_text())


def _vllm_range() -> SpecifierSet:
    (req,) = _pyproject()["project"]["optional-dependencies"]["vllm"]
    m = re.fullmatch(r"vllm\s*([^;\s].*)", req.strip())
    assert m, f"the vllm extra should be one requirement on vllm with a version range, got {req!r}"
    return SpecifierSet(m.group(1))


def _packages(lock: dict, name: str) -> list[dict]:
    return [p for p in lock["package"] if p["name"] == name]


def _fork_extra(extra: str | None) -> str:
    """The value uv gives `extra` in a conflict fork's markers (extra-<len(project)>-<project>-<extra>)."""
    return "" if extra is None else f"extra-{len(PROJECT)}-{PROJECT}-{extra}"


def _locked_version(lock: dict, name: str, extra: str | None) -> str:
    """The version of `name` (a direct dependency) that the install with `extra` (None: default) gets from the lock."""
    (root,) = _packages(lock, PROJECT)
    edges = [d for d in root["dependencies"] if d["name"] == name]
    assert edges, f"{name} is not a dependency of {PROJECT} in uv.lock"
    if len(edges) == 1 and "version" not in edges[0]:
        (pkg,) = _packages(lock, name)
        return pkg["version"]
    env = {"extra": _fork_extra(extra)}
    chosen = {d["version"] for d in edges if "marker" not in d or Marker(d["marker"]).evaluate(env)}
    assert len(chosen) == 1, f"{name} for extra={extra!r}: the lock's edges give {sorted(chosen)}"
    return chosen.pop()


def _vllm_pins(lock: dict) -> tuple[str, dict[str, str]]:
    """The locked vLLM and the torch/transformers versions its dependency edges name."""
    (vllm,) = _packages(lock, "vllm")
    pins = {}
    for dep in ("torch", "transformers"):
        versions = {p["version"] for p in _packages(lock, dep)}
        named = [d.get("version") for d in vllm["dependencies"] if d["name"] == dep]
        assert named, f"vllm {vllm['version']} does not depend on {dep} in uv.lock"
        pins[dep] = named[0] or versions.pop()
    return vllm["version"], pins


def test_conflict_keeps_vllm_out_of_the_other_installs():
    # vllm and verifiers in one conflict set (with verifiers-v1 since that extra came: tests/test_coexistence.py)
    conflicts = [{d["extra"] for d in s} for s in _pyproject()["tool"]["uv"].get("conflicts", [])]
    assert any({"vllm", "verifiers"} <= s for s in conflicts), "pyproject: [tool.uv] conflicts lost the vllm fork"
    lock = _lock()
    locked = [{d["extra"] for d in s if d["package"] == PROJECT} for s in lock.get("conflicts", [])]
    assert any({"vllm", "verifiers"} <= s for s in locked), "uv.lock predates the conflict: run `uv lock`"
    assert _packages(lock, "vllm"), "uv.lock has no vllm: run `uv lock`"


def test_lock_gives_vllm_its_torch_and_the_default_install_its_own():
    lock = _lock()
    vllm_version, pins = _vllm_pins(lock)
    assert Version(vllm_version) in _vllm_range()
    for dep in ("torch", "transformers"):
        newest = max((p["version"] for p in _packages(lock, dep)), key=Version)
        # the default install and the verifiers extra: the newest in the lock, not vLLM's pin dragging them down
        for extra in (None, "verifiers"):
            got = _locked_version(lock, dep, extra)
            assert got == newest and Version(got) >= Version(DEFAULT_AT_LEAST[dep]), (dep, extra, got)
        # the vllm extra: exactly the version the locked vLLM depends on
        assert _locked_version(lock, dep, "vllm") == pins[dep], dep


def _dry_run(tmp_path: Path, *extra_args: str) -> dict[str, str]:
    """`uv sync --frozen --offline --dry-run` into a fresh venv path: {package: version} it would install."""
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("UV_LOCKED", "UV_NO_SYNC", "UV_OFFLINE")}
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    r = subprocess.run([shutil.which("uv"), "sync", "--frozen", "--offline", "--dry-run", "--python", sys.executable,
                        *extra_args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert not venv.exists(), "a dry run created the venv"
    return dict(re.findall(r"^ \+ ([A-Za-z0-9_.-]+)==(\S+)$", out, flags=re.M))


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv on PATH (`pip install uv`), as CI has")
@pytest.mark.parametrize("extra", [None, "verifiers", "vllm"])
def test_uv_sync_dry_run_installs_the_locked_versions(tmp_path, extra):
    lock = _lock()
    would = _dry_run(tmp_path, *(["--extra", extra] if extra else []))
    for dep in ("torch", "transformers"):
        assert would.get(dep) == _locked_version(lock, dep, extra), (dep, would.get(dep))
    if extra == "vllm":
        vllm_version, pins = _vllm_pins(lock)
        assert would.get("vllm") == vllm_version and Version(vllm_version) in _vllm_range()
        assert would["torch"] == pins["torch"] and would["transformers"] == pins["transformers"]
    else:
        assert "vllm" not in would
        assert all(Version(would[dep]) >= Version(v) for dep, v in DEFAULT_AT_LEAST.items()), would
