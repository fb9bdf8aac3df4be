"""The advantage estimators' functions: pure, tensors in, tensors out (their configs and specs, no torch, in
``advantage_types/``); :func:`advantages_for` is the one place a run's advantages are computed."""

from __future__ import annotations

from typing import Any

import torch

from verifiers_rl.trainer.advantage_types.grpo import SCALE_REWARDS_CHOICES, GRPOAdvantageConfig
from verifiers_rl.trainer.advantage_types.length_penalty import RolloutLengths, length_shaped
from verifiers_rl.trainer.advantage_types.max_rl import MaxRLAdvantageConfig
from verifiers_rl.trainer.advantage_types.rae import RAEAdvantageConfig
from verifiers_rl.trainer.advantage_types.rloo import RLOOAdvantageConfig

# Added to the std before dividing, as TRL does, so a group with equal rewards gives 0, not NaN.
STD_EPS = 1e-4


def compute_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: str = "none") -> torch.Tensor:
    """Each rollout's reward minus its group's mean (``rewards`` 1-D, contiguous groups of ``group_size``).

    ``scale_rewards`` divides by nothing (``"none"``: verifiers, prime-rl), the group's std or the batch's std
    (``"group"`` / ``"batch"``: TRL), plus 1e-4; stds are Bessel-corrected, as ``torch.std`` and TRL.
    """
    if not isinstance(rewards, torch.Tensor):
        raise ValueError(f"rewards must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D [num_rollouts], got shape {tuple(rewards.shape)}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if rewards.numel() == 0 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"rewards has {rewards.numel()} entries, not a positive multiple of group_size={group_size}; "
            "pass whole groups of rollouts"
        )
    if scale_rewards not in SCALE_REWARDS_CHOICES:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS_CHOICES}, got {scale_rewards!r}")

    if not rewards.is_floating_point():
        rewards = rewards.to(torch.float32)
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf; make the reward functions return finite numbers")

    grouped = rewards.view(-1, group_size)
    advantages = grouped - grouped.mean(dim=1, keepdim=True)

    if scale_rewards == "group":
        if group_size < 2:
            raise ValueError("scale_rewards='group' needs group_size >= 2 (a std of one reward is undefined)")
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + STD_EPS)
    elif scale_rewards == "batch":
        if rewards.numel() < 2:
            raise ValueError("scale_rewards='batch' needs at least 2 rewards (a std of one reward is undefined)")
        advantages = advantages / (rewards.std() + STD_EPS)

    return advantages.reshape(rewards.shape)


def grpo_advantages(rewards: torch.Tensor, group_size: int, config: GRPOAdvantageConfig,
                    lengths: RolloutLengths | None = None) -> torch.Tensor:
    if config.length_penalty is not None:
        rewards = length_shaped(rewards, group_size, lengths, config.length_penalty)
    return compute_advantages(rewards, group_size, config.scale_rewards)


def rloo_advantages(rewards: torch.Tensor, group_size: int, config: RLOOAdvantageConfig) -> torch.Tensor:
    if isinstance(group_size, int) and not isinstance(group_size, bool) and group_size < 2:
        raise ValueError(f"advantage.type='rloo' needs group_size >= 2 (got {group_size}): the leave-one-out "
                         "baseline of a rollout is the mean of the others in its group")
    return compute_advantages(rewards, group_size, "none") * (group_size / (group_size - 1))  # leave-one-out


def max_rl_advantages(rewards: torch.Tensor, group_size: int, config: MaxRLAdvantageConfig) -> torch.Tensor:
    centred = compute_advantages(rewards, group_size, "none")  # checks shape and values: r - mean(r)
    mean = rewards.float().view(-1, group_size).mean(dim=1, keepdim=True)
    scaled = centred.view(-1, group_size) / mean.clamp(min=torch.finfo(torch.float32).tiny)
    return torch.where(mean > 0, scaled, torch.zeros_like(scaled)).view(-1)


def rae_advantages(rewards: torch.Tensor, group_size: int, config: RAEAdvantageConfig, *, agents: list[str],
                   baselines: dict[str, float]) -> torch.Tensor:
    """Each rollout's reward minus its agent's moving baseline, in order, each scored before its own reward moves
    the baseline (prime-rl's order). ``baselines`` (agent -> value, 0 at first) is the run's and is updated in place:
    the one estimator whose result depends on the steps before."""
    compute_advantages(rewards, group_size)  # checks shape and values
    out = []
    for reward, agent in zip(rewards.tolist(), agents, strict=True):
        baseline = baselines.get(agent, 0.0)
        out.append(reward - baseline)
        baselines[agent] = config.decay * baseline + (1.0 - config.decay) * reward
    return torch.tensor(out, dtype=torch.float32)


def advantages_for(rewards: torch.Tensor, group_size: int, estimator: tuple[Any, Any],
                   kept: list[bool] | None = None, lengths: RolloutLengths | None = None,
                   agents: list[str] | None = None, baselines: dict[str, float] | None = None) -> torch.Tensor:
    """The advantages of a step's ``rewards`` under ``estimator``, the run's ``(AdvantageSpec, config)``. A rollout
    with ``kept`` False (dropped by its env) gets 0 and is left out of its group's baseline (too few kept: all 0);
    ``lengths`` feed grpo's length penalty; ``agents`` and the run's ``baselines``, rae's."""

    spec, config = estimator

    def run(r: torch.Tensor, g: int, idx: torch.Tensor | None = None) -> torch.Tensor:
        extra: dict[str, Any] = {}
        if spec.uses_lengths:
            extra["lengths"] = lengths if lengths is None or idx is None else lengths.take(idx)
        if spec.uses_agents:
            extra["agents"] = agents if idx is None else [agents[i] for i in idx.tolist()]  # type: ignore[index]
            extra["baselines"] = {} if baselines is None else baselines
        return spec.fn(r, g, config, **extra)

    if kept is None or all(kept):
        return run(rewards, group_size)
    out = torch.zeros_like(rewards, dtype=torch.float32)
    keep = torch.tensor(kept, dtype=torch.bool)
    for start in range(0, len(rewards), group_size):
        idx = torch.arange(start, min(start + group_size, len(rewards)))[keep[start:start + group_size]]
        if len(idx) >= max(spec.min_group_size, 1):
            out[idx] = run(rewards[idx], len(idx), idx).float()
    return out
