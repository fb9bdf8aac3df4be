"""Parser: turns a model's text (or completion messages) into the answer the rubric scores."""

from __future__ import annotations

import logging
from typing import Any, Callable

from verifiers_rl.types import Messages


def identity(text: str) -> str:
    return text


class Parser:
    """Base parser. `parse` applies `extract_fn` (identity by default); `parse_answer` parses the
    last assistant message's text, or the completion itself when it is a plain string."""

    def __init__(self, extract_fn: Callable[[str], str] = identity):
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")
        self.extract_fn = extract_fn

    def parse(self, text: str) -> Any:
        return self.extract_fn(text)

    def _message_field(self, message: Any, field: str, default: Any = None) -> Any:
        if isinstance(message, dict):
            return message.get(field, default)
        return getattr(message, field, default)

    def _content_to_text(self, content: Any) -> str:
        """A string as is; a list of content parts: their text parts joined by spaces; else ''."""
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            return ""
        pieces: list[str] = []
        for part in content:
            if isinstance(part, dict):
                value = part.get("text") if part.get("type") == "text" else None
            else:
                value = getattr(part, "text", None)
            if isinstance(value, str):
                pieces.append(value)
        return " ".join(pieces).strip()

    def _message_text(self, message: Any) -> str:
        return self._content_to_text(self._message_field(message, "content", "") or "")

    def _with_role(self, completion: Messages, role: str) -> Messages:
        return [m for m in completion if self._message_field(m, "role") == role]

    def get_assistant_messages(self, completion: Messages) -> Messages:
        return self._with_role(completion, "assistant")

    def get_system_messages(self, completion: Messages) -> Messages:
        return self._with_role(completion, "system")

    def get_user_messages(self, completion: Messages) -> Messages:
        return self._with_role(completion, "user")

    def get_tool_messages(self, completion: Messages) -> Messages:
        return self._with_role(completion, "tool")

    def parse_answer(self, completion: Messages | str) -> str | None:
        if isinstance(completion, str):
            return self.parse(completion)
        replies = self.get_assistant_messages(completion)
        if not replies:
            return None
        return self.parse(self._message_text(replies[-1]))

    def get_format_reward_func(self) -> Callable:
        """The base parser accepts any format: always 1.0."""

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            return 1.0

        return format_reward_func
