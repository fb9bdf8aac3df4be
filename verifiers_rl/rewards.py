"""A rollout's reward, read one way everywhere (summaries, advantages, the difficulty buffer, exports, reports).

A missing reward counts as 0; a dropped rollout (verifiers' `Trace.drop()`) is left out of means, baselines and
batches; advantages and the difficulty buffer both read `training_reward`, so a group is filtered under the rewards
it trains with (0 for a truncated rollout with `zero_truncated_completions`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def reward_of(item: Any) -> float:
    """The reward of a scored state, a rollout output, a trajectory step (mappings) or an object with `.reward`
    (a v1 trace); 0.0 when it has none."""
    if item is None:
        return 0.0
    value = item.get("reward") if isinstance(item, Mapping) else getattr(item, "reward", None)
    return float(value or 0.0)


def is_dropped(state: Any) -> bool:
    """Whether the environment dropped this rollout (`state["dropped"]`, set from a v1 trace's `dropped`)."""
    return bool(state.get("dropped")) if isinstance(state, Mapping) else bool(getattr(state, "dropped", False))


def training_reward(state: Any, zero_truncated_completions: bool = False) -> float:
    """The reward advantages are computed from and the difficulty buffer filters on."""
    if zero_truncated_completions and state.get("is_truncated"):
        return 0.0
    return reward_of(state)


def contain_non_finite(state: Any) -> bool:
    """A scored state whose reward is NaN / inf: reward 0 and `reward_errors["reward"]` set (counted in
    `errors/reward_funcs`, as a raising reward function is), instead of the advantages refusing it and ending the run.
    True when it did."""
    value = state.get("reward")
    if value is None or math.isfinite(float(value)):
        return False
    errors = state.get("reward_errors")
    if not isinstance(errors, dict):
        errors = state["reward_errors"] = {}
    errors["reward"] = f"ValueError: reward {value} is not a finite number"
    state["reward"] = 0.0
    return True
