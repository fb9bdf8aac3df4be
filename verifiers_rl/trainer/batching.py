"""Scored rollouts → training samples → padded micro-batches.

A rollout becomes one sample: its turns stitched into one token sequence (see `turn_tokens.rollout_tokens`)
where only the model's own tokens carry loss. When a chat template rewrites history so the turns
cannot be stitched, each turn becomes its own sample instead (verifiers' original behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from verifiers_rl.envs.turn_tokens import step_tokens
from verifiers_rl.rewards import is_dropped, reward_of


@dataclass
class Sample:
    input_ids: list[int]
    loss_mask: list[int]
    sampling_logprobs: list[float]
    advantage: float
    reward: float
    rollout_index: int
    env_mask: list[int] = field(default_factory=list)  # 1 on environment tokens between turns (for export)
    prompt_len: int = 0  # leading tokens that are the rollout's (first) prompt: shared by its group


def _turn_samples(state: dict[str, Any]) -> list[tuple[list[int], list[int], list[float], list[int], int]]:
    out = []
    for t in map(step_tokens, state.get("trajectory") or []):
        if t is None:
            continue
        p, c = t.prompt_ids, t.completion_ids
        out.append((p + c, [0] * len(p) + [int(bool(m)) for m in t.completion_mask],
                    [0.0] * len(p) + t.completion_logprobs, [0] * (len(p) + len(c)), len(p)))
    return out


def prompt_length(state: dict[str, Any]) -> int:
    """Tokens of the rollout's first prompt (0 when the server returned no token ids)."""
    turns = state.get("trajectory") or []
    first = step_tokens(turns[0]) if turns else None
    return len(first.prompt_ids) if first is not None else 0


def drop_reason(state: dict[str, Any], max_prompt_len: int | None = None, mask_truncated_completions: bool = False,
                prompt_len: int | None = None) -> str | None:
    """Why a rollout keeps its place but carries no loss: "dropped" (its environment dropped it), "prompt_too_long"
    (its first prompt, or `prompt_len` when given, over `max_prompt_len`), "errored", "truncated" (with
    `mask_truncated_completions`); None when it trains.
    The one rule: build_samples masks these, the empty-step watch names them, the `prompt_too_long` metric counts."""
    if is_dropped(state):
        return "dropped"
    n_prompt = prompt_length(state) if prompt_len is None else prompt_len
    if max_prompt_len is not None and n_prompt > max_prompt_len:
        return "prompt_too_long"
    if state.get("error"):
        return "errored"
    if mask_truncated_completions and state.get("is_truncated"):
        return "truncated"
    return None


def build_samples(states: list[dict[str, Any]], advantages: list[float], *, max_seq_len: int,
                  mask_env_responses: bool = True, mask_truncated_completions: bool = False,
                  max_prompt_len: int | None = None, filter_zero_advantages: bool = False) -> list[Sample]:
    """One `Sample` per rollout (or per turn when turns can't be stitched); those with a `drop_reason` (and, with
    `filter_zero_advantages`, those whose advantage is 0) keep their place but carry no loss."""

    samples: list[Sample] = []
    for i, (state, adv) in enumerate(zip(states, advantages)):
        tokens = state.get("tokens")
        if tokens is not None:
            n_prompt = tokens["num_prompt_tokens"]
            model_mask = tokens["model_mask"]
            env_mask = [int(j >= n_prompt and m == 0) for j, m in enumerate(model_mask)]
            loss_mask = list(model_mask) if mask_env_responses else [max(m, e) for m, e in zip(model_mask, env_mask)]
            parts = [(list(tokens["input_ids"]), loss_mask, list(tokens["logprobs"]), env_mask, n_prompt)]
        else:
            parts = _turn_samples(state)
        drop = drop_reason(state, max_prompt_len, mask_truncated_completions) is not None or (
            filter_zero_advantages and adv == 0.0)
        for ids, mask, lps, env, n_prompt in parts:
            ids, mask, lps, env = ids[:max_seq_len], mask[:max_seq_len], lps[:max_seq_len], env[:max_seq_len]
            if drop:
                mask = [0] * len(mask)
            samples.append(Sample(ids, mask, lps, float(adv), reward_of(state), i, env,
                                  min(n_prompt, len(ids))))
    return samples


@dataclass
class MicroBatch:
    input_ids: torch.Tensor          # [B, T] right-padded
    attention_mask: torch.Tensor     # [B, T]
    loss_mask: torch.Tensor          # [B, T] bool
    env_mask: torch.Tensor           # [B, T] bool: env tokens (their sampling logprob is replaced by the trainer's)
    sampling_logprobs: torch.Tensor  # [B, T]
    advantages: torch.Tensor         # [B]
    samples: list[Sample]


def collate(samples: list[Sample], pad_id: int, device: torch.device | str = "cpu") -> MicroBatch:
    width = max(len(s.input_ids) for s in samples)
    b = len(samples)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    loss = torch.zeros((b, width), dtype=torch.bool)
    env = torch.zeros((b, width), dtype=torch.bool)
    lps = torch.zeros((b, width), dtype=torch.float32)
    for r, s in enumerate(samples):
        n = len(s.input_ids)
        ids[r, :n] = torch.tensor(s.input_ids)
        attn[r, :n] = 1
        loss[r, :n] = torch.tensor(s.loss_mask, dtype=torch.bool)
        if s.env_mask:
            env[r, :n] = torch.tensor(s.env_mask, dtype=torch.bool)
        lps[r, :n] = torch.tensor(s.sampling_logprobs, dtype=torch.float32)
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return MicroBatch(ids.to(device), attn.to(device), loss.to(device), env.to(device), lps.to(device),
                      adv.to(device), samples)


def split_micro_batches(samples: list[Sample], micro_batch_size: int) -> list[list[Sample]]:
    # Sort by length so each micro-batch pads little, keeping rollouts of one prompt together (their prompt is
    # computed once: `prefix_packing`); order does not change the step's gradient.
    groups: dict[tuple, list[Sample]] = {}
    for s in samples:
        groups.setdefault(tuple(s.input_ids[:s.prompt_len]) or (id(s),), []).append(s)
    by_group = sorted(groups.values(), key=lambda g: max(len(s.input_ids) for s in g))
    ordered = [s for g in by_group for s in sorted(g, key=lambda s: len(s.input_ids))]
    return [ordered[i:i + micro_batch_size] for i in range(0, len(ordered), micro_batch_size)]
