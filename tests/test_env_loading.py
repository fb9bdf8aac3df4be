"""Which module an environment id loads (verifiers_rl/envs/loading.py, docs/environments.md): an installed module
wins over a workspace folder of the same name and vf-eval says which file it loaded; `verifiers-rl/<name>` (what
the bundled configs name) always loads the example shipped with the package. Real subprocesses: the "installed"
community module is a real module on PYTHONPATH, as a `pip install`ed one would be (nothing is mocked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs" / "vf-rl").glob("*.toml"))

COMMUNITY = """import verifiers_rl as vf
def load_environment(**kwargs):
    return vf.SingleTurnEnv(dataset=[{{"question": "{tag}", "answer": "x"}}] * 2)
"""


@pytest.fixture
def shadowing(tmp_path):
    """A community `reverse_text` installed (on PYTHONPATH) and a workspace folder environments/reverse_text/."""
    site, ws = tmp_path / "site", tmp_path / "ws"
    (ws / "environments" / "reverse_text").mkdir(parents=True)
    site.mkdir()
    (site / "reverse_text.py").write_text(COMMUNITY.format(tag="community"))
    (ws / "environments" / "reverse_text" / "reverse_text.py").write_text(COMMUNITY.format(tag="folder"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(site)}
    return site, ws, env


def _load(code: str, ws: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import verifiers_rl as vf\n" + code], cwd=ws, env=env,
                          capture_output=True, text=True, timeout=120)


def _first_question(ids: list[str]) -> str:
    return ("import json\nout = {}\n" + "".join(
        f"out[{i!r}] = vf.load_environment({i!r}).dataset[0]['prompt'][-1]['content']\n" for i in ids)
        + "print(json.dumps(out))")


@pytest.mark.integration  # spawns a process
def test_installed_module_wins_over_folder_and_vf_eval_says_which_file(shadowing, tiny_model_dir):
    site, ws, env = shadowing
    out = ws / "rows.jsonl"
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.eval", "reverse-text", "-m", str(tiny_model_dir),
                        "-n", "1", "-r", "1", "-t", "4", "--output", str(out)],
                       cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(out.read_text().splitlines()[0])["prompt"][-1]["content"] == "community"
    note = [line for line in r.stderr.splitlines() if line.startswith("environment 'reverse-text': loaded")]
    assert len(note) == 1, r.stderr[-2000:]
    assert f"loaded {site / 'reverse_text.py'} (installed module)" in note[0]
    assert str(ws / "environments" / "reverse_text" / "reverse_text.py") in note[0]
    assert "use id './environments/reverse_text'" in note[0] and "use id 'verifiers-rl/reverse-text'" in note[0]


@pytest.mark.integration  # spawns a process
def test_each_source_has_an_id_that_loads_it(shadowing):
    """The folder by its path, the shipped example by `verifiers-rl/<name>` even with a community module of the
    same name installed; the two load side by side (the example has a module name of its own)."""
    _, ws, env = shadowing
    r = _load(_first_question(["verifiers-rl/reverse-text", "reverse-text"]), ws, env)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["reverse-text"] == "community"
    assert got["verifiers-rl/reverse-text"] not in ("community", "folder")  # the shipped example's own data
    r = _load(_first_question(["./environments/reverse_text"]), ws, env)
    assert r.returncode == 0 and json.loads(r.stdout.strip().splitlines()[-1]) == {
        "./environments/reverse_text": "folder"}, r.stderr[-2000:]


@pytest.mark.integration  # spawns a process
def test_folder_wins_over_the_shipped_example_when_nothing_is_installed(shadowing):
    _, ws, env = shadowing
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    r = _load(_first_question(["reverse-text"]), ws, env)
    assert r.returncode == 0 and json.loads(r.stdout.strip().splitlines()[-1]) == {"reverse-text": "folder"}
    assert "use id 'verifiers-rl/reverse-text'" in r.stderr  # the example it hides, and how to load it
    # no folder, nothing installed: the shipped example, from any directory, and no note (nothing is hidden)
    r = _load(_first_question(["reverse-text"]), ws / "environments", env)
    assert r.returncode == 0 and "loaded" not in r.stderr, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["reverse-text"] not in ("community", "folder")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_bundled_configs_name_the_shipped_examples(path):
    from verifiers_rl.envs.loading import find_environment

    env_id = tomllib.loads(path.read_text())["env"]["id"]
    assert env_id.startswith("verifiers-rl/"), f"{path.name}: env.id {env_id!r} could be taken by an installed module"
    src, hidden = find_environment(env_id)
    assert src is not None and src.kind == "example" and hidden == []


def test_bad_ids_are_one_line():
    import verifiers_rl as vf
    from verifiers_rl.envs.loading import EnvironmentNotFound

    with pytest.raises(EnvironmentNotFound, match="ships no example 'nope'.*verifiers-rl/reverse-text"):
        vf.load_environment("verifiers-rl/nope")
    with pytest.raises(EnvironmentNotFound, match="has no nope.py"):
        vf.load_environment("./no/such/nope")


@pytest.mark.integration  # spawns a process
def test_env_path_reaches_the_processes_the_environment_starts(tmp_path, monkeypatch):
    """`[env] path` / `--env-path`: the folder is importable here and in child processes (a task-scoped tool server,
    a harness program), given relative to the working directory."""
    import os
    import subprocess
    import sys

    from verifiers_rl.envs.loading import add_env_path

    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "my_env_tools.py").write_text("ANSWER = 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    add_env_path("tools")
    add_env_path("tools")  # once is enough
    assert os.environ["PYTHONPATH"] == f"{tmp_path / 'tools'}{os.pathsep}/somewhere/else"
    assert sys.path[0] == str(tmp_path / "tools")
    out = subprocess.run([sys.executable, "-c", "import my_env_tools; print(my_env_tools.ANSWER)"], cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "42", out.stderr
