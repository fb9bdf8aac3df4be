"""A teacher's scored rollouts → training samples for ``training_mode = "sft"``.

Messages are rendered with the POLICY's chat template, so any teacher works (another tokenizer, a hosted API without
token ids); loss tokens are the span each assistant turn adds to the rendering before it, found and checked as vf-sft
finds them (chat_masks.py): a template that renders earlier turns differently later trains one sample per turn.
"""


from __future__ import annotations

from typing import Any

from verifiers_rl.chat_masks import NotPrefix, masked, render_ids, split_masks
from verifiers_rl.trainer.batching import Sample, drop_reason
from verifiers_rl.rewards import reward_of


def _messages(value: Any) -> list[dict[str, Any]]:
    from verifiers_rl.clients.openai_chat_completions_client import native_message

    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [native_message(m) for m in value or []]


def _tool_schemas(tools: Any) -> list[dict] | None:
    if not tools:
        return None
    return [{"type": "function", "function": {"name": t["name"], "description": t.get("description") or "",
                                              "parameters": t.get("parameters") or {"type": "object"}}}
            for t in tools]


def rollout_samples(state: dict[str, Any], tokenizer: Any, tools: list[dict] | None = None
                    ) -> tuple[list[tuple[list[int], list[int]]], int]:
    """([(input_ids, loss_mask), ...], prompt_len) of one rollout rendered with ``tokenizer``'s chat template, loss on
    the completion's assistant turns: one sequence, or one per assistant turn when the template renders earlier turns
    differently once later ones follow (chat_masks.py, as vf-sft's rows)."""
    prompt = _messages(state.get("prompt"))
    messages = prompt + _messages(state.get("completion"))
    trained = [i for i in range(len(prompt), len(messages)) if messages[i].get("role") == "assistant"]
    options = {"tools": tools} if tools else {}
    try:
        pairs = [masked(tokenizer, messages, trained, options)]
    except NotPrefix:
        try:
            pairs = split_masks(tokenizer, messages, trained, options)
        except NotPrefix:  # even alone, a turn renders differently after its generation prompt: no span to trust
            ids = render_ids(tokenizer, messages, options=options)
            pairs = [(ids, [0] * len(ids))]
    prompt_len = len(render_ids(tokenizer, prompt, add_generation_prompt=True, options=options))
    return pairs, prompt_len


def rollout_tokens(state: dict[str, Any], tokenizer: Any, tools: list[dict] | None = None
                   ) -> tuple[list[int], list[int], int]:
    """(input_ids, loss_mask, prompt_len) of a rollout that renders as one sequence (`rollout_samples`' first)."""
    pairs, prompt_len = rollout_samples(state, tokenizer, tools)
    ids, mask = pairs[0]
    return ids, mask, min(prompt_len, len(ids))


def teacher_samples(states: list[dict[str, Any]], tokenizer: Any, *, max_seq_len: int,
                    max_prompt_len: int | None = None, min_reward: float | None = None,
                    tools: Any = None) -> list[Sample]:
    """One ``Sample`` per teacher rollout (no sampling log-probs or advantages: the sft loss reads neither). The
    tools a rollout's prompt is rendered with are its own (``state["tool_defs"]``: an example's info, an EnvGroup's
    member), as the teacher was given them; ``tools`` (the env's) for a state without them."""
    samples: list[Sample] = []
    for i, state in enumerate(states):
        own = state.get("tool_defs") if "tool_defs" in state else None
        pairs, prompt_len = rollout_samples(state, tokenizer, _tool_schemas(tools if own is None else own))
        reward = reward_of(state)
        drop = (drop_reason(state, max_prompt_len, prompt_len=prompt_len) is not None  # its prompt re-rendered here
                or (min_reward is not None and reward < min_reward))
        for ids, mask in pairs:  # one, or one per assistant turn (a position-dependent template)
            ids, mask = ids[:max_seq_len], ([0] * len(mask) if drop else mask)[:max_seq_len]
            samples.append(Sample(ids, mask, [0.0] * len(ids), 0.0, reward, i, [0] * len(ids),
                                  min(prompt_len, len(ids))))
    return samples
