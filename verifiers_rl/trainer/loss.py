"""Token-level RL loss: pure functions and dataclasses, tensors in, tensors out.

The default loss is verifiers' importance-ratio-masked policy gradient (CISPO-like), with prime-rl's optional
``kl_tau * (log ratio)^2`` term and an optional k3 KL penalty to a reference policy (TRL's ``beta``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from verifiers_rl.trainer.importance import log_importance_ratio, ratio_mask
# the default loss's config sits beside its spec (no torch there: configs are checked in vf-rl's own process)
from verifiers_rl.trainer.losses.default import LossConfig

# Log-probabilities and entropy live in `logprobs` (chunked, no [B, T, V] copies); re-exported for callers.
from verifiers_rl.trainer.logprobs import hidden_token_logprobs, token_logprobs_and_entropy  # noqa: E402,F401


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is true; 0 when the mask is empty (so logging never sees NaN)."""
    mask = mask.bool()
    return torch.where(mask, values, torch.zeros_like(values)).sum() / mask.sum().clamp(min=1)


def masked_extreme(values: torch.Tensor, mask: torch.Tensor, largest: bool) -> torch.Tensor:
    """The max (``largest``) or min of ``values`` where ``mask`` is true; with an empty mask (or B = 0, where amax
    raises) the identity -inf / +inf, so micro-batches merge."""
    fill = values.new_tensor(float("-inf") if largest else float("inf"))
    vals = torch.cat([torch.where(mask, values, fill).flatten(), fill.view(1)])
    return vals.max() if largest else vals.min()


def check_token_shapes(inputs: object, names: tuple[str, ...]) -> tuple[int, ...]:
    """The ``[B, T]`` shape of ``inputs.trainer_logprobs``; ValueError unless each of ``names`` (when set) has it."""
    shape = tuple(inputs.trainer_logprobs.shape)  # type: ignore[attr-defined]
    if len(shape) != 2:
        raise ValueError(f"trainer_logprobs must be [B, T], got shape {shape}")
    for name in names:
        t = getattr(inputs, name)
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} must equal trainer_logprobs shape {shape}")
    return shape


def clamped_total(total: int | torch.Tensor, like: torch.Tensor) -> torch.Tensor | int:
    """A step's loss-token total as a divisor, at least 1 (an all-masked step has a zero sum anyway); a tensor
    moves to ``like``'s device and dtype."""
    if isinstance(total, torch.Tensor):
        return total.to(device=like.device, dtype=like.dtype).clamp(min=1)
    return max(int(total), 1)


# ---------------------------------------------------------------------------------------------------------------------
# Loss


@dataclass
class LossInputs:
    """One micro-batch: per-token tensors are ``[B, T]``; ``advantages`` is ``[B]`` (broadcast) or ``[B, T]``.

    ``total_loss_tokens`` counts the whole optimizer step's loss tokens (all micro-batches and ranks), so summing the
    micro-batch losses gives the step's per-token mean; the other ``total_*`` / ``max_completion_length`` are the
    normalisers TRL's loss types divide by (``losses/trl_types.py``).
    """

    trainer_logprobs: torch.Tensor
    sampling_logprobs: torch.Tensor
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    total_loss_tokens: int | torch.Tensor
    ref_logprobs: torch.Tensor | None = None
    total_sequences: int | None = None
    total_micro_batches: int | None = None
    max_completion_length: int | None = None

    def __post_init__(self) -> None:
        shape = check_token_shapes(self, ("sampling_logprobs", "loss_mask", "ref_logprobs"))
        adv_shape = tuple(self.advantages.shape)
        if adv_shape not in (shape[:1], shape):
            raise ValueError(f"advantages must be [B]={shape[:1]} or [B, T]={shape}, got {adv_shape}")
        # Only plain ints are checked: reading a device tensor would force a sync every micro-batch.
        if not isinstance(self.total_loss_tokens, torch.Tensor) and self.total_loss_tokens < 0:
            raise ValueError(f"total_loss_tokens must be >= 0, got {self.total_loss_tokens}")


class StepTotals(NamedTuple):
    """A step's totals over all its micro-batches and ranks, what losses normalise by (``LossInputs``)."""

    tokens: torch.Tensor  # loss tokens
    sequences: int
    micro_batches: int


@dataclass
class LossOutputs:
    """The loss (with grad) and this micro-batch's metrics (detached 0-d tensors, no device sync).

    ``metrics``: ``loss_tokens`` plus per-token means, except ``.../min`` and ``.../max`` extremes; weighted by
    ``loss_tokens`` they merge into a step's (:class:`verifiers_rl.trainer.metrics.TokenWeightedMetrics`).
    ``no_gradient``: the ``[B, T]`` loss tokens given no policy-gradient term (for the token export), or None.
    """

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]
    no_gradient: torch.Tensor | None = None


LossFn = Callable[[LossInputs, LossConfig], LossOutputs]
"""A pluggable loss: dataclass in, dataclass out."""


def k3_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(p || q) from tokens sampled from p: non-negative, unbiased, low variance
    (Schulman's k3)."""
    d = log_q - log_p
    return torch.exp(d) - d - 1


def ratio_masked_policy_gradient(inputs: LossInputs, config: LossConfig) -> LossOutputs:
    """verifiers' default loss, with prime-rl's ``kl_tau`` term and TRL's reference KL ``beta``.

    Per loss token (``loss_mask`` true):
        log_r = trainer_lp - sampling_lp            (sampling_lp detached)
        r     = exp(log_r)
        l     = -r * A * keep + kl_tau * log_r^2 + beta * k3(trainer || ref)
    ``keep`` is 0 outside ``[mask_ratio_low, mask_ratio_high]`` (verifiers' trust-region mask). The regularizers
    apply on every loss token, as in prime-rl's ``default_loss_fn`` and TRL's GRPO: they pull out-of-window tokens
    back. ``loss = sum(l) / total_loss_tokens``. ``mismatch_kl/mean`` is k3 KL(sampler || trainer) (prime-rl's).
    """
    mask = inputs.loss_mask.bool()
    trainer_lp = inputs.trainer_logprobs.float()
    sampling_lp = inputs.sampling_logprobs.detach().float()

    log_ratio = log_importance_ratio(trainer_lp, sampling_lp, mask)  # 0 off the mask: no inf * 0 = NaN
    ratio = torch.exp(log_ratio)

    ratio_d = ratio.detach()
    out_of_range = ratio_mask(ratio_d, mask, config.mask_ratio_low, config.mask_ratio_high)  # loss tokens only
    keep = mask & ~out_of_range

    advantages = inputs.advantages.detach().float()
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)

    pg_tokens = -ratio * advantages
    reg_tokens = torch.zeros_like(trainer_lp)
    if config.kl_tau:
        reg_tokens = reg_tokens + config.kl_tau * log_ratio.pow(2)

    ref_kl_tokens = None
    if inputs.ref_logprobs is not None:
        ref_lp = torch.where(mask, inputs.ref_logprobs.detach().float(), trainer_lp.detach())
        ref_kl_tokens = k3_kl(trainer_lp, ref_lp)
    if config.beta:
        if ref_kl_tokens is None:
            raise ValueError("beta > 0 needs ref_logprobs (log-probs of the reference policy); pass them or set beta=0")
        reg_tokens = reg_tokens + config.beta * ref_kl_tokens

    total = clamped_total(inputs.total_loss_tokens, pg_tokens)
    zero = torch.zeros_like(pg_tokens)
    loss = (torch.where(keep, pg_tokens, zero) + torch.where(mask, reg_tokens, zero)).sum() / total

    metrics = ratio_metrics(mask, ratio_d, log_ratio.detach(), out_of_range, advantages)
    if ref_kl_tokens is not None:
        metrics["ref_kl/mean"] = masked_mean(ref_kl_tokens.detach(), mask)
    return LossOutputs(loss=loss, metrics=metrics, no_gradient=out_of_range)


@torch.no_grad()
def ratio_metrics(mask: torch.Tensor, ratio: torch.Tensor, log_ratio: torch.Tensor, out_of_range: torch.Tensor,
                  advantages: torch.Tensor) -> dict[str, torch.Tensor]:
    """A micro-batch's importance-ratio metrics over its loss tokens (mask): ratio mean/min/max, the ratio-masked
    share (all, and by advantage sign: shares of all loss tokens), and the k3 mismatch KL's mean, mean square
    (→ std once merged, trainer/metrics.py) and max."""
    n = mask.sum()
    kl_tokens = ratio - log_ratio - 1
    masked = mask & out_of_range
    return {
        "importance_ratio/mean": masked_mean(ratio, mask),
        "importance_ratio/min": masked_extreme(ratio, mask, largest=False),
        "importance_ratio/max": masked_extreme(ratio, mask, largest=True),
        "masked_fraction": masked.sum() / n.clamp(min=1),
        "masked_fraction/positive_advantage": (masked & (advantages > 0)).sum() / n.clamp(min=1),
        "masked_fraction/negative_advantage": (masked & (advantages < 0)).sum() / n.clamp(min=1),
        "mismatch_kl/mean": masked_mean(kl_tokens, mask),
        "mismatch_kl/sq_mean": masked_mean(kl_tokens.pow(2), mask),
        "mismatch_kl/max": masked_extreme(kl_tokens, mask, largest=True),
        "loss_tokens": n,
    }


def compute_loss(trainer_logprobs: torch.Tensor, sampling_logprobs: torch.Tensor, advantages: torch.Tensor,
                 loss_mask: torch.Tensor, total_loss_tokens: int | torch.Tensor, config: LossConfig | None = None,
                 ref_logprobs: torch.Tensor | None = None, loss_fn: LossFn = ratio_masked_policy_gradient
                 ) -> LossOutputs:
    """Loss of one micro-batch; see :func:`ratio_masked_policy_gradient` and :class:`LossInputs`."""
    inputs = LossInputs(trainer_logprobs, sampling_logprobs, advantages, loss_mask, total_loss_tokens, ref_logprobs)
    return loss_fn(inputs, config if config is not None else LossConfig())


MISMATCH_WARN_KL = 0.05
"""Per-token KL(sampler || trainer) on a step sampled by the weights it trains above which the run warns: the same
weights in bf16 on both sides give about 1e-3, fp32 on the CPU under 1e-6."""


def sampler_mismatch_line(metrics: dict[str, float], step: int) -> str | None:
    """One warning line when an on-policy step's sampler log-probs (its loss `metrics`) are far from the trainer's:
    the server serves other weights than the policy (nothing else shows it but this metric), or samples otherwise
    than it is told."""
    kl = metrics.get("mismatch_kl/mean")
    if kl is None or not kl > MISMATCH_WARN_KL:
        return None
    return (f"warning: step {step + 1}: the sampler's log-probs differ from the trainer's (mismatch_kl {kl:.3g} per "
            "token on weights the trainer holds too; the same weights give about 1e-3): the inference server may "
            "serve another checkpoint, revision or quantization than the policy (check its --model), or sample with "
            "settings the trainer does not score with (a repetition penalty, a logit bias); the loss's importance "
            "ratios correct for it only in part")
