"""Attention over prompt-packed rows that computes only the query-key pairs a token may see.

Each segment (the prompt, each continuation) gathers its queries and visible keys into a small padded block, one sdpa
call per segment kind: the dense mask's results at the unpacked rows' cost. Registered as the transformers attention
function "vf_rl_segments", its layout in a context variable: a call without one (another thread's forward, such as the
local engine's) is plain sdpa.
"""


from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.nn.functional as F

NAME = "vf_rl_segments"


@dataclass
class Block:
    """Segments of one kind, padded to the same query and key lengths."""

    queries: torch.Tensor  # [S, Q] flat position r * L + l of each query (padding repeats the last real one)
    keys: torch.Tensor     # [S, K] flat positions of the keys each segment sees: its prefix, then its own tokens
    allowed: torch.Tensor  # [S, 1, Q, K] bool
    pick: torch.Tensor     # [N] indices into the flattened [S * Q] queries that are real
    dest: torch.Tensor     # [N] their flat positions


@dataclass
class Layout:
    blocks: list[Block]
    rows: int
    length: int
    calls: int = 0


def _block(segments: list[tuple[int, int, int, int]], length: int) -> Block:
    """`segments`: (row, prefix length, start, own length); the prefix is the row's first `prefix` tokens."""
    row, prefix, start, own = (torch.tensor(c, dtype=torch.long) for c in zip(*segments))
    Q, K = int(own.max()), int((prefix + own).max())
    i = torch.arange(Q).clamp(max=own[:, None] - 1)  # [S, Q]: padding queries repeat the last real one
    k = torch.arange(K)[None, :]
    base = (row * length)[:, None]
    own_key = (start[:, None] + k - prefix[:, None]).clamp(min=0)
    real_key = k < (prefix + own)[:, None]
    keys = base + torch.where(k < prefix[:, None], k, own_key) * real_key  # padding keys point at position 0
    allowed = k[:, None, :] <= (prefix[:, None] + i)[:, :, None]  # [S, Q, K]: the prefix, then causal
    queries = base + start[:, None] + i
    real = (torch.arange(Q)[None, :] < own[:, None]).flatten()
    pick = real.nonzero().flatten()
    return Block(queries, keys, allowed[:, None], pick, queries.flatten()[pick])


def segment_layout(segments: list[tuple[int, int, int, int]], rows: int, length: int,
                   device: torch.device | str = "cpu") -> Layout:
    """The blocks for packed rows [rows, length]: segments with a prefix (continuations) and without (prompts,
    unshared rows) run as separate blocks, so short continuations are not padded to a long prompt's length."""
    kinds = [[s for s in segments if s[1] == 0 and s[3] > 0], [s for s in segments if s[1] > 0 and s[3] > 0]]
    blocks = []
    for kind in kinds:
        if kind:
            b = _block(kind, length)
            blocks.append(Block(*(t.to(device) for t in (b.queries, b.keys, b.allowed, b.pick, b.dest))))
    return Layout(blocks, rows, length)


_LAYOUT: contextvars.ContextVar[Layout | None] = contextvars.ContextVar("vf_rl_segment_layout", default=None)


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, None]:
    layout = _LAYOUT.get()
    R, H, L, D = query.shape
    if layout is None:  # another thread's forward while the config is switched: plain sdpa, its own mask
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if dropout or (R, L) != (layout.rows, layout.length):
        raise RuntimeError(f"segment attention: got queries {tuple(query.shape)} with dropout {dropout} for a "
                           f"layout of {layout.rows} x {layout.length} rows without dropout")
    layout.calls += 1
    Hkv = key.shape[1]
    q, k, v = (t.transpose(1, 2).reshape(R * L, t.shape[1], D) for t in (query, key, value))
    picked, dests = [], []
    for b in layout.blocks:
        S, Q = b.queries.shape
        out = F.scaled_dot_product_attention(
            q[b.queries].transpose(1, 2), k[b.keys].transpose(1, 2), v[b.keys].transpose(1, 2),
            attn_mask=b.allowed, scale=scaling, enable_gqa=H != Hkv)  # [S, H, Q, D]
        picked.append(out.transpose(1, 2).reshape(S * Q, H, D).index_select(0, b.pick))
        dests.append(b.dest)
    # positions no segment covers (the packed rows' padding) get zeros: nothing reads them
    out = q.new_zeros((R * L, H, D)).index_copy(0, torch.cat(dests), torch.cat(picked))
    return out.view(R, L, H, D), None


@contextlib.contextmanager
def segments_attention(config: Any, layout: Layout) -> Iterator[Layout]:
    """The model whose (text) `config` this is attends by `layout` inside the block; sdpa again after it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, _attention)
        # masks as for sdpa: the packed forward passes none (nothing is built), any other forward its own
        AttentionMaskInterface.register(NAME, sdpa_mask)
    before = config._attn_implementation
    token = _LAYOUT.set(layout)
    config._attn_implementation = NAME
    try:
        yield layout
    finally:
        config._attn_implementation = before
        _LAYOUT.reset(token)
