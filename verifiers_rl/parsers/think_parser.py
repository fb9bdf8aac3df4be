"""ThinkParser: the answer is what follows the reasoning block <think>...</think>."""

from __future__ import annotations

from typing import Any, Callable

from verifiers_rl.parsers.parser import Parser
from verifiers_rl.types import Messages


class ThinkParser(Parser):
    def __init__(self, extract_fn: Callable[[str], Any] = lambda x: x, **kwargs: Any):
        super().__init__(extract_fn=extract_fn, **kwargs)

    def parse(self, text: str) -> Any:
        if "</think>" in text:
            text = text.rsplit("</think>", 1)[1]
        return self.extract_fn(text.strip())

    def get_format_reward_func(self) -> Callable[..., float]:
        """1 per assistant message that opens with one <think>…</think> block followed by an answer."""

        def format_reward(completion: Messages | str) -> float:
            texts = self.assistant_texts(completion)
            if not texts:
                return 0.0
            ok = 0
            for t in texts:
                t = t.strip()
                if (t.startswith("<think>") and t.count("<think>") == 1 and t.count("</think>") == 1
                        and t.split("</think>", 1)[1].strip()):
                    ok += 1
            return ok / len(texts)

        return format_reward
