"""verifiers-rl beside a real verifiers package.

- `import verifiers.v1` (and below) is never answered by our classic alias: it is the installed real package's
  module (verifiers 0.4+ is only that), or one ImportError line naming the `verifiers-v1` extra. Classic
  environment code (`import verifiers as vf`) keeps getting ours, and the console line names the v1 package.
  Offline, a FAKE installed verifiers 0.4.0 (a temp dir: `verifiers/__init__.py` with `__version__`,
  `verifiers/v1/`, and dist-info metadata with verifiers' console scripts) stands in for the real wheel;
  `test_real_v1_package` repeats the check with the real 0.4 wheel where that is installed (the `verifiers-v1`
  extra's venv, see docs/verifiers-runtime.md).
- Console scripts: every command also has a `vfrl` name, which no verifiers release installs (verifiers 0.2.1-0.3.x
  install vf-eval, vf-setup, vf-install; 0.4.0 vf-eval); these run ours in any venv, the verifiers extra's included.
- The `verifiers-v1` extra: its own fork of the lock, conflicting with `verifiers` and `vllm`, and leaving the
  default install's versions alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from verifiers_rl.cli.common import NAMES
from verifiers_rl.verifiers_runtime import (CLASSIC_RANGE, V1_ONLY_RANGE, _in_range, installed_verifiers_version,
                                           resolve_runtime)

REPO = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "classic_env"
BIN = Path(sys.executable).parent
INSTALLED = installed_verifiers_version()
# The console scripts of the verifiers wheels 0.2.1, 0.3.1 and 0.4.0 (their *.dist-info/entry_points.txt).
VERIFIERS_SCRIPTS = {
    "0.2.1": {"debug", "eval", "gepa", "init", "replay", "serve", "validate", "vf-build", "vf-eval", "vf-gepa",
              "vf-init", "vf-install", "vf-setup", "vf-tui"},
    "0.3.1": {"debug", "eval", "gepa", "init", "replay", "validate", "vf-build", "vf-eval", "vf-gepa", "vf-init",
              "vf-install", "vf-setup", "vf-tui"},
    "0.4.0": {"vf-debug", "vf-eval", "vf-gepa", "vf-init", "vf-replay", "vf-validate"},
}


def _fake_v1_verifiers(root: Path) -> Path:
    """A stand-in for the installed verifiers 0.4.0 wheel (keeps the test offline): the root holds only
    `__version__`, everything else is `verifiers.v1`; its metadata says 0.4.0 and lists its console scripts."""
    pkg = root / "verifiers"
    (pkg / "v1").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.4.0"\n')
    (pkg / "v1" / "__init__.py").write_text("from verifiers.v1.env import Env\nFAKE_V1 = True\n")
    (pkg / "v1" / "env.py").write_text("from verifiers import __version__\n\nclass Env:\n    pass\n")
    meta = root / "verifiers-0.4.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: verifiers\nVersion: 0.4.0\n")
    (meta / "entry_points.txt").write_text(
        "[console_scripts]\n" + "".join(f"{n} = verifiers.v1.cli.{n[3:]}:main\n" for n in VERIFIERS_SCRIPTS["0.4.0"]))
    return root


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VF_VERIFIERS_RUNTIME"}
    return {**env, "HF_HUB_OFFLINE": "1", **extra}


def _python(code: str, pythonpath: Path | None = None, **extra: str) -> subprocess.CompletedProcess:
    env = _env(**extra)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300)


CLASSIC_ENV_LOADS_OURS = f"""
sys.path.insert(0, {str(FIXTURE)!r})
env = verifiers_rl.load_environment("classic-env", kind="multi")
print("classic env on", type(env).__mro__[1].__module__)
"""


def _code(*parts: str) -> str:
    return "".join(textwrap.dedent(p) for p in parts)


# --- import verifiers.v1 -----------------------------------------------------------------------------------
def test_the_decision_names_an_installed_v1_package(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(_fake_v1_verifiers(tmp_path)))
    for setting in ("auto", "ours"):
        runtime = resolve_runtime(setting)
        assert runtime.name == "ours" and runtime.v1 == "0.4.0", runtime
        assert "verifiers 0.4.0" in runtime.describe() and "`import verifiers.v1`" in runtime.describe()


def test_v1_resolves_to_the_installed_package_classic_code_to_ours(tmp_path):
    fake = _fake_v1_verifiers(tmp_path)
    r = _python(_code("""
        import sys
        import verifiers_rl
        import verifiers as vf
        import verifiers.v1 as v1
        from verifiers.v1.env import Env
        print("root", vf is verifiers_rl, "v1", v1.__file__, v1.FAKE_V1, Env.__module__, vf.v1 is v1)
    """, CLASSIC_ENV_LOADS_OURS), fake)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"root True v1 {fake / 'verifiers' / 'v1' / '__init__.py'} True verifiers.v1.env True" in r.stdout
    assert "classic env on verifiers_rl.envs.multiturn_env" in r.stdout
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("verifiers runtime:")]
    assert len(line) == 1 and line[0].startswith("verifiers runtime: ours") and "verifiers 0.4.0 is v1-only" in line[0]


def test_v1_imported_first_then_a_classic_env(tmp_path):
    """`import verifiers.v1` before verifiers_rl loads the real (v1-only) root; loading a classic environment puts
    ours in its place and keeps the v1 modules."""
    fake = _fake_v1_verifiers(tmp_path)
    r = _python(_code(f"""
        import sys
        import verifiers.v1 as v1
        import verifiers as real_root
        assert real_root.__file__.startswith({str(fake)!r}) and not hasattr(real_root, "Environment"), real_root
        import verifiers_rl
    """, CLASSIC_ENV_LOADS_OURS, """
        import verifiers as vf
        import verifiers.v1 as again
        print("after", vf is verifiers_rl, again is v1, vf.v1 is v1)
    """), fake)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "classic env on verifiers_rl.envs.multiturn_env" in r.stdout
    assert "after True True True" in r.stdout


@pytest.mark.skipif(INSTALLED is not None, reason=f"a real verifiers {INSTALLED} is installed in this venv")
def test_v1_without_the_package_is_one_line_naming_the_extra():
    r = _python("""
        import verifiers_rl
        import verifiers as vf
        try:
            import verifiers.v1
        except ModuleNotFoundError as e:
            print("name:", e.name)
            print("message:", e)
        import verifiers.v1
    """)
    assert "name: verifiers.v1" in r.stdout
    (message,) = [ln for ln in r.stdout.splitlines() if ln.startswith("message: ")]
    assert "not installed" in message and "uv sync --extra verifiers-v1" in message, message
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: " + message[len("message: "):]


V1_CMD = ("UV_PROJECT_ENVIRONMENT=.venv-verifiers-v1 uv sync --frozen --extra verifiers-v1, then "
          "UV_PROJECT_ENVIRONMENT=.venv-verifiers-v1 uv run --frozen --extra verifiers-v1 "
          "pytest tests/test_coexistence.py")


@pytest.mark.skipif(INSTALLED is None or not _in_range(INSTALLED, V1_ONLY_RANGE),
                    reason=f"needs the real verifiers>=0.4: {V1_CMD}")
def test_real_v1_package():
    r = _python(_code("""
        import sys
        import verifiers_rl
        import verifiers as vf
        import verifiers.v1 as v1
        print("root", vf is verifiers_rl, "v1", v1.__file__, v1.Env.__module__)
    """, CLASSIC_ENV_LOADS_OURS))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "root True v1 " in r.stdout and "site-packages" in r.stdout and "verifiers.v1.env" in r.stdout
    assert "classic env on verifiers_rl.envs.multiturn_env" in r.stdout
    assert f"verifiers {INSTALLED} is v1-only" in r.stderr


# --- console scripts ---------------------------------------------------------------------------------------
def _scripts() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_command_has_a_name_no_verifiers_release_installs():
    scripts = _scripts()
    theirs = set().union(*VERIFIERS_SCRIPTS.values())
    assert set(NAMES) | set(NAMES.values()) == set(scripts), "pyproject [project.scripts] vs cli/common.NAMES"
    for old, new in NAMES.items():
        assert scripts[new] == scripts[old], (old, new)
        assert new not in theirs, new
    # the clash this avoids, as the verifiers wheels have it
    assert {n for n in NAMES if n in theirs} == {"vf-eval", "vf-setup", "vf-install"}


@pytest.mark.parametrize("name", sorted(NAMES.values()))
def test_new_names_run_ours(name):
    """The installed entry points (`uv sync --frozen` made them): ours, in this venv whatever else it holds
    (in the `verifiers` extra's venv too: .ci/run runs this file there)."""
    script = BIN / name
    if not script.exists():
        pytest.skip(f"{script} is not installed: run `uv sync --frozen`")
    module = _scripts()[name].partition(":")[0]
    assert f"from {module} import main" in script.read_text()
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "note:" not in r.stderr
    usage = {"vfrl-eval": "usage: vfrl-eval", "vfrl-install": "usage: vfrl-install", "vfrl-setup": "  vfrl-setup ["}
    assert usage.get(name, "") in r.stdout, r.stdout[:300]  # the usage line names the command as typed


@pytest.mark.parametrize("old", ["vf-eval", "vf-setup", "vf-install"])
def test_a_shared_name_running_ours_says_so(tmp_path, old):
    """Where bin/vf-eval is ours while an installed verifiers also defines vf-eval (the fake 0.4.0's metadata
    here; the verifiers extra's venv for real), one line says which program answered and the name that is ours."""
    script = BIN / old
    if not script.exists() or "verifiers_rl.cli" not in script.read_text():
        pytest.skip(f"{script} is not verifiers-rl's here")
    fake = _fake_v1_verifiers(tmp_path)
    env = _env(PYTHONPATH=str(fake)) if old in VERIFIERS_SCRIPTS["0.4.0"] else _env()
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    if old in VERIFIERS_SCRIPTS["0.4.0"] or (INSTALLED and _in_range(INSTALLED, CLASSIC_RANGE)):
        notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note:")]
        assert len(notes) == 1 and f"installs a {old} of its own" in notes[0] and NAMES[old] in notes[0], r.stderr
    else:
        assert "note:" not in r.stderr


@pytest.mark.skipif(INSTALLED is None, reason="needs a real verifiers installed (the `verifiers` extra's venv: "
                                              ".ci/run runs this file there)")
def test_with_a_real_verifiers_old_names_are_ours_or_theirs_new_names_ours():
    """What `uv sync --extra verifiers` leaves: bin/vf-eval is whichever package was installed last."""
    for old, new in NAMES.items():
        text = (BIN / new).read_text()
        assert "verifiers_rl.cli" in text, new
        if (BIN / old).exists() and "verifiers_rl.cli" not in (BIN / old).read_text():
            assert "from verifiers." in (BIN / old).read_text(), old  # verifiers' own program: not ours to run


# --- the verifiers-v1 extra in the lock ---------------------------------------------------------------------
def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_v1_extra_conflicts_with_the_classic_extra_and_vllm():
    project = _pyproject()
    (req,) = project["project"]["optional-dependencies"]["verifiers-v1"]
    assert req.replace(" ", "") == "verifiers>=0.4,<0.5"
    sets = [{d["extra"] for d in s} for s in project["tool"]["uv"]["conflicts"]]
    # one set of three: pairwise sets let uv resolve the default install in verifiers-v1's fork (openai 3 -> 2)
    assert {"vllm", "verifiers", "verifiers-v1"} in sets, sets
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    locked = [{d["extra"] for d in s} for s in lock.get("conflicts", [])]
    assert {"vllm", "verifiers", "verifiers-v1"} in locked, "uv.lock predates the conflict: run `uv lock`"


def _locked_extra_version(lock: dict, extra: str, name: str) -> str:
    """The version of `name` that pyproject's `extra` gets in the lock (the project's optional-dependencies)."""
    (root,) = [p for p in lock["package"] if p["name"] == "verifiers-rl"]
    (edge,) = [d for d in root["optional-dependencies"][extra] if d["name"] == name]
    return edge.get("version") or next(p["version"] for p in lock["package"] if p["name"] == name)


def test_lock_gives_each_extra_its_verifiers_and_the_default_its_openai():
    from test_vllm_extra import _locked_version, _lock  # the lock's fork markers, evaluated per install

    lock = _lock()
    v1 = _locked_extra_version(lock, "verifiers-v1", "verifiers")
    classic = _locked_extra_version(lock, "verifiers", "verifiers")
    assert Version(v1) in SpecifierSet(">=0.4,<0.5") and Version(classic) in SpecifierSet(CLASSIC_RANGE)
    newest_openai = max((p["version"] for p in lock["package"] if p["name"] == "openai"), key=Version)
    for extra in (None, "verifiers", "vllm"):
        assert _locked_version(lock, "openai", extra) == newest_openai, extra
    assert Version(_locked_version(lock, "openai", "verifiers-v1")) < Version("3")
    for dep in ("torch", "transformers"):
        assert _locked_version(lock, dep, "verifiers-v1") == _locked_version(lock, dep, None), dep


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv on PATH (`pip install uv`), as CI has")
def test_uv_sync_dry_run_of_the_v1_extra(tmp_path):
    from test_vllm_extra import _dry_run, _locked_version, _lock

    lock = _lock()
    would = _dry_run(tmp_path, "--extra", "verifiers-v1")
    assert would.get("verifiers") == _locked_extra_version(lock, "verifiers-v1", "verifiers")
    assert "vllm" not in would
    for dep in ("torch", "transformers", "openai"):
        assert would.get(dep) == _locked_version(lock, dep, "verifiers-v1"), dep
    env = {k: v for k, v in os.environ.items() if k not in ("UV_LOCKED", "UV_NO_SYNC", "UV_OFFLINE")}
    env["UV_PROJECT_ENVIRONMENT"] = str(tmp_path / "both")
    r = subprocess.run([shutil.which("uv"), "sync", "--frozen", "--offline", "--dry-run", "--python", sys.executable,
                        "--extra", "verifiers-v1", "--extra", "vllm"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    # uv wraps its message to the width it sees (a pytest-xdist worker's differs): compare it unwrapped
    assert r.returncode != 0 and "incompatible with the declared conflicts" in " ".join(r.stderr.split()), r.stderr
