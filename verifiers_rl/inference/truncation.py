"""The support a truncated sampler keeps (`plan.sampling.Truncation`: min_p, top_k, top_p), as tensor math: the
one rule the local engine samples with and the trainer scores with, in vLLM 0.32's order (its sampler applies
min_p among the logits processors, then top-k, then top-p over what top-k kept: `v1/sample/sampler.py`,
`apply_top_k_top_p`). Pure functions on temperature-scaled float scores [N, V]."""

from __future__ import annotations

from typing import Any

import torch


def keep_mask(x: torch.Tensor, trunc: Any) -> torch.Tensor:
    """[N, V] bool: the tokens a sampler with `trunc` may draw from scores `x` (already divided by temperature).
    min_p drops tokens below min_p x the top probability; top_k keeps those at or above the k-th score (ties
    stay); top_p keeps the smallest head of the sorted distribution whose mass reaches top_p (the top token
    always stays)."""
    keep = torch.ones_like(x, dtype=torch.bool)
    if trunc.min_p > 0.0:
        probs = torch.softmax(x.float(), dim=-1)
        keep &= probs >= trunc.min_p * probs.amax(-1, keepdim=True)
    V = x.shape[-1]
    if 0 < trunc.top_k < V:
        kth = torch.topk(x.masked_fill(~keep, float("-inf")), trunc.top_k, dim=-1).values[:, -1:]
        keep &= x >= kth
    if trunc.top_p < 1.0:
        masked = x.float().masked_fill(~keep, float("-inf"))
        sorted_x, order = torch.sort(masked, dim=-1, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        # drop a token once the mass strictly before it already reaches top_p (vLLM: ascending cumsum <= 1 - p)
        drop_sorted = (probs.cumsum(-1) - probs) >= trunc.top_p
        drop_sorted[:, 0] = False
        keep &= ~torch.zeros_like(drop_sorted).scatter_(1, order, drop_sorted)
    return keep


def truncate(x: torch.Tensor, trunc: Any) -> torch.Tensor:
    """Scores `x` with the tokens outside `keep_mask` at -inf (unchanged when nothing is truncated)."""
    if not trunc.active:
        return x
    return x.masked_fill(~keep_mask(x, trunc), float("-inf"))
