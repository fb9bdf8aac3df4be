#!/usr/bin/env bash
# scripts/check-floors.sh's tests with every dependency at the newest version pyproject.toml allows: what a fresh
# `pip install verifiers-rl` gets today, which may be past uv.lock's (transformers 5.25 renamed the forward's
# past_key_values to cache, a FutureWarning from every decode, until the local engine followed).
#
#   bash scripts/check-newest.sh [VENV_DIR] [EXTRA_PIP_SPEC ...]    # default VENV_DIR: .venv-newest (git-ignored)
#   PYTHON=/path/to/python3.13 bash scripts/check-newest.sh .venv-newest-313    # the newest Python too
set -euo pipefail
venv=${1:-.venv-newest}
shift || true
RESOLUTION=highest exec bash "$(dirname "$0")/check-floors.sh" "$venv" "$@"
