"""TRL's GRPOTrainer loss types by name and by value (TRL 1.16, ``GRPOConfig.loss_type``), with TRL's ``beta`` (and
its KL bias correction), sequence-level ratios (``importance_sampling_level``, GSPO's with grpo) and TRL's sampler
correction (``importance_sampling_mode``).
``tests/test_trl_losses.py`` checks each, value and gradient, against TRL's own ``_compute_loss``.

The configs and specs are here (no torch: vf-rl's own process checks them); the functions in ``trl_functions.py``.
"""


from __future__ import annotations

from dataclasses import dataclass, field

from verifiers_rl.trainer.losses import LossSpec
from verifiers_rl.trainer.lazy_function import LazyFunction

LEVELS = ("token", "sequence")
MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
BETA_HELP = "Weight of the k3 KL to the reference (initial) policy, per token (TRL's beta; 0 disables it)."
LEVEL_HELP = "'token' (one ratio per token) or 'sequence' (GSPO: one per sequence, from its mean log-ratio)."


@dataclass
class TRLLossConfig:
    """The keys every TRL loss type takes: the reference KL and the sampler correction."""
    beta: float = field(default=0.0, metadata={"help": BETA_HELP})
    importance_sampling_mode: str = field(default="none", metadata={"help": (
        "Sampler correction (TRL's vllm_importance_sampling_mode): 'none' (the sampler's log-probs are the old "
        "policy), or the trainer's own log-probs are, and the loss is weighted by trainer/sampler ratios that are "
        "'token_truncate'd, 'token_mask'ed, 'sequence_truncate'd or 'sequence_mask'ed to the clip range.")})
    importance_sampling_clip_min: float | None = field(default=None, metadata={
        "help": "Lower bound of the sampler correction's ratios (TRL's vllm_importance_sampling_clip_min)."})
    importance_sampling_clip_max: float | None = field(default=3.0, metadata={
        "help": "Upper bound of the sampler correction's ratios (TRL's vllm_importance_sampling_clip_max: 3.0)."})
    use_bias_correction_kl: bool = field(default=True, metadata={"help": (
        "With beta > 0, the KL term times the (differentiable) importance ratio, the unbiased reverse-KL gradient "
        "(TRL's use_bias_correction_kl, default true: the gradient changes even on-policy).")})

    def __post_init__(self) -> None:
        if not self.beta >= 0:
            raise ValueError(f"loss.beta={self.beta} must be >= 0 (0: no KL to the reference)")
        if self.importance_sampling_mode not in MODES:
            raise ValueError(f"loss.importance_sampling_mode={self.importance_sampling_mode!r} is not one of "
                             f"{', '.join(MODES)}")
        lo, hi = self.importance_sampling_clip_min, self.importance_sampling_clip_max
        if lo is None and hi is None:
            raise ValueError("loss.importance_sampling_clip_min and importance_sampling_clip_max are both None; "
                             "set at least one (TRL: clip_max = 3.0)")
        if lo is not None and hi is not None and not 0 <= lo < hi:
            raise ValueError(f"loss.importance_sampling_clip_min={lo} must be in [0, clip_max={hi})")


@dataclass
class ClippedLossConfig(TRLLossConfig):
    """The clipped-ratio losses' keys. A sequence-level ratio is TRL's for every one of them (it suggests grpo for
    GSPO: the others sum per-token terms, weighting a sequence by its length)."""
    epsilon_low: float = field(default=0.2, metadata={"help": "Lower clip: 1 - epsilon_low bounds the ratio of a "
                                                             "negative-advantage token (TRL's epsilon, default 0.2)."})
    epsilon_high: float = field(default=0.2, metadata={"help": "Upper clip: 1 + epsilon_high bounds the ratio of a "
                                                              "positive-advantage token (TRL's epsilon_high)."})
    delta: float | None = field(default=None, metadata={"help": "Two-sided clipping: the unclipped ratio is capped "
                                                                "at delta (TRL's delta; None: off)."})
    importance_sampling_level: str = field(default="token", metadata={"help": LEVEL_HELP})

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_level(self.importance_sampling_level)
        if not 0 <= self.epsilon_low < 1:
            raise ValueError(f"loss.epsilon_low={self.epsilon_low} must be in [0, 1) (TRL's epsilon: 0.2)")
        if not self.epsilon_high > 0:
            raise ValueError(f"loss.epsilon_high={self.epsilon_high} must be > 0 (TRL: epsilon_high = epsilon)")
        if self.delta is not None and not self.delta > 1 + self.epsilon_high:
            raise ValueError(f"loss.delta={self.delta} must be > 1 + epsilon_high (TRL recommends 1 + epsilon_high "
                             "+ some margin), or None")


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"loss.importance_sampling_level={level!r} is not 'token' or 'sequence' (GSPO)")


@dataclass
class GRPOLossConfig(ClippedLossConfig):
    """grpo: each sequence's token mean, the mean over sequences; with sequence-level ratios, GSPO."""


@dataclass
class CISPOLossConfig(TRLLossConfig):
    epsilon_high: float = field(default=5.0, metadata={"help": "The ratio's cap (TRL's epsilon_high; ScaleRL's "
                                                               "epsilon_max, recommended 5.0)."})
    importance_sampling_level: str = field(default="token", metadata={"help": LEVEL_HELP})

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_level(self.importance_sampling_level)
        if not self.epsilon_high > 0:
            raise ValueError(f"loss.epsilon_high={self.epsilon_high} must be > 0 (ScaleRL: 5.0)")


@dataclass
class SAPOLossConfig(TRLLossConfig):
    temperature_pos: float = field(default=1.0, metadata={"help": "Gate temperature for tokens with a positive "
                                                                  "advantage (TRL's sapo_temperature_pos)."})
    temperature_neg: float = field(default=1.05, metadata={"help": "Gate temperature for the others (TRL's "
                                                                   "sapo_temperature_neg)."})
    importance_sampling_level: str = field(default="token", metadata={"help": LEVEL_HELP})

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("temperature_pos", "temperature_neg"):
            if not getattr(self, name) > 0:
                raise ValueError(f"loss.{name}={getattr(self, name)} must be > 0 (TRL: 1.0 and 1.05)")
        _check_level(self.importance_sampling_level)


@dataclass
class VESPOLossConfig(TRLLossConfig):
    """vespo: a gamma weight of each sequence's importance ratio (TRL's vespo_k_pos, ... defaults)."""
    k_pos: float = field(default=2.0, metadata={"help": "Shape k of the weight for advantages >= 0 (vespo_k_pos)."})
    lambda_pos: float = field(default=3.0, metadata={"help": "Rate lambda for advantages >= 0 (vespo_lambda_pos)."})
    k_neg: float = field(default=3.0, metadata={"help": "Shape k for negative advantages (vespo_k_neg)."})
    lambda_neg: float = field(default=2.0, metadata={"help": "Rate lambda for negative advantages (vespo_lambda_neg)."})
    importance_sampling_level: str = field(default="token", metadata={"help": (
        "Read only by the KL's bias correction (beta > 0): 'sequence' weights the KL by exp(the sequence's mean "
        "log-ratio), as TRL's vespo does (TRL warns: vespo's own weight is per sequence already; keep 'token').")})

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_level(self.importance_sampling_level)
        if self.importance_sampling_mode.startswith("sequence"):
            raise ValueError(f"loss.importance_sampling_mode={self.importance_sampling_mode!r}: vespo takes "
                             "'none', 'token_truncate' or 'token_mask' (its weight is already per sequence)")
        for name in ("k_pos", "lambda_pos", "k_neg", "lambda_neg"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"loss.{name}={getattr(self, name)} must be >= 0 (TRL: 2.0, 3.0, 3.0, 2.0)")


@dataclass
class DAPOLossConfig(ClippedLossConfig):
    """dapo (DAPO, arXiv:2503.14476 eq. 8; TRL's default): decoupled clip bounds ("clip-higher"), over the step's
    loss tokens (a long completion weighs by its tokens); DAPO itself drops the KL term (beta 0)."""
    epsilon_high: float = field(default=0.28, metadata={"help": "Upper clip: 1 + epsilon_high bounds the ratio of a "
                                                               "positive-advantage token (DAPO: 0.28)."})


@dataclass
class BNPOLossConfig(ClippedLossConfig):
    """bnpo: each micro-batch's token mean."""


@dataclass
class DrGRPOLossConfig(ClippedLossConfig):
    """dr_grpo: a constant normaliser (sequences x max_completion_length), no length bias."""


@dataclass
class LUSPOLossConfig(ClippedLossConfig):
    """luspo: sequence-level ratios by default, its paper's setup (TRL's GRPOConfig says 'token', and warns)."""
    importance_sampling_level: str = field(default="sequence", metadata={"help": LEVEL_HELP})


_EMPTY = {"importance_ratio/min": 1.0, "importance_ratio/max": 1.0, "importance_sampling/ratio/min": 1.0,
          "importance_sampling/ratio/max": 1.0}


def _spec(kind: str, config: type) -> LossSpec:
    return LossSpec(kind, LazyFunction(f"verifiers_rl.trainer.losses.trl_functions:{kind}_loss"), config,
                    when_empty=_EMPTY, console=(("mismatch_kl/mean", "kl"),))


GRPO = _spec("grpo", GRPOLossConfig)
DAPO = _spec("dapo", DAPOLossConfig)
BNPO = _spec("bnpo", BNPOLossConfig)
DR_GRPO = _spec("dr_grpo", DrGRPOLossConfig)
LUSPO = _spec("luspo", LUSPOLossConfig)
CISPO = _spec("cispo", CISPOLossConfig)
SAPO = _spec("sapo", SAPOLossConfig)
VESPO = _spec("vespo", VESPOLossConfig)
