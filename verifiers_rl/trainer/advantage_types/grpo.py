"""``advantage.type = "grpo"`` (the default): a rollout's reward minus its group's mean, optionally divided by a
reward std (``scale_rewards``); ``trainer/advantages.py:compute_advantages`` defines it. With ``length_penalty``
(prime-rl's), the rewards are first shaped by length (``length_penalty.py``). Its function, ``grpo_advantages``,
is in ``trainer/advantages.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.advantage_types.length_penalty import LengthPenaltyConfig, length_penalty_config
from verifiers_rl.trainer.lazy_function import LazyFunction

SCALE_REWARDS_CHOICES = ("none", "group", "batch")


@dataclass
class GRPOAdvantageConfig:
    scale_rewards: str | bool = field(default="none", metadata={
        "help": "Divide advantages by the reward std: 'none', 'group' or 'batch' (std + 1e-4); TRL's true / false "
                "mean 'group' / 'none'."})
    length_penalty: LengthPenaltyConfig | None = field(default=None, metadata={
        "help": "prime-rl's length penalty, a table of num_output_tokens_weight (0.25), num_input_tokens_weight "
                "(0.1), num_turns_weight (0.1): each reward less pass rate x the weighted shares of the group's "
                "longest (None: off)."})

    def __post_init__(self) -> None:
        self.length_penalty = length_penalty_config(self.length_penalty)
        if isinstance(self.scale_rewards, bool):  # TRL's older bool spelling
            self.scale_rewards = "group" if self.scale_rewards else "none"
        if self.scale_rewards not in SCALE_REWARDS_CHOICES:
            raise SettingError("advantage", f"advantage.scale_rewards={self.scale_rewards!r} is not one of "
                                            f"{', '.join(SCALE_REWARDS_CHOICES)}")


# its function in trainer/advantages.py (torch)
ADVANTAGE = AdvantageSpec(
    "grpo", LazyFunction("verifiers_rl.trainer.advantages:grpo_advantages"), GRPOAdvantageConfig, uses_lengths=True)
