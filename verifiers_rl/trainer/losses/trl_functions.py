"""The functions of TRL's loss types (``trl_types.py``: their configs and specs).

Stand-ins for the trainer state TRL's loss reads: ``old_per_token_logps`` is the sampler's log-probs (so the ratio also
corrects the trainer/sampler mismatch; with a sampler correction, the trainer's own, detached, and
``importance_sampling_ratio`` comes from ``sampling_logprobs``). TRL normalises per micro-batch and divides by
``gradient_accumulation_steps``; here each loss divides by the step's totals over all micro-batches and ranks
(``LossInputs``), so on one micro-batch the value is TRL's, and over several it equals TRL's when micro-batches hold
equal numbers of sequences (for bnpo, of loss tokens).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

from verifiers_rl.trainer.importance import log_importance_ratio, ratio_mask
from verifiers_rl.trainer.loss import LossInputs, LossOutputs, k3_kl, masked_extreme, masked_mean, ratio_metrics
from verifiers_rl.trainer.losses.trl_types import (CISPOLossConfig, ClippedLossConfig, SAPOLossConfig, TRLLossConfig,
                                                   VESPOLossConfig)


class Ratios(NamedTuple):
    mask: torch.Tensor  # the loss tokens, bool [B, T]
    mismatch: torch.Tensor  # log(trainer / sampler) per token, 0 off the mask (the ratio metrics)
    log_w: torch.Tensor  # the objective's log-ratio to the old policy: [B, T], or [B, 1] at sequence level
    weight: torch.Tensor | None  # the sampler correction's weights, [B, T] or [B, 1]; None without one


def _ratios(inputs: LossInputs, level: str, config: TRLLossConfig) -> Ratios:
    """The ratios of a TRL loss (the old policy: module docstring); a sampler correction's ratio becomes a truncated
    or masked weight."""

    mask = inputs.loss_mask.bool()
    lp = inputs.trainer_logprobs.float()
    mismatch = log_importance_ratio(lp.detach(), inputs.sampling_logprobs.detach().float(), mask)
    mode = config.importance_sampling_mode
    old = inputs.sampling_logprobs.detach().float() if mode == "none" else lp.detach()
    log_ratio = log_importance_ratio(lp, old, mask)
    return Ratios(mask, mismatch, _at_level(log_ratio, mask, level),
                  None if mode == "none" else _sampler_weight(mismatch, config))


def _at_level(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """Per-token log-ratios as they are (``token``), or each sequence's mean over its loss tokens, [B, 1]."""
    if level != "sequence":
        return log_ratio
    m = mask.float()
    return ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)


def _sampler_weight(mismatch: torch.Tensor, config: TRLLossConfig) -> torch.Tensor:
    """trainer/sampler ratios per token (``token_*``) or per sequence (``sequence_*``: their product), clamped to
    the clip range (``*_truncate``) or zeroed outside it (``*_mask``)."""
    level, _, kind = config.importance_sampling_mode.partition("_")
    w = torch.exp(mismatch.sum(-1, keepdim=True) if level == "sequence" else mismatch)
    lo, hi = config.importance_sampling_clip_min, config.importance_sampling_clip_max
    if kind == "truncate":
        return torch.clamp(w, min=lo, max=hi)
    everywhere = torch.ones_like(w, dtype=torch.bool)
    outside = ratio_mask(w, everywhere, -math.inf if lo is None else lo, math.inf if hi is None else hi)
    return w.masked_fill(outside, 0.0)


def _advantages(inputs: LossInputs) -> torch.Tensor:
    a = inputs.advantages.detach().float()
    return a.unsqueeze(1) if a.ndim == 1 else a


def _with_kl(per_token: torch.Tensor, inputs: LossInputs, config: TRLLossConfig, r: Ratios,
             metrics: dict[str, torch.Tensor]) -> torch.Tensor:
    """`per_token` + beta x the k3 KL to the reference, times the objective's ratio with TRL's bias correction (its
    gradient is then the reverse KL's; a sequence-level ratio broadcast over the tokens, as TRL's);
    `metrics["ref_kl/mean"]` the KL's token mean."""
    if config.beta == 0:
        return per_token
    if inputs.ref_logprobs is None:
        raise ValueError("loss.beta > 0 needs the reference policy's log-probs (ref_logprobs)")
    kl = k3_kl(inputs.trainer_logprobs.float(), inputs.ref_logprobs.detach().float())
    metrics["ref_kl/mean"] = masked_mean(kl.detach(), r.mask)
    return per_token + config.beta * (kl * torch.exp(r.log_w) if config.use_bias_correction_kl else kl)


def _total(inputs: LossInputs, name: str, like: torch.Tensor) -> torch.Tensor | float:
    """The step's total ``inputs.<name>`` as a divisor (a tensor on ``like``'s device and dtype)."""
    value = getattr(inputs, name)
    if isinstance(value, torch.Tensor):
        return value.to(device=like.device, dtype=like.dtype).clamp(min=1)
    if value is None or value <= 0:
        raise ValueError(f"this loss needs LossInputs.{name} (the step's total), got {value!r}")
    return float(value)


def _clipped(coef: torch.Tensor, adv: torch.Tensor, c: ClippedLossConfig) -> tuple[torch.Tensor, torch.Tensor]:
    clipped = torch.clamp(coef, 1 - c.epsilon_low, 1 + c.epsilon_high)
    capped = torch.clamp(coef, max=c.delta) if c.delta is not None else coef
    c_d = coef.detach()
    no_grad = ((c_d > 1 + c.epsilon_high) & (adv > 0)) | ((c_d < 1 - c.epsilon_low) & (adv < 0))
    return -torch.minimum(capped * adv, clipped * adv), no_grad


def _weighted(per_token: torch.Tensor, r: Ratios) -> torch.Tensor:
    return per_token if r.weight is None else per_token * r.weight


def _outputs(loss: torch.Tensor, r: Ratios, out_of_range: torch.Tensor, adv: torch.Tensor,
             extra: dict[str, torch.Tensor], cuts_gradient: bool = True, weights_tokens: bool = True) -> LossOutputs:
    """The loss with its ratio metrics; `out_of_range` (the clip's, cispo's cap) is `masked_fraction`, and the
    tokens the export reports without gradient when the loss does cut them (`cuts_gradient`). With a sampler
    correction, its weights' ``importance_sampling/ratio/*`` and the share it zeroes (``*_mask``), which have no
    gradient when the weights multiply the tokens' loss (`weights_tokens`; vespo folds them into its own)."""
    mask = r.mask
    out_of_range = out_of_range.expand_as(mask) & mask
    metrics = {**ratio_metrics(mask, torch.exp(r.mismatch), r.mismatch, out_of_range, adv), **extra}
    no_grad = out_of_range if cuts_gradient else None
    if r.weight is not None:
        w = r.weight.detach().expand_as(mask)
        zeroed = (w == 0) & mask
        metrics.update({
            "importance_sampling/ratio/mean": masked_mean(w, mask),
            "importance_sampling/ratio/min": masked_extreme(w, mask, largest=False),
            "importance_sampling/ratio/max": masked_extreme(w, mask, largest=True),
            "importance_sampling/masked_fraction": zeroed.sum() / mask.sum().clamp(min=1),
        })
        if weights_tokens:
            no_grad = zeroed if no_grad is None else no_grad | zeroed
    return LossOutputs(loss=loss, metrics=metrics, no_gradient=no_grad)


def _normalised(kind: str, per_token: torch.Tensor, mask: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    m = mask.to(per_token.dtype)
    masked = per_token * m  # [B, T] (a sequence-level loss broadcasts over its tokens)
    if kind in ("grpo", "sapo"):
        return (masked.sum(-1) / m.sum(-1).clamp(min=1.0)).sum() / _total(inputs, "total_sequences", masked)
    if kind == "luspo":
        return masked.sum() / _total(inputs, "total_sequences", masked)
    if kind == "bnpo":
        return masked.sum() / m.sum().clamp(min=1.0) / _total(inputs, "total_micro_batches", masked)
    if kind == "dr_grpo":
        return masked.sum() / (_total(inputs, "total_sequences", masked)
                               * _total(inputs, "max_completion_length", masked))
    return masked.sum() / _total(inputs, "total_loss_tokens", masked)  # dapo, cispo, vespo


def _clipped_loss(kind: str) -> Callable[[LossInputs, ClippedLossConfig], LossOutputs]:
    def loss_fn(inputs: LossInputs, config: ClippedLossConfig) -> LossOutputs:
        r = _ratios(inputs, config.importance_sampling_level, config)
        adv, extra = _advantages(inputs), {}
        per_token, no_grad = _clipped(torch.exp(r.log_w), adv, config)
        per_token = _with_kl(_weighted(per_token, r), inputs, config, r, extra)
        return _outputs(_normalised(kind, per_token, r.mask, inputs), r, no_grad, adv, extra)

    loss_fn.__name__ = f"{kind}_loss"
    loss_fn.__doc__ = f"TRL's loss_type={kind!r} (module docstring): clipped ratio x advantage, its normalisation."
    return loss_fn


def cispo_loss(inputs: LossInputs, config: CISPOLossConfig) -> LossOutputs:
    """TRL's ``cispo``: ``-min(r, epsilon_high).detach() * A * log p`` per token, over the step's loss tokens. The
    capped tokens keep a gradient (through log p); ``masked_fraction`` reports the share capped."""
    r = _ratios(inputs, config.importance_sampling_level, config)
    adv, extra = _advantages(inputs), {}
    coef = torch.exp(r.log_w).detach()
    per_token = -torch.clamp(coef, max=config.epsilon_high) * adv * inputs.trainer_logprobs.float()
    per_token = _with_kl(_weighted(per_token, r), inputs, config, r, extra)
    capped = (coef > config.epsilon_high) & (adv > 0)
    return _outputs(_normalised("cispo", per_token, r.mask, inputs), r, capped, adv, extra, cuts_gradient=False)


def sapo_loss(inputs: LossInputs, config: SAPOLossConfig) -> LossOutputs:
    """TRL's ``sapo``: a soft gate ``sigmoid(tau (r - 1)) * 4 / tau`` in place of the clip (tau by advantage
    sign), the mean over sequences of each sequence's token mean. No token is cut off."""
    r = _ratios(inputs, config.importance_sampling_level, config)
    adv, extra = _advantages(inputs), {}
    tau = torch.where(adv > 0, config.temperature_pos, config.temperature_neg)
    per_token = -(torch.sigmoid(tau * (torch.exp(r.log_w) - 1)) * 4 / tau) * adv
    per_token = _with_kl(_weighted(per_token, r), inputs, config, r, extra)
    return _outputs(_normalised("sapo", per_token, r.mask, inputs), r, torch.zeros_like(r.mask), adv, extra,
                    cuts_gradient=False)


_LOG_EPS = math.log(1e-8)  # VESPO's floor for a log-ratio (its reference implementation's)


def vespo_loss(inputs: LossInputs, config: VESPOLossConfig) -> LossOutputs:
    """TRL's ``vespo``: ``-phi(w) * A * log p`` per token over the step's loss tokens, where ``w`` is the sequence's
    importance ratio (the product of its token ratios, times the sampler correction's token weights when set) and
    ``phi(w) = exp(lambda) * w^k * exp(-lambda * w)`` (1 at w = 1; k, lambda by the advantage's sign) a detached
    weight. Log-ratios are clamped to [-20, 20] per token and [log 1e-8, 20] per sequence, as VESPO's own code.
    ``vespo/phi`` is its token mean. ``importance_sampling_level`` reaches only the KL's bias correction, as TRL's."""
    r = _ratios(inputs, "token", config)  # phi's sequence ratio is the product of the token ratios
    adv, extra = _advantages(inputs), {}
    with torch.no_grad():
        log_w = (torch.clamp(r.log_w, -20.0, 20.0) * r.mask).sum(-1, keepdim=True)
        if r.weight is not None:
            log_w = log_w + torch.clamp(torch.log(r.weight), _LOG_EPS, 20.0).sum(-1, keepdim=True)
        log_w = torch.clamp(log_w, _LOG_EPS, 20.0)
        positive = adv >= 0
        k = torch.where(positive, config.k_pos, config.k_neg)
        lam = torch.where(positive, config.lambda_pos, config.lambda_neg).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    kl_r = r._replace(log_w=_at_level(r.log_w, r.mask, config.importance_sampling_level))  # TRL's KL weight
    per_token = _with_kl(-phi * adv * inputs.trainer_logprobs.float(), inputs, config, kl_r, extra)
    out = _outputs(_normalised("vespo", per_token, r.mask, inputs), r, torch.zeros_like(r.mask), adv, extra,
                   cuts_gradient=False, weights_tokens=False)
    out.metrics["vespo/phi"] = masked_mean(phi.expand_as(r.mask), r.mask)
    return out


grpo_loss = _clipped_loss("grpo")
dapo_loss = _clipped_loss("dapo")
bnpo_loss = _clipped_loss("bnpo")
dr_grpo_loss = _clipped_loss("dr_grpo")
luspo_loss = _clipped_loss("luspo")
