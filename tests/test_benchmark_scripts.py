"""Every Python script in benchmarks/ and scripts/ answers --help with its usage (they are not run in CI; their help
is the door in)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(ROOT.glob("benchmarks/*.py")) + sorted(ROOT.glob("scripts/*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_benchmark_script_answers_help(script):
    p = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("usage:"), p.stdout[:500]
