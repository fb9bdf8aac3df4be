"""vf-rl on real short runs (subprocesses, the tiny model, the CPU): a two-step quickstart to the end, Ctrl-C
stopping every child within 10 s, and run management: run --detach, list, logs, stop, delete.

The tiny model and the SFT warm-up are built once (by the first run) and reused by the others."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import poll_until, wait_for

from verifiers_rl import runs

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "vf-rl" / "quickstart.toml"
_SCRIPT = Path(sys.executable).with_name("vf-rl")
VF_RL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "verifiers_rl.cli.rl"]


def tiny(ws: Path, name: str, steps: int) -> list[str]:
    return ["@", str(QUICKSTART), "--tiny_model.path", str(ws / "tiny"), "--warmup.output-dir", str(ws / "warmup"),
            "--warmup.max-steps", "5", "--warmup.num-examples", "64", "--trainer.args.max-steps", str(steps),
            "--trainer.args.batch-size", "16", "--trainer.args.micro-batch-size", "16",
            "--output-dir", f"outputs/{name}"]


def vf(ws: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*VF_RL, *args], cwd=ws, capture_output=True, text=True, timeout=timeout)


def descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


def stepped(out: Path, n: int = 1):
    return lambda: (runs.last_metrics(out)[0] or 0) >= n


def wait_for_first_step(proc: subprocess.Popen, out: Path, console: Path, timeout: float = 360) -> None:
    """Wait for the run's first logged step. A run that ends first fails at once; one that hangs is sent SIGABRT
    (its children run with PYTHONFAULTHANDLER, so each prints its Python stacks); either failure shows the
    console's and trainer.log's tails."""
    if poll_until(lambda: stepped(out)() or proc.poll() is not None, timeout, 0.5) and stepped(out)():
        return
    why = f"the run exited {proc.returncode}" if proc.poll() is not None else f"no step after {timeout} s"
    if proc.poll() is None:
        for pid in descendants(proc.pid):
            try:
                os.kill(pid, signal.SIGABRT)
            except OSError:
                pass
        time.sleep(3)
    tails = [f"--- {f}:\n{f.read_text(errors='replace')[-4000:]}" for f in (console, out / "logs" / "trainer.log")
             if f.exists()]
    raise AssertionError("\n".join([f"waiting for the first training step: {why}", *tails]))


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vf-rl-runs")


@pytest.fixture(scope="session")
def first_run(workspace):
    """`vf-rl @ quickstart.toml` with a two-step override, to the end (also builds the shared tiny model and
    warm-up)."""
    r = vf(workspace, *tiny(workspace, "first", 2), "--eval.num-examples", "8", "--eval.interval", "2", timeout=500)
    return r, workspace / "outputs" / "first"


def test_quickstart_two_steps_runs_to_the_end_and_leaves_a_checkpoint(first_run):
    r, out = first_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "no GPU found: running on the CPU with the local engine (in-process generation)"
    assert (out / "checkpoint-2" / "config.json").exists() and (out / "checkpoint-2" / "trainer_state.json").exists()
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "finished" and rec["exit_code"] == 0 and rec["name"] == "first"
    assert rec["config"]["trainer"]["args"]["max_steps"] == 2 and rec["started_at"] and rec["ended_at"]
    log = (out / "logs" / "trainer.log").read_text()
    assert "step 2/2" in log and "held-out eval after RL" in log and "\x1b[" not in log
    assert "step 2/2" in r.stdout  # the console shows the trainer
    assert (out / "configs" / "rl.toml").exists() and (out / "configs" / "launch.json").exists()
    assert runs.last_metrics(out)[0] == 2
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/reverse-text/reward/mean" in rec for rec in records)  # [eval] interval = 2
    # the interval's eval at the last step is the after-RL eval: its rollouts are not generated twice
    assert "(the step-2 eval's rollouts)" in " ".join(log.split())


def test_reused_output_dir_is_refused_resumed_or_cleaned(first_run, workspace):
    import shutil

    r, first = first_run
    assert r.returncode == 0
    shutil.copytree(first, workspace / "outputs" / "reused")  # the other tests read `first`
    args = [*tiny(workspace, "reused", 3), "--no-eval"]
    refused = vf(workspace, *args)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert re.fullmatch(r"error: output_dir: outputs/reused holds an earlier run \(metrics.jsonl and \d+ "
                        r"checkpoints?\); pass --clean-output-dir to clear it, --trainer.args.resume-from-checkpoint "
                        r"true to continue it, or another --output-dir\n", refused.stderr), refused.stderr
    out = workspace / "outputs" / "reused"
    resumed = vf(workspace, *tiny(workspace, "reused", 3), "--eval.num-examples", "8",
                 "--trainer.args.resume-from-checkpoint", "true", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [rec["step"] for rec in records]
    assert steps[-1] == 3 and steps.count(3) >= 1 and 1 in steps  # appended: the same run, continued
    # the before-RL eval is the first run's: the resumed policy is not evaluated as "before"
    assert "held-out eval before RL: not run again on resume" in resumed.stdout
    assert [rec["step"] for rec in records if rec.get("eval/when") == "before"] == [0]
    assert [rec["step"] for rec in records if rec.get("eval/when") == "after"] == [2, 3]
    cleaned = vf(workspace, *tiny(workspace, "reused", 1), "--no-eval", "--clean-output-dir", timeout=300)
    assert cleaned.returncode == 0, cleaned.stdout[-2000:] + cleaned.stderr[-2000:]
    assert "--clean-output-dir: cleared outputs/reused" in cleaned.stdout
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert {rec["step"] for rec in records} <= {0, 1} and not (out / "checkpoint-3").exists()
    assert (out / "checkpoint-1").exists()


@pytest.fixture
def sigint_run(first_run, workspace):
    """A long run in the foreground, to Ctrl-C. Alone on the machine: two trainers on 2 cores (each with torch's
    OpenMP threads) slow each other 10-30x here at random, which once kept its first step past the wait in CI."""
    out = (workspace / "sigint.out").open("w")
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a hung run's stacks, on SIGABRT (wait_for_first_step)
    sig = subprocess.Popen([*VF_RL, *tiny(workspace, "sigint", 500), "--no-eval"], cwd=workspace, stdout=out,
                           stderr=subprocess.STDOUT, env=env)
    yield sig
    out.close()
    if sig.poll() is None:
        sig.kill()


def test_sigint_stops_every_child_within_10_s(sigint_run, workspace):
    proc = sigint_run
    out = workspace / "outputs" / "sigint"
    wait_for_first_step(proc, out, workspace / "sigint.out")
    kids = descendants(proc.pid)
    assert kids, "the trainer runs in a child process"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    wait_for(lambda: not any(runs.pid_alive(k) for k in kids), max(0.0, 10 - (time.monotonic() - t0)),
             "every child to exit")
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 128 + signal.SIGINT
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "stopped"
    assert "stopped (SIGINT)" in (workspace / "sigint.out").read_text()


def test_detach_list_logs_stop_delete(first_run, workspace):
    front = subprocess.Popen([*VF_RL, "run", *tiny(workspace, "det", 500), "--no-eval", "--detach"], cwd=workspace,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = front.communicate(timeout=300)
    assert front.returncode == 0, stderr
    assert "started in the background" in stdout
    out = workspace / "outputs" / "det"
    rec = json.loads((out / "run.json").read_text())
    assert rec["detached"] and runs.pid_alive(rec["pid"])
    try:
        wait_for(stepped(out), 360, "the detached run's first step")
        listing = vf(workspace, "list").stdout
        row = next(line for line in listing.splitlines() if line.startswith("det "))
        assert " running " in row and "/500" in row and "outputs/det" in row
        step, reward = runs.last_metrics(out)
        assert step >= 1 and reward is not None
        logs = vf(workspace, "logs", "det")
        assert logs.returncode == 0 and "step 1/500" in logs.stdout
        assert len(vf(workspace, "logs", "det", "-n", "2").stdout.splitlines()) == 2
        refused = vf(workspace, "delete", "det")
        assert refused.returncode == 2 and "is running" in refused.stderr and out.exists()
        children = list(json.loads((out / "run.json").read_text())["children"].values())
        stopped = vf(workspace, "stop", "det", timeout=60)
        assert stopped.returncode == 0 and "stopped run det" in stopped.stdout
    finally:
        rec = runs.read_run(out) or {}
        if runs.is_running(rec):
            runs.stop_run(out)
    assert not runs.pid_alive(rec["pid"]) and not any(runs.pid_alive(c) for c in children)
    assert runs.read_run(out)["status"] == "stopped"
    assert " stopped " in next(line for line in vf(workspace, "list").stdout.splitlines() if line.startswith("det "))
    follow = vf(workspace, "logs", "outputs/det", "--follow", timeout=30)  # a stopped run: prints and returns
    assert follow.returncode == 0 and "step 1/500" in follow.stdout
    assert vf(workspace, "stop", "det").stdout.startswith("run det is not running")
    deleted = vf(workspace, "delete", "det")
    assert deleted.returncode == 0 and not out.exists()
    assert "det " not in vf(workspace, "list").stdout


# --- run records without processes -----------------------------------------------------------------------------------


def test_run_records_list_and_lookup(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = tmp_path / "outputs" / "a"
    b = tmp_path / "outputs" / "group" / "b"
    runs.write_run(a, {"name": "a", "status": "finished", "started_at": "2026-01-01T00:00:00",
                       "config": {"trainer": {"args": {"max_steps": 10}}}})
    runs.write_run(b, {"name": "bee", "status": "running", "pid": 2 ** 22 + 12345, "started_at": "2026-01-02T00:00:00"})
    (a / "metrics.jsonl").write_text('{"step": 1, "reward/all/mean": 0.25}\n{"step": 2, "loss/mean": 0.1}\n'
                                     '{"step": 3, "reward/all/mean": 0.5}\nnot json\n')
    assert runs.last_metrics(a) == (3, 0.5)
    rows = runs.run_rows()
    assert [(r["name"], r["status"], r["step"]) for r in rows] == [("a", "finished", 3), ("bee", "crashed", None)]
    table = runs.format_rows(rows).splitlines()
    assert table[0].split()[:4] == ["NAME", "STATUS", "STEP", "REWARD"] and "3/10" in table[1] and "0.5000" in table[1]
    def found(spec):
        return runs.resolve_run_dir(spec).resolve()

    assert found("a") == a and found("bee") == b and found("group/b") == b and found(str(b)) == b
    with pytest.raises(runs.RunError, match="did you mean bee"):
        runs.resolve_run_dir("be")
    with pytest.raises(runs.RunError, match="not a vf-rl run dir"):
        runs.delete_run(tmp_path)
    gone = str(tmp_path / "gone")  # a path that does not exist: not searched for as a run name under outputs/
    with pytest.raises(runs.RunError, match=f"^{re.escape(gone)}: no such directory$"):
        runs.resolve_run_dir(gone)
    runs.delete_run(b)  # crashed: not running, deleted without --force
    assert not b.exists()


def test_stop_a_process_group(tmp_path):
    """stop_run: SIGTERM to the launcher; a launcher that ignores it is SIGKILLed with its children."""
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
            "print(c.pid, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(p.stdout.readline())
    runs.write_run(tmp_path, {"name": "x", "status": "running", "pid": p.pid,
                              "pid_start": runs.proc_start_ticks(p.pid), "children": {"trainer": child}})
    assert runs.stop_run(tmp_path, timeout=1.0) == (True, "stopped")
    assert runs.stop_run(tmp_path) == (False, "stopped")
    p.wait(timeout=10)
    assert not runs.pid_alive(child) and runs.read_run(tmp_path)["status"] == "stopped"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_spec(out: Path, processes: list[dict]) -> None:
    (out / "configs").mkdir(parents=True, exist_ok=True)
    (out / "configs" / "launch.json").write_text(json.dumps({"main": "trainer", "processes": processes}))
    runs.write_run(out, {"name": out.name, "status": "starting"})


def test_supervise_waits_for_the_server_then_runs_the_trainer(tmp_path):
    from verifiers_rl.launch import supervise

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "health").write_text("ok")
    port = _free_port()
    out = tmp_path / "run"
    _launch_spec(out, [
        {"name": "inference", "cmd": [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                      "--directory", str(tmp_path / "www")],
         "env": {}, "ready_url": f"http://127.0.0.1:{port}/health", "ready_timeout": 30},
        {"name": "trainer", "cmd": [sys.executable, "-c", "print('\\x1b[1mtraining\\x1b[0m done')"], "env": {}},
    ])
    assert supervise(out, echo=False) == 0
    rec = runs.read_run(out)
    assert rec["status"] == "finished" and set(rec["children"]) == {"inference", "trainer"}
    assert (out / "logs" / "trainer.log").read_text() == "training done\n"  # escape codes stripped
    assert not runs.pid_alive(rec["children"]["inference"])  # the server is stopped with the run


def test_supervise_reports_a_server_that_dies(tmp_path):
    from verifiers_rl.launch import supervise

    out = tmp_path / "run"
    _launch_spec(out, [
        {"name": "inference", "cmd": [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], "env": {}},
        {"name": "trainer", "cmd": [sys.executable, "-c", "import time; time.sleep(3600)"], "env": {}},
    ])
    assert supervise(out, echo=False) == 1  # returns at all: the hour-long trainer is stopped, not waited for
    assert not runs.pid_alive(runs.read_run(out)["children"]["trainer"])
    rec = runs.read_run(out)
    assert rec["status"] == "failed" and "inference exited with code 3" in rec["error"]
    assert "boom" in (out / "logs" / "inference.log").read_text()


def test_a_failed_run_points_at_its_own_rank_logs_not_an_earlier_runs(tmp_path, capsys):
    """A run that fails in an output dir an earlier 2-process run used (a resume): the rank log that run left is
    not named as this failure's (it was, and held none of its error)."""
    from verifiers_rl.launch import supervise
    from verifiers_rl.launching.planning import RANK_LOGS

    out = tmp_path / "run"
    earlier = out / "logs" / RANK_LOGS / "earlier-run" / "attempt_0" / "1" / "stderr.log"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("a warning of the earlier run\n")
    os.utime(earlier, (time.time() - 600, time.time() - 600))
    _launch_spec(out, [{"name": "trainer", "cmd": [sys.executable, "-c", "import sys; sys.exit(2)"], "env": {}}])
    assert supervise(out, echo=False) == 2  # the trainer's exit code
    assert runs.read_run(out)["status"] == "failed"
    assert str(earlier) not in capsys.readouterr().err
