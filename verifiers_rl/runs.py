"""Local runs: a run lives in its output dir (default `outputs/<run_name>`) with a `run.json` (name, pid, status,
resolved config without secrets, child and server pids, ...) that `vf-rl list / logs / stop / delete` read and update.
Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Callable

RUN_FILE = "run.json"
DEFAULT_ROOT = "outputs"
LIVE = ("starting", "running")


class RunError(Exception):
    """A run-management mistake (unknown run, running run deleted without --force): one line, exit 2."""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def run_path(output_dir: str | Path) -> Path:
    return Path(output_dir) / RUN_FILE


def read_run(output_dir: str | Path) -> dict[str, Any] | None:
    p = run_path(output_dir)
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def write_run(output_dir: str | Path, record: dict[str, Any]) -> None:
    """Atomic: readers never see half a file."""
    p = run_path(output_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, p)


def update_run(output_dir: str | Path, **changes: Any) -> dict[str, Any]:
    record = read_run(output_dir) or {}
    record.update(changes)
    write_run(output_dir, record)
    return record


# --- processes -------------------------------------------------------------------------------------------------------


def proc_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int | None, start_ticks: int | None = None) -> bool:
    """Running (not a zombie, not a reused pid)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
    if start_ticks is not None:
        now = proc_start_ticks(pid)
        if now is not None and now != start_ticks:
            return False
    return True


def status_of(record: dict[str, Any]) -> str:
    """The recorded status, or 'crashed' when it says running but its launcher is gone."""
    status = str(record.get("status", "unknown"))
    if status in LIVE and not pid_alive(record.get("pid"), record.get("pid_start")):
        return "crashed"
    return status


def is_running(record: dict[str, Any] | None) -> bool:
    return bool(record) and status_of(record) in LIVE  # type: ignore[arg-type]


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by `pid` (each child runs in its own session), else the process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def wait_gone(pids: list[int], timeout: float, starts: dict[int, int | None] | None = None) -> bool:
    starts = starts or {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(pid_alive(p, starts.get(p)) for p in pids):
            return True
        time.sleep(0.1)
    return not any(pid_alive(p, starts.get(p)) for p in pids)


# --- finding runs ----------------------------------------------------------------------------------------------------


def find_runs(root: str | Path = DEFAULT_ROOT, max_depth: int = 4) -> list[Path]:
    """Output dirs holding a run.json under `root` (itself included), sorted by start time."""
    root = Path(root)
    found: list[Path] = []
    if not root.is_dir():
        return found

    def walk(d: Path, depth: int) -> None:
        if (d / RUN_FILE).is_file():
            found.append(d)
        if depth >= max_depth:
            return
        try:
            subs = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for s in subs:
            if s.name.startswith("checkpoint-") or s.name in ("logs", "configs"):
                continue
            walk(s, depth + 1)

    walk(root, 0)
    return sorted(found, key=lambda p: str((read_run(p) or {}).get("started_at", "")))


def resolve_run_dir(spec: str, root: str | Path = DEFAULT_ROOT) -> Path:
    """RUN = an output dir (holding run.json), or a run name / dir name under `root`."""
    p = Path(spec)
    if (p / RUN_FILE).is_file():
        return p
    matches = []
    for d in find_runs(root):
        rec = read_run(d) or {}
        if spec in (rec.get("name"), d.name, str(d.relative_to(root)) if d != Path(root) else None):
            matches.append(d)
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise RunError(f"run {spec!r} is ambiguous: {', '.join(map(str, matches))}; give its output dir")
    if p.is_dir():
        raise RunError(f"{spec}: no {RUN_FILE} there (not a vf-rl run dir)")
    if "/" in spec:  # a path, not a run name: searching the runs root for it would only mislead
        raise RunError(f"{spec}: no such directory")
    names = [str((read_run(d) or {}).get("name") or d.name) for d in find_runs(root)]
    from verifiers_rl.value_check import close_match

    close = close_match(spec, names)
    hint = f" (did you mean {close}?)" if close else (f"; runs: {', '.join(names)}" if names else "")
    raise RunError(f"run {spec!r} not found under {root}/{hint}")


# --- metrics ---------------------------------------------------------------------------------------------------------


def last_metrics(output_dir: str | Path) -> tuple[int | None, float | None]:
    """(last logged step, last reward/all/mean) from metrics.jsonl."""
    path = Path(output_dir) / "metrics.jsonl"
    step: int | None = None
    reward: float | None = None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec.get("step"), int):
            step = rec["step"] if step is None else max(step, rec["step"])
        if isinstance(rec.get("reward/all/mean"), (int, float)):
            reward = float(rec["reward/all/mean"])
    return step, reward


def run_rows(root: str | Path = DEFAULT_ROOT) -> list[dict[str, Any]]:
    rows = []
    for d in find_runs(root):
        rec = read_run(d) or {}
        step, reward = last_metrics(d)
        max_steps = (((rec.get("config") or {}).get("trainer") or {}).get("args") or {}).get("max_steps")
        rows.append({"name": rec.get("name") or d.name, "status": status_of(rec), "step": step,
                     "max_steps": max_steps, "reward": reward, "started_at": rec.get("started_at"),
                     "output_dir": str(d), "pid": rec.get("pid")})
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    header = ["NAME", "STATUS", "STEP", "REWARD", "STARTED", "OUTPUT DIR"]
    table = [header]
    for r in rows:
        step = "-" if r["step"] is None else (f"{r['step']}/{r['max_steps']}" if r["max_steps"] else str(r["step"]))
        reward = "-" if r["reward"] is None else f"{r['reward']:.4f}"
        started = (r["started_at"] or "-").replace("T", " ")[:19]
        table.append([str(r["name"]), r["status"], step, reward, started, r["output_dir"]])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


# --- stop / delete / logs --------------------------------------------------------------------------------------------


def stop_run(output_dir: str | Path, timeout: float = 15.0) -> tuple[bool, str]:
    """SIGTERM the launcher (it stops its children within 10 s); SIGKILL everything left after `timeout`.
    Returns (whether it was running, the status now)."""
    rec = read_run(output_dir)
    if not rec:
        raise RunError(f"{output_dir}: no {RUN_FILE}")
    if not is_running(rec):
        return False, status_of(rec)
    pid = int(rec["pid"])
    children = {name: int(p) for name, p in (rec.get("children") or {}).items() if p}
    children.update({f"server{i}": int(p) for i, p in enumerate(rec.get("servers") or []) if p})
    starts = {int(rec["pid"]): rec.get("pid_start")}
    signal_group(pid, signal.SIGTERM)
    if not wait_gone([pid], timeout, starts):
        signal_group(pid, signal.SIGKILL)
        for child in children.values():
            signal_group(child, signal.SIGKILL)
        wait_gone([pid, *children.values()], 5.0, starts)
    else:
        for child in children.values():  # the launcher stops them; this only catches leftovers
            if pid_alive(child):
                signal_group(child, signal.SIGKILL)
    rec = read_run(output_dir) or rec
    if rec.get("status") in LIVE:
        update_run(output_dir, status="stopped", ended_at=now_iso())
    return True, "stopped"


def delete_run(output_dir: str | Path, force: bool = False) -> None:
    rec = read_run(output_dir)
    if rec is None:
        raise RunError(f"{output_dir}: no {RUN_FILE} (not a vf-rl run dir); not deleting")
    if is_running(rec):
        if not force:
            raise RunError(f"run {rec.get('name')!r} is running (pid {rec.get('pid')}); stop it first "
                           "(vf-rl stop) or pass --force")
        stop_run(output_dir)
    shutil.rmtree(output_dir)


def tail_lines(path: Path, n: int) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            block, data = 65536, b""
            while size > 0 and data.count(b"\n") <= n:
                step = min(block, size)
                size -= step
                f.seek(size)
                data = f.read(step) + data
        return data.decode(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def follow(path: Path, keep_going: Callable[[], bool], out: Any, from_start: bool = True, poll: float = 0.25) -> None:
    """Print `path` as it grows until `keep_going()` is false (then drain what is left)."""
    while not path.exists():
        if not keep_going():
            return
        time.sleep(poll)
    with path.open("rb") as f:
        if not from_start:
            f.seek(0, os.SEEK_END)
        while True:
            chunk = f.read(65536)
            if chunk:
                out.write(chunk.decode(errors="replace"))
                out.flush()
                continue
            if not keep_going():
                rest = f.read()
                if rest:
                    out.write(rest.decode(errors="replace"))
                    out.flush()
                return
            time.sleep(poll)
