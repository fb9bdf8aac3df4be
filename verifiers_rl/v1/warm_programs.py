"""Harness programs started warm: each episode's program (a PEP 723 script) runs in a child forked from a server that
imported its modules once (`warm_server.py`), so an episode costs a fork instead of an interpreter start.

`enable()` wraps verifiers' `SubprocessRuntime.run_program` (its runtime config is a closed union, so the switch is
ours: `[env] args.warm_programs`); only uv-script programs inside `in_episode(True, ...)` run warm.
"""


from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

SERVER_SCRIPT = str(Path(__file__).with_name("warm_server.py"))
START_TIMEOUT_S = 120.0

_servers: dict[tuple[str, str], tuple[subprocess.Popen, str]] = {}  # (interpreter, script) → (server, socket)
_lock = threading.Lock()
_original: Any = None
stats = {"warm": 0, "cold": 0}  # programs run each way (tests and the benchmark read it)
# whether the episode running in this context starts its programs warm: set by the V1Environment that runs it
# (`in_episode`), inherited by the tasks verifiers' run_slot starts
ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("vf_rl_warm_programs", default=False)


async def in_episode(warm: bool, episode: Any) -> Any:
    """Await `episode` (a run_slot coroutine) with its harness programs started warm or not."""
    ACTIVE.set(warm)
    return await episode


def uv_script(argv: list[str]) -> tuple[str, str, str, list[str]] | None:
    """(venv, interpreter, script, args) of the argv `prepare_uv_script` returns (`sh -c <activation> uv-script
    VENV INTERPRETER SCRIPT ARGS...`), or None for any other program."""
    if len(argv) >= 7 and argv[:2] == ["sh", "-c"] and argv[3] == "uv-script" and argv[6].endswith(".py"):
        return argv[4], argv[5], argv[6], list(argv[7:])
    return None


def activation_env(venv: str, env: dict[str, str]) -> dict[str, str]:
    """What verifiers' `sh -c` wrapper exports before it execs the script."""
    home = env.get("HOME", os.path.expanduser("~"))
    return {**env, "VIRTUAL_ENV": venv, "PATH": f"{venv}/bin:{home}/.local/bin:{env.get('PATH', '')}",
            "UV_INSTALL_DIR": f"{home}/.local/bin", "UV_RUN_RECURSION_DEPTH": "1"}


def _start(interpreter: str, script: str, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    sock = os.path.join(tempfile.mkdtemp(prefix="vf-warm-"), "s")
    proc = subprocess.Popen([interpreter, SERVER_SCRIPT, sock, script], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    out: list[str] = []  # the server's first line, read with a timeout
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    try:
        line = json.loads(out[0]) if out and out[0] else {}
    except json.JSONDecodeError:
        line = {}
    if not line.get("ready"):
        _stop(proc)
        raise RuntimeError(f"the warm program server for {script} did not start")
    return proc, sock


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


def server_for(interpreter: str, script: str, env: dict[str, str]) -> str | None:
    """The socket of the (started once) fork server for this script; None when it cannot start."""
    key = (interpreter, script)
    with _lock:
        entry = _servers.get(key)
        if entry is not None and entry[0].poll() is None:
            return entry[1]
        try:
            _servers[key] = _start(interpreter, script, env)
        except (OSError, RuntimeError):
            _servers.pop(key, None)
            return None
        return _servers[key][1]


async def run_warm(sock: str, args: list[str], env: dict[str, str], cwd: str) -> tuple[int, str, str]:
    """Run the server's script with `args` in a forked child: (exit code, stdout, stderr). Cancelled: its process
    group is killed."""
    reader, writer = await asyncio.open_unix_connection(sock, limit=1 << 26)
    pid = None
    try:
        writer.write(json.dumps({"args": args, "env": env, "cwd": cwd}).encode() + b"\n")
        await writer.drain()
        pid = json.loads(await reader.readline())["pid"]
        result = json.loads(await reader.readline())
        pid = None
        return result["exit"], result["stdout"], result["stderr"]
    finally:
        writer.close()
        if pid is not None:  # cancelled (an episode timeout) or the server vanished: the program goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


async def _run_program(self: Any, argv: list[str], env: dict[str, str]) -> Any:
    parsed = uv_script(argv) if ACTIVE.get() else None
    if parsed is not None and self.workdir is not None:
        venv, interpreter, script, args = parsed
        # the environment verifiers' SubprocessRuntime.run gives a program (no API keys inherited), activated
        full = {k: v for k, v in os.environ.items() if "API_KEY" not in k.upper()}
        full = activation_env(venv, {**full, **self.process_env(env)})
        sock = await asyncio.to_thread(server_for, interpreter, script, full)
        if sock is not None:
            from verifiers.v1.runtimes import ProgramResult

            stats["warm"] += 1
            code, out, err = await run_warm(sock, args, full, str(self.workdir))
            return ProgramResult(exit_code=code, stdout=out, stderr=err)
    stats["cold"] += 1
    return await _original(self, argv, env)


def enable() -> None:
    """Run uv-script harness programs of verifiers' subprocess runtime warm, in this process."""
    global _original
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    if _original is None:
        _original = SubprocessRuntime.run_program
        SubprocessRuntime.run_program = _run_program
        atexit.register(stop_servers)


def disable() -> None:
    global _original
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    if _original is not None:
        SubprocessRuntime.run_program = _original
        _original = None
    stop_servers()


def stop_servers() -> None:
    with _lock:
        entries = list(_servers.values())
        _servers.clear()
    for proc, sock in entries:
        _stop(proc)
        shutil.rmtree(os.path.dirname(sock), ignore_errors=True)  # the socket and what the server learned
