"""What a jailed run may use, what it gave back, and the cgroup that caps a whole jail where one can be made.

Memory: RLIMIT_AS per process and, where a cgroup can be made, the jail's memory controller. Processes: the
cgroup's pids controller first (the kernel exempts real root from RLIMIT_NPROC), else RLIMIT_NPROC in the jail's
own user namespace. Details: docs/sandbox.md.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 30.0  # wall clock for the whole run; the jail is killed after it
    memory_mb: int = 1024  # address space per process, and the jail's total where a cgroup can be made
    max_processes: int = 64  # processes and threads inside the jail
    max_output_bytes: int = 1 << 20  # stdout + stderr; past it the jail is killed and the output cut
    max_file_mb: int = 256  # the largest file the jail may write (RLIMIT_FSIZE)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_processes", "max_output_bytes", "max_file_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when the jail was killed (time or output limit)
    runtime: str  # "bwrap", "docker", "podman" or "process"
    duration_s: float = 0.0
    timed_out: bool = False
    output_truncated: bool = False  # the output limit was reached (and the jail killed)
    signal: str | None = None  # the signal that ended the command, by name (SIGKILL for the OOM killer, ...)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated

    def describe_failure(self) -> str:
        """One line on why the run did not finish normally ('' when it did)."""
        if self.timed_out:
            return "the command ran past its time limit and was stopped"
        if self.output_truncated:
            return "the command printed more than the output limit and was stopped"
        if self.signal:
            return f"the command was killed by {self.signal}"
        if self.exit_code not in (0, None):
            return f"the command exited with status {self.exit_code}"
        return ""


def _own_cgroup_dirs() -> dict[str, Path]:
    """controller -> this process's cgroup folder, for the pids and memory controllers (v1) or the unified
    hierarchy (v2, key "unified"), where that folder exists and this process may create folders in it."""
    found: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                if (root / "cgroup.controllers").exists() and os.access(root / rel, os.W_OK):
                    found.setdefault("unified", root / rel)
        for name in ("pids", "memory"):
            if name in controllers.split(","):
                d = Path("/sys/fs/cgroup") / name / rel
                if d.is_dir() and os.access(d, os.W_OK):
                    found[name] = d
    return found


class JailCgroup:
    """A cgroup per jail (v1 pids + memory, or a v2 child with both controllers enabled); absent when none
    can be made. `enter()` runs in the child between fork and exec and moves it into the cgroup."""

    def __init__(self, limits: SandboxLimits):
        self.dirs: list[Path] = []
        name = f"vf-jail-{uuid.uuid4().hex[:12]}"
        parents = _own_cgroup_dirs()
        v2 = parents.get("unified")
        if v2 is not None:
            enabled = (v2 / "cgroup.subtree_control").read_text().split() if \
                (v2 / "cgroup.subtree_control").exists() else []
            if {"pids", "memory"} <= set(enabled):
                self._make(v2 / name, {"pids.max": limits.max_processes,
                                       "memory.max": limits.memory_mb << 20, "memory.swap.max": 0})
                return
        if "pids" in parents:
            self._make(parents["pids"] / name, {"pids.max": limits.max_processes})
        if "memory" in parents:
            self._make(parents["memory"] / name, {"memory.limit_in_bytes": limits.memory_mb << 20})

    def _make(self, d: Path, settings: dict[str, int]) -> None:
        try:
            d.mkdir()
        except OSError:
            return
        self.dirs.append(d)
        for key, value in settings.items():
            with contextlib.suppress(OSError):  # e.g. no swap accounting: the other settings still hold
                (d / key).write_text(str(value))

    @property
    def caps_processes(self) -> bool:
        return any((d / "pids.max").exists() for d in self.dirs)

    def enter(self) -> None:
        pid = str(os.getpid())
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(pid)

    def remove(self) -> None:
        """Delete the cgroups; the jail's last processes may take a moment to leave after the kill."""
        for _ in range(1000):  # up to ~2 s
            for d in list(self.dirs):
                try:
                    d.rmdir()
                    self.dirs.remove(d)
                except FileNotFoundError:
                    self.dirs.remove(d)
                except OSError:
                    pass
            if not self.dirs:
                return
            time.sleep(0.002)
