"""The local engine's decode loop: a bare forward loop over a KV cache instead of HF `generate`.

Per token it runs one forward of the last token (logits of that position only), the engine's sampler and stop
criteria, and one write into a preallocated token buffer: no logits-processor chain, no per-step copies of the
growing sequence, no `generate` bookkeeping. Left-padded rows get HF's position ids (count of real tokens
before); rows that finished are fed the pad token until every row is done, as `generate` does.

torch is imported at module level: only the batching worker imports this module, inside the function that runs
a batch, so `import verifiers_rl` stays fast.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch


def _accepts_logits_to_keep(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


@functools.cache
def _reserved_layer_class() -> type:  # defined on first use: transformers' cache module loads with the engine
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """A full-attention cache layer whose keys and values live in one buffer sized for the whole decode: each
        token writes in place, where `DynamicLayer` concatenates (a copy of the whole cache per token: quadratic
        in the length)."""

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity, self.length = capacity, 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                shape = (*key_states.shape[:-2], self.capacity, key_states.shape[-1])
                self._k, self._v = key_states.new_empty(shape), value_states.new_empty(shape)
            end = self.length + key_states.shape[-2]
            self._k[..., self.length:end, :] = key_states
            self._v[..., self.length:end, :] = value_states
            self.length = end
            self.keys, self.values = self._k[..., :end, :], self._v[..., :end, :]
            return self.keys, self.values

        def select_rows(self, idx: torch.Tensor) -> None:
            """Batch row i becomes row `idx[i]`: finished rows leave the decode batch, a shared prompt's prefill
            is copied to every row that asked for it."""
            self._k, self._v = self._k.index_select(0, idx), self._v.index_select(0, idx)
            self.keys, self.values = self._k[..., :self.length, :], self._v[..., :self.length, :]

    return ReservedLayer


def reserved_cache(model: Any, capacity: int) -> Any:
    """A `DynamicCache` for `model` whose plain full-attention layers are preallocated to `capacity` tokens; None
    (the model builds its own cache) when the config does not describe its layers up front."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        cache = DynamicCache(config=model.config)
    except Exception:  # a config the cache cannot read: the model's own default
        return None
    if not cache.layers:
        return None
    layer = _reserved_layer_class()
    cache.layers = [layer(capacity) if type(x) is DynamicLayer else x for x in cache.layers]
    return cache


def _compactable(cache: Any) -> bool:
    return cache is not None and all(hasattr(x, "select_rows") for x in cache.layers)


def _unique_rows(input_ids: torch.Tensor, attention: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(first row of each distinct prompt, each row's index into those), or None when every prompt differs.
    A GRPO group sends the same prompt `rollouts_per_example` times: its prefill is computed once."""
    keyed = torch.cat([input_ids, attention.to(input_ids.dtype)], dim=1)
    uniq, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    if len(uniq) == len(keyed):
        return None
    first = torch.full((len(uniq),), len(keyed), dtype=torch.long, device=keyed.device)
    first.scatter_reduce_(0, inverse, torch.arange(len(keyed), device=keyed.device), reduce="amin")
    return first, inverse


def decode(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, sampler: Any, stopper: Any,
           max_new: int, pad_id: int) -> torch.Tensor:
    """Prompt + generated ids [B, P + n], n <= max_new; `sampler.choose` picks each token, `stopper` ends rows.

    Identical prompts are prefilled once (their KV rows copied). Rows that finished leave the forward batch (their
    KV rows dropped) once a quarter of the rows still computed are done; the sampler and the stop criteria keep
    seeing every row (a finished row's logits are zeros and its token the pad), so each row draws the same random
    numbers as without compaction.

    Run under `torch.inference_mode()` with the model in eval mode (the caller's job)."""
    B, P = input_ids.shape
    device = input_ids.device
    buf = torch.full((B, P + max_new), pad_id, dtype=torch.long, device=device)
    buf[:, :P] = input_ids
    mask = torch.ones((B, P + max_new), dtype=attention.dtype, device=device)
    mask[:, :P] = attention
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    next_pos = attention.sum(-1, keepdim=True)  # the first new token's position in each row
    extra = {"logits_to_keep": 1} if _accepts_logits_to_keep(model) else {}
    cache = reserved_cache(model, P + max_new)
    compact = _compactable(cache)
    shared = _unique_rows(input_ids, attention) if compact else None
    if shared is None:
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                    past_key_values=cache, **extra)
    else:
        first, inverse = shared
        out = model(input_ids=input_ids[first], attention_mask=attention[first], position_ids=positions[first],
                    use_cache=True, past_key_values=cache, **extra)
        for layer in cache.layers:
            layer.select_rows(inverse)
        out.logits = out.logits.index_select(0, inverse)
    pad = torch.full((B,), pad_id, dtype=torch.long, device=device)
    rows = torch.arange(B, device=device)  # the rows in the forward batch, in order
    done = None
    n = 0
    for step in range(max_new):
        logits = out.logits[:, -1]
        if len(rows) < B:
            logits = logits.new_zeros((B, logits.shape[-1])).index_copy_(0, rows, logits)
        tok = sampler.choose(buf[:, : P + step], logits)
        if done is not None:
            tok = torch.where(done, pad, tok)
        buf[:, P + step] = tok
        n = step + 1
        done = stopper(buf[:, : P + n], None)
        if n == max_new or bool(done.all()):
            break
        if compact and 4 * int(done[rows].sum()) >= len(rows):
            keep = (~done[rows]).nonzero().flatten()
            for layer in cache.layers:
                layer.select_rows(keep)
            rows = rows[keep]
        out = model(input_ids=tok[rows, None], attention_mask=mask[rows, : P + n], position_ids=next_pos[rows] + step,
                    past_key_values=out.past_key_values, use_cache=True, **extra)
    return buf[:, : P + n]
