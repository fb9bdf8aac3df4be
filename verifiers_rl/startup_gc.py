"""Python's cyclic garbage collector paused while a command imports and loads, then one collection of what that
made: importing torch, transformers and an environment and loading a model makes some 500,000 long-lived objects,
over which CPython 3.11 would otherwise run eight or more full collections (seconds of a command's start). What runs
afterwards collects as usual; training on the CPU leaves what exists when it starts out of its collections
(`frozen_heap`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic collection inside the block; when it ends (however it ends), one collection of the generations
    its objects are in. Nested blocks, and a process whose collector is off already, change nothing."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(1)  # generations 0 and 1: what the block made (nothing was collected while it ran)
        gc.enable()


@contextlib.contextmanager
def frozen_heap(on: bool = True) -> Iterator[None]:
    """The objects that exist now left out of every collection while the block runs (`gc.freeze`), put back when
    it ends. For training on the CPU: HF's training loop starts with a full collection (to give an accelerator's
    memory back; on the CPU refcounting frees tensors already), ~0.5-0.9 s over a process that imported torch,
    transformers and an environment. `on=False`, or a process that froze its heap already (its own choice, kept):
    nothing changes."""
    if not on or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
