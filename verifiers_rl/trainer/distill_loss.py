"""Distillation losses beside the RL loss: pure functions, tensors in, tensors out (dataclass in, dataclass out).

- :func:`opd_loss` (``training_mode="opd"``): on-policy distillation. The policy sampled the tokens; a teacher
  scored the same sequences. Each sampled token's reward is ``teacher_lp - policy_lp`` (minus the per-token reverse
  KL), trained with the RL loss's importance-ratio-masked policy gradient, so its gradient lowers
  KL(policy || teacher) on the policy's own samples.
- :func:`sft_loss` (``training_mode="sft"``): cross-entropy (NLL) on the teacher's rollout tokens.

Both return ``LossOutputs`` whose metrics aggregate per token like the RL loss's (``trainer/metrics.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verifiers_rl.trainer.loss import (LossConfig, LossInputs, LossOutputs, check_token_shapes, clamped_total,
                                       masked_extreme, masked_mean, ratio_masked_policy_gradient)


@dataclass
class DistillInputs:
    """One micro-batch, ``[B, T]`` tensors aligned to token positions (as ``LossInputs``).

    ``teacher_logprobs``: the teacher's log-prob of each token given the tokens before it (opd; unused by sft).
    ``loss_mask``: the tokens that train: the policy's sampled tokens (opd) or the teacher's reply tokens (sft).
    """

    trainer_logprobs: torch.Tensor
    loss_mask: torch.Tensor
    total_loss_tokens: int | torch.Tensor
    sampling_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        check_token_shapes(self, ("loss_mask", "sampling_logprobs", "teacher_logprobs"))


def teacher_kl_metrics(kl: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token KL estimates over the mask as step-aggregatable metrics: the mean, the mean square (the step's std
    comes from both: :func:`finish_teacher_kl`) and the max."""
    mask = mask.bool()
    return {
        "teacher_kl/mean": masked_mean(kl, mask),
        "teacher_kl/sq_mean": masked_mean(kl.pow(2), mask),
        "teacher_kl/max": masked_extreme(kl, mask, largest=True),
    }


def finish_teacher_kl(metrics: dict[str, float]) -> dict[str, float]:
    """A step's aggregated metrics with ``teacher_kl/sq_mean`` turned into ``teacher_kl/std``."""
    out = dict(metrics)
    if "teacher_kl/sq_mean" in out:
        sq = out.pop("teacher_kl/sq_mean")
        out["teacher_kl/std"] = max(sq - out.get("teacher_kl/mean", 0.0) ** 2, 0.0) ** 0.5
    return out


def opd_loss(inputs: DistillInputs, config: LossConfig) -> LossOutputs:
    """On-policy distillation loss of one micro-batch.

    Per loss token: ``kl = policy_lp - teacher_lp`` (a sample of KL(policy || teacher): the token came from the
    policy), advantage ``A = -kl`` (detached), and the RL loss ``-r * A`` with the importance ratio ``r`` of
    trainer over sampler, masked outside ``[mask_ratio_low, mask_ratio_high]`` as in RL. Metrics: the RL loss's
    (importance ratio, mismatch KL, masked fraction) plus ``teacher_kl/mean|sq_mean|max`` of the live policy.
    """
    if inputs.teacher_logprobs is None or inputs.sampling_logprobs is None:
        raise ValueError("opd_loss needs teacher_logprobs and sampling_logprobs")
    mask = inputs.loss_mask.bool()
    trainer_lp = inputs.trainer_logprobs.float()
    teacher_lp = torch.where(mask, inputs.teacher_logprobs.detach().float(), trainer_lp.detach())
    kl = trainer_lp.detach() - teacher_lp
    rl = ratio_masked_policy_gradient(LossInputs(
        trainer_logprobs=inputs.trainer_logprobs, sampling_logprobs=inputs.sampling_logprobs, advantages=-kl,
        loss_mask=inputs.loss_mask, total_loss_tokens=inputs.total_loss_tokens), config)
    with torch.no_grad():
        rl.metrics.update(teacher_kl_metrics(kl, mask))
    return rl


def sft_loss(inputs: DistillInputs, config: LossConfig | None = None) -> LossOutputs:
    """Cross-entropy on the loss tokens: ``sum(-trainer_lp over loss tokens) / total_loss_tokens``, so the
    micro-batch losses of a step sum to the step's per-token mean NLL. Metric ``sft/nll/mean``."""
    mask = inputs.loss_mask.bool()
    trainer_lp = inputs.trainer_logprobs.float()
    nll = torch.where(mask, -trainer_lp, torch.zeros_like(trainer_lp))
    loss = nll.sum() / clamped_total(inputs.total_loss_tokens, nll)
    with torch.no_grad():
        metrics = {"sft/nll/mean": masked_mean(nll.detach(), mask), "loss_tokens": mask.sum()}
    return LossOutputs(loss=loss, metrics=metrics)


def full_vocab_kl(policy_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Exact KL(policy || teacher) over the whole vocabulary at each ``mask`` position of ``[B, T, V]`` logits
    (position t predicts token t + 1), averaged over the mask: a deterministic measure of how far apart the two
    are on fixed sequences (benchmarks and tests; training uses the sampled-token estimate)."""
    n = min(policy_logits.shape[-1], teacher_logits.shape[-1])
    p = torch.log_softmax(policy_logits[..., :n].float(), dim=-1)
    q = torch.log_softmax(teacher_logits[..., :n].float(), dim=-1)
    per_position = (p.exp() * (p - q)).sum(-1)
    return masked_mean(per_position, mask)
