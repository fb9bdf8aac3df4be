"""Rubric: weighted reward functions that score rollouts (verifiers 0.1.11 semantics; weight 0 makes a metric).

A reward function declares the keyword arguments it wants; one declaring a plural (`completions`, `states`, ...) or
annotated `-> list` is a group function. Beyond verifiers: a function that raises (or returns NaN / inf) scores 0 and is
counted (`error_counts`, `state["reward_errors"]`); a `RubricSetupError` stops the run instead of scoring zeros.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Callable

from verifiers_rl.decorators import call_marked, marked_methods, signature_of
from verifiers_rl.parsers.parser import Parser
from verifiers_rl.utils.async_utils import maybe_await, run_sync

# group argument -> the per-rollout field it lists (example_ids is ours; verifiers passes no ids)
GROUP_ARGS = {"prompts": "prompt", "completions": "completion", "answers": "answer", "states": "state",
              "tasks": "task", "infos": "info", "example_ids": "example_id"}


# the row fields offered by their own names; the row's OTHER columns are offered too (verifiers 0.3's TASK_INPUT_FIELDS)
ROW_FIELDS = frozenset({"prompt", "answer", "info", "example_id"})


def row_columns(state: Any) -> dict[str, Any]:
    """The dataset row's other columns by name, as verifiers 0.3 offers them to reward functions and rubric cleanup
    handlers (`def f(completion, difficulty)` gets the row's `difficulty`); the named objects win over a column."""
    row = state.get("input") if isinstance(state, Mapping) else None
    return {k: v for k, v in row.items() if k not in ROW_FIELDS} if isinstance(row, Mapping) else {}


class RubricSetupError(RuntimeError):
    """Raised by a reward function when the rubric is misconfigured; propagates instead of scoring 0."""


def func_name(func: Callable) -> str:
    """The metric name of a reward function: its `__name__` (a partial's underlying name, else its type)."""
    name = getattr(func, "__name__", None)
    if name is None and isinstance(func, functools.partial):
        return func_name(func.func)
    return name if isinstance(name, str) else type(func).__name__


def is_group_func(func: Callable) -> bool:
    """Group-level when it declares a plural argument or is annotated `-> list` (as in verifiers)."""
    sig = signature_of(func)
    if sig is None:
        return False
    return bool(set(sig.parameters) & set(GROUP_ARGS)) or sig.return_annotation is list


def _select_kwargs(func: Callable, pool: dict[str, Any]) -> dict[str, Any]:
    """All of `pool` for a function taking **kwargs, else only the names it declares."""
    sig = signature_of(func)
    if sig is None or any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return pool
    return {k: v for k, v in pool.items() if k in sig.parameters}


def _finite(score: Any) -> float:
    """A score as a float. NaN / inf raise here, so a function returning one is scored 0 and counted like a raising
    one, instead of reaching the advantages (which refuse it and would end the run)."""
    value = float(score)
    if not math.isfinite(value):
        raise ValueError(f"returned {value}, not a finite number")
    return value


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class Rubric:
    def __init__(self, funcs: list[Callable] | None = None, weights: list[float] | None = None,
                 parser: Parser | None = None):
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")
        self.funcs: list[Callable] = list(funcs or [])
        if not weights:
            self.weights: list[float] = [1.0] * len(self.funcs)
        elif len(weights) != len(self.funcs):
            raise ValueError(f"Number of weights ({len(weights)}) must match number of functions "
                             f"({len(self.funcs)}): give one weight per reward function")
        else:
            self.weights = [float(w) for w in weights]
        self.parser = parser or Parser()
        self.class_objects: dict[str, Any] = {"parser": self.parser}
        self.error_counts: Counter[str] = Counter()
        self._cleanup_handlers = marked_methods(self, "cleanup")
        self._teardown_handlers = marked_methods(self, "teardown")

    # --- building ----------------------------------------------------------------------------------
    def add_reward_func(self, func: Callable, weight: float = 1.0) -> None:
        self.funcs.append(func)
        self.weights.append(float(weight))

    def add_metric(self, func: Callable, weight: float = 0.0) -> None:
        self.add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        self.class_objects[name] = obj
        if name == "parser":  # keep `rubric.parser` the parser the functions receive
            self.parser = obj

    def add_cleanup_handler(self, handler: Callable) -> None:
        """One more cleanup handler (kept in priority order, as the marked ones are)."""
        self._cleanup_handlers.append(handler)
        self._cleanup_handlers.sort(key=lambda h: (-getattr(h, "cleanup_priority", 0), func_name(h)))

    async def cleanup(self, state: Any) -> None:
        """Run the rubric's cleanup handlers on a scored rollout."""
        if not self._cleanup_handlers:  # the usual case: no per-rollout reads of the state
            return
        objects = {**row_columns(state), "prompt": state.get("prompt"), "completion": state.get("completion"),
                   "answer": state.get("answer", ""), "info": state.get("info", {}), "task": state.get("task"),
                   **self.class_objects}
        for handler in self._cleanup_handlers:
            await call_marked(handler, state, **objects)

    async def teardown(self) -> None:
        """Run the rubric's teardown handlers."""
        for handler in self._teardown_handlers:
            await handler()

    @property
    def has_group_rewards(self) -> bool:
        return bool(self._get_group_reward_funcs())

    @property
    def has_advantages(self) -> bool:
        return False

    # --- introspection (public names are ours; the underscored ones are verifiers') -----------------
    def get_reward_func_names(self) -> list[str]:
        """One name per reward function, in order; these are the keys of `state["metrics"]`."""
        return self._get_reward_func_names()

    def get_reward_funcs(self) -> list[Callable]:
        return self._get_reward_funcs()

    def get_reward_weights(self) -> list[float]:
        return self._get_reward_weights()

    def _get_reward_func_names(self) -> list[str]:
        return [func_name(f) for f in self.funcs]

    def _get_reward_funcs(self) -> list[Callable]:
        return list(self.funcs)

    def _get_reward_weights(self) -> list[float]:
        return self.weights

    def _is_group_func(self, func: Callable) -> bool:
        return is_group_func(func)

    def _get_individual_reward_funcs(self) -> list[Callable]:
        return [f for f in self.funcs if not is_group_func(f)]

    def _get_individual_reward_weights(self) -> list[float]:
        return [w for f, w in zip(self.funcs, self.weights) if not is_group_func(f)]

    def _get_group_reward_funcs(self) -> list[Callable]:
        return [f for f in self.funcs if is_group_func(f)]

    def _get_group_reward_weights(self) -> list[float]:
        return [w for f, w in zip(self.funcs, self.weights) if is_group_func(f)]

    # --- calling ------------------------------------------------------------------------------------
    def _record_error(self, name: str, err: Exception, states: list[Any]) -> None:
        if isinstance(err, RubricSetupError):
            raise err
        self.error_counts[name] += len(states)
        self.logger.warning("reward function %s failed for %d rollout(s): %s", name, len(states), _error_text(err))
        for s in states:
            errors = s.get("reward_errors")
            if not isinstance(errors, dict):
                errors = s["reward_errors"] = {}
            errors[name] = _error_text(err)

    async def _call_individual_reward_func(self, func: Callable, state: Any) -> float:
        """Score one rollout with one function; a raising function scores 0 and is counted."""
        pool = {**row_columns(state), "prompt": state.get("prompt"), "completion": state.get("completion"),
                "answer": state.get("answer", ""), "state": state, "task": state.get("task"),
                "info": state.get("info", {}), "example_id": state.get("example_id")}
        pool.update(self.class_objects)  # class objects win, as in verifiers
        try:
            return _finite(await maybe_await(func, **_select_kwargs(func, pool)))
        except Exception as e:
            self._record_error(func_name(func), e, [state])
            return 0.0

    async def _call_group_reward_func(self, func: Callable, states: list[Any]) -> list[float]:
        """Score a group with one group function; a raising (or wrong-length) result scores 0s, counted."""
        pool: dict[str, Any] = {plural: [s.get(field) for s in states] for plural, field in GROUP_ARGS.items()}
        pool["answers"] = [s.get("answer", "") for s in states]
        pool["infos"] = [s.get("info", {}) for s in states]
        pool["states"] = states
        pool.update(self.class_objects)
        try:
            scores = [_finite(x) for x in await maybe_await(func, **_select_kwargs(func, pool))]
            if len(scores) != len(states):
                raise ValueError(f"returned {len(scores)} scores for {len(states)} rollouts")
            return scores
        except Exception as e:
            self._record_error(func_name(func), e, states)
            return [0.0] * len(states)

    # --- scoring ------------------------------------------------------------------------------------
    async def score_rollout(self, state: Any) -> None:
        """Score one rollout in place, calling the functions one after another (no group functions)."""
        if self._get_group_reward_funcs():
            raise AssertionError("Rubric.score_rollout cannot run group reward functions "
                                 f"({[func_name(f) for f in self._get_group_reward_funcs()]}); use score_group")
        start = time.time()
        reward, metrics = 0.0, {}
        for func, weight in zip(self.funcs, self.weights):
            score = await self._call_individual_reward_func(func, state)
            metrics[func_name(func)] = score
            reward += score * weight
        state["reward"] = reward
        state["metrics"] = metrics
        add_scoring_time(state, (time.time() - start) * 1000)

    async def score_group(self, states: list[Any]) -> None:
        """Score a group in place, each function across all rollouts concurrently; sets `state["advantage"]` (reward
        minus the group mean) and the steps' unset reward/advantage, as verifiers does."""
        if not states:
            self.logger.warning("No states to score")
            return
        start = time.time()
        n = len(states)
        rewards = [0.0] * n
        columns: dict[str, list[float]] = {}
        for func, weight in zip(self.funcs, self.weights):
            if is_group_func(func):
                scores = await self._call_group_reward_func(func, states)
            else:
                scores = list(await asyncio.gather(*(self._call_individual_reward_func(func, s) for s in states)))
            columns[func_name(func)] = scores  # a repeated name: the later function's score is the metric
            rewards = [r + x * weight for r, x in zip(rewards, scores)]
        mean = sum(rewards) / n
        elapsed_ms = (time.time() - start) * 1000
        for i, state in enumerate(states):
            state["reward"] = rewards[i]
            state["advantage"] = rewards[i] - mean
            _fill_trajectory(state, state["reward"], state["advantage"])
            state["metrics"] = {name: scores[i] for name, scores in columns.items()}
            add_scoring_time(state, elapsed_ms)

    async def dummy_score_rollout(self, state: Any) -> None:
        """Score without calling anything: reward 0, no metrics (for runs that do not score)."""
        state["reward"] = 0.0
        state["metrics"] = {}

    async def dummy_score_group(self, states: list[Any]) -> None:
        for state in states:
            await self.dummy_score_rollout(state)

    def score_group_sync(self, states: list[Any]) -> None:
        """`score_group` from synchronous code (benchmarks, notebooks)."""
        run_sync(self.score_group(states))


def _fill_trajectory(state: Any, reward: float, advantage: float) -> None:
    for step in state.get("trajectory") or []:
        if isinstance(step, dict):
            if step.get("advantage") is None:
                step["advantage"] = advantage
            if step.get("reward") is None:
                step["reward"] = reward


def add_scoring_time(state: Any, ms: float) -> None:
    """`timing.scoring_ms`, added to `timing.total_ms`, when the state carries a timing record."""
    timing = state.get("timing")
    if isinstance(timing, dict):
        timing["scoring_ms"] = ms
        timing["total_ms"] = (timing.get("total_ms") or 0.0) + ms
