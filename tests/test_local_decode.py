"""The local engine's preallocated KV cache: the same logits as transformers' own cache, token after token, with
left-padded rows; sliding-window layers keep transformers' layer class."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from verifiers_rl.inference.local_decode import reserved_cache  # noqa: E402


def step_logits(model, ids, attention, cache, new_tokens):
    B, P = ids.shape
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                past_key_values=cache, logits_to_keep=1)
    logits, mask, pos = [out.logits[:, -1]], attention, attention.sum(-1, keepdim=True)
    for k, tok in enumerate(new_tokens):
        mask = torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype)], dim=1)
        out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos + k,
                    past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
        logits.append(out.logits[:, -1])
    return torch.stack(logits, 1)


def test_reserved_cache_gives_the_logits_of_transformers_cache(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 250, (3, 9), generator=g)
    attention = torch.ones_like(ids)
    attention[1, :4] = 0  # a left-padded row
    new_tokens = list(torch.randint(3, 250, (12, 3), generator=g))
    cache = reserved_cache(model, ids.shape[1] + len(new_tokens))
    assert cache is not None and all(type(x).__name__ == "ReservedLayer" for x in cache.layers)
    with torch.inference_mode():
        ours = step_logits(model, ids, attention, cache, new_tokens)
        theirs = step_logits(model, ids, attention, None, new_tokens)
    assert ours.shape == (3, 13, model.config.vocab_size)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0)


def test_sliding_window_layers_keep_their_own_cache():
    from transformers import Qwen3Config

    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, use_sliding_window=True,
                         sliding_window=8, max_window_layers=1,
                         layer_types=["full_attention", "sliding_attention"])

    class Holder:
        pass

    model = Holder()
    model.config = config
    cache = reserved_cache(model, 32)
    assert [type(x).__name__ for x in cache.layers] == ["ReservedLayer", "DynamicSlidingWindowLayer"]
