"""A teacher's scored rollouts → training samples for ``training_mode = "sft"``.

Messages are rendered with the POLICY's chat template, so any teacher works (another tokenizer, a hosted API without
token ids); loss tokens are the span each assistant turn adds to the rendering before it.
"""


from __future__ import annotations

from typing import Any

from verifiers_rl.trainer.batching import Sample, drop_reason
from verifiers_rl.rewards import reward_of


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict] | None, gen: bool = False) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True, add_generation_prompt=gen)
    if hasattr(out, "keys"):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return list(out)


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


def rollout_tokens(state: dict[str, Any], tokenizer: Any, tools: list[dict] | None = None
                   ) -> tuple[list[int], list[int], int]:
    """(input_ids, loss_mask, prompt_len) of one rollout rendered with ``tokenizer``'s chat template."""
    prompt = _messages(state.get("prompt"))
    completion = _messages(state.get("completion"))
    messages = prompt + completion
    ids = _render(tokenizer, messages, tools)
    mask = [0] * len(ids)
    for i in range(len(prompt), len(messages)):
        if messages[i].get("role") != "assistant":
            continue
        start = len(_render(tokenizer, messages[:i], tools, gen=True))
        end = len(_render(tokenizer, messages[: i + 1], tools))
        for j in range(start, min(end, len(ids))):
            mask[j] = 1
    prompt_len = len(_render(tokenizer, prompt, tools, gen=True))
    return ids, mask, min(prompt_len, len(ids))


def teacher_samples(states: list[dict[str, Any]], tokenizer: Any, *, max_seq_len: int,
                    max_prompt_len: int | None = None, min_reward: float | None = None,
                    tools: Any = None) -> list[Sample]:
    """One ``Sample`` per teacher rollout (no sampling log-probs or advantages: the sft loss reads neither)."""
    schemas = _tool_schemas(tools)
    samples: list[Sample] = []
    for i, state in enumerate(states):
        ids, mask, prompt_len = rollout_tokens(state, tokenizer, schemas)
        reward = reward_of(state)
        drop = (drop_reason(state, max_prompt_len, prompt_len=prompt_len) is not None  # its prompt re-rendered here
                or (min_reward is not None and reward < min_reward))
        ids, mask = ids[:max_seq_len], ([0] * len(mask) if drop else mask)[:max_seq_len]
        samples.append(Sample(ids, mask, [0.0] * len(ids), 0.0, reward, i, [0] * len(ids), min(prompt_len, len(ids))))
    return samples
