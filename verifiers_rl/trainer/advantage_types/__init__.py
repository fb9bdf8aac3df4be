"""The advantage estimators, chosen by name (``advantage.type``; TRL's GRPOTrainer vs RLOOTrainer, verl's
``algorithm.adv_estimator``).

Each is an :class:`AdvantageSpec` in its own module: a pure function ``(rewards, group_size, config) -> advantages``
over contiguous groups of ``group_size`` rollouts, and its config class. Adding one: docs/architecture.md.
"""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# name -> module defining ADVANTAGE; imported when the estimator is chosen
ADVANTAGES: dict[str, str] = {
    "grpo": "verifiers_rl.trainer.advantage_types.grpo",
    "rloo": "verifiers_rl.trainer.advantage_types.rloo",
    "max_rl": "verifiers_rl.trainer.advantage_types.max_rl",
    "rae": "verifiers_rl.trainer.advantage_types.rae",
}
DEFAULT_ADVANTAGE = "grpo"


@dataclass(frozen=True)
class AdvantageSpec:
    """One registered estimator; ``min_group_size``: the fewest rollouts per example it is defined for;
    ``uses_lengths``: ``fn`` takes ``lengths=`` too; ``uses_agents``, ``group_baseline``: below."""

    name: str
    fn: Callable[..., Any]
    config: type
    min_group_size: int = 1
    uses_lengths: bool = False
    uses_agents: bool = False  # ``fn`` takes ``agents=`` (each rollout's ``agent_of``) and the run's ``baselines=``
    group_baseline: bool = True  # False: its baseline is not the group's mean, so a group of one rollout learns
