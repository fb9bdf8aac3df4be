"""The local engine serves a LoRA policy as one plain model with the adapters merged in (``W + B A * scale``).

PEFT's four extra small ops per linear dominate a small model's decode step; the copy is refreshed at every sync and the
policy is never touched. Only plain LoRA on `nn.Linear` over fp32 base weights qualifies: a merge rounded to bf16 loses
every update below W's rounding step (NeMo-RL issue #3696).
"""

from __future__ import annotations

import copy
from typing import Any


def _lora_layers(model: Any) -> list[tuple[str, Any]] | None:
    """(name, layer) of every LoRA layer under the PEFT model's base model, or None if `model` does not qualify."""
    import torch
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import Linear as LoraLinear

    if not isinstance(model, PeftModel):
        return None
    layers = [(n, m) for n, m in model.get_base_model().named_modules() if isinstance(m, LoraLayer)]
    if not layers:
        return None
    for _, m in layers:
        if type(m) is not LoraLinear or getattr(m, "merged", False):
            return None
        if any(m.use_dora.get(a, False) or getattr(m, "lora_bias", {}).get(a, False) for a in m.active_adapters):
            return None
    if any(p.requires_grad and "lora_" not in n for n, p in model.named_parameters()):
        return None  # e.g. modules_to_save: trained weights the merged copy would not follow
    if any(m.get_base_layer().weight.dtype != torch.float32 for _, m in layers):
        return None  # a merge rounded to half precision drops small updates: served unmerged
    return layers


def _room_for_copy(model: Any) -> bool:
    """On CPU, yes; on CUDA, when twice the model's size is free (the copy must not be what runs out of memory)."""
    import torch

    param = next(model.parameters(), None)
    if param is None or param.device.type == "cpu":
        return param is not None
    if param.device.type != "cuda":
        return False
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    return torch.cuda.mem_get_info(param.device)[0] > 2 * size


def merged_copy(model: Any) -> Any | None:
    """A plain model (eval mode, no grad) equal to `model` with its active adapters merged; None when `model` is not
    a plain LoRA model or its device has no room for a copy (serve it as is)."""
    if _lora_layers(model) is None or not _room_for_copy(model):
        return None
    merged = copy.deepcopy(model).merge_and_unload()
    return merged.eval().requires_grad_(False)


def refresh_merged(merged: Any, model: Any) -> None:
    """Write `model`'s current base weights plus adapter deltas into `merged`'s linears."""
    import torch

    with torch.no_grad():
        for name, layer in _lora_layers(model) or []:
            target = merged.get_submodule(name).weight
            target.copy_(layer.get_base_layer().weight)
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    target.add_(layer.get_delta_weight(adapter))
