"""Run a command, or Python source, in a fresh jail (`run`, `run_python`, `arun`; examples: docs/sandbox.md).

The jail's one writable host folder is `workdir`; only `env` reaches its environment. At the time or output limit every
process of the jail ends (its PID namespace dies with its first process; the fallback kills its process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from verifiers_rl.sandbox.limits import JailCgroup, SandboxLimits, SandboxResult
from verifiers_rl.sandbox.runtimes import (BASE_ENV, WORKDIR, bwrap_argv, bwrap_executable, choose_runtime,
                                           container_argv, nproc_wrapped)

__all__ = ["run", "arun", "run_python", "python_argv", "prepare", "spawn", "JailCommand", "Spawned"]


def _as_argv(command: str | list[str]) -> list[str]:
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    return [shell, "-c", command] if isinstance(command, str) else list(command)


def python_argv(source: str, image: str | None = None) -> list[str]:
    """argv running `source` with the jail's Python: this process's interpreter (its packages read-only) in
    bwrap and the fallback, the image's `python3` in a container."""
    return ["python3" if image else sys.executable, "-I", "-c", source]


def _preexec(limits: SandboxLimits, cgroup: JailCgroup | None) -> Callable[[], None]:
    def apply() -> None:  # in the child, between fork and exec: everything the jail starts inherits these
        import resource

        mem = limits.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        size = limits.max_file_mb << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if cgroup is not None:
            cgroup.enter()

    return apply


@dataclass
class JailCommand:
    """How to start a command in a jail with any process API (subprocess, asyncio): `argv`, `env`, `cwd`,
    `preexec_fn` (limits, the cgroup), and `cleanup()` once the process is gone."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    preexec_fn: Callable[[], None] | None
    runtime: str
    cgroup: JailCgroup | None
    container: tuple[str, str] | None  # (engine, container name)

    def cleanup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()


@dataclass
class Spawned(JailCommand):
    """A started jail: the command and its process (pipes for stdin/stdout/stderr)."""

    proc: subprocess.Popen

    def stop(self) -> None:
        """Kill the jail and everything in it; wait for it."""
        if self.container is not None:
            subprocess.run([self.container[0], "kill", self.container[1]], capture_output=True, timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self.cleanup()


def prepare(command: str | list[str], workdir: str, *, env: dict[str, str] | None = None,
            limits: SandboxLimits | None = None, runtime: str | None = None, image: str | None = None,
            extra_binds: list[tuple[str, str]] = (), ro_binds: list[tuple[str, str]] = (),
            mount_at: str = WORKDIR, cwd: str | None = None, root: str | None = None) -> JailCommand:
    """The jail for `command`: `workdir` is its writable folder, at `mount_at` inside (its cwd unless `cwd`
    names another jail path); `extra_binds` / `ro_binds` are more (host, jail) folders, writable / read-only;
    `root` a host folder as bwrap's writable `/` (ignored by the other runtimes)."""
    limits = limits or SandboxLimits()
    chosen = choose_runtime(runtime if runtime or not image else "auto")
    full_env = {**BASE_ENV, "HOME": mount_at, **(env or {})}
    argv = _as_argv(command)
    if chosen in ("docker", "podman"):
        if not image:
            raise ValueError(f"sandbox runtime {chosen!r} needs an image")
        name = f"vf-sandbox-{uuid.uuid4().hex[:12]}"
        argv = container_argv(chosen, image, argv, workdir, full_env, limits, name)
        return JailCommand(argv, {"PATH": os.environ.get("PATH", "")}, None, None, chosen, None, (chosen, name))
    cgroup = JailCgroup(limits)
    if chosen == "process":  # no namespaces: the host paths themselves, the work dir as cwd and HOME
        host_cwd = cwd.replace(mount_at, workdir, 1) if cwd else workdir
        full_env = {**full_env, "HOME": workdir, "TMPDIR": workdir}
        return JailCommand(argv, full_env, host_cwd, _preexec(limits, cgroup), chosen, cgroup, None)
    if not cgroup.caps_processes:
        argv = nproc_wrapped(argv, limits.max_processes)
    argv = bwrap_argv(bwrap_executable() or "bwrap", argv, workdir, full_env, list(extra_binds), list(ro_binds),
                      mount_at=mount_at, cwd=cwd, root=root)
    return JailCommand(argv, {"PATH": os.environ.get("PATH", "")}, None, _preexec(limits, cgroup), chosen, cgroup,
                       None)


def spawn(command: str | list[str], workdir: str, **kwargs: Any) -> Spawned:
    """Start `command` in a jail (see `prepare` for the keywords); stdin, stdout and stderr are pipes."""
    jail = prepare(command, workdir, **kwargs)
    proc = subprocess.Popen(jail.argv, cwd=jail.cwd, env=jail.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                            preexec_fn=jail.preexec_fn)
    return Spawned(**vars(jail), proc=proc)


def _collect(jail: Spawned, stdin: bytes | None, limits: SandboxLimits) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout/stderr until the jail exits, its time is up or its output passes the limit."""
    proc = jail.proc
    if stdin:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(stdin)
    proc.stdin.close()
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + limits.timeout_s
    timed_out = truncated = False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
            if len(out) + len(err) > limits.max_output_bytes:
                truncated = True
                break
    if not (timed_out or truncated):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    cap = limits.max_output_bytes
    return bytes(out[:cap]), bytes(err[:max(0, cap - min(len(out), cap))]), timed_out, truncated


def _signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return str(-code)


def run(command: str | list[str], *, workdir: str | None = None, env: dict[str, str] | None = None,
        limits: SandboxLimits | None = None, runtime: str | None = None, image: str | None = None,
        stdin: bytes | str | None = None, extra_binds: list[tuple[str, str]] = (),
        root: str | None = None) -> SandboxResult:
    """Run `command` (a shell string, or an argv list) in a fresh jail and wait for it, within `limits`;
    `extra_binds` are more (host folder, jail path) pairs it may write; `root` a host folder as the jail's
    writable `/` (bwrap only: see runtimes.bwrap_argv)."""
    limits = limits or SandboxLimits()
    data = stdin.encode() if isinstance(stdin, str) else stdin
    start = time.monotonic()
    with (contextlib.nullcontext(str(workdir)) if workdir is not None
          else tempfile.TemporaryDirectory(prefix="vf-sandbox-", ignore_cleanup_errors=True)) as wd:
        jail = spawn(command, wd, env=env, limits=limits, runtime=runtime, image=image, extra_binds=extra_binds,
                      root=root)
        try:
            out, err, timed_out, truncated = _collect(jail, data, limits)
        finally:
            jail.stop()  # also ends what the command left running (the fallback's process group)
    code = jail.proc.returncode
    killed = timed_out or truncated
    # bwrap reports a command killed by a signal as 128 + signal
    sig = _signal_name(code) or (_signal_name(128 - code) if jail.runtime == "bwrap" and code and code > 128
                                 else None)
    return SandboxResult(stdout=out.decode("utf-8", errors="replace"), stderr=err.decode("utf-8", errors="replace"),
                         exit_code=None if killed else code, runtime=jail.runtime,
                         duration_s=time.monotonic() - start, timed_out=timed_out, output_truncated=truncated,
                         signal=None if killed else sig)


async def arun(command: str | list[str], **kwargs: Any) -> SandboxResult:
    """`run` from a coroutine: the wait happens on a worker thread, the event loop keeps going."""
    return await asyncio.to_thread(run, command, **kwargs)


def run_python(source: str, **kwargs: Any) -> SandboxResult:
    """Run Python `source` in a fresh jail (see `run` for the keywords)."""
    return run(python_argv(source, kwargs.get("image")), **kwargs)

