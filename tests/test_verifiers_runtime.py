"""Who answers `import verifiers`: the one decision (verifiers_runtime.resolve_runtime), the import hook, the
console line, and `vf-install` (an environment package installed without the verifiers package)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verifiers_rl import verifiers_runtime as vr

FIXTURE = Path(__file__).parent / "fixtures" / "classic_env"


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


@pytest.mark.integration  # spawns a process
def test_import_verifiers_answers_with_this_package_one_module_per_path():
    r = _run("""
        import verifiers_rl
        import verifiers as vf
        import verifiers.envs.multiturn_env as a
        import verifiers_rl.envs.multiturn_env as b
        from verifiers.parsers.parser import Parser
        from verifiers.types import UserMessage
        assert vf is verifiers_rl and a is b, (vf, a, b)
        assert isinstance(Parser(), verifiers_rl.Parser)
        m = UserMessage(content="hi")
        assert m.content == m["content"] == "hi" and m == {"role": "user", "content": "hi"}
        try:
            import verifiers.no_such_module
        except ModuleNotFoundError as e:
            print("missing:", e.name)
    """, VF_VERIFIERS_RUNTIME="auto")
    assert r.returncode == 0, r.stderr
    assert "missing: verifiers.no_such_module" in r.stdout


def _fake_dist(tmp_path: Path, version: str) -> Path:
    """Package metadata of an installed `verifiers` (what the decision reads); no code is needed for it."""
    d = tmp_path / f"verifiers-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verifiers\nVersion: {version}\n")
    return tmp_path


@pytest.mark.parametrize("version, requirements, expected", [
    (None, [], "ours"),                                 # not installed
    ("0.4.0", [], "ours"),                              # v1-only
    ("0.1.11", [], "ours"),                             # before the classic range we drive
    ("0.3.1", [], "real"),
    ("0.3.1", ["verifiers>=0.1.8"], "real"),
    ("0.3.1", ["verifiers<0.3", "datasets"], "ours"),  # the environment's own requirements refuse it
])
def test_auto_decision(tmp_path, monkeypatch, version, requirements, expected):
    if version is not None:
        monkeypatch.syspath_prepend(str(_fake_dist(tmp_path, version)))
    elif vr.installed_verifiers_version() is not None:
        pytest.skip("a real verifiers is installed in this venv")
    runtime = vr.resolve_runtime("auto", requirements)
    assert runtime.name == expected, runtime
    assert runtime.describe().startswith("verifiers runtime: ")


def test_explicit_settings(tmp_path, monkeypatch):
    assert vr.resolve_runtime("ours").name == "ours"
    monkeypatch.setenv(vr.SETTING, "ours")
    assert vr.resolve_runtime().name == "ours"
    monkeypatch.setenv(vr.SETTING, "sometimes")
    with pytest.raises(vr.RuntimeSettingError, match="VF_VERIFIERS_RUNTIME"):
        vr.resolve_runtime()
    if vr.installed_verifiers_version() is None:
        with pytest.raises(vr.RuntimeSettingError, match="not installed"):
            vr.resolve_runtime("real")
    monkeypatch.syspath_prepend(str(_fake_dist(tmp_path, "0.4.0")))
    with pytest.raises(vr.RuntimeSettingError, match="0.4.0"):
        vr.resolve_runtime("real")


@pytest.mark.integration  # spawns a process
def test_loading_an_environment_says_which_runtime(tmp_path):
    r = _run(f"""
        import sys
        sys.path.insert(0, {str(FIXTURE)!r})
        import verifiers_rl as vf
        env = vf.load_environment("classic-env")
        print(type(env).__mro__[1].__module__)
    """, VF_VERIFIERS_RUNTIME="auto", HF_HUB_OFFLINE="1")
    assert r.returncode == 0, r.stderr
    assert "verifiers runtime: ours" in r.stderr
    assert r.stderr.count("verifiers runtime:") == 1


@pytest.mark.integration  # spawns a process
def test_vf_install_leaves_verifiers_out(tmp_path):
    """The supported command for an environment whose requirements say `verifiers>=0.1.8` with no upper bound."""
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.install", str(FIXTURE), "--target", str(target)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "--excludes" in r.stderr
    assert (target / "classic_env.py").exists()
    assert not list(target.glob("verifiers-*.dist-info")) and not (target / "verifiers").exists()
    r = _run(f"""
        import sys
        sys.path.insert(0, {str(target)!r})
        import verifiers_rl as vf
        env = vf.load_environment("classic-env", kind="multi")
        print(type(env).__name__, len(env.get_dataset()))
    """, HF_HUB_OFFLINE="1")
    assert r.returncode == 0, r.stderr
    assert "EchoTwice 8" in r.stdout


def _run_script(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, timeout=600)


@pytest.mark.integration  # spawns a process
def test_classic_env_trains_two_steps_in_a_notebook(tiny_model_dir, tmp_path):
    """The fixture says `import verifiers as vf` and is loaded unedited; a notebook-style script trains on it."""
    r = _run_script(f"""
        import sys, json
        sys.path.insert(0, {str(FIXTURE)!r})
        import verifiers_rl as vf
        env = vf.load_environment("classic-env", kind="multi")
        args = vf.RLConfig(output_dir="out", max_steps=2, batch_size=8, rollouts_per_example=4, micro_batch_size=8,
                           max_tokens=8, max_seq_len=256, max_prompt_len=128, learning_rate=1e-3, save_steps=100,
                           eval_num_examples=0, logging_steps=1, sample_log_interval=0, disable_tqdm=True)
        vf.RLTrainer({str(tiny_model_dir)!r}, env, args).train()
        rows = [json.loads(l) for l in open("out/metrics.jsonl")]
        print("steps", max(r.get("step", 0) for r in rows), "turns", rows[-1].get("num_turns/mean"))
    """, tmp_path, VF_VERIFIERS_RUNTIME="auto")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verifiers runtime: ours" in r.stderr
    assert "steps 2" in r.stdout, r.stdout


@pytest.mark.integration  # spawns a process
def test_classic_env_trains_two_steps_with_vf_rl(tiny_model_dir, tmp_path):
    cfg = tmp_path / "classic.toml"
    cfg.write_text(textwrap.dedent(f"""
        model = {str(tiny_model_dir)!r}
        verifiers_runtime = "ours"
        [env]
        id = "classic-env"
        args = {{ kind = "tool" }}
        [inference]
        backend = "local"
        [trainer.args]
        output_dir = "outputs/classic"
        max_steps = 2
        batch_size = 8
        rollouts_per_example = 4
        micro_batch_size = 8
        max_tokens = 8
        max_seq_len = 1024
        max_prompt_len = 960
        logging_steps = 1
    """))
    import os

    script = Path(sys.executable).parent / "vf-rl"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "verifiers_rl.cli.rl"]
    r = subprocess.run([*cmd, "@", str(cfg)], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(FIXTURE)})
    out = tmp_path / "outputs" / "classic"
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "verifiers runtime: ours" in (out / "logs" / "trainer.log").read_text() + r.stdout + r.stderr
    assert "step 2/2" in r.stdout


REAL_VERSION = "0.3.1"


def _real_verifiers_python() -> Path:
    """A venv with the real verifiers (classic API), made once with uv and cached; only its Python runs here."""
    import os
    import shutil

    root = Path(os.environ.get("VF_REAL_VERIFIERS_VENV",
                               Path.home() / ".cache" / "verifiers-rl" / f"real-{REAL_VERSION}"))
    python = root / "bin" / "python"
    probe = [str(python), "-c", f"import importlib.metadata as m; assert m.version('verifiers') == '{REAL_VERSION}'"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the real-verifiers venv for this comparison"
    subprocess.run([uv, "venv", "-q", "--allow-existing", str(root)], check=True, timeout=300)
    r = subprocess.run([uv, "pip", "install", "-q", "--python", str(python), f"verifiers=={REAL_VERSION}"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    return python


@pytest.mark.network  # installs the real verifiers into a cached venv the first time
def test_multiturn_and_tool_rewards_equal_the_real_verifiers_loop(tmp_path):
    """The same scripted replies through verifiers' own loop (the real package) and through this runtime give
    the same rewards, metrics, stop conditions and conversations: alphabet-sort (multi-turn, a reply cut by
    max_tokens in the middle) and a tool env (two calls in one turn, one with bad arguments). The replies are
    scripted (tests/fixtures/scripted_loop.py): the comparison is about the harness, not a model."""
    import os

    root = Path(__file__).resolve().parents[1]
    script = Path(__file__).parent / "fixtures" / "scripted_loop.py"
    paths = [str(root / "environments" / "alphabet_sort"), str(FIXTURE)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    real = subprocess.run([str(_real_verifiers_python()), str(script)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600, env={**env, "PYTHONPATH": os.pathsep.join([*paths, str(root)])})
    assert real.returncode == 0, real.stderr[-3000:]
    ours = subprocess.run([sys.executable, "-c", f"import verifiers_rl, runpy; runpy.run_path({str(script)!r}, "
                           f"run_name='__main__')"], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env={**env, "PYTHONPATH": os.pathsep.join(paths), "VF_VERIFIERS_RUNTIME": "ours"})
    assert ours.returncode == 0, ours.stderr[-3000:]
    import json

    theirs, mine = json.loads(real.stdout), json.loads(ours.stdout)
    assert mine == theirs
    assert any(r["truncated"] and len(r["roles"]) >= 3 for r in mine["alphabet-sort"])  # went on after a cut reply
    assert {r["stop"] for r in mine["tool"]} == {"no_tools_called"}
