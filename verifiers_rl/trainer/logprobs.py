"""Log-probabilities (and entropies) of the tokens of a sequence, without materializing [B, T, V] logits.

`hidden_token_logprobs` runs the output head a chunk of rows at a time under activation checkpointing, so neither
forward nor backward holds more than one chunk's logits. Calling the head *module* (not its weight) keeps PEFT
adapters and FSDP wrapping in play.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from typing import Any, Callable

import torch
from torch.utils.checkpoint import checkpoint

from verifiers_rl.inference.truncation import keep_mask
from verifiers_rl.models.precision import forward_dtype

log = logging.getLogger(__name__)

DEFAULT_CHUNK_ELEMENTS = 1 << 23
"""Logit elements per chunk (32 MiB in fp32), rounded up to whole rows."""


def _needs_upcast(t: torch.Tensor) -> bool:
    # log-softmax in bf16/fp16 loses too much precision for importance ratios; compute those in fp32.
    return t.dtype in (torch.float16, torch.bfloat16)


def _chunk_logprobs(head: Callable, h: torch.Tensor, y: torch.Tensor, temperature: float,
                    entropy_out: list | None, truncation: Any = None) -> torch.Tensor:
    logits = head(h)
    if _needs_upcast(logits):
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    if truncation is not None and truncation.active:
        # the sampler drew from a truncated support: score over the same one (the sampled token always in it)
        with torch.no_grad():
            keep = keep_mask(logits.detach(), truncation).scatter_(-1, y.unsqueeze(-1), True)
        logits = logits.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, y.unsqueeze(-1)).squeeze(-1) - lse
    if entropy_out is not None and not entropy_out:
        # Entropy is a metric: computed once, without grad (checkpoint's recompute in backward skips it).
        with torch.no_grad():
            p = torch.exp(logits - lse.unsqueeze(-1))
            entropy_out.append(lse - torch.where(p > 0, p * logits, 0.0).sum(-1))
    return lp


def hidden_token_logprobs(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor,
    temperature: float = 1.0,
    *,
    mask: torch.Tensor | None = None,
    with_entropy: bool = False,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    truncation: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of ``input_ids`` [B, T] from the last hidden states [B, T, H] and the output ``head``.

    ``out[:, t] = log p(input_ids[:, t] | < t)`` under ``softmax(head(hidden[:, t-1]) / temperature)``,
    ``out[:, 0] = 0``; only ``mask``'s true positions are computed (others 0). An active ``truncation`` scores over
    the sampler's truncated support (`inference/truncation.py`). Returns (logprobs, detached entropy or None), fp32
    for half-precision heads.
    """
    if hidden.ndim != 3 or input_ids.ndim != 2 or hidden.shape[:2] != input_ids.shape:
        raise ValueError(
            f"expected hidden [B, T, H] and input_ids [B, T], got {tuple(hidden.shape)} and {tuple(input_ids.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    B, T, H = hidden.shape
    source = torch.arange(B * T, device=hidden.device).view(B, T)
    return _scored(hidden.reshape(-1, H), source, head, input_ids, temperature, mask, with_entropy, chunk_elements,
                   truncation)


def _head_input(rows: torch.Tensor, head: Callable) -> torch.Tensor:
    """``rows`` in the head weight's dtype: accelerate's mixed precision hands back fp32 hidden states, which a LoRA
    policy's half-precision head refuses outside the forward's autocast."""
    weight = getattr(head, "weight", None)  # nn.Linear, and a PEFT layer's base weight; none for `_identity`
    if isinstance(weight, torch.Tensor) and weight.is_floating_point() and weight.dtype != rows.dtype:
        return rows.to(weight.dtype)
    return rows


def _scored(flat_hidden: torch.Tensor, source: torch.Tensor, head: Callable, input_ids: torch.Tensor,
            temperature: float, mask: torch.Tensor | None, with_entropy: bool, chunk_elements: int,
            truncation: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`hidden_token_logprobs` where position (b, t)'s hidden state is row ``source[b, t]`` of ``flat_hidden``."""
    B, T = input_ids.shape
    src = source[:, :-1].reshape(-1)
    targets = input_ids[:, 1:].reshape(-1).long()
    idx = None
    if mask is not None:
        idx = mask[:, 1:].reshape(-1).nonzero().squeeze(-1)
        src, targets = src.index_select(0, idx), targets.index_select(0, idx)
    rows = _head_input(flat_hidden.index_select(0, src), head)
    n = rows.shape[0]
    with torch.no_grad():  # the head's output width and dtype, from one row
        probe = head(rows[:1]) if n else None
    vocab = probe.shape[-1] if probe is not None else 1
    out_dtype = torch.float32 if probe is None or _needs_upcast(probe) else probe.dtype
    del probe
    # One row past the budget: with the default budget a chunk's [rows, V] fp32 buffers then exceed glibc's 32 MiB
    # adaptive mmap cap, so each is mapped and unmapped whole instead of lingering in the heap (RSS) once freed.
    step = chunk_elements // vocab + 1
    grad = torch.is_grad_enabled() and rows.requires_grad
    lps: list[torch.Tensor] = []
    ents: list[torch.Tensor] = []
    for s in range(0, n, step):
        holder: list | None = [] if with_entropy else None
        args = (head, rows[s:s + step], targets[s:s + step], temperature, holder, truncation)
        lps.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False) if grad else _chunk_logprobs(*args))
        if holder:
            ents.append(holder[0])
    lp_flat = torch.cat(lps).to(out_dtype) if lps else rows.new_zeros(0, dtype=out_dtype)
    if not lps and grad:
        # No position to score (e.g. a micro-batch of dropped rollouts): stay on the graph so backward still runs.
        lp_flat = lp_flat + flat_hidden.sum().to(out_dtype) * 0
    ent_flat = torch.cat(ents).to(out_dtype) if ents else rows.new_zeros(0, dtype=out_dtype).detach()

    def place(values: torch.Tensor) -> torch.Tensor:
        if idx is not None:
            values = values.new_zeros(B * (T - 1)).index_copy(0, idx, values)
        return torch.cat([values.new_zeros(B, 1), values.view(B, T - 1)], dim=1)

    return place(lp_flat), (place(ent_flat) if with_entropy else None)


def token_logprobs_and_entropy(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = True,
    truncation: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`hidden_token_logprobs` from full ``[B, T, V]`` logits (the identity as the head)."""
    if logits.ndim != 3 or input_ids.ndim != 2 or logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"expected logits [B, T, V] and input_ids [B, T], got {tuple(logits.shape)} and {tuple(input_ids.shape)}"
        )
    return hidden_token_logprobs(logits, _identity, input_ids, temperature, with_entropy=with_entropy,
                                 truncation=truncation)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _unwrapped(model: torch.nn.Module) -> tuple[torch.nn.Module, Any, Any]:
    """(the model under a DDP-style `.module` wrapper, its config, its text config)."""
    inner = model.module if hasattr(model, "module") and isinstance(model.module, torch.nn.Module) else model
    config = getattr(inner, "config", None)
    text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    return inner, config, text


def _output_head(model: torch.nn.Module) -> Callable | None:
    """The module that turns last hidden states into logits, or None when the model's forward does more than
    apply it (logit soft-capping, a logit scale such as Granite's `logits_scaling`, anything else its forward does
    after the head: checked once per model) or takes no `logits_to_keep`: those keep the full-logits path."""
    import inspect

    inner, _, text = _unwrapped(model)
    if getattr(text, "final_logit_softcapping", None) or any(
            getattr(text, name, None) not in (None, 1, 1.0) for name in ("logit_scale", "logits_scaling")):
        return None
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    base = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
    if head is None or "logits_to_keep" not in inspect.signature(base.forward).parameters:
        return None
    try:
        verdict = _head_verdicts[inner]
    except KeyError:
        verdict = _head_verdicts[inner] = _head_gives_logits(model, head)
    except TypeError:  # not weak-referenceable: check every time
        verdict = _head_gives_logits(model, head)
    return head if verdict else None


_head_verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> bool


def _head_gives_logits(model: torch.nn.Module, head: Callable) -> bool:
    """Whether `head` on the forward's last hidden state gives the forward's own logits (8 tokens, no grad,
    dropout off), as the chunked path computes them."""
    weight = getattr(head, "weight", None)
    vocab = weight.shape[0] if isinstance(weight, torch.Tensor) and weight.ndim == 2 else 2
    device = next(model.parameters()).device
    ids = (torch.arange(8, device=device)[None] * 7 + 3) % vocab
    was_training = model.training
    model.eval()
    # the head in the forward's own precision (accelerate's autocast around a fp32 model's forward): rounding apart
    amp = forward_dtype(model)
    same = contextlib.nullcontext() if amp == torch.float32 else torch.autocast(device.type, dtype=amp)
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
            theirs = out.logits.float()
            with same:
                ours = head(_head_input(out.hidden_states[-1], head)).float()
    finally:
        model.train(was_training)
    scale = max(1.0, float(theirs.abs().max()))
    if ours.shape == theirs.shape and float((ours - theirs).abs().max()) <= 1e-3 * scale:
        return True
    log.warning("%s: its logits are not its output head on its last hidden state (a scale or cap after the head): "
                "log-probs come from its full logits, without chunking or prompt packing",
                type(_unwrapped(model)[0]).__name__)
    return False


def _packing_settings(model: torch.nn.Module) -> tuple[int, torch.dtype | None, bool] | None:
    """(hidden size, mask dtype, dense mask) when the model takes packed rows (sdpa or eager, every layer attending
    fully), else None. Dense mask False: sdpa attends by segments instead (`_by_segments`)."""

    inner, config, text = _unwrapped(model)
    impl = getattr(text, "_attn_implementation", None) or getattr(config, "_attn_implementation", None)
    hidden = getattr(text, "hidden_size", None)
    if impl not in ("sdpa", "eager") or not isinstance(hidden, int):
        return None
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return None
    if layer_types is None and getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return None
    if impl == "sdpa":
        return hidden, None, not _by_segments(inner)
    return hidden, next(inner.parameters()).dtype, True


class SegmentsNotUsed(RuntimeError):
    """A packed forward by segments whose attention layers never called the segment attention."""


def _by_segments(inner: torch.nn.Module) -> bool:
    """Whether an sdpa model's packed rows attend segment by segment (`segment_attention`): not with attention
    dropout, nor with activation checkpointing (a recompute in the backward would run outside the layout)."""
    for m in inner.modules():
        # attention dropout as the layers hold it (Llama-style float, GPT-2-style module), and what transformers'
        # is_activation_checkpointing reads, through any wrapper (PEFT, DDP)
        p = getattr(m, "attention_dropout", None)
        d = getattr(m, "attn_dropout", None)
        if (isinstance(p, float) and p > 0) or (isinstance(d, torch.nn.Dropout) and d.p > 0) or \
                getattr(m, "gradient_checkpointing", False) is True:
            return False
    return True


def policy_token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    mask: torch.Tensor | None = None,
    with_entropy: bool = False,
    prompt_lens: list[int] | None = None,
    pad_id: int = 0,
    truncation: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The (possibly PEFT/DDP-wrapped) causal LM's per-token log-probs (and entropy) at the `mask` positions, as
    :func:`hidden_token_logprobs`. The forward goes through `model` itself (wrappers' hooks apply) with
    ``logits_to_keep=1``; the head runs chunk by chunk. With ``prompt_lens``, rows that share a prompt run as one
    packed row (`prefix_packing`) when the model allows it and packing pays."""
    head = _output_head(model)
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        lp, ent = token_logprobs_and_entropy(logits, input_ids, temperature, with_entropy=with_entropy,
                                             truncation=truncation)
        if mask is not None:  # same contract as the chunked path: zeros off the mask
            keep = mask.clone()
            keep[:, 0] = False
            lp = torch.where(keep, lp, torch.zeros_like(lp))
            ent = torch.where(keep, ent, torch.zeros_like(ent)) if ent is not None else None
        return lp, ent
    settings = _packing_settings(model) if prompt_lens is not None else None
    packed = None
    if settings is not None:
        from verifiers_rl.trainer.prefix_packing import pack_shared_prompts

        packed = pack_shared_prompts(input_ids, attention_mask, list(prompt_lens), hidden_size=settings[0],
                                     pad_id=pad_id, mask_dtype=settings[1], dense_mask=settings[2])
    if packed is None:
        out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, logits_to_keep=1)
        return hidden_token_logprobs(out.hidden_states[-1], head, input_ids, temperature, mask=mask,
                                     with_entropy=with_entropy, truncation=truncation)
    return _packed_logprobs(model, head, packed, input_ids, temperature, mask, with_entropy, truncation)


def _packed_logprobs(model: torch.nn.Module, head: Callable, packed: Any, input_ids: torch.Tensor,
                     temperature: float, mask: torch.Tensor | None, with_entropy: bool, truncation: Any = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    if packed.attention_mask is not None:
        out = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                    position_ids=packed.position_ids, output_hidden_states=True, logits_to_keep=1)
    else:
        from verifiers_rl.trainer.segment_attention import segment_layout, segments_attention

        layout = segment_layout(packed.segments, *packed.input_ids.shape, device=packed.input_ids.device)
        with segments_attention(_unwrapped(model)[2], layout):
            out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, output_hidden_states=True,
                        logits_to_keep=1)
        if not layout.calls:  # its layers read another config: this forward attended wrongly
            raise SegmentsNotUsed(f"{type(model).__name__}'s attention layers do not follow its text config's "
                                  "_attn_implementation")
    hidden = out.hidden_states[-1]
    return _scored(hidden.reshape(-1, hidden.shape[-1]), packed.source, head, input_ids, temperature, mask,
                   with_entropy, DEFAULT_CHUNK_ELEMENTS, truncation)


CHECK_TOKENS = 8  # completion tokens per rollout in `packing_matches`


def packing_matches(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    temperature: float, *, prompt_lens: list[int], pad_id: int, atol: float | None = None,
                    dtype: torch.dtype | None = None) -> bool | None:
    """Whether the packed forward matches the padded one (no grad) on two rollouts each of the first two shared
    prompts, cut to their first `CHECK_TOKENS` completion tokens (the layout is what is compared, inside a run's first
    step); None when no prompt is shared or the model cannot be packed. `atol` None: `dtype`'s (else the model's)."""

    settings = _packing_settings(model)
    head = _output_head(model)
    if settings is None or head is None:
        return None
    from verifiers_rl.trainer.prefix_packing import group_rows, pack_shared_prompts

    lengths = attention_mask.sum(-1).tolist()
    shared = [g for g in group_rows(input_ids, lengths, list(prompt_lens)) if len(g) > 1][:2]
    rows = sorted(b for g in shared for b in g[:2])
    if not rows:
        return None
    ends = [min(lengths[b], prompt_lens[b] + CHECK_TOKENS) for b in rows]
    width = max(ends)
    input_ids, attention_mask = input_ids[rows, :width], attention_mask[rows, :width]  # copies (rows: a list)
    for i, end in enumerate(ends):  # right-padded, as the trainer's rows
        input_ids[i, end:], attention_mask[i, end:] = pad_id, 0
    packed = pack_shared_prompts(input_ids, attention_mask, [prompt_lens[b] for b in rows],
                                 hidden_size=settings[0], pad_id=pad_id, mask_dtype=settings[1],
                                 max_len=1 << 62, min_saving=float("inf"), dense_mask=settings[2])
    mask = attention_mask.bool()
    was_training = model.training
    model.eval()  # no dropout: both forwards see the same network, and no random numbers are drawn
    try:
        with torch.no_grad():
            plain, _ = policy_token_logprobs(model, input_ids, attention_mask, temperature, mask=mask)
            packed_lp, _ = _packed_logprobs(model, head, packed, input_ids, temperature, mask, False)
    except SegmentsNotUsed:
        return False
    finally:
        model.train(was_training)
    if atol is None:
        from verifiers_rl.plan.precision import logprob_atol

        atol = logprob_atol(dtype or forward_dtype(model))
    return bool(torch.allclose(plain.float(), packed_lp.float(), atol=atol, rtol=0))


