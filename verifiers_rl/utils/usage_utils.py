"""Token usage of a rollout: a tracker kept in `state["usage_tracker"]`, shown read-only in `state["usage"]`
(so environment code can look at it live but cannot change the count)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from verifiers_rl.record import get_field


def extract_usage_tokens(response: Any) -> tuple[int, int]:
    """(input, output) tokens of a response's usage, 0 where absent or not a number."""
    usage = get_field(response, "usage")
    if usage is None:
        return 0, 0

    def num(*keys: str) -> int:
        for k in keys:
            v = get_field(usage, k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        return 0

    return num("prompt_tokens", "input_tokens"), num("completion_tokens", "output_tokens")


class StateUsageTracker:
    __slots__ = ("_seen", "_totals", "_view")

    def __init__(self) -> None:
        self._seen = False
        self._totals = {"input_tokens": 0.0, "output_tokens": 0.0}
        self._view = MappingProxyType(self._totals)

    @property
    def usage(self) -> Any:
        return self._view

    def increment(self, input_tokens: float = 0, output_tokens: float = 0, *, mark_seen: bool = True) -> None:
        dx, dy = float(input_tokens or 0.0), float(output_tokens or 0.0)
        if dx < 0 or dy < 0:
            raise ValueError("Token usage increments must be non-negative.")
        self._seen = self._seen or mark_seen
        self._totals["input_tokens"] += dx
        self._totals["output_tokens"] += dy

    def increment_from_response(self, response: Any) -> None:
        if get_field(response, "usage") is not None:
            self.increment(*extract_usage_tokens(response))

    def snapshot(self) -> dict[str, float] | None:
        return dict(self._totals) if self._seen else None

    def __deepcopy__(self, memo: dict) -> "StateUsageTracker":
        copy = StateUsageTracker()
        copy._seen, copy._totals["input_tokens"], copy._totals["output_tokens"] = \
            self._seen, self._totals["input_tokens"], self._totals["output_tokens"]
        return copy


def state_usage(state: Any) -> dict[str, float] | None:
    """A rollout's token usage: its tracker's snapshot, else a plain `state["usage"]` mapping, else None."""
    tracker = state.get("usage_tracker")
    if isinstance(tracker, StateUsageTracker):
        return tracker.snapshot()
    usage = state.get("usage")
    if not isinstance(usage, Mapping):
        return None
    try:
        return {"input_tokens": float(usage.get("input_tokens", 0.0)),
                "output_tokens": float(usage.get("output_tokens", 0.0))}
    except (TypeError, ValueError):
        return None
