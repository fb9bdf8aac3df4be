"""``advantage.length_penalty`` (grpo): prime-rl's linear length penalty, subtracted from each reward before the group
baseline. Per group, each quantity divided by the group's largest:

    shaped = reward - pass_rate * (w_out * output / max(output) + w_in * input / max(input) + w_turns * turns / max(turns))

``input`` counts the tokens the model conditioned on but did not write. Scaled by the group's pass rate (mean
reward), the penalty only trades length against correctness the group has.
"""


from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # torch is imported where tensors are made: vf-rl's own process reads the config above
    import torch


@dataclass
class LengthPenaltyConfig:
    """prime-rl's ``LinearLengthPenaltyConfig``: its keys and defaults; 0 turns a term off."""
    num_output_tokens_weight: float = field(default=0.25, metadata={"help": "Weight of the model's tokens."})
    num_input_tokens_weight: float = field(default=0.1, metadata={"help": "Weight of the tokens it read."})
    num_turns_weight: float = field(default=0.1, metadata={"help": "Weight of its turns."})

    def __post_init__(self) -> None:
        for name in ("num_output_tokens_weight", "num_input_tokens_weight", "num_turns_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"advantage.length_penalty.{name}={v!r} must be a finite number >= 0 (prime-rl: "
                                 "0.25 output, 0.1 input, 0.1 turns; 0 turns the term off)")


def length_penalty_config(value: Any) -> LengthPenaltyConfig | None:
    """The penalty from its table (TOML), its config object (a notebook) or None; unknown keys are one line."""
    if value is None or isinstance(value, LengthPenaltyConfig):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"advantage.length_penalty={value!r} must be a table of num_output_tokens_weight, "
                         "num_input_tokens_weight, num_turns_weight (or omitted)")
    table = {k: v for k, v in value.items() if k != "type" or v != "linear"}  # prime-rl's only type
    unknown = sorted(set(table) - {f for f in LengthPenaltyConfig.__dataclass_fields__})
    if unknown:
        raise ValueError(f"advantage.length_penalty.{unknown[0]} is not a key of the length penalty; its keys: "
                         "num_output_tokens_weight, num_input_tokens_weight, num_turns_weight")
    return LengthPenaltyConfig(**table)


class RolloutLengths(NamedTuple):
    """Per rollout (1-D float tensors, in the rewards' order)."""
    output: torch.Tensor
    input: torch.Tensor
    turns: torch.Tensor

    def take(self, idx: torch.Tensor) -> RolloutLengths:
        return RolloutLengths(self.output[idx], self.input[idx], self.turns[idx])


def rollout_lengths(states: list[dict[str, Any]]) -> RolloutLengths:
    """Each rollout's model tokens, the other tokens of its context (the last turn's prompt and completion less the
    model's tokens; at least the first prompt) and its turns; 0 where the server returned no token ids. Lengths
    only, every step: no token list is copied."""
    from verifiers_rl.envs.turn_tokens import token_record, turn_count
    from verifiers_rl.evaluation import completion_length

    out, inp, turns = [], [], []
    for s in states:
        steps = [t for t in map(token_record, s.get("trajectory") or []) if t is not None]
        n_out = completion_length(s)
        total = len(steps[-1]["prompt_ids"]) + len(steps[-1]["completion_ids"]) if steps else 0
        out.append(n_out)
        inp.append(max(total - n_out, len(steps[0]["prompt_ids"]) if steps else 0))
        turns.append(turn_count(s))
    import torch

    return RolloutLengths(*(torch.tensor(x, dtype=torch.float32) for x in (out, inp, turns)))


def length_shaped(rewards: torch.Tensor, group_size: int, lengths: RolloutLengths | None,
                  penalty: LengthPenaltyConfig) -> torch.Tensor:
    """The rewards less each group's length penalty (module docstring)."""
    if lengths is None:
        raise ValueError("advantage.length_penalty needs each rollout's lengths (advantages_for(..., lengths=))")
    r = rewards.float().view(-1, group_size)

    def share(x: torch.Tensor) -> torch.Tensor:
        x = x.float().view(-1, group_size)
        return x / x.max(dim=1, keepdim=True).values.clamp(min=1)

    frac = (penalty.num_output_tokens_weight * share(lengths.output)
            + penalty.num_input_tokens_weight * share(lengths.input)
            + penalty.num_turns_weight * share(lengths.turns))
    return (r - r.mean(dim=1, keepdim=True) * frac).view(-1)
