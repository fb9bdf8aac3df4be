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

from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.lazy_function import LazyFunction


@dataclass
class RLOOAdvantageConfig:
    """RLOO has no keys of its own."""


# its function in trainer/advantages.py (torch)
ADVANTAGE = AdvantageSpec(
    "rloo", LazyFunction("verifiers_rl.trainer.advantages:rloo_advantages"), RLOOAdvantageConfig, min_group_size=2)
