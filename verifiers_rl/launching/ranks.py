"""A vf-rl run with several training processes (torchrun): what must happen once per machine before the ranks train.

The tiny model and the SFT warm-up are built by local rank 0 in a child process without the torchrun environment
(a single-process SFT, as with one training process) while the other ranks wait, then reused by every rank: built
in every rank they would race on the same directories, and the warm-up would run data-parallel with another batch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# torchrun's variables: without them the child is an ordinary single process
_DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
              "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
              "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_ERROR_FILE")

PREPARE_CODE = "import sys; from verifiers_rl.launching.pipeline import prepare_main; sys.exit(prepare_main())"


def _marker() -> Path:
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    return Path(tempfile.gettempdir()) / f"vf-rl-prepared-{os.getuid()}-{run_id}"


def prepare_once(cfg: Any, poll_s: float = 0.5) -> None:
    """With several training processes and a [tiny_model] or [warmup]: local rank 0 builds them in a child process,
    the other local ranks wait (torchrun ends them if rank 0 fails). Nothing to do with one process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or (cfg.tiny_model is None and cfg.warmup is None):
        return
    marker = _marker()
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
        done = subprocess.run([sys.executable, "-c", PREPARE_CODE], input=cfg.model_dump_json(), text=True,
                              env=env)
        if done.returncode != 0:
            raise SystemExit(done.returncode)
        marker.write_text("done\n")
        return
    while not marker.exists():
        time.sleep(poll_s)


def clear_marker() -> None:
    """Remove this launch's marker (local rank 0, once every rank is past it)."""
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        _marker().unlink(missing_ok=True)
