"""RLMEnv's local execution backend: one REPL process per rollout, in the rollout's working folder.

`LocalSession` owns the folder, the REPL (`bash` or `rlm_worker.py`'s Python REPL, leading its own process group) and
the Unix socket for root tools. bash runs each command through `eval` with stdin from /dev/null, so a syntax error or a
command reading stdin comes back as output instead of hanging. Model-written code runs in a jail (docs/sandbox.md).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from verifiers_rl.sandbox.limits import SandboxLimits
from verifiers_rl.sandbox.runner import JailCommand, prepare

logger = logging.getLogger(__name__)

WORKER_SCRIPT = str(Path(__file__).with_name("rlm_worker.py"))
REPL_LIMITS = SandboxLimits(memory_mb=4096, max_processes=256)  # per process / per REPL jail; time: per command
_READ_CAP = 4 * 1024 * 1024  # bytes of REPL output kept per command (the rest is dropped, the marker still found)

ToolHandler = Callable[[str, list, dict], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class RLMWorkerPaths:
    """Where a rollout's REPL lives: its folder, the working folder, the control folder and the tool socket."""

    base_dir: str
    fs_root: str
    control_dir: str
    tool_socket: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class ReplTimeout(Exception):
    """The REPL did not answer within the code execution timeout."""


def _not_ready() -> dict[str, Any]:
    return {"ready": False, "content": ""}


def _truthy(text: str) -> bool:
    return text.strip().lower() in {"1", "true", "yes", "y", "on"}


class LocalSession:
    def __init__(self, rollout_id: str, language: str, python: str | None = None):
        self.rollout_id, self.language = rollout_id, language
        self.python = python or sys.executable
        self.rollout_dir = tempfile.mkdtemp(prefix=f"rlm_rollout_{rollout_id}_")
        self.fs_root = os.path.join(self.rollout_dir, "rlm_fs")
        self.control_dir = os.path.join(self.rollout_dir, "rlm_control")
        os.makedirs(self.fs_root)
        os.makedirs(self.control_dir)
        self.socket_path = os.path.join(self.control_dir, "tools.sock")
        self.paths = RLMWorkerPaths(self.rollout_dir, self.fs_root, self.control_dir, self.socket_path)
        self.process: asyncio.subprocess.Process | None = None
        self.jail: JailCommand | None = None
        self.server: asyncio.AbstractServer | None = None
        self.answer: dict[str, Any] = _not_ready()  # as of the last command
        self.root_tool_names: list[str] = []

    # --- lifecycle ----------------------------------------------------------------------------------
    async def start(self, handler: ToolHandler, root_tool_names: list[str], extra_env: dict[str, str]) -> None:
        self.root_tool_names = list(root_tool_names)
        self._extra_env = dict(extra_env)
        self.server = await asyncio.start_unix_server(
            lambda r, w: self._serve(handler, r, w), path=self.socket_path)
        await self._spawn()

    def _environment(self) -> dict[str, str]:
        """The REPL's variables: the session's own, nothing inherited (the jail starts from a cleared env)."""
        env = dict(self._extra_env)
        env.update({"RLM_TOOL_SOCKET": self.socket_path, "RLM_ROOT_TOOL_NAMES": json.dumps(self.root_tool_names),
                    "RLM_WORKER": WORKER_SCRIPT, "RLM_PYTHON": self.python, "PYTHONUNBUFFERED": "1",
                    "BASH_SILENCE_DEPRECATION_WARNING": "1"})
        return env

    async def _spawn(self) -> None:
        if self.language == "bash":
            argv = ["bash", "--noprofile", "--norc"]
        else:
            argv = [self.python, "-u", WORKER_SCRIPT, "python-repl"]
        # model-written code: a jail (verifiers_rl.sandbox) whose one writable folder is the rollout's, at its own
        # path (the tool socket lives there), with the worker script read-only
        self._release_jail()
        self.jail = prepare(argv, self.rollout_dir, env=self._environment(), limits=REPL_LIMITS,
                            mount_at=self.rollout_dir, cwd=self.fs_root, ro_binds=[(WORKER_SCRIPT, WORKER_SCRIPT)])
        self.process = await asyncio.create_subprocess_exec(
            *self.jail.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=self.jail.cwd, env=self.jail.env, start_new_session=True,
            preexec_fn=self.jail.preexec_fn, limit=_READ_CAP)
        self.answer = _not_ready()
        if self.language == "bash":
            await self._bash_init()
        else:
            line = await asyncio.wait_for(self.process.stdout.readline(), timeout=60)  # type: ignore[union-attr]
            if not line.strip().startswith(b"{"):
                raise RuntimeError(f"Python REPL failed to start: {line.decode(errors='replace')[:500]}")

    async def _bash_init(self) -> None:
        lines = ["export PS1= PS2= PROMPT_COMMAND=", "export RLM_READY= RLM_CONTENT="]
        for name in self.root_tool_names:
            lines.append(f'{name}() {{ "$RLM_PYTHON" "$RLM_WORKER" tool {name} "$@"; }}')
        await self._bash_exchange("\n".join(lines), timeout=60)

    def kill(self) -> asyncio.subprocess.Process | None:
        """Kill the REPL's process group now (synchronous: safe in teardown and at exit); the process, to reap."""
        proc, self.process = self.process, None
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return proc

    async def _kill_and_reap(self) -> None:
        proc = self.kill()
        if proc is not None:
            try:
                await asyncio.wait_for(proc.wait(), timeout=10)
            except asyncio.TimeoutError:
                logger.warning("RLM REPL process %s did not exit after SIGKILL", proc.pid)

    def _release_jail(self) -> None:
        if self.jail is not None:
            self.jail.cleanup()
            self.jail = None

    async def stop(self, remove_files: bool) -> None:
        await self._kill_and_reap()
        self._release_jail()
        if self.server is not None:
            self.server.close()
            self.server = None
        if remove_files:
            await asyncio.to_thread(shutil.rmtree, self.rollout_dir, True)
        else:
            Path(self.socket_path).unlink(missing_ok=True)

    async def restart(self) -> None:
        await self._kill_and_reap()
        await self._spawn()

    # --- root tools from the REPL -----------------------------------------------------------------------
    async def _serve(self, handler: ToolHandler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await reader.read()
            try:
                request = json.loads(raw.decode("utf-8"))
                name, args, kwargs = request["tool"], request.get("args") or [], request.get("kwargs") or {}
                if not isinstance(args, list) or not isinstance(kwargs, dict):
                    raise ValueError("args must be a list and kwargs an object")
            except Exception as e:
                reply: dict[str, Any] = {"error": f"Invalid tool request: {e}"}
            else:
                reply = await handler(name, args, kwargs)
            writer.write((json.dumps(reply, default=repr) + "\n").encode("utf-8"))
            await writer.drain()
        except Exception as e:  # the REPL side went away; nothing to answer
            logger.debug("root tool connection failed: %s", e)
        finally:
            writer.close()

    # --- running code -----------------------------------------------------------------------------------------
    async def execute(self, code: str, timeout: float) -> dict[str, Any]:
        """Run `code`; the worker-style result dict. Raises ReplTimeout (the REPL is then dead: restart it)."""
        if self.process is None or self.process.returncode is not None:
            await self.restart()
        if self.language == "bash":
            return await self._bash_execute(code, timeout)
        return await self._python_execute(code, timeout)

    async def _python_execute(self, code: str, timeout: float) -> dict[str, Any]:
        proc = self.process
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps({"code": code}) + "\n").encode("utf-8"))
        try:
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=timeout)
        except asyncio.TimeoutError:
            raise ReplTimeout from None
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as e:
            await self.restart()
            return {"status": "error", "stdout": "", "stderr": "", "answer": _not_ready(),
                    "result": f"Python REPL failed ({e}); it was restarted and its state was reset."}
        if not line:
            code_ = await proc.wait()
            await self.restart()
            return {"status": "error", "stdout": "", "stderr": "", "answer": _not_ready(),
                    "result": f"Python REPL exited with code {code_}; it was restarted and its state was reset."}
        result = json.loads(line)
        self.answer = result.get("answer") or _not_ready()
        return result

    async def _bash_execute(self, code: str, timeout: float) -> dict[str, Any]:
        output, exit_code, ready, content = await self._bash_exchange(code, timeout)
        status = "ok"
        if exit_code is None:  # the shell ended (e.g. `exit`)
            status, rc = "error", await self.process.wait() if self.process else -1  # type: ignore[union-attr]
            output += f"\nBash session exited with code {rc}\n"
            await self.restart()
        else:
            self.answer = {"ready": _truthy(ready), "content": content}
        return {"status": status, "stdout": output, "stderr": "", "result": None, "exit_code": exit_code,
                "answer": dict(self.answer)}

    async def _bash_exchange(self, code: str, timeout: float) -> tuple[str, int | None, str, str]:
        proc = self.process
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        marker = f"__RLM_DONE_{uuid.uuid4().hex}__"
        script = Path(self.control_dir) / "command.sh"
        script.write_text(code, encoding="utf-8")
        proc.stdin.write((f'eval "$(cat {_quote(str(script))})" </dev/null 2>&1\n'
                          f'__rlm_rc=$?; printf "\\n{marker} %s " "$__rlm_rc"; printf "%s" "${{RLM_READY:-}}" | base64 | tr -d "\\n"; '
                          f'printf " "; printf "%s" "${{RLM_CONTENT-}}" | base64 | tr -d "\\n"; printf " \\n"\n').encode())
        try:
            await proc.stdin.drain()
            raw = await asyncio.wait_for(_read_until(proc.stdout, marker.encode()), timeout=timeout)
        except asyncio.TimeoutError:
            raise ReplTimeout from None
        except ConnectionError:
            raw = b""
        text = raw.decode("utf-8", errors="replace")
        head, found, tail = text.partition(marker)
        if not found:
            return text, None, "", ""
        fields = tail.split(" ") + ["", "", ""]  # exit code, RLM_READY, RLM_CONTENT; missing ones empty
        rc = int(fields[1]) if fields[1].lstrip("-").isdigit() else None
        ready, content = _b64(fields[2]), _b64(fields[3])
        return head[:-1] if head.endswith("\n") else head, rc, ready, content


def copy_context_directory(src: str, dst: str, max_bytes: int | None) -> None:
    """Copy the task's folder into the working folder; symlinks and folders over `max_bytes` are refused."""
    if os.path.islink(src):
        raise ValueError(f"context_dir cannot be a symlink: {src}")
    if not os.path.isdir(src):
        raise ValueError(f"context_dir must be a directory: {src}")
    total = 0
    for root, dirs, files in os.walk(src):
        for name in dirs + files:
            if os.path.islink(os.path.join(root, name)):
                raise ValueError(f"context_dir contains a symlink, which is not allowed: {os.path.join(root, name)}")
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    if max_bytes is not None and total > max_bytes:
        raise ValueError(f"Context directory exceeds size limit: {total} bytes > {max_bytes} bytes.")
    shutil.copytree(src, dst, dirs_exist_ok=True)


def write_builtin_context(data: Any, fs_root: str) -> None:
    """`info["context"]` as a file: context.txt for a string, context.json for JSON-able data."""
    if isinstance(data, str):
        Path(fs_root, "context.txt").write_text(data, encoding="utf-8")
        return
    try:
        text = json.dumps(data, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError("Legacy context data must be JSON-serializable or a raw string.") from e
    Path(fs_root, "context.json").write_text(text, encoding="utf-8")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _b64(text: str) -> str:
    try:
        return base64.b64decode(text.strip()).decode("utf-8", errors="replace")
    except ValueError:
        return ""


async def _read_until(stream: asyncio.StreamReader, marker: bytes) -> bytes:
    """Bytes up to the end of the marker's line (the head capped at _READ_CAP); what came before EOF otherwise."""
    kept, window = bytearray(), b""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(kept)
        window = window[-(len(marker) + 512):] + chunk
        if len(kept) < _READ_CAP:
            kept += chunk
        at = window.find(marker)
        if at >= 0 and b"\n" in window[at:]:
            if len(kept) >= _READ_CAP and marker not in kept:  # the marker fell beyond the cap: put it back
                kept = kept[:_READ_CAP] + b"\n... [output truncated]\n" + window[at:]
            return bytes(kept[:kept.find(b"\n", kept.find(marker)) + 1])
