"""ThinkParser: the answer is whatever follows the last </think>; nothing without one."""

from __future__ import annotations

from typing import Any, Callable

from verifiers_rl.parsers.parser import Parser, identity
from verifiers_rl.types import Messages

_WARNING = (
    "ThinkParser expects models that always emit <think>...</think> and whose chat template leaves "
    "those tags in the output. Without a </think> it parses to an empty answer, so it is the wrong "
    "choice for models such as Qwen3 or DeepSeek-R1 whose templates strip the reasoning block."
)


def _well_formed(text: str) -> bool:
    return (text.strip().startswith("<think>") and text.count("<think>") == 1
            and text.count("</think>") == 1 and len(text.rsplit("</think>", 1)[1]) > 0)


class ThinkParser(Parser):
    def __init__(self, extract_fn: Callable[[str], str] = identity):
        super().__init__(extract_fn=extract_fn)
        self.logger.warning(_WARNING)

    def parse(self, text: str) -> str:
        _, sep, tail = text.rpartition("</think>")
        return self.extract_fn(tail.strip() if sep else "")

    def get_format_reward_func(self) -> Callable:
        """Share of assistant messages that are well formed (0.0 when there are none)."""

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            replies = self.get_assistant_messages(completion)
            if not replies:
                return 0.0
            return sum(float(_well_formed(self._message_text(m))) for m in replies) / len(replies)

        return format_reward_func
