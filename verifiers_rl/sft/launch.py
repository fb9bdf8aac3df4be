"""vf-sft with several training processes: torchrun started as vf-rl starts it (plan/launch.torchrun_command); the
knobs and their rules: docs/training.md, "Several processes". Each rank runs TRL's SFTTrainer, which takes its DDP
set-up from torchrun's variables.
"""


from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


def under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def rank() -> tuple[int, int]:
    """(this process's rank, the world size): (0, 1) outside torchrun."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def world_size(trainer: Any, gpus_visible: int) -> int:
    """Training processes for vf-sft's `[trainer]` (gpus, processes, batch_size); ConfigError (one line) when the
    machine or the batch cannot take them."""
    from verifiers_rl.config.loading import ConfigError

    if gpus_visible:
        n = trainer.gpus
        if n > gpus_visible:
            raise ConfigError(f"trainer.gpus: {n} asked but {gpus_visible} GPU(s) are visible; set trainer.gpus <= "
                              f"{gpus_visible}")
        if trainer.processes is not None and trainer.processes != n:
            raise ConfigError(f"trainer.processes: {trainer.processes} asked but training runs one process per GPU "
                              f"({n}); drop trainer.processes or set trainer.gpus = {trainer.processes}")
    else:
        if trainer.gpus > 1:
            raise ConfigError(f"trainer.gpus: {trainer.gpus} asked but no GPU is visible; on the CPU set "
                              "trainer.processes instead")
        n = trainer.processes or 1
    if trainer.batch_size % n:
        raise ConfigError(f"trainer.batch_size: {trainer.batch_size} rows per step cannot be shared by {n} "
                          f"processes; use a multiple of {n}")
    micro = trainer.micro_batch_size
    if micro and trainer.batch_size % (micro * n):
        raise ConfigError(f"trainer.micro_batch_size: {trainer.batch_size} rows per step do not split into forwards "
                          f"of {micro} rows on {n} process(es); use a batch_size that is a multiple of {micro * n}")
    return n


def check_rows(cfg: Any, rows: list[dict[str, Any]], val_rows: list[dict[str, Any]]) -> None:
    """Tokenize every row in the parent as the ranks will (sft/data.py): a row none of them could train on is one
    SFTDataError line here, before torchrun starts, instead of a traceback from each rank."""
    from transformers import AutoTokenizer

    from verifiers_rl.sft.data import tokenize_dataset
    from verifiers_rl.trainer.model_loading import from_pretrained

    tokenizer = from_pretrained(AutoTokenizer, cfg.model)
    roles, max_length = cfg.data.loss_mask.roles(), cfg.trainer.settings().max_length
    tokenize_dataset(rows, tokenizer, max_length, roles, cfg.data.on_template_mismatch)
    if val_rows:
        tokenize_dataset(val_rows, tokenizer, max_length, roles, cfg.data.on_template_mismatch, label="val")


def relaunch(n: int, argv: list[str], output_dir: str) -> int:
    """Run vf-sft's ranks under torchrun with the same arguments; their exit code (torchrun ends every rank when one
    fails, and its workers when it is ended). torchrun's own folders go under the run's logs/, as vf-rl's do
    (by default it leaves one in the temp dir per run)."""
    from verifiers_rl.plan.launch import RANK_LOGS, torchrun_command

    logs = Path(output_dir) / "logs" / RANK_LOGS
    cmd = [*torchrun_command(n), "--log-dir", str(logs), "-m", "verifiers_rl.cli.sft", *argv]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        return proc.wait()
    except KeyboardInterrupt:  # the ranks got the same SIGINT; give torchrun time to end them
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.terminate()
            return proc.wait()
