"""The local engine's KV cache: full-attention layers preallocated for the whole decode, so that each token
writes in place, and whose rows can be selected (finished rows dropped, a shared prefill copied).

torch is imported at module level: only the decode loop imports this module."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch


def _own_class(model: Any) -> type:
    """The class whose forward runs: a peft wrapper's base model's (wrappers of an instance's forward, such as
    accelerate's hooks, pass keywords through)."""
    return type(model.get_base_model() if hasattr(model, "get_base_model") else model)


def _params(cls: type) -> Any:
    try:
        return inspect.signature(cls.forward).parameters
    except (AttributeError, TypeError, ValueError):
        return {}


def forward_params(model: Any) -> Any:
    """The parameters of `model`'s class's forward, or {} when unreadable."""
    return _params(_own_class(model))


def cache_keyword(model: Any) -> str:
    """The keyword `model`'s forward takes its KV cache by, and its output returns it as: `cache` from transformers
    5.25 (where `past_key_values` is deprecated, to go in 5.40), `past_key_values` before."""
    return _cache_keyword_of(_own_class(model))


@functools.cache  # read once per class: the decode asks at each model call
def _cache_keyword_of(cls: type) -> str:
    # the first class up the hierarchy whose forward names either decides (a subclass's may pass **kwargs on)
    for c in cls.__mro__:
        params = _params(c) if "forward" in vars(c) else {}
        if "cache" in params or "past_key_values" in params:
            return "cache" if "cache" in params else "past_key_values"
    return "past_key_values"


@functools.cache
def _reserved_layer_class() -> type:  # defined on first use: transformers' cache module loads with the engine
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """A full-attention cache layer in one buffer sized for the whole decode: each token writes in place, where
        `DynamicLayer` concatenates (a copy of the whole cache per token)."""

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity, self.length = capacity, 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                # each by its own shape: an MLA layer (DeepSeek-V3) caches keys and values of different widths
                self._k, self._v = (t.new_empty((*t.shape[:-2], self.capacity, t.shape[-1]))
                                    for t in (key_states, value_states))
            start, n = self.length, key_states.shape[-2]
            # narrow, not `[..., a:b, :]` indexing: a third of the time per call, which the decode pays per layer
            self._k.narrow(-2, start, n).copy_(key_states)
            self._v.narrow(-2, start, n).copy_(value_states)
            self.length = start + n
            self.keys, self.values = self._k.narrow(-2, 0, self.length), self._v.narrow(-2, 0, self.length)
            return self.keys, self.values

        def select_rows(self, idx: torch.Tensor) -> None:
            """Batch row i becomes row `idx[i]` (finished rows dropped, a shared prefill copied)."""
            self._k, self._v = self._k.index_select(0, idx), self._v.index_select(0, idx)
            self.keys, self.values = self._k[..., :self.length, :], self._v[..., :self.length, :]

    return ReservedLayer


def reserved_cache(model: Any, capacity: int) -> Any:
    """A `DynamicCache` for `model` whose plain full-attention layers are preallocated to `capacity` tokens; None
    (the model builds its own cache) when the config does not describe its layers up front."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        cache = DynamicCache(config=model.config)
    except Exception:  # a config the cache cannot read: the model's own default
        return None
    if not cache.layers:
        return None
    layer = _reserved_layer_class()
    cache.layers = [layer(capacity) if type(x) is DynamicLayer else x for x in cache.layers]
    return cache


def compactable(cache: Any) -> bool:
    return cache is not None and all(hasattr(x, "select_rows") for x in cache.layers)
