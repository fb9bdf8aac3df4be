"""A rollout's timing record, `state["timing"]`, readable the way verifiers 0.1.11 and 0.3.x code reads it.

The runtime fills both verifiers 0.3's spans in Unix seconds (`timing.setup`, `.generation`, `.scoring`, `.model`,
`.env`, ...) and 0.1.11's milliseconds (`timing["generation_ms"]`, ...), as dicts with attribute access.
"""

from __future__ import annotations

import time
from typing import Any

from verifiers_rl.record import Record


class _Derived(Record):
    """A record whose derived fields (properties named in `_derived`) are written out by `model_dump`, as
    verifiers serializes its computed fields, and never stored."""

    _derived: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        for name in self._derived:  # read back from a dump: derived again, not stored
            self.pop(name, None)

    def model_dump(self, exclude_none: bool = False, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
        out = super().model_dump(exclude_none=exclude_none, exclude=exclude, **kwargs)
        out.update({name: getattr(self, name) for name in self._derived if name not in (exclude or ())})
        return out


class TimeSpan(_Derived):
    """One timed span; `duration` is 0 until it has ended."""

    _defaults = {"start": 0.0, "end": 0.0}
    _derived = ("duration",)

    @property
    def duration(self) -> float:
        return 0.0 if self["end"] <= 0.0 else self["end"] - self["start"]


class TimeSpans(_Derived):
    """Spans of one kind (each model call, each env reply); `duration` is their sum."""

    _defaults = {"spans": list}
    _nested = {"spans": lambda spans: [s if isinstance(s, TimeSpan) else TimeSpan(s) for s in spans]}
    _derived = ("duration",)

    @property
    def duration(self) -> float:
        return sum(s.duration for s in self["spans"])


_SPANS = {"setup": TimeSpan, "generation": TimeSpan, "scoring": TimeSpan, "model": TimeSpans, "env": TimeSpans}


class RolloutTiming(_Derived):
    """`RolloutTiming()` starts now with empty spans; the 0.1.11 keyword fields (`generation_ms=...`) are kept
    as given."""

    _derived = ("total", "overhead")

    def __init__(self, *args: Any, **kwargs: Any):
        data = dict(*args, **kwargs)
        data.setdefault("start_time", time.time())
        for name, kind in _SPANS.items():
            value = data.get(name)
            data[name] = value if isinstance(value, kind) else kind(value or {})
        super().__init__(data)

    @property
    def total(self) -> float:
        """From the start of generation to the end of scoring (0 until scored)."""
        return 0.0 if self["scoring"].end <= 0.0 else self["scoring"].end - self["generation"].start

    @property
    def overhead(self) -> float:
        return self.total - sum(self[name].duration for name in ("setup", "model", "env", "scoring"))


def new_rollout_timing() -> RolloutTiming:
    """The record a fresh rollout starts with: spans for 0.3 code, the 0.1.11 millisecond fields at 0."""
    return RolloutTiming(generation_ms=0.0, scoring_ms=0.0, total_ms=0.0)


def spans_of(state: Any) -> RolloutTiming | None:
    """The state's timing as a RolloutTiming (a plain dict given by older code is converted in place)."""
    timing = state.get("timing") if hasattr(state, "get") else None
    if timing is None or isinstance(timing, RolloutTiming):
        return timing
    if isinstance(timing, dict):
        state["timing"] = RolloutTiming(timing)
        return state["timing"]
    return None
