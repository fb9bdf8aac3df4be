"""Difficulty buffer: keep training on groups that carry signal (constant groups dropped and refilled; too easy or
too hard examples moved to pools drawn back from by fraction: the settings' help). Its state is checkpointed.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, ClassVar

from verifiers_rl.rewards import training_reward
from verifiers_rl.trainer.data_order import DataOrder


@dataclass
class BufferSettings:
    """The difficulty buffer's settings, declared once: ``RLConfig`` has them as fields (a base class of RLFields)."""

    online_difficulty_filtering: bool = field(
        default=False, metadata={"help": "Drop groups whose rewards are all equal (no signal) and refill the batch."})
    filter_zero_advantages: bool = field(
        default=False, metadata={"help": "Train no token of a rollout whose advantage is 0 (no loss, not in the "
                                 "loss's token count; no refill), as prime-rl's filter_zero_advantages."})
    oversampling_factor: float = field(
        default=1.0, metadata={"help": "With online_difficulty_filtering: generate this many times the groups a step "
                               "needs, so the groups left after filtering fill it."})
    easy_threshold: float | None = field(
        default=None, metadata={"help": "Examples whose group mean reward is >= this leave the rotation (easy pool)."})
    hard_threshold: float | None = field(
        default=None, metadata={"help": "Examples whose group mean reward is <= this leave the rotation (hard pool)."})
    easy_fraction: float = field(
        default=0.0, metadata={"help": "Share of each step's examples drawn from the easy pool."})
    hard_fraction: float = field(
        default=0.0, metadata={"help": "Share of each step's examples drawn from the hard pool."})
    # a reward setting, defined here because the buffer filters on the rewards advantages use (rewards.py)
    zero_truncated_completions: bool = field(
        default=False, metadata={"help": "Give completions cut off by max_tokens/max_seq_len a reward of 0."})


@dataclass
class BufferConfig(BufferSettings):
    """The buffer's settings as a run sets them (``RLConfig.buffer_config()``)."""

    max_refills: ClassVar[int] = 8  # generation rounds per step before constant groups are trained on anyway

    @property
    def active(self) -> bool:
        return (self.online_difficulty_filtering or self.oversampling_factor != 1.0
                or self.easy_threshold is not None or self.hard_threshold is not None)


@dataclass
class BufferState:
    cursor: int = 0
    easy: list[int] = field(default_factory=list)
    hard: list[int] = field(default_factory=list)
    filtered_groups: int = 0


def is_constant(group: list[dict[str, Any]], zero_truncated_completions: bool = False) -> bool:
    rewards = [training_reward(s, zero_truncated_completions) for s in group]
    return max(rewards) - min(rewards) < 1e-9


class DifficultyBuffer:
    def __init__(self, order: DataOrder, config: BufferConfig, seed: int):
        self.order, self.config, self.seed = order, config, seed
        self.state = BufferState()

    def _draw(self, n: int, step: int, round_: int) -> list[int]:
        cfg, st = self.config, self.state
        rng = random.Random(self.seed * 7919 + step * 101 + round_)
        picks: list[int] = []
        for pool, frac in ((st.easy, cfg.easy_fraction), (st.hard, cfg.hard_fraction)):
            k = min(len(pool), int(round(frac * n)))
            picks += rng.sample(pool, k) if k else []
        out_of_rotation = set(st.easy) | set(st.hard)
        total_rows = sum(len(r) for r in self.order.env_rows)
        skipped = 0
        while len(picks) < n:
            idx = self.order.at(st.cursor)
            st.cursor += 1
            # When every example is out of rotation, take them anyway rather than loop forever.
            if idx not in out_of_rotation or skipped >= total_rows:
                picks.append(idx)
            else:
                skipped += 1
        return picks

    def _update_pools(self, groups: list[list[dict[str, Any]]], indices: list[int]) -> None:
        cfg, st = self.config, self.state
        for idx, g in zip(indices, groups):
            mean = sum(training_reward(s, cfg.zero_truncated_completions) for s in g) / len(g)
            for pool in (st.easy, st.hard):
                if idx in pool:
                    pool.remove(idx)
            if cfg.easy_threshold is not None and mean >= cfg.easy_threshold:
                st.easy.append(idx)
            elif cfg.hard_threshold is not None and mean <= cfg.hard_threshold:
                st.hard.append(idx)

    async def fill(self, step: int, groups_needed: int,
                   generate: Callable[[list[int]], Awaitable[list[list[dict[str, Any]]]]]
                   ) -> tuple[list[list[dict[str, Any]]], dict[str, float]]:
        """Generate until `groups_needed` groups are kept; returns them and the buffer's metrics."""
        cfg = self.config
        kept: list[list[dict[str, Any]]] = []
        filtered = generated = 0
        spare_constant: list[list[dict[str, Any]]] = []
        for round_ in range(cfg.max_refills):
            missing = groups_needed - len(kept)
            if missing <= 0:
                break
            indices = self._draw(max(missing, math.ceil(missing * cfg.oversampling_factor)), step, round_)
            groups = await generate(indices)
            generated += len(groups)
            self._update_pools(groups, indices)
            for g in groups:
                if cfg.online_difficulty_filtering and is_constant(g, cfg.zero_truncated_completions):
                    filtered += 1
                    spare_constant.append(g)
                else:
                    kept.append(g)
        if len(kept) < groups_needed:  # everything left is constant: train on it (zero advantage) rather than stall
            kept += spare_constant[: groups_needed - len(kept)]
        self.state.filtered_groups += filtered
        metrics = {"buffer/filtered_groups": float(filtered), "buffer/generated_groups": float(generated),
                   "buffer/easy_pool": float(len(self.state.easy)), "buffer/hard_pool": float(len(self.state.hard))}
        return kept[:groups_needed], metrics

    def state_dict(self) -> dict[str, Any]:
        return asdict(self.state)

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.state = BufferState(**d)
