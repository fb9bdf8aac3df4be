"""XMLParser: fields written as <tag>...</tag>, with alternative tag names per field."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from verifiers_rl.parsers.parser import Parser
from verifiers_rl.types import Messages


class XMLParser(Parser):
    """`fields` are tag names or tuples of alternatives whose first item is the canonical name,
    e.g. XMLParser(["think", ("answer", "ans")], answer_field="answer")."""

    def __init__(self, fields: Sequence[str | Sequence[str]], answer_field: str = "answer", **kwargs: Any):
        super().__init__(**kwargs)
        self._fields: list[tuple[str, list[str]]] = []
        for f in fields:
            if isinstance(f, str):
                self._fields.append((f, [f]))
            else:
                alts = list(f)
                if not alts:
                    raise ValueError("XMLParser: an empty tuple of field alternatives")
                self._fields.append((alts[0], alts))
        self.answer_field = answer_field

    @property
    def fields(self) -> list[str]:
        return [name for name, _ in self._fields]

    def parse(self, text: str, strip: bool = True, last: bool = False) -> SimpleNamespace:
        """Return a namespace with one attribute per canonical field (None if absent).
        With several occurrences the first is used (`last=True`: the last)."""
        out: dict[str, Any] = {}
        for name, alts in self._fields:
            value = None
            for alt in alts:
                matches = re.findall(rf"<{re.escape(alt)}>\s*(.*?)\s*</{re.escape(alt)}>" if strip
                                     else rf"<{re.escape(alt)}>(.*?)</{re.escape(alt)}>", text, re.DOTALL)
                if matches:
                    value = matches[-1] if last else matches[0]
                    break
            out[name] = value
        return SimpleNamespace(**out)

    def parse_answer(self, completion: Messages | str) -> str | None:
        """The `answer_field` of the latest assistant message that has it."""
        for text in reversed(self.assistant_texts(completion)):
            value = getattr(self.parse(text, last=True), self.answer_field, None)
            if value is not None:
                return value
        return None

    def format(self, **kwargs: Any) -> str:
        """Render fields as XML, e.g. format(think="...", answer="42")."""
        parts = []
        for name, alts in self._fields:
            for alt in alts:
                if alt in kwargs and kwargs[alt] is not None:
                    parts.append(f"<{alt}>\n{kwargs[alt]}\n</{alt}>")
                    break
        return "\n".join(parts)

    def get_fields(self) -> list[str]:
        return self.fields

    def get_format_str(self) -> str:
        return "\n".join(f"<{'|'.join(alts)}>\n...\n</{'|'.join(alts)}>" for _, alts in self._fields)

    def get_format_reward_func(self) -> Callable[..., float]:
        """Mean over assistant messages of the share of fields present as well-formed tags."""

        def format_reward(completion: Messages | str) -> float:
            texts = self.assistant_texts(completion)
            if not texts:
                return 0.0
            scores = []
            for text in texts:
                parsed = self.parse(text)
                present = sum(getattr(parsed, name) is not None for name in self.fields)
                scores.append(present / max(1, len(self.fields)))
            return sum(scores) / len(scores)

        return format_reward
