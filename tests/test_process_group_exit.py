"""A rank's process group is destroyed at interpreter exit while Python is whole (trainer/distributed.py): gloo's
threads left to finalization can abort a rank that finished its run, and torchrun then calls the run failed."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import atexit, sys, tempfile
import torch.distributed as dist
from verifiers_rl.trainer.distributed import release_process_group_at_exit

def after():  # registered first, so it runs after the release (atexit runs last-in first-out)
    print("initialized at exit:", dist.is_initialized(), flush=True)

atexit.register(after)
store = tempfile.mktemp()
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
release_process_group_at_exit()
release_process_group_at_exit()  # registered once
if sys.argv[1] == "user-destroyed":
    dist.destroy_process_group()
print("trained", flush=True)
"""


def _run(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120)


def test_the_process_group_is_gone_before_the_interpreter_finalizes():
    r = _run("left")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["trained", "initialized at exit: False"], r.stdout + r.stderr[-2000:]


def test_a_group_the_user_destroyed_is_left_alone():
    r = _run("user-destroyed")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["trained", "initialized at exit: False"]
