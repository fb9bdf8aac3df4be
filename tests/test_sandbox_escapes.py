"""Escape attempts from inside the jail (verifiers_rl.sandbox), each of which must be denied, and each run must end
within its limit with this process (the host side) still working. Real bwrap jails, real processes, a real TCP
listener; nothing mocked. Where the kernel refuses namespaces the tests skip with bwrap's own reason."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from processes import poll_until
from verifiers_rl.sandbox import SandboxLimits, run, run_python
from verifiers_rl.sandbox.runtimes import probe_bwrap

WHY = probe_bwrap()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no bwrap jail here: {WHY}")
FAST = SandboxLimits(timeout_s=20, memory_mb=512, max_processes=32, max_output_bytes=64 * 1024)


def _running(marker: str) -> bool:
    """Whether a process whose command line holds `marker` runs on the host (read from /proc: ps cuts lines)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                return True
        except OSError:
            pass
    return False


def test_a_plain_command_runs_and_sees_its_work_dir(tmp_path):
    (tmp_path / "input.txt").write_text("seven\n")
    r = run("cat input.txt && pwd && echo out > made.txt", workdir=str(tmp_path), limits=FAST)
    assert r.ok and r.runtime == "bwrap"
    assert r.stdout.split() == ["seven", "/workspace"]
    assert (tmp_path / "made.txt").read_text() == "out\n"


def test_reading_host_files_outside_the_work_dir_is_denied(tmp_path):
    secret = Path.home() / f".vf-sandbox-test-{uuid.uuid4().hex}"
    secret.write_text("host secret")
    try:
        r = run(f"cat /etc/hostname; cat {secret}; cat /etc/passwd; ls {Path.home()}", limits=FAST,
                workdir=str(tmp_path))
    finally:
        secret.unlink()
    assert "host secret" not in r.stdout
    assert socket.gethostname() not in r.stdout.split() or socket.gethostname() == "sandbox"
    assert r.stderr.count("No such file or directory") >= 3
    assert secret.name not in r.stdout


def test_writing_outside_the_work_dir_is_denied(tmp_path):
    marker = f"vf-escape-{uuid.uuid4().hex}"
    r = run(f"for d in /usr /etc /opt /{marker}; do touch $d/{marker} 2>&1; done; "
            f"echo x > /tmp/{marker} && echo tmp-ok", workdir=str(tmp_path), limits=FAST)
    assert r.stdout.count("Read-only file system") + r.stdout.count("No such file or directory") >= 4
    assert "tmp-ok" in r.stdout  # the jail's own /tmp is writable ...
    assert not (Path("/tmp") / marker).exists()  # ... and is not the host's
    assert not any((Path(d) / marker).exists() for d in ("/usr", "/etc", "/opt"))


def test_a_tcp_connection_to_a_host_listener_is_refused(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list = []

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        code = ("import socket\ns = socket.socket(); s.settimeout(3)\n"
                f"print(s.connect_ex(('127.0.0.1', {port})))\n"
                "try:\n    socket.getaddrinfo('pypi.org', 443); print('dns-ok')\nexcept OSError as e: print('dns-no')")
        r = run_python(code, limits=FAST, workdir=str(tmp_path))
        # the host side can still connect: the listener works
        probe = socket.create_connection(("127.0.0.1", port), timeout=3)
        probe.close()
        poll_until(lambda: accepted, 10, 0.05)  # let the accept loop take the probe before it is stopped
    finally:
        stop.set()
        thread.join()
        server.close()
    errno_line, dns = r.stdout.split()
    assert int(errno_line) != 0 and dns == "dns-no"
    assert len(accepted) == 1  # only the host's own probe got through


def test_host_processes_are_invisible(tmp_path):
    marker = f"vf-host-{uuid.uuid4().hex}"
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        r = run("cat /proc/*/cmdline | tr '\\0' ' '; echo; ls -d /proc/[0-9]* | wc -l", limits=FAST,
                workdir=str(tmp_path))
    finally:
        host.kill()
        host.wait()
    assert marker not in r.stdout
    assert int(r.stdout.split()[-1]) <= 6  # bwrap's init, the shell, cat/ls and wc: nothing of the host


def test_nothing_keeps_running_after_the_jail_ends(tmp_path):
    marker = f"vf-linger-{uuid.uuid4().hex}"
    r = run(f"nohup sh -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 & setsid sleep 301 & disown; echo started",
            limits=FAST, workdir=str(tmp_path))
    assert r.stdout.strip() == "started"
    assert not _running(marker) and not _running("sleep 301")


def test_environment_variables_do_not_leak_unless_passed(tmp_path, monkeypatch):
    monkeypatch.setenv("VF_SANDBOX_SECRET", "s3cr3t-token")
    r = run("env", limits=FAST, workdir=str(tmp_path), env={"PASSED": "yes"})
    assert "s3cr3t-token" not in r.stdout and "VF_SANDBOX_SECRET" not in r.stdout
    assert "PASSED=yes" in r.stdout.splitlines()


def test_a_fork_bomb_is_contained_and_ends(tmp_path):
    limits = SandboxLimits(timeout_s=5, memory_mb=256, max_processes=24, max_output_bytes=64 * 1024)
    r = run("bomb() { bomb | bomb & }; bomb; sleep 2; ls -d /proc/[0-9]* | wc -l", limits=limits,
            workdir=str(tmp_path))
    assert r.timed_out or r.exit_code is not None
    lines = [ln for ln in r.stdout.split() if ln.isdigit()]
    if lines:  # the count, when the shell got to print it: never past the process limit
        assert int(lines[-1]) <= limits.max_processes + 1
    assert "fork" in r.stdout + r.stderr or "Resource temporarily unavailable" in r.stderr or r.timed_out
    after = subprocess.run(["true"])  # the host can still start processes
    assert after.returncode == 0


def test_filling_memory_fails_inside_the_jail(tmp_path):
    limits = SandboxLimits(timeout_s=20, memory_mb=256, max_processes=16)
    r = run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))", limits=limits,
                   workdir=str(tmp_path))
    assert not r.ok and not r.timed_out
    assert "MemoryError" in r.stderr or r.signal == "SIGKILL"
    assert len(bytearray(512 << 20)) == 512 << 20  # this process is unaffected


def test_printing_a_gigabyte_is_cut_at_the_output_limit(tmp_path):
    r = run("head -c 1000000000 /dev/zero | tr '\\0' x", limits=FAST, workdir=str(tmp_path))
    assert r.output_truncated and r.exit_code is None
    assert len(r.stdout) <= FAST.max_output_bytes
    assert r.duration_s < FAST.timeout_s


def test_a_command_past_its_time_limit_is_stopped(tmp_path):
    r = run("sleep 30", limits=SandboxLimits(timeout_s=1), workdir=str(tmp_path))
    assert r.timed_out and r.exit_code is None
    assert "time limit" in r.describe_failure()


def test_a_large_file_is_refused(tmp_path):
    r = run("head -c 5000000 /dev/zero > big.bin; echo rc=$?", workdir=str(tmp_path),
            limits=SandboxLimits(timeout_s=20, max_file_mb=1))
    assert (tmp_path / "big.bin").stat().st_size <= 1 << 20
    assert "rc=0" not in r.stdout
