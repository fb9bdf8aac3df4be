"""The supervisor: runs the processes of `<output_dir>/configs/launch.json`, tees the trainer's output (rank 0's, with
several training processes) to the console and `logs/trainer.log`, keeps `run.json` current, and on Ctrl-C /
SIGTERM stops every child (SIGTERM to each child's process group, SIGKILL after STOP_GRACE_S)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from verifiers_rl.launching.prepare import LAUNCH_FILE

STOP_GRACE_S = 8.0  # SIGTERM → SIGKILL; with the polling around it, every child is gone within 10 s

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def _tee(stream: Any, log_path: Path, echo: bool) -> None:
    """Copy a child's output to the log (escape codes stripped) and, when `echo`, to our stdout."""
    out = getattr(sys.stdout, "buffer", None) if echo else None
    pending = b""
    with log_path.open("ab") as log:
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if out is not None:
                try:
                    out.write(chunk)
                    out.flush()
                except (OSError, ValueError):
                    out = None
            data = pending + chunk
            cut = data.rfind(b"\x1b")  # keep an escape sequence split across reads for the next round
            if cut != -1 and cut > len(data) - 32 and not _ANSI.match(data, cut):
                data, pending = data[:cut], data[cut:]
            else:
                pending = b""
            log.write(_ANSI.sub(b"", data))
            log.flush()
        if pending:
            log.write(_ANSI.sub(b"", pending))


def _terminate(procs: dict[str, subprocess.Popen], extra_groups: list[int] | None = None) -> None:
    """SIGTERM every child's process group, then SIGKILL what is left after STOP_GRACE_S. `extra_groups`: process
    groups the children started in sessions of their own (the vLLM servers the trainer started)."""
    from verifiers_rl.runs import signal_group

    live = [p for p in procs.values() if p.poll() is None]
    for p in reversed(live):  # trainer first, then the server it talks to
        signal_group(p.pid, signal.SIGTERM)
    for g in extra_groups or []:
        signal_group(g, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs.values():
        # Anything left in a child's group (its own children included) is killed, even when the leader exited.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        if p.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=1.0)
    for g in extra_groups or []:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, signal.SIGKILL)


def _catch_signals(stop: threading.Event, got: list[int]) -> dict[int, Any]:
    """SIGINT / SIGTERM / SIGHUP set `stop` (the first one lands in `got`); returns the handlers they replace."""

    def on_signal(sig: int, frame: Any) -> None:
        if not got:
            got.append(sig)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    if hasattr(signal, "SIGHUP"):
        old[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_signal)
    return old


def _child_env(p: dict[str, Any], is_main: bool, echo: bool) -> dict[str, str]:
    env = {**os.environ, **p.get("env", {})}
    if is_main and echo and sys.stdout.isatty():
        env.setdefault("FORCE_COLOR", "1")
        with contextlib.suppress(OSError):
            env.setdefault("COLUMNS", str(os.get_terminal_size().columns))
    elif is_main:
        env.setdefault("COLUMNS", "200")  # a pipe or a log file: don't wrap lines at 80
    return env


def _start_all(spec: dict[str, Any], out: Path, echo: bool, stop: threading.Event,
               procs: dict[str, subprocess.Popen], threads: list[threading.Thread]) -> None:
    """Start the processes in order (each started one lands in `procs` at once)."""
    from verifiers_rl.runs import update_run

    logs = out / "logs"
    for p in spec["processes"]:
        if stop.is_set():
            break
        log_path = logs / f"{p['name']}.log"
        log_path.write_bytes(b"")
        is_main = p["name"] == spec.get("main", "trainer")
        env = _child_env(p, is_main, echo)
        proc = subprocess.Popen(p["cmd"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs[p["name"]] = proc
        update_run(out, children={k: v.pid for k, v in procs.items()})
        t = threading.Thread(target=_tee, args=(proc.stdout, log_path, echo and is_main), daemon=True)
        t.start()
        threads.append(t)


def _watch(main: subprocess.Popen | None, procs: dict[str, subprocess.Popen], logs: Path,
           stop: threading.Event) -> str | None:
    """Wait for the main process to end or a stop; returns a failure when another process dies first."""
    while main is not None and not stop.is_set():
        if main.poll() is not None:
            break
        dead = [n for n, pr in procs.items() if pr is not main and pr.poll() is not None]
        if dead:
            return f"{dead[0]} exited with code {procs[dead[0]].returncode}; see {logs / (dead[0] + '.log')}"
        stop.wait(0.2)
    return None


def _outcome(got: list[int], failure: str | None, main: subprocess.Popen | None) -> tuple[str, int]:
    if got:
        return "stopped", 128 + got[0]
    if failure is not None:
        return "failed", 1
    if main is not None and main.returncode == 0:
        return "finished", 0
    return "failed", (main.returncode if main is not None and main.returncode else 1)


def supervise(output_dir: str | Path, echo: bool = True) -> int:
    """Run the processes of `<output_dir>/configs/launch.json`; returns the exit code (130/143 when stopped)."""
    from verifiers_rl.runs import now_iso, proc_start_ticks, update_run

    out = Path(output_dir)
    started = time.time()  # rank logs older than this are an earlier run's
    spec = json.loads((out / "configs" / LAUNCH_FILE).read_text())
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    got: list[int] = []
    old = _catch_signals(stop, got)
    update_run(out, pid=os.getpid(), pid_start=proc_start_ticks(os.getpid()), status="running")
    procs: dict[str, subprocess.Popen] = {}
    threads: list[threading.Thread] = []
    failure: str | None = None
    try:
        _start_all(spec, out, echo, stop, procs, threads)
        failure = _watch(procs.get(spec.get("main", "trainer")), procs, logs, stop)
    finally:
        from verifiers_rl.runs import read_run

        _terminate(procs, [int(g) for g in (read_run(out) or {}).get("servers") or []])
        for t in threads:
            t.join(timeout=2.0)
        for s, h in old.items():
            signal.signal(s, h)
    status, rc = _outcome(got, failure, procs.get(spec.get("main", "trainer")))
    update_run(out, status=status, exit_code=rc, ended_at=now_iso(), **({"error": failure} if failure else {}))
    if got and (echo or failure):
        print(f"\nstopped ({signal.Signals(got[0]).name}): every process ended; run dir {out}", flush=True)
    elif failure:
        print(f"error: {failure}", file=sys.stderr, flush=True)
    if status == "failed":
        from verifiers_rl.launching.planning import rank_stderr_logs

        for path in rank_stderr_logs(logs, since=started):  # a rank other than 0 failed: its traceback is there
            print(f"rank output: {path}", file=sys.stderr, flush=True)
    return rc


def start_detached(output_dir: str | Path) -> int:
    """The supervisor in the background: own session, output to logs/launcher.log. Returns its pid."""
    out = Path(output_dir)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    log = (out / "logs" / "launcher.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "verifiers_rl.launch", "supervise", str(out)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log.close()
    return proc.pid
