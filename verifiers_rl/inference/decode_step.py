"""A one-token forward for plain Llama-family decoders (Llama, Mistral, Qwen2, Qwen3), used by the decode loop.

HF's forward pays, per token, for building a 4D mask, a module call per sub-layer, and a general attention
dispatch; at the sizes the local engine serves, that overhead costs more than the matmuls. This step runs the
same arithmetic from the model's own modules and weights (read at every call, so a weight sync or an optimizer
step is seen), with one additive key-padding row per sequence instead of a mask, one rotary lookup shared by all
layers, and attention as two batched matmuls over the grouped query heads. Keys and values go into the same
cache layers HF's prefill filled, through their `update`.

`DecodeStep.for_model` returns None for anything else (another architecture, LoRA-wrapped layers, sliding
windows, biases in the MLP, a model on meta weights); then the loop keeps calling the model. A model is accepted
once its step has matched the model's own forward on a small input (checked once per model object).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch
import torch.nn.functional as F

from verifiers_rl.inference.kv_cache import compactable, reserved_cache

log = logging.getLogger(__name__)

_FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}
_verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> DecodeStep | None


def _rms(x: torch.Tensor, norm: Any) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op (the same sum, another rounding order)
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    # HF's LlamaRMSNorm exactly: normalize in float32, cast back, then scale
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def key_padding_bias(attention: torch.Tensor, width: int) -> torch.Tensor:
    """The step's `key_bias` [B, width] for a left-padded prompt `attention` [B, P]: 0 for real prompt tokens and
    for every column after the prompt (the tokens to come), float32 min for padding."""
    bias = torch.zeros((attention.shape[0], width), dtype=torch.float32, device=attention.device)
    bias[:, : attention.shape[1]].masked_fill_(attention == 0, torch.finfo(torch.float32).min)
    return bias


def _layer_refs(layer: Any) -> tuple | None:
    a, m = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    if a is None or m is None or not all(type(getattr(a, n, None)) is torch.nn.Linear for n in names):
        return None
    mlp = tuple(getattr(m, n, None) for n in ("gate_proj", "up_proj", "down_proj"))
    if not all(type(x) is torch.nn.Linear and x.bias is None for x in mlp):
        return None
    if getattr(a, "sliding_window", None):
        return None
    norms = (layer.input_layernorm, layer.post_attention_layernorm, getattr(a, "q_norm", None),
             getattr(a, "k_norm", None))
    if not all(x is None or hasattr(x, "variance_epsilon") for x in norms):
        return None
    return (a.q_proj, a.k_proj, a.v_proj, a.o_proj, *mlp, *norms, float(a.scaling))


class DecodeStep:
    """`step(tokens [B], positions [B], key_bias [B, K], cache)` → next-token logits [B, V] (K ≥ the cache length
    after this token; `key_bias` is 0 for keys to attend and a large negative number for padding)."""

    def __init__(self, model: Any, inner: Any, layers: list[tuple]):
        cfg = model.config.get_text_config()
        # submodules only, never the model itself: the verdict cache's values must not keep its keys alive
        self.inner, self.lm_head, self.layers = inner, model.lm_head, layers
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

    @staticmethod
    def for_model(model: Any) -> DecodeStep | None:
        try:
            verdict = _verdicts[model]
        except KeyError:
            verdict = _verdicts[model] = DecodeStep._build(model)
        except TypeError:  # not weak-referenceable: build, check, don't remember
            verdict = DecodeStep._build(model)
        return verdict

    @staticmethod
    def _build(model: Any) -> DecodeStep | None:
        cfg = getattr(model, "config", None)
        inner = getattr(model, "model", None)
        if cfg is None or getattr(cfg, "model_type", None) not in _FAMILIES or inner is None:
            return None
        if type(getattr(model, "lm_head", None)) is not torch.nn.Linear or getattr(cfg, "hidden_act", None) != "silu":
            return None
        if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ()):
            return None
        if any(p.device.type == "meta" for p in model.parameters()):
            return None
        layers = [_layer_refs(x) for x in getattr(inner, "layers", ())]
        if not layers or any(x is None for x in layers) or not hasattr(inner, "rotary_emb"):
            return None
        step = DecodeStep(model, inner, layers)
        return step if step._matches(model) else None

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, key_bias: torch.Tensor, cache: Any) -> torch.Tensor:
        B, H, Hkv, D = len(tokens), self.heads, self.kv_heads, self.head_dim
        x = F.embedding(tokens, self.inner.embed_tokens.weight)
        cos, sin = self.inner.rotary_emb(x, positions[:, None])  # [B, 1, D], shared by every layer
        cos, sin = cos[:, :, None], sin[:, :, None]
        for refs, layer in zip(self.layers, cache.layers):
            q_p, k_p, v_p, o_p, gate, up, down, n_in, n_post, q_n, k_n, scale = refs
            h = _rms(x, n_in)
            q = F.linear(h, q_p.weight, q_p.bias).view(B, 1, H, D)
            k = F.linear(h, k_p.weight, k_p.bias).view(B, 1, Hkv, D)
            if q_n is not None:
                q, k = _rms(q, q_n), _rms(k, k_n)
            q, k = _rope(torch.cat((q, k), dim=2), cos, sin).split((H, Hkv), dim=2)
            v = F.linear(h, v_p.weight, v_p.bias).view(B, 1, Hkv, D)
            keys, values = layer.update(k.transpose(1, 2), v.transpose(1, 2))
            # grouped query heads: head j reads kv head j // (H / Hkv), as HF's repeat_kv
            scores = torch.matmul(q.view(B, Hkv, H // Hkv, D), keys.transpose(-1, -2)).float()
            scores = scores * scale + key_bias[:, None, None, : keys.shape[-2]]
            probs = torch.softmax(scores, dim=-1).to(values.dtype)
            x = x + F.linear(torch.matmul(probs, values).reshape(B, H * D), o_p.weight, o_p.bias)
            h = _rms(x, n_post)
            x = x + F.linear(F.silu(F.linear(h, gate.weight)) * F.linear(h, up.weight), down.weight)
        return F.linear(_rms(x, self.inner.norm), self.lm_head.weight, self.lm_head.bias)

    def _matches(self, model: Any) -> bool:
        """Two rows (one left-padded), three decode steps: this step's logits against the model's forward."""
        device = next(model.parameters()).device
        vocab = self.lm_head.out_features
        ids = (torch.arange(10, device=device).view(2, 5) * 7 + 3) % vocab
        att = torch.ones_like(ids)
        att[1, :2] = 0
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        caches = [reserved_cache(model, 8), reserved_cache(model, 8)]
        if not compactable(caches[0]):
            return False
        dtype = next(model.parameters()).dtype
        bias = key_padding_bias(att, 8)
        mask = torch.ones((2, 8), dtype=att.dtype, device=device)
        mask[:, :5] = att
        worst, scale = 0.0, 1.0
        with torch.inference_mode():
            for c in caches:
                out = model(input_ids=ids, attention_mask=att, position_ids=pos, past_key_values=c, use_cache=True)
            tok = out.logits[:, -1].argmax(-1)
            for s in range(3):
                p = att.sum(-1) + s
                ref = model(input_ids=tok[:, None], attention_mask=mask[:, : 6 + s], position_ids=p[:, None],
                                 past_key_values=caches[0], use_cache=True).logits[:, -1].float()
                got = self.step(tok, p, bias, caches[1]).float()
                worst, scale = max(worst, float((ref - got).abs().max())), max(scale, float(ref.abs().max()))
                tok = ref.argmax(-1)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        if worst > tol * scale:
            log.warning("decode step: %s differs from its own forward by %.3g; the local engine calls the model's "
                        "forward per token instead", type(model).__name__, worst)
            return False
        return True


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
