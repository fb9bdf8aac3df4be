"""Python's cyclic garbage collector paused while a command imports and loads, then one collection of what that
made: importing torch, transformers and a model makes hundreds of thousands of long-lived objects, over which CPython
would otherwise run several full collections at start-up. What runs afterwards collects as usual.
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
    """The objects that exist now left out of every collection while the block runs (`gc.freeze`). For training on
    the CPU: HF's training loop starts with a full collection (for an accelerator's memory; on the CPU refcounting
    frees tensors already). `on=False`, or a heap frozen already: nothing changes."""
    if not on or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
