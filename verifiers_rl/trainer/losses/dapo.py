"""``loss.type = "dapo"``: DAPO's token-level clipped policy gradient with decoupled clip bounds ("clip-higher").

Definition (DAPO, Yu et al. 2025, arXiv:2503.14476, eq. 8; TRL's ``GRPOConfig(loss_type="dapo")`` with
``epsilon`` / ``epsilon_high``): per loss token, with ``r = exp(trainer_lp - sampling_lp)`` and the rollout's
advantage ``A``,

    l = -min(r * A, clip(r, 1 - epsilon_low, 1 + epsilon_high) * A)

summed over every loss token of the step and divided by their number (token-level normalisation: a long
completion weighs by its tokens, not as one sample). No KL term (DAPO drops it). The sampler's log-probs stand for
the old policy, so ``r`` also corrects the trainer/sampler mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from verifiers_rl.trainer.importance import log_importance_ratio
from verifiers_rl.trainer.loss import LossInputs, LossOutputs, ratio_metrics
from verifiers_rl.trainer.losses import LossSpec


@dataclass
class DAPOLossConfig:
    epsilon_low: float = field(default=0.2, metadata={"help": "Lower clip: ratios below 1 - epsilon_low stop "
                                                             "pushing a negative-advantage token down (DAPO: 0.2)."})
    epsilon_high: float = field(default=0.28, metadata={"help": "Upper clip: ratios above 1 + epsilon_high stop "
                                                               "pushing a positive-advantage token up (DAPO: 0.28)."})

    def __post_init__(self) -> None:
        if not 0 <= self.epsilon_low < 1:
            raise ValueError(f"loss.epsilon_low={self.epsilon_low} must be in [0, 1) (DAPO: 0.2)")
        if not self.epsilon_high > 0:
            raise ValueError(f"loss.epsilon_high={self.epsilon_high} must be > 0 (DAPO: 0.28)")


def dapo_loss(inputs: LossInputs, config: DAPOLossConfig) -> LossOutputs:
    """One micro-batch's DAPO loss: ``sum(l over loss tokens) / total_loss_tokens``.

    Metrics, as the default loss names them: ``importance_ratio/*``, ``mismatch_kl/*`` and ``masked_fraction``
    (+ by advantage sign), here the share of loss tokens the clip leaves without gradient: ``r > 1 + epsilon_high``
    with ``A > 0`` (positive) and ``r < 1 - epsilon_low`` with ``A < 0`` (negative).
    """
    mask = inputs.loss_mask.bool()
    trainer_lp = inputs.trainer_logprobs.float()
    log_ratio = log_importance_ratio(trainer_lp, inputs.sampling_logprobs.detach().float(), mask)  # 0 off the mask
    ratio = torch.exp(log_ratio)
    advantages = inputs.advantages.detach().float()
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - config.epsilon_low, 1 + config.epsilon_high)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    total = inputs.total_loss_tokens
    if isinstance(total, torch.Tensor):
        total = total.to(device=per_token.device, dtype=per_token.dtype).clamp(min=1)
    else:
        total = max(int(total), 1)
    loss = torch.where(mask, per_token, torch.zeros_like(per_token)).sum() / total
    ratio_d = ratio.detach()
    no_grad = (((ratio_d > 1 + config.epsilon_high) & (advantages > 0))
               | ((ratio_d < 1 - config.epsilon_low) & (advantages < 0)))
    return LossOutputs(loss=loss, metrics=ratio_metrics(mask, ratio_d, log_ratio.detach(), no_grad, advantages),
                       no_gradient=no_grad & mask)


LOSS = LossSpec("dapo", dapo_loss, DAPOLossConfig, mode="rl",
                when_empty={"importance_ratio/min": 1.0, "importance_ratio/max": 1.0},
                console=(("mismatch_kl/mean", "kl"),))
