"""``advantage.type = "rloo"``: REINFORCE Leave-One-Out.

Definition (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
Feedback in LLMs", arXiv:2402.14740, sec. 3; TRL's ``RLOOTrainer``): each of a prompt's ``G`` rollouts is baselined
by the mean reward of the OTHER ``G - 1``,

    A_i = r_i - (sum_j r_j - r_i) / (G - 1) = G / (G - 1) * (r_i - mean(r))

so the baseline does not depend on the rollout it scores (an unbiased estimate). It is GRPO's unscaled advantage
times ``G / (G - 1)``; it needs ``G >= 2``. No keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.advantages import compute_advantages


@dataclass
class RLOOAdvantageConfig:
    """RLOO has no keys of its own."""


def rloo_advantages(rewards: torch.Tensor, group_size: int, config: RLOOAdvantageConfig) -> torch.Tensor:
    if isinstance(group_size, int) and not isinstance(group_size, bool) and group_size < 2:
        raise ValueError(f"advantage.type='rloo' needs group_size >= 2 (got {group_size}): the leave-one-out "
                         "baseline of a rollout is the mean of the others in its group")
    # compute_advantages checks the shape and values and gives r - mean(r); leave-one-out rescales it
    return compute_advantages(rewards, group_size, "none") * (group_size / (group_size - 1))


ADVANTAGE = AdvantageSpec("rloo", rloo_advantages, RLOOAdvantageConfig, min_group_size=2)
