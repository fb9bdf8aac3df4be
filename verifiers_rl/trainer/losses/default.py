"""``loss.type = "default"``: verifiers' importance-ratio-masked policy gradient with prime-rl's ``kl_tau`` and TRL's
``beta`` (the function and its config, ``LossConfig``, live in ``trainer/loss.py``)."""

from __future__ import annotations

from verifiers_rl.trainer.loss import LossConfig, ratio_masked_policy_gradient
from verifiers_rl.trainer.losses import LossSpec

# A step without loss tokens moved nothing: its importance ratios are 1.
LOSS = LossSpec("default", ratio_masked_policy_gradient, LossConfig, mode="rl",
                when_empty={"importance_ratio/min": 1.0, "importance_ratio/max": 1.0},
                console=(("mismatch_kl/mean", "kl"),))
