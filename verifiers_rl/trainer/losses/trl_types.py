"""TRL's GRPOTrainer loss types by name and by value (TRL 1.16, ``GRPOConfig.loss_type``): ``grpo``, ``bnpo``,
``dr_grpo``, ``cispo``, ``sapo``, ``luspo`` (``dapo`` is ``losses/dapo.py``), with TRL's ``beta`` (k3 KL to the
reference policy, added per token before the normalisation) and, for ``grpo`` and ``sapo``,
``importance_sampling_level = "sequence"`` (GSPO: one ratio per sequence, the mean log-ratio of its loss tokens).
``tests/test_trl_losses.py`` checks each, value and gradient, against TRL's own ``_compute_loss`` on the same
tensors.

What stands here for the trainer state TRL's loss reads:

- ``old_per_token_logps``: the sampler's log-probs (``sampling_logprobs``), so the ratio also corrects the
  trainer/sampler mismatch (TRL without vLLM: the policy's own, detached, ratio 1 on the first iteration);
- TRL normalises each micro-batch and divides by ``gradient_accumulation_steps``; here each loss divides by the
  step's totals over all micro-batches and ranks: ``total_sequences`` (grpo, sapo: the mean over sequences of
  each sequence's token mean; luspo: of each sequence's token sum), ``total_sequences * max_completion_length``
  (dr_grpo; ``max_completion_length`` is the run's ``max_tokens``), ``total_loss_tokens`` (cispo, as TRL's
  ``num_items_in_batch``), each micro-batch's own loss tokens over ``total_micro_batches`` (bnpo). On one
  micro-batch the value is TRL's; over several, TRL's equals it when micro-batches hold equal numbers of
  sequences (and, for bnpo, of loss tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from verifiers_rl.trainer.importance import log_importance_ratio
from verifiers_rl.trainer.loss import LossInputs, LossOutputs, k3_kl, ratio_metrics
from verifiers_rl.trainer.losses import LossSpec

LEVELS = ("token", "sequence")


BETA_HELP = "Weight of the k3 KL to the reference (initial) policy, per token (TRL's beta; 0 disables it)."


@dataclass
class ClippedLossConfig:
    """The clipped-ratio losses' keys (token-level ratios only, as TRL requires for bnpo and dr_grpo)."""
    epsilon_low: float = field(default=0.2, metadata={"help": "Lower clip: 1 - epsilon_low bounds the ratio of a "
                                                             "negative-advantage token (TRL's epsilon, default 0.2)."})
    epsilon_high: float = field(default=0.2, metadata={"help": "Upper clip: 1 + epsilon_high bounds the ratio of a "
                                                              "positive-advantage token (TRL's epsilon_high)."})
    delta: float | None = field(default=None, metadata={"help": "Two-sided clipping: the unclipped ratio is capped "
                                                                "at delta (TRL's delta; None: off)."})
    beta: float = field(default=0.0, metadata={"help": BETA_HELP})

    def __post_init__(self) -> None:
        if not 0 <= self.epsilon_low < 1:
            raise ValueError(f"loss.epsilon_low={self.epsilon_low} must be in [0, 1) (TRL's epsilon: 0.2)")
        if not self.epsilon_high > 0:
            raise ValueError(f"loss.epsilon_high={self.epsilon_high} must be > 0 (TRL: epsilon_high = epsilon)")
        if self.delta is not None and not self.delta > 1 + self.epsilon_high:
            raise ValueError(f"loss.delta={self.delta} must be > 1 + epsilon_high (TRL recommends 1 + epsilon_high "
                             "+ some margin), or None")
        if not self.beta >= 0:
            raise ValueError(f"loss.beta={self.beta} must be >= 0 (0: no KL to the reference)")


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"loss.importance_sampling_level={level!r} is not 'token' or 'sequence' (GSPO)")


@dataclass
class GRPOLossConfig(ClippedLossConfig):
    importance_sampling_level: str = field(default="token", metadata={
        "help": "'token' (one ratio per token) or 'sequence' (GSPO: one per sequence, from its mean log-ratio)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_level(self.importance_sampling_level)


@dataclass
class CISPOLossConfig:
    epsilon_high: float = field(default=5.0, metadata={"help": "The ratio's cap (TRL's epsilon_high; ScaleRL's "
                                                               "epsilon_max, recommended 5.0)."})
    beta: float = field(default=0.0, metadata={"help": BETA_HELP})

    def __post_init__(self) -> None:
        if not self.epsilon_high > 0:
            raise ValueError(f"loss.epsilon_high={self.epsilon_high} must be > 0 (ScaleRL: 5.0)")
        if not self.beta >= 0:
            raise ValueError(f"loss.beta={self.beta} must be >= 0 (0: no KL to the reference)")


@dataclass
class SAPOLossConfig:
    temperature_pos: float = field(default=1.0, metadata={"help": "Gate temperature for tokens with a positive "
                                                                  "advantage (TRL's sapo_temperature_pos)."})
    temperature_neg: float = field(default=1.05, metadata={"help": "Gate temperature for the others (TRL's "
                                                                   "sapo_temperature_neg)."})
    beta: float = field(default=0.0, metadata={"help": BETA_HELP})
    importance_sampling_level: str = field(default="token", metadata={"help": "'token' or 'sequence' (GSPO)."})

    def __post_init__(self) -> None:
        for name in ("temperature_pos", "temperature_neg"):
            if not getattr(self, name) > 0:
                raise ValueError(f"loss.{name}={getattr(self, name)} must be > 0 (TRL: 1.0 and 1.05)")
        if not self.beta >= 0:
            raise ValueError(f"loss.beta={self.beta} must be >= 0 (0: no KL to the reference)")
        _check_level(self.importance_sampling_level)


@dataclass
class BNPOLossConfig(ClippedLossConfig):
    """bnpo: each micro-batch's token mean."""


@dataclass
class DrGRPOLossConfig(ClippedLossConfig):
    """dr_grpo: a constant normaliser (sequences x max_completion_length), no length bias."""


@dataclass
class LUSPOLossConfig(ClippedLossConfig):
    """luspo: sequence-level ratios always (TRL refuses it at token level)."""


def _ratios(inputs: LossInputs, level: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss mask, per-token log-ratio [B, T] (0 off the mask), the importance weights' log: [B, T] or [B, 1])."""
    mask = inputs.loss_mask.bool()
    log_ratio = log_importance_ratio(inputs.trainer_logprobs.float(), inputs.sampling_logprobs.detach().float(),
                                     mask)
    if level == "sequence":
        m = mask.float()
        return mask, log_ratio, ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    return mask, log_ratio, log_ratio


def _advantages(inputs: LossInputs) -> torch.Tensor:
    a = inputs.advantages.detach().float()
    return a.unsqueeze(1) if a.ndim == 1 else a


def _with_kl(per_token: torch.Tensor, inputs: LossInputs, beta: float) -> torch.Tensor:
    if beta == 0:
        return per_token
    if inputs.ref_logprobs is None:
        raise ValueError("loss.beta > 0 needs the reference policy's log-probs (ref_logprobs)")
    return per_token + beta * k3_kl(inputs.trainer_logprobs.float(), inputs.ref_logprobs.detach().float())


def _total(value: int | float | torch.Tensor, like: torch.Tensor, name: str) -> torch.Tensor | float:
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


def _outputs(loss: torch.Tensor, mask: torch.Tensor, log_ratio: torch.Tensor, out_of_range: torch.Tensor,
             adv: torch.Tensor, cuts_gradient: bool = True) -> LossOutputs:
    """The loss with its ratio metrics; `out_of_range` (the clip's, cispo's cap) is `masked_fraction`, and the
    tokens the export reports without gradient when the loss does cut them (`cuts_gradient`)."""
    out_of_range = out_of_range.expand_as(mask) & mask
    metrics = ratio_metrics(mask, torch.exp(log_ratio.detach()), log_ratio.detach(), out_of_range, adv)
    return LossOutputs(loss=loss, metrics=metrics, no_gradient=out_of_range if cuts_gradient else None)


def _normalised(kind: str, per_token: torch.Tensor, mask: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    m = mask.to(per_token.dtype)
    masked = per_token * m  # [B, T] (a sequence-level loss broadcasts over its tokens)
    if kind in ("grpo", "sapo"):
        return (masked.sum(-1) / m.sum(-1).clamp(min=1.0)).sum() / _total(inputs.total_sequences, masked,
                                                                            "total_sequences")
    if kind == "luspo":
        return masked.sum() / _total(inputs.total_sequences, masked, "total_sequences")
    if kind == "bnpo":
        return masked.sum() / m.sum().clamp(min=1.0) / _total(inputs.total_micro_batches, masked,
                                                              "total_micro_batches")
    if kind == "dr_grpo":
        return masked.sum() / (_total(inputs.total_sequences, masked, "total_sequences")
                               * _total(inputs.max_completion_length, masked, "max_completion_length"))
    return masked.sum() / _total(inputs.total_loss_tokens, masked, "total_loss_tokens")  # cispo


def _clipped_loss(kind: str, level: str | None = None) -> Callable[[LossInputs, ClippedLossConfig], LossOutputs]:
    def loss_fn(inputs: LossInputs, config: ClippedLossConfig) -> LossOutputs:
        lv = level or getattr(config, "importance_sampling_level", "token")
        mask, log_ratio, log_w = _ratios(inputs, lv)
        adv = _advantages(inputs)
        per_token, no_grad = _clipped(torch.exp(log_w), adv, config)
        per_token = _with_kl(per_token, inputs, config.beta)
        return _outputs(_normalised(kind, per_token, mask, inputs), mask, log_ratio, no_grad, adv)

    loss_fn.__name__ = f"{kind}_loss"
    loss_fn.__doc__ = f"TRL's loss_type={kind!r} (module docstring): clipped ratio x advantage, its normalisation."
    return loss_fn


def cispo_loss(inputs: LossInputs, config: CISPOLossConfig) -> LossOutputs:
    """TRL's ``cispo``: ``-min(r, epsilon_high).detach() * A * log p`` per token, over the step's loss tokens. The
    capped tokens keep a gradient (through log p); ``masked_fraction`` reports the share capped."""
    mask, log_ratio, _ = _ratios(inputs, "token")
    adv = _advantages(inputs)
    coef = torch.exp(log_ratio)
    per_token = -torch.clamp(coef, max=config.epsilon_high).detach() * adv * inputs.trainer_logprobs.float()
    per_token = _with_kl(per_token, inputs, config.beta)
    capped = (coef.detach() > config.epsilon_high) & (adv > 0)
    return _outputs(_normalised("cispo", per_token, mask, inputs), mask, log_ratio, capped, adv, cuts_gradient=False)


def sapo_loss(inputs: LossInputs, config: SAPOLossConfig) -> LossOutputs:
    """TRL's ``sapo``: a soft gate ``sigmoid(tau (r - 1)) * 4 / tau`` in place of the clip (tau by advantage
    sign), the mean over sequences of each sequence's token mean. No token is cut off."""
    mask, log_ratio, log_w = _ratios(inputs, config.importance_sampling_level)
    adv = _advantages(inputs)
    tau = torch.where(adv > 0, config.temperature_pos, config.temperature_neg)
    per_token = -(torch.sigmoid(tau * (torch.exp(log_w) - 1)) * 4 / tau) * adv
    per_token = _with_kl(per_token, inputs, config.beta)
    return _outputs(_normalised("sapo", per_token, mask, inputs), mask, log_ratio, torch.zeros_like(mask), adv,
                    cuts_gradient=False)


_EMPTY = {"importance_ratio/min": 1.0, "importance_ratio/max": 1.0}
_CONSOLE = (("mismatch_kl/mean", "kl"),)
GRPO = LossSpec("grpo", _clipped_loss("grpo"), GRPOLossConfig, when_empty=_EMPTY, console=_CONSOLE)
BNPO = LossSpec("bnpo", _clipped_loss("bnpo", "token"), BNPOLossConfig, when_empty=_EMPTY, console=_CONSOLE)
DR_GRPO = LossSpec("dr_grpo", _clipped_loss("dr_grpo", "token"), DrGRPOLossConfig, when_empty=_EMPTY,
                   console=_CONSOLE)
LUSPO = LossSpec("luspo", _clipped_loss("luspo", "sequence"), LUSPOLossConfig, when_empty=_EMPTY, console=_CONSOLE)
CISPO = LossSpec("cispo", cispo_loss, CISPOLossConfig, when_empty=_EMPTY, console=_CONSOLE)
SAPO = LossSpec("sapo", sapo_loss, SAPOLossConfig, when_empty=_EMPTY, console=_CONSOLE)
