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
    """The max (``largest``) or min of ``values`` where ``mask`` is true; -inf / +inf (the identity of max / min, so
    micro-batches merge) when the mask is empty. The flatten + identity element covers B = 0 too (amin/amax of
    an empty tensor raise)."""
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
    """One micro-batch. All per-token tensors are ``[B, T]`` aligned to token positions.

    ``advantages`` is ``[B]`` (one per sequence, broadcast over its tokens) or ``[B, T]`` (per token).
    ``loss_mask`` is true on the completion tokens that train (env responses and prompts are false).
    ``total_loss_tokens`` is the number of loss tokens in the whole optimizer step, across all micro-batches and
    ranks, so that summing the micro-batch losses gives the step's per-token mean. ``total_sequences`` (the step's
    sequences), ``total_micro_batches`` (micro-batches over all ranks) and ``max_completion_length`` (the run's
    max_tokens) are the other normalisers a loss may divide by (TRL's loss types: ``losses/trl_types.py``).
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
    """The loss (with grad) and this micro-batch's metrics by name (detached 0-d tensors, no device sync).

    ``metrics`` holds ``loss_tokens`` (the micro-batch's number of loss tokens) and values over those tokens, named
    as the trainer logs them: ``.../min`` and ``.../max`` are extremes, every other name is a per-token mean (0 with
    no loss tokens; the extremes are then +inf / -inf, the identities of min / max). Weighted by ``loss_tokens``
    they aggregate into a step's metrics (:class:`verifiers_rl.trainer.metrics.TokenWeightedMetrics`).
    ``no_gradient``: ``[B, T]`` bool, the loss tokens this loss gives no policy-gradient term (the default loss's
    ratio window, DAPO's active clip), as the token export reports them; None when it leaves none out.
    """

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]
    no_gradient: torch.Tensor | None = None


LossFn = Callable[[LossInputs, LossConfig], LossOutputs]
"""A pluggable loss: dataclass in, dataclass out."""


def k3_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(p || q) from tokens sampled from p: ``exp(log_q - log_p) - (log_q - log_p) - 1``.

    Non-negative, unbiased (``E_p[q/p] = 1``), and lower variance than ``log_p - log_q`` (Schulman's k3).
    """
    d = log_q - log_p
    return torch.exp(d) - d - 1


def ratio_masked_policy_gradient(inputs: LossInputs, config: LossConfig) -> LossOutputs:
    """verifiers' default loss, with prime-rl's ``kl_tau`` term and TRL's reference KL ``beta``.

    Per loss token (``loss_mask`` true):
        log_r = trainer_lp - sampling_lp            (sampling_lp detached)
        r     = exp(log_r)
        l     = -r * A * keep + kl_tau * log_r^2 + beta * k3(trainer || ref)
    ``keep`` is 0 on tokens with ``r < mask_ratio_low`` or ``r > mask_ratio_high``: no policy-gradient term there
    (verifiers' trust-region mask), while the two regularizers apply on every loss token (prime-rl's
    ``default_loss_fn`` adds ``kl_tau * log_r^2`` over its whole loss mask; TRL's GRPO adds ``beta * KL`` over the
    completion mask, outside its clipping). ``loss = sum(l over loss tokens) / total_loss_tokens``.

    ``mismatch_kl/mean`` is the k3 estimate of KL(sampler || trainer), ``r - log_r - 1`` averaged over loss tokens:
    the tokens were sampled from the inference server, so this is unbiased and >= 0 (prime-rl's definition).
    ``ref_kl/mean`` (with ``ref_logprobs``) is k3(trainer || ref) averaged the same way.
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

    # The policy-gradient term trains only inside the ratio window (`keep`); the regularizers apply on every loss
    # token, as prime-rl's default loss (its `log_r^2` term over the whole loss mask) and TRL's GRPO (`beta * KL`
    # added after the clipped term, over the completion mask) do: they are what pulls out-of-window tokens back.
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


def compute_loss(
    trainer_logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    total_loss_tokens: int | torch.Tensor,
    config: LossConfig | None = None,
    ref_logprobs: torch.Tensor | None = None,
    loss_fn: LossFn = ratio_masked_policy_gradient,
) -> LossOutputs:
    """Loss of one micro-batch; see :func:`ratio_masked_policy_gradient` and :class:`LossInputs`."""
    inputs = LossInputs(
        trainer_logprobs=trainer_logprobs,
        sampling_logprobs=sampling_logprobs,
        advantages=advantages,
        loss_mask=loss_mask,
        total_loss_tokens=total_loss_tokens,
        ref_logprobs=ref_logprobs,
    )
    return loss_fn(inputs, config if config is not None else LossConfig())
