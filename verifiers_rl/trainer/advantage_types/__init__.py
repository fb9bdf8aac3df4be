"""The advantage estimators, chosen by name (``advantage.type``; TRL's GRPOTrainer vs RLOOTrainer, verl's
``algorithm.adv_estimator``).

Each registered estimator lives in its own module and is an :class:`AdvantageSpec`: a pure function
``(rewards, group_size, config) -> advantages`` (1-D float tensors, rewards laid out as contiguous groups of
``group_size`` rollouts of one prompt; with ``uses_lengths``, also ``lengths=``: each rollout's token and turn
counts, ``length_penalty.RolloutLengths``) and its own config class (a dataclass that checks its values in
``__post_init__`` and raises one line naming the key).

Adding an estimator: a module here that defines ``ADVANTAGE = AdvantageSpec(...)``, and its line in ``ADVANTAGES``;
or, outside the package, ``advantage.type = "my_pkg.advantages:ADVANTAGE"`` (its import path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# name -> module defining ADVANTAGE; imported when the estimator is chosen
ADVANTAGES: dict[str, str] = {
    "grpo": "verifiers_rl.trainer.advantage_types.grpo",
    "rloo": "verifiers_rl.trainer.advantage_types.rloo",
    "max_rl": "verifiers_rl.trainer.advantage_types.max_rl",
}
DEFAULT_ADVANTAGE = "grpo"


@dataclass(frozen=True)
class AdvantageSpec:
    """One registered estimator; ``min_group_size``: the fewest rollouts per example it is defined for;
    ``uses_lengths``: ``fn`` takes ``lengths=`` too."""

    name: str
    fn: Callable[..., Any]
    config: type
    min_group_size: int = 1
    uses_lengths: bool = False
