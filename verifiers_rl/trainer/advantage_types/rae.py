"""``advantage.type = "rae"``: role-conditioned advantage estimation (SPIRAL, arXiv:2506.24119; prime-rl's ``rae``).

``A_i = r_i - b_agent``, ``b_agent`` an exponential moving average of that agent's own rewards (per environment and
seat: ``agent_of``), each rollout scored before its reward moves the baseline: ``b <- decay * b + (1 - decay) * r``.
For multi-agent self-play (two seats of a zero-sum game), where a group mean is ~0 whatever the policy does; a
one-seat environment gets REINFORCE with a moving baseline. Its baseline is not the group's, so a group of one
learns. Baselines start at 0 and live with the run (as prime-rl's: a resumed run warms them again).
"""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.lazy_function import LazyFunction


@dataclass
class RAEAdvantageConfig:
    """RAE's key: ``decay``, the baselines' EMA decay (SPIRAL's alpha, prime-rl's default 0.95)."""

    decay: float = 0.95

    def __post_init__(self) -> None:
        if isinstance(self.decay, bool) or not isinstance(self.decay, (int, float)) or not 0 <= self.decay < 1:
            raise SettingError("advantage", f"advantage.decay={self.decay!r} must be in [0, 1) (default 0.95)")


def agent_of(state: dict[str, Any]) -> str:
    """Whose baseline a rollout is scored against: its environment (``task``) and seat (a v1 episode's agent)."""
    return f"{state.get('task') or ''}/{(state.get('info') or {}).get('agent') or ''}"


# its function in trainer/advantages.py (torch)
ADVANTAGE = AdvantageSpec("rae", LazyFunction("verifiers_rl.trainer.advantages:rae_advantages"), RAEAdvantageConfig,
                          uses_agents=True, group_baseline=False)
