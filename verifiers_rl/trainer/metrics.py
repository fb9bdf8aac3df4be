"""Per-micro-batch metrics → one optimizer step's metrics, by name: ``.../min`` and ``.../max`` over the
micro-batches with loss tokens, anything else a token-weighted mean (a per-token mean over the whole step).
"""


from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable


def extreme(name: str) -> Callable[..., float] | None:
    """How a metric merges over micro-batches and ranks: `min` for `.../min`, `max` for `.../max` (over those with
    loss tokens), None for a token-weighted mean. The one rule of TokenWeightedMetrics and merge_metrics."""
    return {"min": min, "max": max}.get(name.rsplit("/", 1)[-1])


def with_std(metrics: Mapping[str, float]) -> dict[str, float]:
    """`name/sq_mean` (a token-weighted mean of squares, merged like any mean) → `name/std` beside `name/mean`;
    converted once a step's values are merged over micro-batches and ranks."""
    out = dict(metrics)
    for key in [k for k in out if k.endswith("/sq_mean")]:
        base = key[: -len("/sq_mean")]
        sq, mean = float(out.pop(key)), float(out.get(f"{base}/mean", 0.0))
        out[f"{base}/std"] = math.sqrt(max(0.0, sq - mean * mean))
    return out


class TokenWeightedMetrics:
    """Accumulates named per-micro-batch metrics; ``weight_key`` names the token count each dict carries.

    A step with no loss tokens reports 0 for every name (its token count included), except names given in
    ``when_empty``. Values may be floats or 0-d tensors (read with ``float``, so a device tensor syncs here).
    """

    def __init__(self, weight_key: str = "loss_tokens", when_empty: Mapping[str, float] | None = None):
        self.weight_key = weight_key
        self.when_empty = dict(when_empty or {})
        self.tokens = 0.0
        self._sums: dict[str, float] = {}
        self._extremes: dict[str, float | None] = {}

    def add(self, metrics: Mapping[str, Any]) -> None:
        """Add one micro-batch's metrics (``metrics[weight_key]`` is its number of loss tokens)."""
        n = float(metrics[self.weight_key])
        self.tokens += n
        for name, value in metrics.items():
            if name == self.weight_key:
                continue
            pick = extreme(name)
            if pick is not None:
                best = self._extremes.setdefault(name, None)
                if n:  # a micro-batch without loss tokens has no ratio to report
                    v = float(value)
                    self._extremes[name] = v if best is None else pick(best, v)
            else:
                self._sums[name] = self._sums.get(name, 0.0) + float(value) * n

    def result(self) -> dict[str, float]:
        """The step's metrics: token-weighted means, mins and maxes, and ``weight_key`` = the total tokens."""
        n = max(self.tokens, 1.0)
        out = {name: (s / n if self.tokens else self.when_empty.get(name, 0.0)) for name, s in self._sums.items()}
        for name, v in self._extremes.items():
            out[name] = v if v is not None else self.when_empty.get(name, 0.0)
        out[self.weight_key] = self.tokens
        return out
