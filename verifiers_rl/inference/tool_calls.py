"""Hermes/Qwen tool-call parsing: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` → OpenAI tool calls."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

TOOL_CALL_START = "<tool_call>"

# A block may be unclosed when generation was cut at max_tokens or a stop string: take the rest of the text.
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


@dataclass
class ParsedToolCalls:
    content: str | None
    tool_calls: list[dict] = field(default_factory=list)


def _to_call(raw: str) -> dict | None:
    try:
        obj = json.loads(raw.strip())
    except ValueError:  # json.JSONDecodeError included
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, str):
        args = json.dumps({} if args is None else args, ensure_ascii=False)
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": args},
    }


def parse_hermes_tool_calls(text: str) -> ParsedToolCalls:
    """Split `text` into content and OpenAI-shaped tool calls.

    Like vLLM's hermes parser, a block that isn't valid JSON with a `name` makes the whole text plain content
    (no tool calls), so a malformed call is visible to the reward and never half-executed. Content is the text
    outside the blocks, stripped, or None when empty.
    """
    if TOOL_CALL_START not in text:
        return ParsedToolCalls(content=text, tool_calls=[])
    calls = []
    for m in _BLOCK.finditer(text):
        call = _to_call(m.group(1))
        if call is None:
            return ParsedToolCalls(content=text, tool_calls=[])
        calls.append(call)
    rest = _BLOCK.sub("", text).strip()
    return ParsedToolCalls(content=rest or None, tool_calls=calls)
