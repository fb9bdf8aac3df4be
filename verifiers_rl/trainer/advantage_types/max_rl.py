"""``advantage.type = "max_rl"``: Maximum-likelihood RL (arXiv:2602.02710; prime-rl's ``[orchestrator.algo] type =
"max_rl"``, 559b447).

Each rollout's reward minus its group's mean, divided by that mean (in place of GRPO's std):

    A_i = (r_i - mean(r)) / mean(r)        (0 for the whole group when mean(r) <= 0)

With binary rewards a prompt the policy solves with probability p weighs ~1/p, which makes the policy gradient
that of the maximum-likelihood objective truncated at order ``group_size``. Meant for non-negative rewards.
No keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.advantages import compute_advantages


@dataclass
class MaxRLAdvantageConfig:
    """MaxRL has no keys of its own."""


def max_rl_advantages(rewards: torch.Tensor, group_size: int, config: MaxRLAdvantageConfig) -> torch.Tensor:
    centred = compute_advantages(rewards, group_size, "none")  # checks shape and values: r - mean(r)
    mean = rewards.float().view(-1, group_size).mean(dim=1, keepdim=True)
    scaled = centred.view(-1, group_size) / mean.clamp(min=torch.finfo(torch.float32).tiny)
    return torch.where(mean > 0, scaled, torch.zeros_like(scaled)).view(-1)


ADVANTAGE = AdvantageSpec("max_rl", max_rl_advantages, MaxRLAdvantageConfig)
