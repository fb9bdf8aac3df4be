"""The chunked log-probs (trainer/logprobs.py) against the full-logits computation, and the memory promise:
no tensor anywhere near [B, T, V] in the loss path at Qwen3's real vocabulary."""

from __future__ import annotations

import pytest
import torch

from verifiers_rl.trainer.logprobs import hidden_token_logprobs, policy_token_logprobs


def _full(hidden, head, ids, temperature):
    logits = head(hidden)[:, :-1].float() / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    p = torch.softmax(logits, -1)
    ent = -(p * torch.log_softmax(logits, -1)).sum(-1)
    zero = torch.zeros(ids.shape[0], 1)
    return torch.cat([zero, lp], 1), torch.cat([zero, ent], 1)


@pytest.mark.parametrize("chunk_elements", [1, 7 * 50, 1 << 23])
def test_chunked_logprobs_and_grads_match_full_logits(chunk_elements):
    torch.manual_seed(0)
    B, T, H, V = 3, 9, 16, 50
    head = torch.nn.Linear(H, V, bias=True)
    ids = torch.randint(0, V, (B, T))
    h1 = torch.randn(B, T, H, requires_grad=True)
    h2 = h1.detach().clone().requires_grad_(True)
    lp, ent = hidden_token_logprobs(h1, head, ids, 0.7, with_entropy=True, chunk_elements=chunk_elements)
    want_lp, want_ent = _full(h2, head, ids, 0.7)
    assert torch.allclose(lp, want_lp, atol=1e-5) and torch.allclose(ent, want_ent, atol=1e-5)
    assert not ent.requires_grad
    w = torch.randn(B, T)
    (lp * w).sum().backward()
    g_h1, g_w1 = h1.grad.clone(), head.weight.grad.clone()
    head.zero_grad()
    (want_lp * w).sum().backward()
    assert torch.allclose(g_h1, h2.grad, atol=1e-5) and torch.allclose(g_w1, head.weight.grad, atol=1e-5)


def test_masked_positions_are_zero_and_the_rest_match():
    torch.manual_seed(1)
    B, T, H, V = 2, 6, 8, 11
    head = torch.nn.Linear(H, V, bias=False)
    hidden, ids = torch.randn(B, T, H), torch.randint(0, V, (B, T))
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [1, 0, 0, 0, 1, 1]], dtype=torch.bool)
    lp, _ = hidden_token_logprobs(hidden, head, ids, mask=mask, chunk_elements=V * 2)
    want, _ = _full(hidden, head, ids, 1.0)
    keep = mask.clone()
    keep[:, 0] = False  # the first token has no prediction
    assert torch.equal(lp == 0, ~keep)
    assert torch.allclose(lp[keep], want[keep], atol=1e-6)


def test_an_empty_mask_still_backpropagates():
    """A micro-batch whose rollouts were all dropped has no loss position; the trainer still calls backward."""
    head = torch.nn.Linear(4, 7)
    hidden = torch.randn(2, 3, 4, requires_grad=True)
    lp, _ = hidden_token_logprobs(hidden, head, torch.zeros(2, 3, dtype=torch.long),
                                  mask=torch.zeros(2, 3, dtype=torch.bool))
    assert lp.requires_grad and torch.equal(lp, torch.zeros(2, 3))
    lp.sum().backward()
    assert torch.equal(hidden.grad, torch.zeros_like(hidden))


def test_policy_logprobs_of_a_peft_model_match_its_logits(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from verifiers_rl.trainer.loss import token_logprobs_and_entropy

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    cfg = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "lm_head"], init_lora_weights=False)
    model = get_peft_model(base, cfg)
    ids = torch.randint(0, 250, (2, 12))
    attn = torch.ones_like(ids)
    attn[1, 9:] = 0
    mask = attn.bool()
    lp, ent = policy_token_logprobs(model, ids, attn, 0.8, mask=mask, with_entropy=True)
    want, want_ent = token_logprobs_and_entropy(model(input_ids=ids, attention_mask=attn).logits, ids, 0.8)
    keep = mask.clone()
    keep[:, 0] = False
    assert torch.allclose(lp[keep], want[keep], atol=1e-5) and torch.allclose(ent[keep], want_ent[keep], atol=1e-5)
    lp.sum().backward()  # the LoRA on the output head gets its gradient through the chunked path
    assert model.base_model.model.lm_head.lora_B["default"].weight.grad.abs().sum() > 0


def test_loss_path_at_qwen3_vocabulary_never_holds_a_quarter_of_the_logits():
    """A Qwen3 of the real 151,936-token vocabulary (tiny hidden size, 2 layers), 2 x 128 tokens: forward,
    log-probs and backward, with a dispatch hook that fails on any tensor of >= B*T*V/4 elements."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import Qwen3Config, Qwen3ForCausalLM

    V, B, T = 151_936, 2, 128
    limit = B * T * V // 4
    cfg = Qwen3Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    ids = torch.randint(0, V, (B, T))
    attn = torch.ones_like(ids)
    biggest = []

    class Guard(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.numel() >= limit:
                    biggest.append((str(func), tuple(t.shape)))
            return out

    with Guard():
        lp, ent = policy_token_logprobs(model, ids, attn, 1.0, mask=attn.bool(), with_entropy=True)
        lp.sum().backward()
    assert not biggest, biggest[:3]
    assert model.lm_head.weight.grad is not None and torch.isfinite(lp).all()


@pytest.mark.parametrize("trunc", [dict(top_p=0.9), dict(top_k=5), dict(min_p=0.2), dict(top_k=7, top_p=0.8,
                                                                                            min_p=0.05)],
                         ids=["top_p", "top_k", "min_p", "all"])
def test_truncated_logprobs_are_the_samplers_over_its_support(trunc):
    """The trainer scores a truncated sampler's tokens over the support it kept: the same values as the local
    engine's sampler records (log_softmax of its filtered scores), in chunks, with finite gradients and entropy."""
    from verifiers_rl.inference.local_sampling import filter_scores
    from verifiers_rl.plan.sampling import Truncation

    g = torch.Generator().manual_seed(0)
    B, T, H, V, temp = 3, 9, 16, 40, 0.8
    hidden = torch.randn(B, T, H, generator=g, requires_grad=True)
    head = torch.nn.Linear(H, V, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(V, H, generator=g))
        logits = head(hidden)
    knobs = dict(top_k=0, top_p=1.0, min_p=0.0) | trunc
    scores = filter_scores(logits[:, :-1].reshape(-1, V), temperature=temp, **knobs)
    sampler_lp = torch.log_softmax(scores, -1)
    # tokens drawn from the truncated distribution, then one position forced outside it
    drawn = torch.multinomial(sampler_lp.exp(), 1, generator=g).view(B, T - 1)
    ids = torch.cat([torch.zeros(B, 1, dtype=torch.long), drawn], 1)
    outside = int(torch.isinf(scores[0]).nonzero()[0])
    ids[0, 1] = outside
    lp, ent = hidden_token_logprobs(hidden, head, ids, temp, with_entropy=True, chunk_elements=2 * V,
                                    truncation=Truncation(**knobs))
    want = sampler_lp.gather(1, ids[:, 1:].reshape(-1, 1)).view(B, T - 1)
    assert torch.allclose(lp[:, 1:][1:], want[1:], atol=1e-5)
    assert torch.allclose(lp[0, 2:], want[0, 1:], atol=1e-5)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()  # the forced token counts in its own support
    full, _ = hidden_token_logprobs(hidden, head, ids, temp)
    gap = (lp - full).detach()[:, 1:]
    assert float(gap.min()) >= -1e-6 and float(gap.max()) > 1e-2  # renormalized over a smaller support
    lp.sum().backward()
    assert torch.isfinite(hidden.grad).all() and hidden.grad.abs().sum() > 0
