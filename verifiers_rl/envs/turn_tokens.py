"""A rollout's model turns as tokens for training: each trajectory step's `tokens` (the prompt ids the server saw,
the completion ids, logprobs and mask it sampled), stitched by `rollout_tokens` into one sequence."""

from __future__ import annotations

from typing import Any, NamedTuple


class StepTokens(NamedTuple):
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    completion_mask: list[int]


def token_record(step: dict[str, Any]) -> dict[str, Any] | None:
    """One trajectory step's raw `tokens` record (read, not copied), or None when the server returned no token ids."""
    tokens = step.get("tokens")
    if not tokens or tokens.get("prompt_ids") is None or tokens.get("completion_ids") is None:
        return None
    return tokens


def step_tokens(step: dict[str, Any]) -> StepTokens | None:
    """The token record of one trajectory step, or None when the server returned no token ids."""
    tokens = token_record(step)
    if tokens is None:
        return None
    c = list(tokens["completion_ids"])
    lps = list(tokens.get("completion_logprobs") or [0.0] * len(c))
    mask = list(tokens.get("completion_mask") or [1] * len(c))
    return StepTokens(list(tokens["prompt_ids"]), c, lps, mask)


def turn_count(state: dict[str, Any]) -> int:
    """The model's turns in a rollout: one per trajectory step, or a v1 branch's sampled turns (`model_turns`)."""
    return sum(int(step.get("model_turns", 1)) for step in state.get("trajectory") or [])


def turn_split(state: dict[str, Any]) -> tuple[int, int]:
    """(turns stitched into the rollout's one sample, turns trained as samples of their own): the batching
    falls back to one sample per turn when `state["tokens"]` is None (see `rollout_tokens`)."""
    if state.get("tokens") is not None:
        return len(state.get("trajectory") or []), 0
    return 0, sum(1 for t in map(step_tokens, state.get("trajectory") or []) if t is not None)


def rollout_tokens(state: dict[str, Any]) -> dict[str, Any] | None:
    """Stitch a rollout's turns into one token sequence.

    Returns {"input_ids", "model_mask", "logprobs", "num_prompt_tokens"}; only the model's sampled tokens carry
    mask 1 and a logprob. None when tokens were not recorded, or when a later turn's prompt does not start with the
    previous prompt + completion (a chat template that rewrites history): callers then use one sample per turn.
    """
    steps = [step_tokens(s) for s in state.get("trajectory") or []]
    if not steps or any(s is None for s in steps):
        return None
    ids: list[int] = list(steps[0].prompt_ids)
    mask: list[int] = [0] * len(ids)
    lps: list[float] = [0.0] * len(ids)
    num_prompt = len(ids)
    for k, s in enumerate(steps):
        if k > 0:
            if len(s.prompt_ids) < len(ids) or s.prompt_ids[:len(ids)] != ids:
                return None
            env_part = s.prompt_ids[len(ids):]
            ids += env_part
            mask += [0] * len(env_part)
            lps += [0.0] * len(env_part)
        ids += s.completion_ids
        mask += [int(bool(m)) for m in s.completion_mask]
        lps += s.completion_logprobs
    return {"input_ids": ids, "model_mask": mask, "logprobs": lps, "num_prompt_tokens": num_prompt}
