"""``loss.type = "default"``: verifiers' importance-ratio-masked policy gradient with prime-rl's ``kl_tau`` and TRL's
``beta``: its config here, its function ``ratio_masked_policy_gradient`` in ``trainer/loss.py`` (torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.losses import LossSpec
from verifiers_rl.trainer.lazy_function import LazyFunction


@dataclass
class LossConfig:
    """Knobs of the default loss: the keys of ``loss`` (``[trainer.args.loss]``) with ``type = "default"`` (and
    ``opd``'s); ``RLConfig.loss_config()`` builds this object from a run's values."""

    mask_ratio_low: float = field(
        default=0.125, metadata={"help": "Tokens whose importance ratio trainer/sampler is below this get no loss."}
    )
    mask_ratio_high: float = field(
        default=8.0, metadata={"help": "Tokens whose importance ratio trainer/sampler is above this get no loss."}
    )
    kl_tau: float = field(
        default=0.0, metadata={"help": "Weight of the (log importance ratio)^2 penalty (prime-rl: 1e-3)."}
    )
    beta: float = field(
        default=0.0, metadata={"help": "Weight of the KL penalty to the reference (initial) policy; 0 disables it."}
    )

    def __post_init__(self) -> None:
        if not (0 <= self.mask_ratio_low < 1 < self.mask_ratio_high):
            raise SettingError(
                "loss",
                f"loss.mask_ratio_low={self.mask_ratio_low} and loss.mask_ratio_high={self.mask_ratio_high} must "
                "satisfy 0 <= low < 1 < high (defaults 0.125 and 8.0)")
        if not self.kl_tau >= 0:
            raise SettingError("loss",
                               f"loss.kl_tau={self.kl_tau} must be >= 0 (0: no log-ratio penalty; prime-rl uses 1e-3)")
        if not self.beta >= 0:
            raise SettingError("loss", f"loss.beta={self.beta} must be >= 0 (0: no reference model, as TRL's default)")


# A step without loss tokens moved nothing: its importance ratios are 1.
LOSS = LossSpec("default", LazyFunction("verifiers_rl.trainer.loss:ratio_masked_policy_gradient"), LossConfig,
                mode="rl", when_empty={"importance_ratio/min": 1.0, "importance_ratio/max": 1.0},
                console=(("mismatch_kl/mean", "kl"),))
