"""`perf/mfu`: model FLOPs utilisation in percent, as prime-rl logs it: a step's training FLOPs per second over the
GPUs' bf16 dense peak (by device name; an unknown device or the CPU gets no `perf/mfu`, never a guessed peak).

FLOPs per training token, the PaLM paper's count (appendix B; torchtitan and prime-rl use it): 6 N for the matmul
weights (every parameter but the input embedding; 4 N for frozen ones, no weight gradient) + 12 L H Q T for
attention (L layers, H heads of size Q, sequence length T; causal masking not discounted)."""


from __future__ import annotations

import re
from typing import Any

# (words of torch.cuda.get_device_name that must all be there, bf16 dense peak FLOP/s); the first match wins, so
# the more specific entries come first. Words, not substrings: "A100" must not match an "RTX A1000".
PEAK_BF16_FLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("B200",), 2.25e15),         # NVIDIA Blackwell data sheet (dense; 4.5e15 with sparsity)
    (("H100", "NVL"), 835e12),    # NVIDIA H100 data sheet
    (("H100", "PCIe"), 756e12),
    (("H100",), 989e12),          # H100 SXM
    (("H200", "NVL"), 835e12),    # NVIDIA H200 data sheet
    (("H200",), 989e12),          # H200 SXM: H100 SXM's tensor cores
    (("GH200",), 989e12),
    (("H800",), 989e12),
    (("A100",), 312e12),          # NVIDIA A100 data sheet
    (("A800",), 312e12),
    (("L40S",), 362e12),          # NVIDIA L40S data sheet
    (("L40",), 181e12),           # NVIDIA L40 data sheet
    (("L4",), 121e12),            # NVIDIA L4 data sheet
    (("4090",), 165e12),          # GeForce RTX 4090 (Ada white paper, FP32 accumulate)
    (("A10",), 125e12),           # NVIDIA A10 data sheet
    (("MI300X",), 1307e12),       # AMD Instinct data sheets
    (("MI325X",), 1307e12),
)


def peak_flops(device_name: str) -> float | None:
    """The device's bf16 dense peak FLOP/s, None when the table does not know it."""
    words = set(re.split(r"[\s\-_/]+", device_name))
    for keys, flops in PEAK_BF16_FLOPS:
        if all(k in words for k in keys):
            return flops
    return None


def device_peak_flops(device: Any) -> float | None:
    """The training device's peak: a CUDA device's by its name; None on the CPU (no MFU there)."""
    if getattr(device, "type", str(device)) != "cuda":
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return peak_flops(torch.cuda.get_device_name(device))


def flops_per_token_terms(model: Any) -> tuple[float, float]:
    """(matmul FLOPs per token, attention FLOPs per token per token of sequence length) of training `model`."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    skip = {id(p) for p in embedding.parameters()} if embedding is not None else set()
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = out_emb is not None and any(id(p) in skip for p in out_emb.parameters())
    if tied:  # the shared matrix is also the LM head's matmul: counted once
        skip = set()
    counted = [p for p in model.parameters() if id(p) not in skip]  # parameters() yields a tied weight once
    trainable = sum(p.numel() for p in counted if p.requires_grad)
    frozen = sum(p.numel() for p in counted) - trainable
    cfg = getattr(model.config, "text_config", None) or model.config
    heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    return 6.0 * trainable + 4.0 * frozen, 12.0 * int(cfg.num_hidden_layers) * heads * head_dim


def step_flops(model: Any, sequence_lengths: list[int]) -> float:
    """FLOPs of one training pass over sequences of these lengths."""
    dense, attention = flops_per_token_terms(model)
    return dense * sum(sequence_lengths) + attention * sum(n * n for n in sequence_lengths)


def mfu_percent(flops: float, seconds: float, world_size: int, peak: float | None) -> float | None:
    """100 x achieved FLOP/s per device / the device's peak; None without a known peak or a time."""
    if not peak or seconds <= 0:
        return None
    return 100.0 * flops / seconds / max(1, world_size) / peak
