"""The local engine's decode loop: a bare forward loop over a KV cache instead of HF `generate` (no processor
chain, no per-step copies of the sequence). Left-padded rows get HF's position ids; finished rows are fed the pad.

torch is imported at module level: only the batching worker imports this module, when it runs a batch (so
`import verifiers_rl` stays fast).
"""

from __future__ import annotations

from typing import Any

import torch

from verifiers_rl.inference.decode_step import DecodeStep, key_padding_bias
from verifiers_rl.inference.kv_cache import cache_keyword, compactable, forward_params, reserved_cache


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


MIN_SHARED_PREFIX = 16  # tokens: below this, a second forward call costs more than it saves


def _shared_prefix(input_ids: torch.Tensor, attention: torch.Tensor) -> int:
    """How many leading columns of a left-padded batch hold only padding and one prompt prefix common to every
    row (0 when that prefix is short): those columns' keys and values can be computed once."""
    lengths = attention.sum(-1)
    if len(input_ids) < 2 or int(lengths.min()) <= MIN_SHARED_PREFIX:
        return 0
    pads = input_ids.shape[1] - lengths
    # each row's first tokens (all but its last, whose logits every row needs), aligned at their start
    firsts = input_ids.gather(1, pads[:, None] + torch.arange(int(lengths.min()) - 1, device=input_ids.device))
    common = int((firsts == firsts[:1]).all(0).long().cumprod(0).sum())
    start = input_ids.shape[1] - int((lengths - common).max())
    return start if common >= MIN_SHARED_PREFIX else 0


def _prefill(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
             cache: Any, compact: bool, extra: dict, fast: DecodeStep | None = None) -> tuple[torch.Tensor, Any]:
    """The prompts' forward that fills `cache`: every row's last-position logits [B, V], and the cache. With a
    `compact` cache, identical prompts and a prefix common to all are computed once (vLLM's prefix caching, within
    a batch) and their key/value rows copied into place."""
    if not compact:
        kv = cache_keyword(model)
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                    **{kv: cache}, **extra)
        return out.logits[:, -1], out[kv]
    shared = _unique_rows(input_ids, attention)
    if shared is not None:
        first, inverse = shared
        input_ids, attention, positions = input_ids[first], attention[first], positions[first]
    start = _shared_prefix(input_ids, attention)
    known = _fill_prefix(model, cache, input_ids, attention, start, extra, fast) if start else None
    if fast is not None:
        logits = fast.prefill(input_ids[:, start:], attention, positions[:, start:], cache, known)
    else:
        logits = model(input_ids=input_ids[:, start:], attention_mask=attention, position_ids=positions[:, start:],
                       use_cache=True, **{cache_keyword(model): cache}, **extra).logits[:, -1]
    if shared is not None:
        for layer in cache.layers:
            layer.select_rows(inverse)
        logits = logits.index_select(0, inverse)
    return logits, cache


def _fill_prefix(model: Any, cache: Any, input_ids: torch.Tensor, attention: torch.Tensor, start: int,
                 extra: dict, fast: DecodeStep | None = None) -> tuple[torch.Tensor, list] | None:
    """Compute the common prefix once (by `fast`'s prefill where there is one: the model's forward costs more
    per call) and write its keys and values into columns [0, start) of every row (a row's padding columns get
    copies of the first token's: masked, but finite). With `fast`, returns what rows whose prefix runs past
    `start` hold in the later columns (for `DecodeStep.prefill`): which of those [B, W - start] are prefix
    tokens, and each layer's keys and values there [B, H, W - start, D]."""
    pads = input_ids.shape[1] - attention.sum(-1)
    longest = int(pads.argmin())
    prefix = input_ids[longest, int(pads[longest]):start]
    own = reserved_cache(model, len(prefix))
    positions = torch.arange(len(prefix), device=prefix.device)[None]
    if fast is not None:
        fast.prefill(prefix[None], torch.ones_like(prefix)[None], positions, own)
    else:
        model(input_ids=prefix[None], position_ids=positions, use_cache=True, **{cache_keyword(model): own},
              **extra)
    later_too = fast is not None
    width = input_ids.shape[1] if later_too else start
    offset = torch.arange(width, device=pads.device)[None] - pads[:, None]  # [B, width]
    src = offset.clamp(0, len(prefix) - 1)  # row i's column c holds prefix token c - pad_i
    later = []
    for mine, theirs in zip(own.layers, cache.layers):
        # [1, H, L, D] → [B, H, width, D]
        keys, values = mine.keys[0][:, src].transpose(0, 1), mine.values[0][:, src].transpose(0, 1)
        theirs.update(keys[:, :, :start], values[:, :, :start])
        later.append((keys[:, :, start:], values[:, :, start:]))
    return (offset[:, start:] < len(prefix), later) if later_too else None


def decode(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, sampler: Any, stopper: Any,
           max_new: int, pad_id: int) -> torch.Tensor:
    """Prompt + generated ids [B, P + n], n <= max_new; `sampler.choose` picks each token, `stopper` ends rows.

    Finished rows leave the forward batch once a quarter of the rows still computed are done; the sampler and the
    stop criteria keep seeing every row (zero logits, the pad token), so each row draws the same random numbers
    as without compaction. The caller runs it under `torch.inference_mode()` with the model in eval mode."""
    B, P = input_ids.shape
    device = input_ids.device
    buf = torch.full((B, P + max_new), pad_id, dtype=torch.long, device=device)
    buf[:, :P] = input_ids
    mask = torch.ones((B, P + max_new), dtype=attention.dtype, device=device)
    mask[:, :P] = attention
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    next_pos = attention.sum(-1, keepdim=True)  # the first new token's position in each row
    extra = {"logits_to_keep": 1} if "logits_to_keep" in forward_params(model) else {}
    kv = cache_keyword(model)
    cache = reserved_cache(model, P + max_new)
    compact = compactable(cache)
    fast = DecodeStep.for_model(model) if compact else None
    logits, cache = _prefill(model, input_ids, attention, positions, cache, compact, extra, fast)
    pad = torch.full((B,), pad_id, dtype=torch.long, device=device)
    rows = torch.arange(B, device=device)  # the rows in the forward batch, in order
    if fast is not None:
        key_bias = key_padding_bias(attention, P + max_new)
        row_pos, row_bias = next_pos[:, 0], fast.prepare(key_bias)
    done = None
    n = 0
    for step in range(max_new):
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
            if fast is not None:
                row_pos, row_bias = next_pos[rows, 0], fast.prepare(key_bias[rows])
        if fast is not None:
            logits = fast.step(tok[rows], row_pos + step, row_bias, cache)
        else:
            logits = model(input_ids=tok[rows, None], attention_mask=mask[rows, : P + n],
                           position_ids=next_pos[rows] + step, use_cache=True, **{kv: cache},
                           **extra).logits[:, -1]
    return buf[:, : P + n]
