"""Messages in and out of a rollout: raw dicts (datasets, environment code) become this runtime's message
records (dicts with attribute access, see `types`), so both `m["content"]` and `m.content` work everywhere."""

from __future__ import annotations

import json
from typing import Any

from verifiers_rl.record import Record, get_field
from verifiers_rl.types import (MESSAGE_CLASSES, ImageUrlContentPart, InputAudioContentPart, Messages, TextContentPart,
                                TextMessage)

_PART_CLASSES = {"text": TextContentPart, "image_url": ImageUrlContentPart, "input_audio": InputAudioContentPart}


def from_raw_content_part(part: dict[str, Any]) -> Any:
    cls = _PART_CLASSES.get(part.get("type"))  # type: ignore[arg-type]
    if cls is None or isinstance(part, cls):
        return part
    try:
        return cls(part)
    except TypeError:  # a part missing its required field stays as given
        return part


def _flat_tool_call(tc: Any) -> Any:
    """OpenAI's nested `{"function": {"name", "arguments"}}` form → `{"id", "name", "arguments"}`."""
    if not isinstance(tc, dict) or ("name" in tc and "arguments" in tc):
        return tc
    fn = tc.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        return tc
    args = fn.get("arguments")
    if not isinstance(args, str):
        try:
            args = json.dumps(args if args is not None else {})
        except (TypeError, ValueError):
            args = str(args)
    call_id = tc.get("id")
    return {"id": call_id if isinstance(call_id, str) else fn["name"], "name": fn["name"], "arguments": args}


def from_raw_message(message: dict) -> Any:
    """A raw message dict as the record class of its role (ValueError for an unknown role)."""
    data = dict(message)
    if isinstance(data.get("content"), list):
        data["content"] = [from_raw_content_part(p) if isinstance(p, dict) else p for p in data["content"]]
    if data.get("role") == "assistant" and isinstance(data.get("tool_calls"), list):
        data["tool_calls"] = [_flat_tool_call(tc) for tc in data["tool_calls"]]
    cls = MESSAGE_CLASSES.get(data.get("role"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"Unknown role: {data.get('role')}")
    return data if type(message) is cls else cls(data)


def normalize_messages(value: Messages | str, *, field_name: str = "messages") -> Messages:
    """A prompt/completion as a list of message records; a plain string is one text message."""
    if isinstance(value, str):
        return [TextMessage(content=value)]
    out: Messages = []
    for m in value:
        if isinstance(m, Record):
            out.append(m)
        elif isinstance(m, dict):
            out.append(from_raw_message(m))
        elif hasattr(m, "role") and hasattr(m, "content"):
            out.append(m)
        else:
            raise TypeError(f"Invalid {field_name} item type: {type(m).__name__}. Expected vf.Message-like objects.")
    return out


def get_messages(messages: Messages, role: str | None = None) -> Messages:
    """The messages as records, only those of `role` when given (verifiers 0.3)."""
    records = normalize_messages(messages)
    return records if role is None else [m for m in records if get_field(m, "role") == role]


def concat_messages(messages_list: list[Messages]) -> Messages:
    return [m for messages in messages_list for m in messages]


def sanitize_tool_calls(messages: Messages) -> Messages:
    """Messages with each tool call as a JSON string (for datasets/JSONL that can't hold nested objects)."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        calls = get_field(m, "tool_calls")
        if not calls:
            out.append(m)
            continue
        encoded = []
        for tc in calls:
            if isinstance(tc, str):
                encoded.append(json.dumps(json.loads(tc)))
            else:  # a plain dict as it is; a record or a pydantic model dumped
                plain = isinstance(tc, dict) and not isinstance(tc, Record)
                encoded.append(json.dumps(tc if plain else tc.model_dump(exclude_none=True)))
        new = {"role": get_field(m, "role"), "content": get_field(m, "content") or "", "tool_calls": encoded}
        if isinstance(get_field(m, "reasoning_content"), str):
            new["reasoning_content"] = get_field(m, "reasoning_content")
        out.append(new)
    return out


def message_text(m: Any) -> str:
    """A message's text (content parts joined)."""
    content = get_field(m, "content")
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(str(get_field(p, "text") or "") for p in content if get_field(p, "type") in ("text", None))
    return str(content)


def messages_to_printable(messages: Any) -> Any:
    """Plain JSON-ready dicts (records dumped, tool calls in OpenAI form kept readable)."""
    if isinstance(messages, str):
        return messages
    return [m.model_dump(exclude_none=True) if isinstance(m, Record) else m for m in messages or []]
