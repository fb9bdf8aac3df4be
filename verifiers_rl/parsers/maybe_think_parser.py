"""MaybeThinkParser: drops a reasoning block if there is one; text without </think> is kept whole."""

from __future__ import annotations

from typing import Callable

from verifiers_rl.parsers.parser import Parser, identity


class MaybeThinkParser(Parser):
    def __init__(self, extract_fn: Callable[[str], str] = identity):
        super().__init__(extract_fn=extract_fn)

    def parse(self, text: str) -> str:
        return self.extract_fn(text.rpartition("</think>")[2].strip())
