"""XMLParser: fields written as <tag>...</tag>, each field optionally with alternative tag names."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Callable

from verifiers_rl.parsers.parser import Parser, identity
from verifiers_rl.types import Messages

_THINK_WARNING = (
    "XMLParser was given a 'think' field. Only use it with models that always emit <think>...</think> "
    "and whose chat template keeps those tags; models such as Qwen3 or DeepSeek-R1 strip them, "
    "so parsing will fail."
)


def _normalise_field(field: Any) -> tuple[str, list[str]]:
    if isinstance(field, str):
        return field, [field]
    if not isinstance(field, tuple):
        raise TypeError("Each field must be a string or a tuple of strings.")
    if not field:
        raise ValueError("Field tuple cannot be empty.")
    if any(not isinstance(name, str) for name in field):
        raise TypeError("All alternatives in a tuple must be strings.")
    return field[0], list(field)


class XMLParser(Parser):
    """`fields`: tag names, or tuples of alternatives whose first item is the canonical name used by
    `format`; `parse` reports every alternative, e.g. XMLParser(["think", ("code", "answer")])."""

    def __init__(self, fields: list[str | tuple[str, ...]], answer_field: str = "answer",
                 extract_fn: Callable[[str], str] = identity):
        super().__init__(extract_fn=extract_fn)
        self.answer_field = answer_field
        self._fields: list[tuple[str, list[str]]] = []
        for field in fields:
            canonical, alternatives = _normalise_field(field)
            if any(canonical == known for known, _ in self._fields):
                raise ValueError(f"Duplicate field name: {canonical}")
            self._fields.append((canonical, alternatives))
        if any(canonical == "think" for canonical, _ in self._fields):
            self.logger.warning(_THINK_WARNING)

    def _all_tags(self) -> list[str]:
        return [tag for _, alternatives in self._fields for tag in alternatives]

    def parse(self, text: str, strip: bool = True, last: bool = False) -> Any:
        """A namespace with one attribute per tag (alternatives included): the content of its first
        (or, with `last`, its last) occurrence with surrounding whitespace trimmed, else None."""
        found: dict[str, str | None] = {}
        for tag in self._all_tags():
            # tag names go into the pattern unescaped, as in verifiers
            matches = list(re.finditer(rf"<{tag}>\s*(.*?)\s*</{tag}>", text, re.DOTALL))
            if not matches:
                found[tag] = None
                continue
            body = matches[-1 if last else 0].group(1)
            found[tag] = body.strip() if strip else body
        return SimpleNamespace(**found)

    def _answer_of(self, text: str, last: bool) -> str | None:
        return getattr(self.parse(text, last=last), self.answer_field, None)

    def parse_answer(self, completion: Messages | str) -> str | None:
        """The answer field: for a string its last occurrence; for messages, the first occurrence in
        the latest assistant message that has one."""
        if isinstance(completion, str):
            return self._answer_of(completion, last=True)
        for message in reversed(self.get_assistant_messages(completion)):
            answer = self._answer_of(self._message_text(message), last=False)
            if answer is not None:
                return answer
        return None

    def get_format_str(self) -> str:
        blocks = []
        for canonical, alternatives in self._fields:
            name = canonical if len(alternatives) == 1 else f"[ {' | '.join(alternatives)} ]"
            blocks.append(f"<{name}>\n...\n</{name}>")
        return "\n".join(blocks)

    def get_fields(self) -> list[str]:
        return [canonical for canonical, _ in self._fields]

    def format(self, **kwargs: Any) -> str:
        """XML for the given values under canonical tags; a field may be given under any of its
        alternative names (the canonical one wins); a missing field raises ValueError."""
        blocks = []
        for canonical, alternatives in self._fields:
            key = next((k for k in [canonical, *alternatives] if k in kwargs), None)
            value = None if key is None else kwargs[key]
            if value is None:
                raise ValueError(f"Missing value for field '{canonical}' (allowed: {alternatives})")
            blocks.append(f"<{canonical}>\n{value}\n</{canonical}>")
        return "\n".join(blocks)

    def _message_format_score(self, text: str) -> float:
        """0.4 x share of fields present (unclosed counts), 0.2 for spacing (always: the pattern trims it), 0.2 if
        the text opens with a tag of the first field, 0.2 if it closes with a tag of the last field."""
        parsed = self.parse(text)
        parsed_any = False
        fields_seen = 0
        for _, alternatives in self._fields:
            hit = [getattr(parsed, tag) is not None for tag in alternatives]
            parsed_any = parsed_any or any(hit)
            if any(hit) or any(f"<{t}>" in text or f"</{t}>" in text for t in alternatives):
                fields_seen += 1
        score = 0.0
        if parsed_any:
            score += 0.4 * (fields_seen / len(self._fields))
        score += 0.2
        stripped = text.strip()
        if any(stripped.startswith(f"<{tag}>") for tag in self._fields[0][1]):
            score += 0.2
        if any(stripped.endswith(f"</{tag}>") for tag in self._fields[-1][1]):
            score += 0.2
        return score

    def get_format_reward_func(self) -> Callable:
        """Mean format score over the assistant messages (0.0 when there are none)."""

        def format_reward_func(completion: Messages) -> float:
            replies = self.get_assistant_messages(completion)
            if not replies:
                return 0.0
            scores = [self._message_format_score(self._message_text(m)) for m in replies]
            return sum(scores) / len(scores)

        return format_reward_func
