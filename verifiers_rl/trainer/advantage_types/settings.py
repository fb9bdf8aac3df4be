"""A run's advantage estimator from its settings: ``RLConfig.advantage`` (``[trainer.args.advantage]``: ``type`` and
that estimator's own keys; RLConfig's top-level ``scale_rewards``, a deprecated spelling of
``advantage.scale_rewards``, fills grpo's key with one warning). :func:`advantages_for` is the one place a run's
advantages are computed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.advantage_types import ADVANTAGES, DEFAULT_ADVANTAGE, AdvantageSpec, get_advantage
from verifiers_rl.trainer.advantage_types.length_penalty import RolloutLengths
from verifiers_rl.trainer.typed_table import build_config, built_once, deprecated_keys, keep, store_back, table_of

if TYPE_CHECKING:
    import torch


def advantage_table(advantage: Any) -> dict[str, Any]:
    """``RLConfig.advantage`` as a table: None, a table with ``type``, or an estimator's config object."""
    table = table_of(advantage, lambda: {n: get_advantage(n).config for n in ADVANTAGES})
    if table is not None:
        return table
    raise SettingError("advantage",
                       f"advantage={advantage!r} must be a table with a 'type' key (one of {', '.join(ADVANTAGES)}) "
                       "or an estimator's config object")


def _inputs(c: Any) -> tuple:
    return getattr(c, "advantage", None), [getattr(c, k, None) for k in deprecated_keys("advantage")]


def resolve_advantage(c: Any) -> tuple[AdvantageSpec, Any]:
    """The chosen estimator and its config, built (so checked) from ``c`` (an RLConfig, or anything with its
    fields): once per run, kept for ``c`` (beside it: ``typed_table.built_once``) while its advantage settings
    stay the same."""
    return built_once(c, "_built_advantage", _inputs(c), lambda: _build(c))


def _build(c: Any) -> tuple[AdvantageSpec, Any]:
    table = advantage_table(getattr(c, "advantage", None))
    kind = table.pop("type", None) or DEFAULT_ADVANTAGE  # a name, or an import path
    spec = get_advantage(kind)
    return spec, build_config("advantage", kind, spec.config, table, c, ADVANTAGES,
                              lambda n: get_advantage(n).config)


def check_advantage(c: Any) -> None:
    """Build the run's estimator config once (one line on a bad type, key or value; a group too small for it); a
    config object given as ``c.advantage`` is kept as its table."""
    spec, config = resolve_advantage(c)
    group = getattr(c, "rollouts_per_example", spec.min_group_size)
    if group < spec.min_group_size:
        raise SettingError("advantage",
                           f"advantage.type={spec.name!r} needs rollouts_per_example >= {spec.min_group_size}, got "
                           f"{group}; raise rollouts_per_example or set advantage.type='grpo'")
    store_back(c, "advantage", spec.name, config)
    keep(c, "_built_advantage", _inputs(c), (spec, config))  # the settings as stored back build the same


def advantages_for(rewards: torch.Tensor, group_size: int, args: Any, kept: list[bool] | None = None,
                   lengths: RolloutLengths | None = None) -> torch.Tensor:
    """The advantages of a step's ``rewards`` (contiguous groups of ``group_size``) under ``args``' estimator.
    ``kept`` False marks a rollout its environment dropped: it gets advantage 0 and is left out of its group's
    baseline (the estimator runs on the group's kept rollouts; fewer than it needs: all 0). ``lengths``: each
    rollout's (``rollout_lengths(states)``), for an estimator that uses them (grpo's length penalty)."""
    import torch  # here: the settings above are read by vf-rl's own process, which imports no torch

    spec, config = resolve_advantage(args)

    def run(r: torch.Tensor, g: int, idx: torch.Tensor | None = None) -> torch.Tensor:
        if not spec.uses_lengths:
            return spec.fn(r, g, config)
        return spec.fn(r, g, config, lengths=lengths if lengths is None or idx is None else lengths.take(idx))

    if kept is None or all(kept):
        return run(rewards, group_size)
    out = torch.zeros_like(rewards, dtype=torch.float32)
    keep = torch.tensor(kept, dtype=torch.bool)
    for start in range(0, len(rewards), group_size):
        idx = torch.arange(start, min(start + group_size, len(rewards)))[keep[start:start + group_size]]
        if len(idx) >= max(spec.min_group_size, 1):
            out[idx] = run(rewards[idx], len(idx), idx).float()
    return out
