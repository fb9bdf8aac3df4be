"""Waiting on processes in tests, shared by the test modules (`from processes import alive, poll_until, wait_for`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no such process, or it vanished between open and read
        return False
    return state != "Z"


def poll_until(cond: Callable[[], object], timeout: float, poll: float = 0.2) -> bool:
    """Poll `cond` until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(poll)
    return bool(cond())


def wait_for(cond: Callable[[], object], timeout: float, what: str, poll: float = 0.2) -> None:
    """Poll `cond` until it is true; an AssertionError naming `what` after `timeout` seconds."""
    if not poll_until(cond, timeout, poll):
        raise AssertionError(f"timed out waiting for {what}")
