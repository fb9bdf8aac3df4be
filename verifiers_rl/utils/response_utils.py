"""From a model `Response` to what a trajectory step records: the assistant message and the tokens."""

from __future__ import annotations

import dataclasses
from typing import Any

from verifiers_rl.types import AssistantMessage, Messages, Response, TrajectoryStepTokens


async def parse_response_message(response: Response) -> Messages:
    msg = response.message
    return [AssistantMessage(role="assistant", content=msg.get("content"),
                             reasoning_content=msg.get("reasoning_content"),
                             thinking_blocks=msg.get("thinking_blocks"), tool_calls=msg.get("tool_calls"))]


async def parse_response_tokens(response: Response | None,
                                max_seq_len: int | None = None) -> TrajectoryStepTokens | None:
    """The step's token record, cut to `max_seq_len` (an overlong prompt keeps no completion)."""
    tokens = None if response is None else response.message.get("tokens")
    if tokens is None:
        return None
    p_ids, p_mask = list(tokens["prompt_ids"]), list(tokens["prompt_mask"])
    c_ids, c_mask = list(tokens["completion_ids"]), list(tokens["completion_mask"])
    c_lps, experts = list(tokens["completion_logprobs"]), tokens.get("routed_experts")
    overlong = truncated = False
    if max_seq_len is not None:
        room = max_seq_len - len(p_ids)
        if room < 0:
            overlong = truncated = True
            p_ids, p_mask = p_ids[:max_seq_len], p_mask[:max_seq_len]
            c_ids, c_mask, c_lps = [], [], []
            experts = [] if experts is not None else None
        elif len(c_ids) > room:
            truncated = True
            c_ids, c_mask, c_lps = c_ids[:room], c_mask[:room], c_lps[:room]
            experts = None if experts is None else list(experts[:room])
    out = TrajectoryStepTokens(prompt_ids=p_ids, prompt_mask=p_mask, completion_ids=c_ids, completion_mask=c_mask,
                               completion_logprobs=c_lps, overlong_prompt=overlong, is_truncated=truncated,
                               routed_experts=experts)
    attribution = tokens.get("prompt_attribution")
    if attribution is not None:  # verifiers 0.3: moved onto the step, as plain data, cut with the prompt
        out["prompt_attribution"] = _attribution_data(attribution, len(p_ids) if overlong else None)  # type: ignore
        tokens["prompt_attribution"] = None
    return out


# A renderer's prompt attribution (`renderers.RenderedTokens`): these fields have one entry per prompt token.
_PER_TOKEN = ("token_ids", "message_indices", "sampled_mask", "is_content")


def _attribution_data(attribution: Any, prompt_len: int | None) -> Any:
    """The attribution as a dict (its multi-modal data left out: the step holds that), per-token fields cut to
    `prompt_len` when the prompt was."""
    if not dataclasses.is_dataclass(attribution):
        return attribution
    data = {f.name: getattr(attribution, f.name) for f in dataclasses.fields(attribution)}
    if "multi_modal_data" in data:
        data["multi_modal_data"] = None
    if prompt_len is not None:
        data.update({k: list(data[k][:prompt_len]) for k in _PER_TOKEN if isinstance(data.get(k), list)})
    return dataclasses.asdict(dataclasses.replace(attribution, **data))  # type: ignore[type-var]


async def parse_response_messages(response: Any, message_type: str = "chat") -> Messages:
    """Older verifiers' name: the completion messages of a model response — a `vf.Response`, or the raw OpenAI
    chat completion (an assistant message) / text completion (the text) that older environment code holds."""
    if isinstance(response, Response):
        return await parse_response_message(response)
    choices = getattr(response, "choices", None) or []
    if message_type != "chat":
        return (choices[0].text or "") if choices else ""  # type: ignore[return-value]
    msg = choices[0].message if choices else None
    out = AssistantMessage(content=getattr(msg, "content", None) or "")
    calls = getattr(msg, "tool_calls", None)
    if calls:
        out["tool_calls"] = [tc.model_dump() if hasattr(tc, "model_dump") else tc for tc in calls]
        out = AssistantMessage(out)  # nested calls become ToolCall records
    return [out]
