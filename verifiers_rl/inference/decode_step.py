"""A one-token forward and a prefill for plain Llama-family decoders (Llama, Mistral, Qwen2, Qwen3), for the decode
loop.

At the local engine's sizes, HF's per-token overhead costs more than the matmuls; this runs the same arithmetic from the
model's own weights (gathered again whenever one moved, so every optimizer step and weight sync is seen).
`DecodeStep.for_model` returns None for anything else (LoRA-wrapped layers, sliding windows, MLP biases, meta weights)
or when it does not match the model's own forward on a small input (checked once per model); the loop then calls the
model.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, NamedTuple, Sequence

import torch
import torch.nn.functional as F

from verifiers_rl.inference.kv_cache import cache_keyword, compactable, reserved_cache
from verifiers_rl.models.precision import forward_dtype

log = logging.getLogger(__name__)

_FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}
# RoPE types whose cos/sin depend on the position alone (not on the longest sequence seen): read from a table
_STATIC_ROPE = {"default", "linear", "llama3", "yarn"}
_verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> DecodeStep | None
TRANSPOSED_BUDGET = 1 << 30
"""Bytes of CPU linear weights up to which a step keeps [in, out] copies of them (`DecodeStep._matrices`)."""
_synced = 0  # weight syncs so far (`weights_changed`): part of every step's check of its copies


def weights_changed() -> None:
    """A weight sync happened: every step re-reads its weights, even ones rewritten through `.data` (which moves no
    version counter)."""
    global _synced
    _synced += 1


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op (the same sum, another rounding order)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # HF's LlamaRMSNorm exactly: normalize in float32, cast back, then scale
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return h.to(x.dtype) if weight is None else weight * h.to(x.dtype)


def key_padding_bias(attention: torch.Tensor, width: int) -> torch.Tensor:
    """The step's `key_bias` [B, width] for a left-padded prompt `attention` [B, P]: 0 for real prompt tokens and
    for every column after the prompt (the tokens to come), float32 min for padding."""
    bias = torch.zeros((attention.shape[0], width), dtype=torch.float32, device=attention.device)
    bias[:, : attention.shape[1]].masked_fill_(attention == 0, torch.finfo(torch.float32).min)
    return bias


class _Layer(NamedTuple):
    q: Any
    k: Any
    v: Any
    o: Any
    gate: Any
    up: Any
    down: Any
    norm_in: Any
    norm_post: Any
    q_norm: Any
    k_norm: Any
    scale: float


class _Weights(NamedTuple):
    """One layer's tensors as the forward reads them, gathered once per state of the weights (module attribute reads
    cost a microsecond each, per token): the projections as [in, out] matrices (`DecodeStep._matrices`), their
    biases or None, the norms' weights (q_norm and k_norm None where the model has none), epsilons and scale."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    q_bias: torch.Tensor | None
    k_bias: torch.Tensor | None
    v_bias: torch.Tensor | None
    o_bias: torch.Tensor | None
    norm_in: torch.Tensor
    norm_post: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    eps_in: float
    eps_post: float
    eps_qk: float
    scale: float


def _layer_weights(refs: _Layer, mats: Sequence[torch.Tensor]) -> _Weights:
    qn, kn = refs.q_norm, refs.k_norm
    return _Weights(*mats, refs.q.bias, refs.k.bias, refs.v.bias, refs.o.bias, refs.norm_in.weight,
                    refs.norm_post.weight, None if qn is None else qn.weight, None if kn is None else kn.weight,
                    refs.norm_in.variance_epsilon, refs.norm_post.variance_epsilon,
                    0.0 if qn is None else qn.variance_epsilon, refs.scale)


def _layer_refs(layer: Any) -> _Layer | None:
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
    qn, kn = norms[2:]
    if (qn is None) != (kn is None) or qn is not None and qn.variance_epsilon != kn.variance_epsilon:
        return None  # the step normalizes q and k heads together
    return _Layer(a.q_proj, a.k_proj, a.v_proj, a.o_proj, *mlp, *norms, float(a.scaling))


class DecodeStep:
    """`step(tokens [B], positions [B], bias, cache)` → next-token logits [B, V], where `bias = prepare(key_bias)`
    for `key_bias` [B, W] (W ≥ the cache length after the last token; 0 for keys to attend, a large negative number
    for padding), made once per decode and again when its rows change."""

    def __init__(self, model: Any, inner: Any, layers: list[tuple]):
        cfg = model.config.get_text_config()
        # submodules only, never the model itself: the verdict cache's values must not keep its keys alive
        self.inner, self.lm_head, self.layers = inner, model.lm_head, layers
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self._tables: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}  # (dtype, device) -> rotary cos, sin
        self._static_rope = getattr(inner.rotary_emb, "rope_type", None) in _STATIC_ROPE
        self._linears = [m for refs in layers for m in refs[:7]] + [model.lm_head]
        self._copy = sum(m.weight.numel() * m.weight.element_size() for m in self._linears) <= TRANSPOSED_BUDGET
        self._copies: list[torch.Tensor] = []  # the [in, out] copies' buffers, rewritten in place
        self._read: tuple[Any, Any] = (None, None)  # (the weights' state, what `_step_weights` made of it)

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

    def prepare(self, key_bias: torch.Tensor) -> torch.Tensor:
        """`key_bias` [B, W] as the steps read it: [B * kv heads, 1, W] in the model's dtype (every layer's cache
        holds the same columns: one padding bias for all of them, one row per kv head)."""
        B, W = key_bias.shape
        dtype = self.inner.embed_tokens.weight.dtype
        return key_bias[:, None].expand(B, self.kv_heads, W).reshape(B * self.kv_heads, 1, W).to(dtype)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor, cache: Any) -> torch.Tensor:
        B, H, Hkv, D = len(tokens), self.heads, self.kv_heads, self.head_dim
        x = F.embedding(tokens, self.inner.embed_tokens.weight)
        cos, sin = self._rotary_at(x, positions, bias.shape[-1])
        K = cache.layers[0].length + 1
        bias = bias[:, :, :K]
        layers, head = self._step_weights()
        fp32 = x.dtype == torch.float32
        for w, layer in zip(layers, cache.layers):
            q, k, v = self._qkv(w, x, cos, sin)
            keys, values = layer.update(k[:, :, None], v[:, :, None])  # [B, Hkv, K, D] each
            # grouped query heads: head j reads kv head j // (H / Hkv), as HF's repeat_kv; bias and scale fused
            scores = torch.baddbmm(bias, q.reshape(B * Hkv, H // Hkv, D), keys.reshape(B * Hkv, K, D).mT,
                                   alpha=w.scale)
            probs = torch.softmax(scores, -1) if fp32 else torch.softmax(scores, -1, dtype=torch.float32).to(x.dtype)
            x = _residual_linear(x, torch.bmm(probs, values.reshape(B * Hkv, K, D)).view(B, H * D), w.o, w.o_bias)
            x = _mlp_residual(w, x)
        norm, eps, mat, head_bias = head
        return _linear(_rms(x, norm, eps), mat, head_bias)

    def _step_weights(self) -> tuple[list[_Weights], tuple]:
        """Every layer's `_Weights` and the output's (final norm weight, its epsilon, head matrix, head bias) for
        `step`, made again whenever a weight's storage or version counter moved or a weight sync happened, so a step
        always computes with the current weights."""
        weights = [m.weight for m in self._linears]
        state = (_synced, [(w.data_ptr(), w._version, w.dtype) for w in weights])
        if state != self._read[0]:
            mats = self._matrices(weights)
            layers = [_layer_weights(refs, mats[7 * i: 7 * i + 7]) for i, refs in enumerate(self.layers)]
            norm = self.inner.norm
            self._read = (state, (layers, (norm.weight, norm.variance_epsilon, mats[-1], self.lm_head.bias)))
        return self._read[1]

    def _matrices(self, weights: list[torch.Tensor]) -> list[torch.Tensor]:
        """`weights` as [in, out] matrices: on CPU copies (a one-token step's small matmuls read that layout faster:
        a decode of the 6 x 256 benchmark model 0.84-0.95x at 2-64 rows, docs/benchmarks.md), rewritten into the
        same buffers each time; elsewhere, or over `TRANSPOSED_BUDGET`, views of the weights themselves."""
        if not self._copy or weights[0].device.type != "cpu":
            return [w.t() for w in weights]
        with torch.inference_mode():  # into the same buffers each time: no allocation per optimizer step
            old = self._copies
            if not old or old[0].dtype != weights[0].dtype:
                old = self._copies = [w.new_empty(w.shape[::-1]) for w in weights]
            return [a.copy_(w.t()) for a, w in zip(old, weights)]

    def prefill(self, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any,
                known: tuple | None = None) -> torch.Tensor:
        """The forward of the last `T = input_ids.shape[1]` columns of a left-padded batch whose earlier columns
        are in `cache` (`attention` [B, cache length + T] covers all): fills the cache, returns the last column's
        logits [B, V]. `known` = (mask [B, T], per-layer (keys, values) [B, Hkv, T, D]): a shared prefix's, not
        computed again. Projections and MLPs run packed on the other real tokens; attention on the padded layout."""
        B, T = input_ids.shape
        H, Hkv, D = self.heads, self.kv_heads, self.head_dim
        todo = attention[:, -T:].bool()
        if known is not None:
            todo &= ~known[0]
        idx = todo.flatten().nonzero().flatten()  # computed token i sits at flat padded position idx[i]
        x = F.embedding(input_ids.flatten()[idx], self.inner.embed_tokens.weight)
        cos, sin = self._rotary(x, positions.flatten()[idx])
        W = cache.layers[0].length + T
        allowed = attention[:, None, :W].bool() & torch.ones((T, W), dtype=torch.bool, device=x.device).tril(W - T)
        mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill_(
            ~allowed, torch.finfo(x.dtype).min)[:, None]  # [B, 1, T, W]; rows of queries not computed are not read
        views = [m.weight.t() for m in self._linears[:-1]]  # compute-bound here: the modules' own weights
        for i, (refs, layer) in enumerate(zip(self.layers, cache.layers)):
            w = _layer_weights(refs, views[7 * i: 7 * i + 7])
            q, k, v = self._qkv(w, x, cos, sin)
            if known is None:
                kv = x.new_zeros((B * T, 2 * Hkv, D))
            else:
                kv = torch.cat(known[1][i], dim=1).transpose(1, 2).reshape(B * T, 2 * Hkv, D)
            kv.index_copy_(0, idx, torch.cat((k, v), dim=1))
            keys, values = layer.update(*kv.view(B, T, 2 * Hkv, D).transpose(1, 2).split(Hkv, dim=1))
            q = x.new_zeros((B * T, H, D)).index_copy_(0, idx, q).view(B, T, H, D).transpose(1, 2)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=w.scale, enable_gqa=True)
            x = _residual_linear(x, out.transpose(1, 2).reshape(B * T, H * D).index_select(0, idx), w.o, w.o_bias)
            x = _mlp_residual(w, x)
        last = todo.sum(-1).cumsum(0) - 1  # each row's last column is computed (never padding or the prefix)
        norm = self.inner.norm
        return F.linear(_rms(x.index_select(0, last), norm.weight, norm.variance_epsilon), self.lm_head.weight,
                        self.lm_head.bias)

    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin [n, 1, D] for `positions` [n], shared by every layer:
        rotate_half(t) * sin == roll(t, D/2) * (sin with its first half negated), 3 ops per rotation, not 5."""
        cos, sin = self.inner.rotary_emb(x, positions[None])
        signs = getattr(self, "_signs", None)
        if signs is None or signs.dtype != sin.dtype or signs.device != sin.device:
            signs = self._signs = torch.ones(self.head_dim, dtype=sin.dtype, device=sin.device)
            signs[: self.head_dim // 2] = -1
        return cos[0, :, None], (sin * signs)[0, :, None]

    def _rotary_at(self, x: torch.Tensor, positions: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`_rotary` for positions < `width`, read from a table made once (the same values: each is a function of
        its position alone), for the RoPE types where that holds."""
        if not self._static_rope:
            return self._rotary(x, positions)
        table = self._tables.get((x.dtype, x.device))
        if table is None or len(table[0]) < width:
            table = self._tables[(x.dtype, x.device)] = self._rotary(x, torch.arange(width, device=x.device))
        return table[0].index_select(0, positions), table[1].index_select(0, positions)

    def _qkv(self, w: _Weights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """A layer's q [n, H, D], k and v [n, Hkv, D] for hidden states x [n, hidden], rotated."""
        n, H, Hkv, D = len(x), self.heads, self.kv_heads, self.head_dim
        h = _rms(x, w.norm_in, w.eps_in)
        qk = torch.cat((_linear(h, w.q, w.q_bias).view(n, H, D), _linear(h, w.k, w.k_bias).view(n, Hkv, D)), dim=1)
        if w.q_norm is not None:  # q's and k's per-head norms as one (the same epsilon), then each one's weight
            qk = _rms(qk, None, w.eps_qk)
            qk[:, :H].mul_(w.q_norm)  # in place through the views (`qk[...] *=` would copy the slice back)
            qk[:, H:].mul_(w.k_norm)
        q, k = torch.addcmul(qk * cos, qk.roll(D // 2, dims=-1), sin).split((H, Hkv), dim=1)
        return q, k, _linear(h, w.v, w.v_bias).view(n, Hkv, D)

    def _matches(self, model: Any) -> bool:
        """Two rows (one left-padded): this prefill's and three decode steps' logits against the model's forward."""
        device = next(model.parameters()).device
        vocab = self.lm_head.out_features
        ids = (torch.arange(10, device=device).view(2, 5) * 7 + 3) % vocab
        att = torch.ones_like(ids)
        att[1, :2] = 0
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        caches = [reserved_cache(model, 8), reserved_cache(model, 8)]
        if not compactable(caches[0]):
            return False
        dtype = forward_dtype(model)  # the reference's precision (accelerate may autocast a fp32 model's forward)
        bias = self.prepare(key_padding_bias(att, 8))
        mask = torch.ones((2, 8), dtype=att.dtype, device=device)
        mask[:, :5] = att
        theirs = {cache_keyword(model): caches[0]}
        with torch.inference_mode():
            ref = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True,
                        **theirs).logits[:, -1].float()
            got = self.prefill(ids, att, pos, caches[1]).float()
            worst, scale = float((ref - got).abs().max()), max(1.0, float(ref.abs().max()))
            tok = ref.argmax(-1)
            for s in range(3):
                p = att.sum(-1) + s
                ref = model(input_ids=tok[:, None], attention_mask=mask[:, : 6 + s], position_ids=p[:, None],
                            use_cache=True, **theirs).logits[:, -1].float()
                got = self.step(tok, p, bias, caches[1]).float()
                worst, scale = max(worst, float((ref - got).abs().max())), max(scale, float(ref.abs().max()))
                tok = ref.argmax(-1)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        if worst > tol * scale:
            log.warning("decode step: %s differs from its own forward by %.3g; the local engine calls the model's "
                        "forward per token instead", type(model).__name__, worst)
            return False
        return True


def _mlp_residual(w: _Weights, x: torch.Tensor) -> torch.Tensor:
    h = _rms(x, w.norm_post, w.eps_post)
    return _residual_linear(x, F.silu(torch.mm(h, w.gate)).mul_(torch.mm(h, w.up)), w.down, None)


def _linear(h: torch.Tensor, mat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """h @ mat (+ bias) for 2-D h and an [in, out] `mat`."""
    return torch.mm(h, mat) if bias is None else torch.addmm(bias, h, mat)


def _residual_linear(x: torch.Tensor, h: torch.Tensor, mat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x + h @ mat (+ bias) for 2-D x, as one fused op where there is no bias."""
    return torch.addmm(x, h, mat) if bias is None else x + _linear(h, mat, bias)
