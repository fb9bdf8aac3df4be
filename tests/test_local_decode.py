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


def test_finished_rows_leave_the_batch_without_changing_any_row(tiny_model_dir, monkeypatch):
    """Rows with different max_tokens finish at different steps; dropping them from the forward batch gives the
    same tokens and logprobs as decoding every row to the end (same seeds, same draws)."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference import local_decode
    from verifiers_rl.inference.local_sampling import Sampler, StopCriteria, row_generators

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    B, P = 8, 6
    ids = torch.randint(3, 250, (B, P), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    attention[2, :3] = 0
    max_new = [2, 3, 3, 5, 8, 13, 16, 16]
    calls = []
    forward = model.forward

    def counting_forward(*a, **kw):
        calls.append(kw["input_ids"].shape[0])
        return forward(*a, **kw)

    def run(compact: bool):
        monkeypatch.setattr(local_decode, "_compactable", lambda cache: compact and cache is not None)
        monkeypatch.setattr(model, "forward", counting_forward)
        calls.clear()
        sampler = Sampler(attention, temperature=1.0, segments=row_generators([("r", 7, 0)] * B))
        stopper = StopCriteria(None, P, eos_ids=[], max_new=max_new, min_tokens=[0] * B, ignore_eos=[True] * B,
                               stops=[[]] * B, skip_special_tokens=[True] * B)
        with torch.inference_mode():
            out = local_decode.decode(model, ids, attention, sampler, stopper, max(max_new), pad_id=0)
        return out, torch.stack(sampler.chosen_lp, 1), list(calls), stopper.lengths

    full, lp_full, calls_full, len_full = run(False)
    compact, lp_compact, calls_compact, len_compact = run(True)
    assert len_full == len_compact == max_new
    assert torch.equal(full, compact)
    for i, n in enumerate(max_new):
        assert torch.allclose(lp_full[i, :n], lp_compact[i, :n], atol=1e-5)
    assert calls_full == [B] * 16
    assert calls_compact[0] == B and calls_compact[-1] == 2 and sum(calls_compact) < 0.75 * sum(calls_full)
