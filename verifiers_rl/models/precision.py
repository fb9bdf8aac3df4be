"""The dtype a model's forward computes in, which the checks of the trainer's and the local engine's fast paths
compare against: an autocast in force, else accelerate's mixed precision when it wrapped the forward (HF Trainer
with bf16 / fp16 on fp32 weights, as TRL runs a GRPOConfig's default bf16), else the weights' own dtype."""

from __future__ import annotations

from typing import Any

import torch

_AMP = {"bf16": torch.bfloat16, "fp16": torch.float16}


def forward_dtype(model: Any) -> torch.dtype:
    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            return torch.get_autocast_dtype(device)
    if "_original_forward" in vars(model):  # accelerate's mark on a forward it wrapped in its autocast
        from accelerate.state import AcceleratorState

        amp = _AMP.get(str(AcceleratorState._shared_state.get("_mixed_precision")))
        if amp is not None:
            return amp
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
