"""The local engine's preallocated KV cache: the same logits as transformers' own cache, token after token, with
left-padded rows; sliding-window layers keep transformers' layer class."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from verifiers_rl.inference.kv_cache import cache_keyword, reserved_cache  # noqa: E402


def step_logits(model, ids, attention, cache, new_tokens):
    B, P = ids.shape
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    kv = cache_keyword(model)
    out = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                **{kv: cache}, logits_to_keep=1)
    logits, mask, pos = [out.logits[:, -1]], attention, attention.sum(-1, keepdim=True)
    for k, tok in enumerate(new_tokens):
        mask = torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype)], dim=1)
        out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos + k,
                    **{kv: out[kv]}, use_cache=True, logits_to_keep=1)
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


@pytest.mark.parametrize("own_step", [False, True], ids=["model-forward", "decode-step"])
def test_finished_rows_leave_the_batch_without_changing_any_row(tiny_model_dir, monkeypatch, own_step):
    """Rows with different max_tokens finish at different steps; dropping them from the forward batch gives the
    same tokens and logprobs as decoding every row to the end (same seeds, same draws), whether the tokens go
    through the model's forward or the engine's own decode step."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference import decode_step, local_decode
    from verifiers_rl.inference.local_sampling import Sampler, StopCriteria, row_generators

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    B, P = 8, 6
    ids = torch.randint(3, 250, (B, P), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    attention[2, :3] = 0
    max_new = [2, 3, 3, 5, 8, 13, 16, 16]
    step = decode_step.DecodeStep.for_model(model) if own_step else None
    assert (step is not None) == own_step
    monkeypatch.setattr(decode_step.DecodeStep, "for_model", staticmethod(lambda m: step))
    calls = []
    forward, own, own_prefill = model.forward, decode_step.DecodeStep.step, decode_step.DecodeStep.prefill

    def counting_forward(*a, **kw):
        calls.append(kw["input_ids"].shape[0])
        return forward(*a, **kw)

    def counting_step(self, tokens, *a):
        calls.append(len(tokens))
        return own(self, tokens, *a)

    def counting_prefill(self, input_ids, *a):
        calls.append(len(input_ids))
        return own_prefill(self, input_ids, *a)

    def run(compact: bool):
        monkeypatch.setattr(local_decode, "compactable", lambda cache: compact and cache is not None)
        monkeypatch.setattr(model, "forward", counting_forward)
        monkeypatch.setattr(decode_step.DecodeStep, "step", counting_step)
        monkeypatch.setattr(decode_step.DecodeStep, "prefill", counting_prefill)
        calls.clear()
        sampler = Sampler(attention, temperature=1.0, rng_groups=row_generators([("r", 7, 0)] * B))
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
    assert len(calls_compact) == 16 and calls_compact[0] == B and calls_compact[-1] == 2
    assert sum(calls_compact) < 0.75 * sum(calls_full)


class _Output(dict):
    """A model output as transformers 5.25 returns it: the cache under `cache`."""

    __getattr__ = dict.__getitem__


@pytest.mark.parametrize("compact", [False, True], ids=["model-forward", "decode-step"])
def test_the_cache_goes_by_the_keyword_the_models_forward_names(tiny_model_dir, monkeypatch, compact):
    """transformers 5.25 renamed the forward's `past_key_values` to `cache` (the old name deprecated, to go in 5.40:
    a FutureWarning from every decode): the decode passes and reads the cache under the name the model's class
    takes, and decodes the same tokens. A subclass taking `cache` stands in for 5.25's models here (the lock's
    transformers may have either)."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference import local_decode
    from verifiers_rl.inference.local_sampling import Sampler, StopCriteria, row_generators

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    theirs, seen = cache_keyword(base), []

    class NewStyle(type(base)):
        def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, **kw):
            assert "past_key_values" not in kw
            seen.append(cache is not None)
            out = super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                  **{theirs: cache}, **kw)
            return _Output(logits=out.logits, cache=out[theirs])

    model = NewStyle(base.config).eval()
    model.load_state_dict(base.state_dict())
    assert cache_keyword(model) == "cache"
    monkeypatch.setattr(local_decode, "compactable", lambda cache: compact and cache is not None)
    B, P = 4, 6
    ids = torch.randint(3, 250, (B, P), generator=torch.Generator().manual_seed(2))
    attention = torch.ones_like(ids)
    attention[1, :2] = 0

    def run(m):
        sampler = Sampler(attention, temperature=1.0, rng_groups=row_generators([("r", 3, 0)] * B))
        stopper = StopCriteria(None, P, eos_ids=[], max_new=[5] * B, min_tokens=[0] * B, ignore_eos=[True] * B,
                               stops=[[]] * B, skip_special_tokens=[True] * B)
        with torch.inference_mode():
            return local_decode.decode(m, ids, attention, sampler, stopper, 5, pad_id=0)

    assert torch.equal(run(model), run(base))
    assert seen and all(seen)  # every call of its forward got the cache by its own name
    if not compact:
        assert len(seen) == 5  # the prefill and four steps through the model's forward


def _left_padded(rows: list[torch.Tensor], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(r) for r in rows)
    ids = torch.full((len(rows), P), pad)
    attention = torch.zeros((len(rows), P), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, P - len(r):], attention[i, P - len(r):] = r, 1
    return ids, attention


@pytest.mark.parametrize("own_step", [False, True], ids=["model-forward", "padding-free-prefill"])
def test_a_prefix_common_to_every_prompt_is_computed_once(tiny_model_dir, monkeypatch, own_step):
    """Prompts sharing a 30-token prefix (two of them identical): the prefix runs once, then only the columns after
    it (both through the model's forward, or both through the engine's own prefill, over the real tokens only); the
    logits and every real position's keys and values match a plain forward over all rows."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference import decode_step, local_decode

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(3, 250, (30,), generator=g)
    rows = [torch.cat([prefix, torch.randint(3, 250, (n,), generator=g)]) for n in (5, 12, 1, 20)]
    rows.append(rows[1].clone())
    ids, attention = _left_padded(rows)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    assert local_decode._shared_prefix(ids, attention) == 30  # the longest row has no padding
    shapes = []
    forward = model.forward

    def recording_forward(*a, **kw):
        shapes.append(("forward", tuple(kw["input_ids"].shape)))
        return forward(*a, **kw)

    step = decode_step.DecodeStep.for_model(model) if own_step else None
    assert (step is not None) == own_step
    own_prefill = decode_step.DecodeStep.prefill

    def recording_prefill(self, input_ids, *a):
        shapes.append(("prefill", tuple(input_ids.shape)))
        return own_prefill(self, input_ids, *a)

    monkeypatch.setattr(model, "forward", recording_forward)
    monkeypatch.setattr(decode_step.DecodeStep, "prefill", recording_prefill)
    with torch.inference_mode():
        ours = reserved_cache(model, ids.shape[1] + 4)
        logits, _ = local_decode._prefill(model, ids, attention, positions, ours, True, {"logits_to_keep": 1}, step)
        theirs = reserved_cache(model, ids.shape[1] + 4)
        ref = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                    **{cache_keyword(model): theirs})
    # the prefix once, then four distinct prompts' last 20 columns
    by = "prefill" if own_step else "forward"
    assert shapes[:2] == [(by, (1, 30)), (by, (4, 20))]
    assert torch.allclose(logits, ref.logits[:, -1], atol=1e-5)
    real = attention.bool()
    for a, b in zip(ours.layers, theirs.layers):
        for x, y in ((a.keys, b.keys), (a.values, b.values)):
            assert x.shape == y.shape
            assert torch.allclose(x.transpose(1, 2)[real], y.transpose(1, 2)[real], atol=1e-5)


def test_short_or_missing_common_prefixes_are_not_split_off():
    from verifiers_rl.inference.local_decode import MIN_SHARED_PREFIX, _shared_prefix

    g = torch.Generator().manual_seed(0)
    short = torch.randint(3, 250, (MIN_SHARED_PREFIX - 1,), generator=g)
    rows = [torch.cat([short, torch.randint(3, 250, (9,), generator=g)]) for _ in range(3)]
    assert _shared_prefix(*_left_padded(rows)) == 0
    assert _shared_prefix(*_left_padded(rows[:1])) == 0
    long = torch.randint(3, 250, (40,), generator=g)
    # a prompt that is the prefix itself plus one token: every row keeps at least its last token to compute
    ids, attention = _left_padded([torch.cat([long, torch.tensor([5])]), torch.cat([long, torch.tensor([6, 7])])])
    assert _shared_prefix(ids, attention) == 40
