"""The local engine's own one-token forward (`decode_step`): the logits of the model's forward, token after token,
for each family it accepts (random-init models built offline from configs); everything else is refused and keeps
the model's forward."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

from verifiers_rl.inference.decode_step import DecodeStep  # noqa: E402
from verifiers_rl.inference.kv_cache import cache_keyword, reserved_cache  # noqa: E402

SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)


def _model(kind: str, dtype=torch.float32):
    import transformers as tf

    torch.manual_seed(0)
    if kind == "qwen3":
        cfg = tf.Qwen3Config(head_dim=16, **SMALL)
    elif kind == "qwen2":  # biases on q, k and v
        cfg = tf.Qwen2Config(**SMALL)
    elif kind == "llama-rope-scaled":
        cfg = tf.LlamaConfig(rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 16}, **SMALL)
    elif kind == "llama-rope-dynamic":  # cos/sin depend on the longest position seen: not read from a table
        cfg = tf.LlamaConfig(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
                             **{**SMALL, "max_position_embeddings": 8})
    else:
        cfg = tf.MistralConfig(sliding_window=None, **SMALL)
    model = tf.AutoModelForCausalLM.from_config(cfg).to(dtype).eval()
    with torch.no_grad():  # random biases, so that a dropped bias would show
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0, 0.5)
    return model


def _logits_both_ways(model, step, n_steps=6):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 96, (3, 7), generator=g)
    att = torch.ones_like(ids)
    att[1, :3] = 0
    att[2, :1] = 0
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    cap = 7 + n_steps
    caches = [reserved_cache(model, cap), reserved_cache(model, cap)]
    bias = torch.zeros((3, cap))
    bias[:, :7].masked_fill_(att == 0, torch.finfo(torch.float32).min)
    mask = torch.cat([att, torch.ones((3, n_steps), dtype=att.dtype)], 1)
    ref, ours = [], []
    with torch.inference_mode():
        for c in caches:
            out = model(input_ids=ids, attention_mask=att, position_ids=pos, **{cache_keyword(model): c},
                        use_cache=True)
        tok = out.logits[:, -1].argmax(-1)
        for s in range(n_steps):
            p = att.sum(-1) + s
            ref.append(model(input_ids=tok[:, None], attention_mask=mask[:, : 8 + s], position_ids=p[:, None],
                             **{cache_keyword(model): caches[0]}, use_cache=True).logits[:, -1])
            ours.append(step.step(tok, p, step.prepare(bias), caches[1]))
            tok = torch.randint(0, 96, (3,), generator=g)
    return torch.stack(ref, 1), torch.stack(ours, 1)


@pytest.mark.parametrize("kind", ["qwen3", "qwen2", "llama-rope-scaled", "llama-rope-dynamic", "mistral"])
def test_the_step_gives_the_logits_of_the_models_forward(kind):
    model = _model(kind)
    if kind == "qwen2":
        assert model.model.layers[0].self_attn.q_proj.bias.abs().max() > 0.1
    step = DecodeStep.for_model(model)
    assert step is not None
    ref, ours = _logits_both_ways(model, step)
    assert ref.abs().max() > 0.1
    assert torch.allclose(ours, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["qwen3", "qwen2", "llama-rope-scaled", "mistral"])
def test_the_prefill_gives_the_logits_and_cache_of_the_models_forward(kind):
    """The engine's own prefill of a left-padded batch sharing a prefix, computed once and placed by the decode
    loop (later columns of the more-padded rows hold prefix tokens, passed as `known`): the last column's logits
    and every real position's keys and values of the model's forward over the whole batch."""
    from verifiers_rl.inference.local_decode import _fill_prefix, _shared_prefix

    model = _model(kind)
    step = DecodeStep.for_model(model)
    g = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, 96, (20,), generator=g)
    rows = [torch.cat([prefix, torch.randint(0, 96, (n,), generator=g)]) for n in (5, 2, 1)]
    W = max(len(r) for r in rows)
    ids = torch.zeros((3, W), dtype=torch.long)
    att = torch.zeros((3, W), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, W - len(r):], att[i, W - len(r):] = r, 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    start = _shared_prefix(ids, att)
    assert start > 0
    with torch.inference_mode():
        theirs = reserved_cache(model, W)
        ref = model(input_ids=ids, attention_mask=att, position_ids=pos, **{cache_keyword(model): theirs},
                    use_cache=True).logits[:, -1]
        ours = reserved_cache(model, W)
        known = _fill_prefix(model, ours, ids, att, start, {}, step)  # the prefix by the engine's prefill too
        assert known[0][att[:, start:].bool()].any()  # some real columns after `start` are not computed again
        got = step.prefill(ids[:, start:], att, pos[:, start:], ours, known)
    assert torch.allclose(got, ref, atol=1e-5, rtol=0)
    real = att.bool()
    for a, b in zip(ours.layers, theirs.layers):
        for x, y in ((a.keys, b.keys), (a.values, b.values)):
            assert torch.allclose(x.transpose(1, 2)[real], y.transpose(1, 2)[real], atol=1e-5)


def test_bfloat16_is_accepted_within_its_precision():
    model = _model("qwen3", torch.bfloat16)
    step = DecodeStep.for_model(model)
    assert step is not None
    ref, ours = _logits_both_ways(model, step)
    assert (ours.float() - ref.float()).abs().max() <= 3e-2 * ref.float().abs().max()


def test_weights_changed_in_place_are_seen():
    model = _model("qwen3")
    step = DecodeStep.for_model(model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.1)
    ref, ours = _logits_both_ways(model, step)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=0)


def test_the_steps_weight_copies_follow_every_change_of_the_weights(monkeypatch):
    """On CPU the step reads [in, out] copies of the weights: made once per state of the weights (not per step),
    again after an optimizer step, and after a weight sync even when the weights were rewritten through `.data`
    (which moves no version counter); over its memory budget the step reads the modules' own."""
    from verifiers_rl.inference import decode_step
    from verifiers_rl.inference.weight_sync import SharedWeights

    model = _model("qwen3")
    step = DecodeStep.for_model(model)
    ref, ours = _logits_both_ways(model, step)
    read = step._step_weights()
    q_proj = model.model.layers[0].self_attn.q_proj.weight
    assert read[0][0].q.data_ptr() != q_proj.data_ptr() and torch.equal(read[0][0].q, q_proj.t())  # a copy
    assert step._step_weights() is read  # six steps, one set of copies
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.1)
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    ref, ours = _logits_both_ways(model, step)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=0)
    for p in model.parameters():
        p.data.mul_(1.1)
    SharedWeights("policy").sync(model, 2)
    ref, ours = _logits_both_ways(model, step)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=0)
    monkeypatch.setattr(decode_step, "TRANSPOSED_BUDGET", 0)
    model = _model("qwen3")
    small = DecodeStep.for_model(model)
    assert small is not None
    assert small._step_weights()[0][0].q.data_ptr() == model.model.layers[0].self_attn.q_proj.weight.data_ptr()


def test_lora_wrapped_or_sliding_window_models_keep_their_forward():
    import transformers as tf
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(_model("qwen3"), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert DecodeStep.for_model(lora) is None
    assert DecodeStep.for_model(lora.get_base_model()) is None  # its q_proj is a LoRA layer now
    windowed = tf.AutoModelForCausalLM.from_config(tf.MistralConfig(sliding_window=4, **SMALL))
    assert DecodeStep.for_model(windowed) is None


def test_q_and_k_norms_of_different_epsilons_keep_the_models_forward(caplog):
    """The step normalizes q and k heads in one op, so it takes only models whose two norms share an epsilon; others
    are refused up front, not by the numeric check (which would warn)."""
    odd = _model("qwen3")
    odd.model.layers[1].self_attn.k_norm.variance_epsilon = 1e-3
    with caplog.at_level("WARNING"):
        assert DecodeStep.for_model(odd) is None
    assert not caplog.records


def test_a_model_that_computes_differently_is_refused_with_one_line(caplog):
    """A model whose arithmetic the step does not reproduce (here its MLP activation swapped) fails the check
    against its own forward."""
    model = _model("qwen3")
    model.model.layers[0].mlp.act_fn = torch.nn.GELU()
    with caplog.at_level(logging.WARNING, logger="verifiers_rl.inference.decode_step"):
        assert DecodeStep.for_model(model) is None
        assert DecodeStep.for_model(model) is None  # decided once per model
    assert len(caplog.records) == 1 and "differs from its own forward" in caplog.records[0].getMessage()


def test_the_verdict_cache_does_not_keep_a_model_alive():
    import gc
    import weakref

    model = _model("qwen3")
    assert DecodeStep.for_model(model) is not None
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None
