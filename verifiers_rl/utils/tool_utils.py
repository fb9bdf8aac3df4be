"""Tool helpers environment code imports as `verifiers.utils.tool_utils` (the schema: `utils/tool_schema.py`). A
tool's return value that is already a list of chat content parts reaches the model as parts, not as a string."""

from __future__ import annotations

from typing import Any, Callable

from verifiers_rl.types import Tool
from verifiers_rl.utils.tool_schema import function_tool_def

VALID_TOOL_CONTENT_PART_TYPES = frozenset({"text", "image_url"})


def is_valid_tool_content_parts(value: Any) -> bool:
    """True for a list whose every item is a dict with `type` "text" or "image_url" (an empty list too)."""
    return isinstance(value, list) and all(
        isinstance(part, dict) and part.get("type") in VALID_TOOL_CONTENT_PART_TYPES for part in value)


def convert_func_to_tool_def(func: Callable) -> Tool:
    """The provider-agnostic tool definition of `func`: its name, docstring description, parameter schema."""
    return function_tool_def(func)


__all__ = ["VALID_TOOL_CONTENT_PART_TYPES", "convert_func_to_tool_def", "is_valid_tool_content_parts"]
