"""Rollouts sharing a prompt run as one packed row (trainer/prefix_packing.py): same log-probs, entropies and
gradients as the padded rows, on the real tiny model with sdpa and with eager attention."""

from __future__ import annotations

import pytest
import torch

from verifiers_rl.trainer.logprobs import packing_matches, policy_token_logprobs
from verifiers_rl.trainer.prefix_packing import group_rows, pack_shared_prompts

PAD = 0


def _batch():
    """Two groups (prompts of 7 and 4 tokens) with 3 and 2 continuations of different lengths, plus one row
    whose prompt nobody shares; right-padded like the trainer's micro-batches."""
    g = torch.Generator().manual_seed(0)
    p1, p2, p3 = (torch.randint(3, 250, (n,), generator=g).tolist() for n in (7, 4, 5))
    rows = [(p1, 5), (p1, 9), (p1, 2), (p2, 11), (p2, 6), (p3, 3)]
    seqs = [p + torch.randint(3, 250, (n,), generator=g).tolist() for p, n in rows]
    T = max(map(len, seqs))
    ids = torch.full((len(seqs), T), PAD, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        attn[b, :len(s)] = 1
    loss = attn.bool().clone()
    for b, (p, _) in enumerate(rows):
        loss[b, :len(p)] = False
    return ids, attn, loss, [len(p) for p, _ in rows]


def test_rows_group_by_identical_prompt():
    ids, attn, _, plens = _batch()
    assert group_rows(ids, attn.sum(-1).tolist(), plens) == [[0, 1, 2], [3, 4], [5]]
    packed = pack_shared_prompts(ids, attn, plens, hidden_size=128, pad_id=PAD)
    assert packed is not None and packed.input_ids.shape[0] == 3
    # every real token appears in the packed rows at its own position id
    for b in range(ids.shape[0]):
        n = int(attn[b].sum())
        flat = packed.source[b, :n]
        assert torch.equal(packed.input_ids.view(-1)[flat], ids[b, :n])
        assert torch.equal(packed.position_ids.view(-1)[flat], torch.arange(n))


def test_no_shared_prompt_or_no_saving_means_no_packing():
    ids, attn, _, plens = _batch()
    assert pack_shared_prompts(ids, attn, [0] * len(plens), hidden_size=128, pad_id=PAD) is None
    # attention dominates at a tiny hidden size: one long packed row would cost more than the padded rows
    assert pack_shared_prompts(ids, attn, plens, hidden_size=1, pad_id=PAD) is None
    assert pack_shared_prompts(ids, attn, plens, hidden_size=128, pad_id=PAD, max_len=10) is None


def test_segments_cover_every_real_token_once_with_the_keys_it_sees():
    """segment_attention's blocks: each real token is one real query; it sees its prompt, then its own
    continuation up to itself, and nothing of the other continuations."""
    from verifiers_rl.trainer.segment_attention import segment_layout

    ids, attn, _, plens = _batch()
    packed = pack_shared_prompts(ids, attn, plens, hidden_size=128, pad_id=PAD, dense_mask=False)
    assert packed.attention_mask is None
    R, L = packed.input_ids.shape
    layout = segment_layout(packed.segments, R, L)
    assert len(layout.blocks) == 2  # prompts, continuations
    dest = torch.cat([b.dest for b in layout.blocks])
    real = packed.source[attn.bool()].unique()
    assert sorted(dest.tolist()) == sorted(real.tolist())  # every real packed position exactly once
    seen: dict[int, set[int]] = {}
    for b in layout.blocks:
        S, Q = b.queries.shape
        for j in range(S):
            for i in range(Q):
                seen.setdefault(int(b.queries[j, i]), set(b.keys[j][b.allowed[j, 0, i]].tolist()))
    for row in range(ids.shape[0]):  # the keys of each original token = the positions before it in its own row
        n = int(attn[row].sum())
        for t in range(n):
            assert seen[int(packed.source[row, t])] == set(packed.source[row, : t + 1].tolist()), (row, t)


@pytest.mark.integration  # trains for many seconds in-process
@pytest.mark.parametrize("attn_impl", ["sdpa", "sdpa-checkpointing", "eager"])
def test_packed_forward_matches_padded_rows_and_their_gradients(tiny_model_dir, attn_impl, monkeypatch):
    """sdpa attends by segments (segment_attention); with activation checkpointing, and on eager, through the
    dense 4D mask."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.trainer import segment_attention

    layouts = []
    build = segment_attention.segment_layout
    monkeypatch.setattr(segment_attention, "segment_layout", lambda *a, **k: layouts.append(build(*a, **k))
                        or layouts[-1])

    ids, attn, loss, plens = _batch()
    grads = []
    results = []
    for packed in (False, True):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation=attn_impl.split("-")[0])
        if attn_impl.endswith("checkpointing"):
            model.activation_checkpointing_enable()
            model.train()
        kwargs = {"prompt_lens": plens, "pad_id": PAD} if packed else {}
        lp, ent = policy_token_logprobs(model, ids, attn, 0.8, mask=loss, with_entropy=True, **kwargs)
        lp[loss].sum().backward()
        assert model.config._attn_implementation == attn_impl.split("-")[0]  # the packed forward restores it
        results.append((lp, ent))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    # one attention call per layer, by segments exactly on sdpa without checkpointing
    assert [x.calls for x in layouts] == ([model.config.num_hidden_layers] if attn_impl == "sdpa" else [])
    (lp0, ent0), (lp1, ent1) = results
    assert torch.allclose(lp0, lp1, atol=1e-5) and torch.allclose(ent0, ent1, atol=1e-5)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name, g in grads[0].items():  # same up to float summation order, relative to each tensor's scale
        assert (g - grads[1][name]).abs().max() <= 1e-5 * g.abs().max() + 1e-8, name
    assert packing_matches(model, ids, attn, 0.8, prompt_lens=plens, pad_id=PAD) is True


def test_the_check_runs_on_two_rollouts_of_two_prompts_cut_short(tiny_model_dir):
    """The check runs inside a run's first step: its two forwards see two rollouts of each of the first two shared
    prompts, each cut to its prompt and first CHECK_TOKENS completion tokens, and still match."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.trainer.logprobs import CHECK_TOKENS

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids, attn, _, plens = _batch()  # groups of 3 and 2 rollouts; prompts of 7 and 4 tokens
    seen = []
    model.model.register_forward_pre_hook(lambda _, a, kw: seen.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    assert packing_matches(model, ids, attn, 1.0, prompt_lens=plens, pad_id=PAD) is True
    width = max(min(n, p + CHECK_TOKENS) for n, p in zip(attn.sum(-1).tolist()[:5], plens))
    assert width < ids.shape[1]
    # (after the output head's own once-per-model check) padded rows 0, 1, 3, 4; then one packed row a prompt
    assert seen[-2:] == [(4, width), (2, 7 + 5 + CHECK_TOKENS)]


def test_a_model_that_ignores_position_ids_fails_the_check(tiny_model_dir):
    """The trainer compares packed and padded log-probs once before packing: a model that numbers positions its
    own way (here: position_ids dropped) must fail that comparison."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    inner = model.model.forward

    def no_positions(*a, **kw):
        kw.pop("position_ids", None)
        return inner(*a, **kw)

    model.model.forward = no_positions
    ids, attn, _, plens = _batch()
    assert packing_matches(model, ids, attn, 1.0, prompt_lens=plens, pad_id=PAD) is False


def test_another_threads_forward_is_plain_sdpa_while_the_config_is_switched(tiny_model_dir):
    """The packed forward switches the model's config to segment attention; a forward of the same model in
    another thread meanwhile (the local engine's generation under max_async_level) keeps sdpa and its own
    padding mask."""
    import threading

    from transformers import AutoModelForCausalLM

    from verifiers_rl.trainer.segment_attention import segment_layout, segments_attention

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()
    ids, attn, _, plens = _batch()
    packed = pack_shared_prompts(ids, attn, plens, hidden_size=128, pad_id=PAD, dense_mask=False)
    # the other forward is left-padded, as generation's: its padding mask matters
    shift = (attn == 0).sum(-1)
    left_ids = torch.stack([row.roll(int(n)) for row, n in zip(ids, shift)])
    left_attn = torch.stack([row.roll(int(n)) for row, n in zip(attn, shift)])
    with torch.no_grad():
        want = model(input_ids=left_ids, attention_mask=left_attn).logits
    got = []
    with segments_attention(model.config, segment_layout(packed.segments, *packed.input_ids.shape)):
        assert model.config._attn_implementation != "sdpa"
        t = threading.Thread(target=lambda: got.append(model(input_ids=left_ids, attention_mask=left_attn).logits))
        with torch.no_grad():
            t.start()
            t.join()
    assert model.config._attn_implementation == "sdpa"
    real = left_attn.bool()
    assert torch.allclose(got[0][real], want[real], atol=1e-5)


def test_a_model_whose_layers_read_another_config_fails_the_check(tiny_model_dir):
    """Segment attention is switched on through the model's text config; attention layers holding a config of
    their own never see the switch, so the packed forward attended wrongly: the check says no (padded rows)
    instead of training on it or crashing."""
    import copy

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    for layer in model.model.layers:
        layer.self_attn.config = copy.copy(model.config)
    ids, attn, _, plens = _batch()
    assert packing_matches(model, ids, attn, 1.0, prompt_lens=plens, pad_id=PAD) is False
