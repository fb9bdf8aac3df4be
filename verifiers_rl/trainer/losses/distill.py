"""``loss.type = "opd"`` and ``"sft"``: the distillation losses of ``training_mode = "opd"`` / ``"sft"`` (functions in
``trainer/distill_loss.py``). OPD is the default loss with the teacher's log-ratio as the advantage, so it takes
the default loss's config; SFT's cross-entropy has no knobs."""

from __future__ import annotations

from dataclasses import dataclass

from verifiers_rl.trainer.losses import LossSpec
from verifiers_rl.trainer.losses.default import LossConfig
from verifiers_rl.trainer.lazy_function import LazyFunction


@dataclass
class SFTLossConfig:
    """Cross-entropy on the teacher's tokens: nothing to set."""


OPD = LossSpec("opd", LazyFunction("verifiers_rl.trainer.distill_loss:opd_loss"), LossConfig, mode="opd",
               when_empty={"importance_ratio/min": 1.0, "importance_ratio/max": 1.0},
               console=(("mismatch_kl/mean", "kl"), ("teacher_kl/mean", "teacher_kl")))
SFT = LossSpec("sft", LazyFunction("verifiers_rl.trainer.distill_loss:sft_loss"), SFTLossConfig, mode="sft",
               console=(("sft/nll/mean", "nll"),))
