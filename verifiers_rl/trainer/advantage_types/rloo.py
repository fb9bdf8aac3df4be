"""``advantage.type = "rloo"``: REINFORCE Leave-One-Out.

Each of a prompt's ``G`` rollouts is baselined by the mean reward of the OTHER ``G - 1`` (arXiv:2402.14740 sec. 3;
TRL's ``RLOOTrainer``), an unbiased baseline: ``A_i = G / (G - 1) * (r_i - mean(r))``; needs ``G >= 2``. No keys.
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
