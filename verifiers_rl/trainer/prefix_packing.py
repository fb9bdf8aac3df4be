"""One forward row per prompt: the rollouts of a group share their prompt, so it is computed once.

A 4D attention mask lets each continuation see the prompt and itself only, and position ids restart at the prompt
length, so every token sees exactly what it sees in its own row: same log-probs and gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_PACKED_LEN = 4096
"""Longest packed row: its dense [L, L] mask (and sdpa's attention weights) grow with the square."""

MIN_SAVING = 0.85
"""Pack only when the estimated cost falls below this fraction of the padded rows' cost."""


@dataclass
class PackedRows:
    input_ids: torch.Tensor       # [R, L]
    position_ids: torch.Tensor    # [R, L]
    attention_mask: torch.Tensor | None  # [R, 1, L, L]: bool (sdpa) or additive float (eager); None: segments
    source: torch.Tensor          # [B, T] flat index r * L + l of each original position (0 on padding)
    # without the mask: (row, prefix length, start, length) of each prompt and continuation
    segments: list[tuple[int, int, int, int]] | None = None


def _cost(rows: int, length: int, hidden_size: int) -> float:
    # Per layer, a token's projections cost ~24 h^2 flops and one query-key pair of attention ~4 h: 1 / (6 h).
    return rows * length * (1.0 + length / (6.0 * hidden_size))


def _segments_cost(segments: list[tuple[int, int, int, int]], hidden_size: int) -> float:
    return sum(n * (1.0 + (p + n) / (6.0 * hidden_size)) for _, p, _, n in segments)


def group_rows(input_ids: torch.Tensor, lengths: list[int], prompt_lens: list[int]) -> list[list[int]]:
    """Rows grouped by identical prompt (in order of first appearance); a row without a prompt is its own group."""
    groups: dict[tuple, list[int]] = {}
    for b, (n, p) in enumerate(zip(lengths, prompt_lens)):
        p = min(p, n)
        key = (p, *input_ids[b, :p].tolist()) if p > 0 else ("row", b)
        groups.setdefault(key, []).append(b)
    return list(groups.values())


def pack_shared_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_lens: list[int], *,
                        hidden_size: int, pad_id: int, mask_dtype: torch.dtype | None = None,
                        max_len: int = MAX_PACKED_LEN, min_saving: float = MIN_SAVING,
                        dense_mask: bool = True) -> PackedRows | None:
    """Packed rows for right-padded ``input_ids`` [B, T] whose first ``prompt_lens[b]`` tokens are row b's prompt;
    None when no two rows share a prompt or the cost estimate is not below ``min_saving`` times the padded rows'.
    ``mask_dtype`` None: a bool mask (sdpa), else additive (eager). ``dense_mask=False``: no mask and no length
    limit, for attention by `segments` (`segment_attention`)."""

    B, T = input_ids.shape
    lengths = attention_mask.sum(-1).tolist()
    groups = group_rows(input_ids, lengths, prompt_lens)
    if len(groups) == B:
        return None
    shared = [min(prompt_lens[g[0]], lengths[g[0]]) for g in groups]
    row_len = [p + sum(lengths[b] - p for b in g) for g, p in zip(groups, shared)]
    L = max(row_len)
    segments = None if dense_mask else _segments(groups, shared, lengths)
    cost = _cost(len(groups), L, hidden_size) if segments is None else _segments_cost(segments, hidden_size)
    if (dense_mask and L > max_len) or cost >= min_saving * _cost(B, T, hidden_size):
        return None
    R = len(groups)
    ids = torch.full((R, L), pad_id, dtype=input_ids.dtype)
    pos = torch.zeros((R, L), dtype=torch.long)
    seg = torch.full((R, L), -1, dtype=torch.long)  # 0: the prompt, k: the k-th continuation, -1: padding
    source = torch.zeros((B, T), dtype=torch.long)
    src_ids = input_ids.cpu()
    for r, (g, p) in enumerate(zip(groups, shared)):
        ids[r, :p] = src_ids[g[0], :p]
        pos[r, :p] = torch.arange(p)
        seg[r, :p] = 0
        at = p
        for k, b in enumerate(g, start=1):
            n = lengths[b] - p
            ids[r, at:at + n] = src_ids[b, p:p + n]
            pos[r, at:at + n] = torch.arange(p, p + n)
            seg[r, at:at + n] = k
            source[b, :p] = r * L + torch.arange(p)
            source[b, p:p + n] = r * L + torch.arange(at, at + n)
            at += n
    device = input_ids.device
    if not dense_mask:
        return PackedRows(ids.to(device), pos.to(device), None, source.to(device), segments)
    q, k = seg.unsqueeze(-1), seg.unsqueeze(-2)
    causal = torch.ones((L, L), dtype=torch.bool).tril()
    allowed = causal & (q >= 0) & (k >= 0) & ((k == 0) | (k == q))
    allowed |= torch.eye(L, dtype=torch.bool)  # padding attends to itself: no fully-masked (NaN) rows
    mask = allowed.unsqueeze(1)
    if mask_dtype is not None:
        mask = torch.zeros(mask.shape, dtype=mask_dtype).masked_fill_(~mask, torch.finfo(mask_dtype).min)
    return PackedRows(ids.to(device), pos.to(device), mask.to(device), source.to(device))


def _segments(groups: list[list[int]], shared: list[int], lengths: list[int]) -> list[tuple[int, int, int, int]]:
    """(row, prefix length, start, length) of each packed row's prompt and continuations, in packing order."""
    out = []
    for r, (g, p) in enumerate(zip(groups, shared)):
        if p:
            out.append((r, 0, 0, p))
        at = p
        for b in g:
            out.append((r, p, at, lengths[b] - p))
            at += lengths[b] - p
    return out
