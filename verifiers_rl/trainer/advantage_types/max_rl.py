"""``advantage.type = "max_rl"``: Maximum-likelihood RL (arXiv:2602.02710; prime-rl's ``max_rl``). No keys.

``A_i = (r_i - mean(r)) / mean(r)`` (0 when mean(r) <= 0): with binary rewards a prompt solved with probability p weighs
~1/p, the gradient of the maximum-likelihood objective truncated at order ``group_size``.
"""


from __future__ import annotations

from dataclasses import dataclass

from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.lazy_function import LazyFunction


@dataclass
class MaxRLAdvantageConfig:
    """MaxRL has no keys of its own."""


# its function in trainer/advantages.py (torch)
ADVANTAGE = AdvantageSpec(
    "max_rl", LazyFunction("verifiers_rl.trainer.advantages:max_rl_advantages"), MaxRLAdvantageConfig)
