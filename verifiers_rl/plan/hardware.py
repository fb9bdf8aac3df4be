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


def gpu_count() -> int:
    """Visible CUDA devices (honours CUDA_VISIBLE_DEVICES)."""
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # pragma: no cover - a broken CUDA setup counts as none
        return 0


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
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise VLLMLaunchError(f"no Python with vLLM found: run `{INSTALL_HINT}` (CPU) or `pip install vllm` (GPU), "
                          f"or set {PYTHON_ENV_VAR} / [inference] python")
