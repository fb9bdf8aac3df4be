"""RubricGroup: several rubrics scoring the same rollouts (verifiers 0.1.11 semantics).

Each member scores with its own functions and parser; rewards and same-named metrics add up. Functions added to the
group go to its FIRST member, so they are scored; the group's own `funcs` stay empty.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable

from verifiers_rl.rewards import reward_of
from verifiers_rl.rubrics.rubric import Rubric, add_scoring_time

_EMPTY = "RubricGroup must have at least one rubric"


class RubricGroup(Rubric):
    def __init__(self, rubrics: list[Rubric], **kwargs: Any):
        if not rubrics:
            raise ValueError(_EMPTY)
        kwargs.setdefault("parser", rubrics[0].parser)  # ours: the group reports its first member's parser
        super().__init__(**kwargs)
        self.rubrics = rubrics
        self.logger.debug("RubricGroup of %d rubrics", len(rubrics))

    # --- introspection: the members' functions, in order ---------------------------------------------
    def _get_reward_func_names(self) -> list[str]:
        return [name for r in self.rubrics for name in r._get_reward_func_names()]

    def _get_reward_funcs(self) -> list[Callable]:
        return [f for r in self.rubrics for f in r._get_reward_funcs()]

    def _get_reward_weights(self) -> list[float]:
        return [w for r in self.rubrics for w in r._get_reward_weights()]

    @property
    def error_counts(self) -> Counter[str]:  # type: ignore[override]
        """The members' failure counts, summed by function name."""
        total: Counter[str] = Counter()
        for r in getattr(self, "rubrics", []):
            total.update(r.error_counts)
        return total

    @error_counts.setter
    def error_counts(self, value: Counter[str]) -> None:
        pass  # the base constructor assigns one; the members own the counts

    @property
    def has_group_rewards(self) -> bool:
        return any(r.has_group_rewards for r in self.rubrics)

    @property
    def has_advantages(self) -> bool:
        return any(r.has_advantages for r in self.rubrics)

    async def cleanup(self, state: Any) -> None:
        """The group's own cleanup handlers, then each member's."""
        await super().cleanup(state)
        for rubric in self.rubrics:
            await rubric.cleanup(state)

    async def teardown(self) -> None:
        await super().teardown()
        for rubric in self.rubrics:
            await rubric.teardown()

    # --- building: delegated to the first member -----------------------------------------------------
    def _first(self, what: str) -> Rubric:
        if not getattr(self, "rubrics", None):
            raise AssertionError(_EMPTY)
        self.logger.warning("Adding %s to the first rubric in the group.", what)
        return self.rubrics[0]

    def add_reward_func(self, func: Callable, weight: float = 1.0) -> None:
        self._first("reward function").add_reward_func(func, weight)

    def add_metric(self, func: Callable, weight: float = 0.0) -> None:
        self._first("metric").add_metric(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        self._first("class object").add_class_object(name, obj)

    # --- scoring -------------------------------------------------------------------------------------
    async def score_rollout(self, state: Any) -> None:
        await self._score([state], single=True)

    async def score_group(self, states: list[Any]) -> None:
        await self._score(states, single=False)

    async def _score(self, states: list[Any], single: bool) -> None:
        """Run every member on the states, each from their original reward and metrics, then store the sums."""
        if not states:
            return
        start = time.time()
        n = len(states)
        before = [_snapshot(s) for s in states]
        totals = [0.0] * n
        summed: dict[str, list[float]] = {}
        for rubric in self.rubrics:
            if single:
                await rubric.score_rollout(states[0])
            else:
                await rubric.score_group(states)
            for i, s in enumerate(states):
                totals[i] += reward_of(s)
                for key, value in (s.get("metrics") or {}).items():
                    summed.setdefault(key, [0.0] * n)[i] += value
                _restore(s, before[i])
        elapsed_ms = (time.time() - start) * 1000
        mean = sum(totals) / n
        for i, s in enumerate(states):
            s["reward"] = totals[i]
            if single:  # score_rollout replaces the metrics; score_group adds to those already there
                s["metrics"] = {k: v[i] for k, v in summed.items()}
            elif summed:
                metrics = s.get("metrics")
                if not isinstance(metrics, dict):
                    metrics = s["metrics"] = {}
                metrics.update({k: v[i] for k, v in summed.items()})
            if not single:  # ours: the group's advantage, not the last member's
                s["advantage"] = totals[i] - mean
                _fill_steps(before[i]["unset_steps"], totals[i], s["advantage"])
            add_scoring_time(s, elapsed_ms)


def _snapshot(state: Any) -> dict[str, Any]:
    """What members overwrite: reward, metrics, advantage, timing, and which trajectory steps had no
    reward/advantage yet (members fill those with their own; the group fills them with its totals)."""
    timing = state.get("timing")
    steps = [t for t in (state.get("trajectory") or []) if isinstance(t, dict)]
    return {"reward": state.get("reward", 0.0),
            "metrics": dict(state.get("metrics") or {}),
            "advantage": (state.get("advantage"), "advantage" in state),
            "timing": dict(timing) if isinstance(timing, dict) else None,
            "unset_steps": [(t, t.get("reward") is None, t.get("advantage") is None) for t in steps]}


def _restore(state: Any, snap: dict[str, Any]) -> None:
    state["reward"] = snap["reward"]
    state["metrics"] = dict(snap["metrics"])
    value, present = snap["advantage"]
    if present:
        state["advantage"] = value
    if snap["timing"] is not None:
        state["timing"].clear()
        state["timing"].update(snap["timing"])
    _fill_steps(snap["unset_steps"], None, None)


def _fill_steps(unset: list[tuple[dict, bool, bool]], reward: float | None, advantage: float | None) -> None:
    """Set the reward / advantage of the steps that had none before the members scored."""
    for step, no_reward, no_advantage in unset:
        if no_reward:
            step["reward"] = reward
        if no_advantage:
            step["advantage"] = advantage
