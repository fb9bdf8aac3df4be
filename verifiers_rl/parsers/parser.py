"""Parser: turns a model's text (or completion messages) into the answer the rubric scores."""

from __future__ import annotations

from typing import Any, Callable

from verifiers_rl.types import Messages


def _content_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    if content is None:
        return ""
    if isinstance(content, list):  # multimodal-style content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


class Parser:
    """Base parser: `extract_fn` maps the last assistant text to the answer (identity by default)."""

    def __init__(self, extract_fn: Callable[[str], Any] = lambda x: x, **kwargs: Any):
        self.extract_fn = extract_fn
        for k, v in kwargs.items():
            setattr(self, k, v)

    def parse(self, text: str) -> Any:
        return self.extract_fn(text)

    def get_assistant_messages(self, completion: Messages) -> Messages:
        return [m for m in completion if _role(m) == "assistant"]

    def get_user_messages(self, completion: Messages) -> Messages:
        return [m for m in completion if _role(m) == "user"]

    def get_tool_messages(self, completion: Messages) -> Messages:
        return [m for m in completion if _role(m) == "tool"]

    def assistant_texts(self, completion: Messages | str) -> list[str]:
        """The text of each assistant message (a plain string is one)."""
        if isinstance(completion, str):
            return [completion]
        return [_content_text(m) for m in self.get_assistant_messages(completion)]

    def parse_answer(self, completion: Messages | str) -> Any:
        """Parse the last assistant message (or a plain string)."""
        texts = self.assistant_texts(completion)
        return self.parse(texts[-1]) if texts else None

    def get_format_reward_func(self) -> Callable[..., float]:
        """The base parser accepts any format."""

        def format_reward(completion: Messages | str) -> float:
            return 1.0

        return format_reward
