"""Distillation losses beside the RL loss: :func:`opd_loss` (on-policy distillation) and :func:`sft_loss`
(cross-entropy on the teacher's rollout tokens). Both return ``LossOutputs`` that aggregate like the RL loss's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verifiers_rl.trainer.loss import (LossConfig, LossInputs, LossOutputs, check_token_shapes, clamped_total,
                                       masked_extreme, masked_mean, ratio_masked_policy_gradient)


@dataclass
class DistillInputs:
    """One micro-batch, ``[B, T]`` tensors as ``LossInputs``; ``teacher_logprobs`` for opd only. ``loss_mask``: the
    policy's sampled tokens (opd) or the teacher's reply tokens (sft)."""

    trainer_logprobs: torch.Tensor
    loss_mask: torch.Tensor
    total_loss_tokens: int | torch.Tensor
    sampling_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        check_token_shapes(self, ("loss_mask", "sampling_logprobs", "teacher_logprobs"))


def teacher_kl_metrics(kl: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token KL estimates over the mask as step-aggregatable metrics: the mean, the mean square (the step's std
    comes from both: ``metrics.with_std``, as the step merges them) and the max."""
    mask = mask.bool()
    return {
        "teacher_kl/mean": masked_mean(kl, mask),
        "teacher_kl/sq_mean": masked_mean(kl.pow(2), mask),
        "teacher_kl/max": masked_extreme(kl, mask, largest=True),
    }


def opd_loss(inputs: DistillInputs, config: LossConfig) -> LossOutputs:
    """On-policy distillation loss of one micro-batch: per loss token ``kl = policy_lp - teacher_lp`` (a sample of
    KL(policy || teacher)), advantage ``A = -kl`` (detached), and the RL loss ``-r * A``, ratio-masked as in RL, so
    its gradient lowers KL(policy || teacher) on the policy's own samples. Adds ``teacher_kl/*`` metrics."""
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
    """Cross-entropy over the step's loss tokens (micro-batch losses sum to the step's per-token mean NLL)."""

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
