#!/usr/bin/env bash
# Install verifiers-rl with every direct dependency at the lowest version pyproject.toml allows (uv's
# `--resolution lowest-direct`) into its own venv, and run the tests that touch those libraries most: the private
# transformers hooks, the trainer, the local engine's KV cache and decode, LoRA merging, checkpoints, the losses, the
# optimizers, vf-sft, and a newcomer's run (no FutureWarning or DeprecationWarning from what we call).
#
#   bash scripts/check-floors.sh [VENV_DIR] [EXTRA_PIP_SPEC ...]    # default VENV_DIR: .venv-floors (git-ignored)
#
# scripts/check-newest.sh runs the same with the newest versions pyproject.toml allows (what `pip install
# verifiers-rl` gets today, past uv.lock's), by RESOLUTION=highest. PYTHON picks the interpreter (default 3.11,
# requires-python's floor), e.g. PYTHON=/path/to/python3.13.
#
# EXTRA_PIP_SPEC pins what the floors leave open or what you want held, e.g. a CPU torch wheel instead of the CUDA
# build torch's floor would download: `bash scripts/check-floors.sh .venv-floors "torch==2.13.0+cpu"` with
# PIP_FIND_LINKS pointing at a folder that has it. Raise a floor in pyproject.toml when this fails.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-floors}
shift || true
uv venv -q --allow-existing "$venv" -p "${PYTHON:-3.11}"  # PYTHON: a version or an interpreter's path
links=()
if [ -n "${PIP_FIND_LINKS:-}" ]; then links=(--find-links "$PIP_FIND_LINKS"); fi
resolution=${RESOLUTION:-lowest-direct}
# --upgrade: an existing venv is resolved again (kept versions would hide a new release or a floor)
uv pip install -q -p "$venv" --upgrade --resolution "$resolution" "${links[@]}" "$@" -e . \
    "pytest>=8" "pytest-asyncio>=0.23" "pytest-timeout>=2.3" "pytest-xdist>=3.8"  # pyproject's addopts use -n
"$venv/bin/python" - <<'EOF'
from importlib.metadata import version
print("versions:", ", ".join(f"{p} {version(p)}" for p in (
    "torch", "transformers", "accelerate", "peft", "datasets", "trl", "huggingface-hub", "numpy", "matplotlib")))
EOF
exec "$venv/bin/python" -m pytest -p no:cacheprovider -m "not vllm and not network" tests/test_hf_hooks.py \
    tests/test_trainer.py tests/test_local_engine.py tests/test_local_decode.py tests/test_decode_step.py \
    tests/test_lora_merge.py tests/test_checkpoints.py tests/test_loss_registry.py tests/test_sft_data.py \
    tests/test_sft_processes.py tests/test_newcomer.py tests/test_optimizers.py
