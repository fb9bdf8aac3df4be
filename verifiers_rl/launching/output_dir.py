"""A run's output dir used before: refused unless the run resumes or `--clean-output-dir` clears it.

Training into it would append to its metrics.jsonl and mix its checkpoints with the new run's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from verifiers_rl.trainer.checkpoints import IF_ANY, latest_checkpoint, used_by


def _inputs(cfg: Any) -> list[Path]:
    """Paths the run reads that may sit inside its output dir (kept by a clean)."""
    paths = [getattr(cfg, "model", None), getattr(getattr(cfg, "tiny_model", None), "path", None),
             getattr(getattr(cfg, "warmup", None), "output_dir", None)]
    return [Path(p).resolve() for p in paths if isinstance(p, str) and Path(p).exists()]


def clean(output_dir: str | Path, keep: list[Path]) -> int:
    """Delete output_dir's contents except the entries holding a path in `keep`; returns how many were removed."""
    d = Path(output_dir).resolve()
    if not d.is_dir():
        return 0
    removed = 0
    for entry in d.iterdir():
        if any(k == entry or entry in k.parents for k in keep):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed += 1
    return removed


def check_output_dir(output_dir: str, cfg: Any, *, resume: Any, clean_requested: bool) -> str | None:
    """None when the run may start (clearing the dir first when asked); else the one-line refusal."""
    if resume not in (None, False) and (resume != IF_ANY or latest_checkpoint(output_dir)):
        return None  # continuing that run is the point
    used = used_by(output_dir)
    if clean_requested:
        if used:
            clean(output_dir, _inputs(cfg))
            print(f"--clean-output-dir: cleared {output_dir} ({used})", flush=True)
        return None
    if used is None:
        return None
    return (f"output_dir: {output_dir} holds an earlier run ({used}); pass --clean-output-dir to clear it, "
            "--trainer.args.resume-from-checkpoint true to continue it, or another --output-dir")
