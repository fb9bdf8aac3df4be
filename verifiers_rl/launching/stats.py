"""Held-out reward statistics: the mean reward of scored states and the paired before/after gain."""

from __future__ import annotations

import math
from typing import Any

from verifiers_rl.rewards import reward_of


def paired_gain(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> tuple[float, float, float, float]:
    """(mean before, mean after, mean gain, paired standard error of the gain) over the same rollouts."""
    b = [reward_of(s) for s in before]
    a = [reward_of(s) for s in after]
    d = [y - x for x, y in zip(b, a)]
    n = len(d)
    mean_d = sum(d) / n
    var = sum((x - mean_d) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    return sum(b) / n, sum(a) / n, mean_d, math.sqrt(var / n)


def mean_reward(states: list[dict[str, Any]]) -> float:
    """The mean of `reward` over scored states (a missing reward counts as 0; no states: 0)."""
    return sum(reward_of(s) for s in states) / max(1, len(states))
