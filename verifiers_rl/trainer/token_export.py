"""Token export: one JSON line per trained sequence, every array aligned per token, for debugging rollouts.

Written to `<output_dir>/token_exports/step_<N>/rank_<R>.jsonl` when `enable_token_export` is on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from verifiers_rl.trainer.importance import log_importance_ratio


def sequence_records(mb: Any, trainer_lp: torch.Tensor, sampling_lp: torch.Tensor, entropy: torch.Tensor | None,
                     no_gradient: torch.Tensor | None, step: int) -> list[dict[str, Any]]:
    """Per-sequence records of one micro-batch (padding stripped). `no_gradient`: the loss tokens the chosen loss
    left out (`LossOutputs.no_gradient`), written as `ratio_masked`; None: none."""
    ratio = torch.exp(log_importance_ratio(trainer_lp.detach(), sampling_lp, mb.loss_mask))
    masked = no_gradient if no_gradient is not None else torch.zeros_like(mb.loss_mask, dtype=torch.bool)
    out = []
    for r, sample in enumerate(mb.samples):
        n = len(sample.input_ids)
        out.append({
            "step": step,
            "rollout_index": sample.rollout_index,
            "reward": sample.reward,
            "advantage": sample.advantage,
            "token_ids": sample.input_ids,
            "loss_mask": mb.loss_mask[r, :n].int().tolist(),
            "env_mask": mb.env_mask[r, :n].int().tolist(),
            "trainer_logprobs": trainer_lp[r, :n].detach().float().tolist(),
            "sampling_logprobs": sampling_lp[r, :n].float().tolist(),
            "importance_ratio": ratio[r, :n].float().tolist(),
            "ratio_masked": masked[r, :n].int().tolist(),
            "entropy": entropy[r, :n].float().tolist() if entropy is not None else None,
        })
    return out


def write_records(output_dir: str | Path, step: int, rank: int, records: list[dict[str, Any]]) -> Path:
    path = Path(output_dir) / "token_exports" / f"step_{step}" / f"rank_{rank}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return path
