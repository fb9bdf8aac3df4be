"""``advantage.type = "grpo"`` (the default): a rollout's reward minus its group's mean, optionally divided by a
reward std (``scale_rewards``); ``trainer/advantages.py:compute_advantages`` defines it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.advantages import SCALE_REWARDS_CHOICES, compute_advantages


@dataclass
class GRPOAdvantageConfig:
    scale_rewards: str = field(default="none", metadata={
        "help": "Divide advantages by the reward std: 'none', 'group' or 'batch' (std + 1e-4)."})

    def __post_init__(self) -> None:
        if self.scale_rewards not in SCALE_REWARDS_CHOICES:
            # named as the top-level key it has always been (RLConfig.scale_rewards fills it)
            raise ValueError(f"scale_rewards={self.scale_rewards!r} is not one of {', '.join(SCALE_REWARDS_CHOICES)}")


def grpo_advantages(rewards: torch.Tensor, group_size: int, config: GRPOAdvantageConfig) -> torch.Tensor:
    return compute_advantages(rewards, group_size, config.scale_rewards)


ADVANTAGE = AdvantageSpec("grpo", grpo_advantages, GRPOAdvantageConfig)
