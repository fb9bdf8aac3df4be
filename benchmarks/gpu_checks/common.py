"""What the checks of benchmarks/gpu_check.py share: the run's context, model shapes, the log tee, child processes.

Nothing here imports torch at module level: `gpu_check.py --help` stays fast."""

from __future__ import annotations

import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
GiB = float(1 << 30)

# Qwen3 shapes (the tiny model's byte-level tokenizer: 260 tokens, so the 0.6B shape has no 151,936-row embedding)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": dict(num_hidden_layers=28, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                       intermediate_size=3072, head_dim=128, tie_word_embeddings=True),
    "qwen3-4b": dict(num_hidden_layers=36, hidden_size=2560, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=9728, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "smoke": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, head_dim=16, tie_word_embeddings=True),
}


class CheckFailed(Exception):
    """A check's one-line FAIL reason (no traceback needed)."""


class CheckSkipped(Exception):
    """A check that cannot run here (one line why)."""


class CheckTimeout(Exception):
    """Raised in the main thread when a check runs past its time budget."""


@dataclass
class Outcome:
    status: str          # PASS, FAIL or SKIP
    summary: str         # one line: the figures that matter
    seconds: float = 0.0


@dataclass
class Ctx:
    """The run: smoke or GPU, where scratch files go, the time left, the device."""

    smoke: bool
    scratch: Path
    deadline: float                     # time.monotonic() at which the whole run's budget ends
    cuda: bool = False
    gpu_name: str = "no GPU"
    check_deadline: float = 0.0         # time.monotonic() at which the running check's budget ends
    notes: dict[str, Any] = field(default_factory=dict)
    _policy: Path | None = None

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def check_left(self) -> float:
        return min(self.check_deadline, self.deadline) - time.monotonic()

    def shape(self, name: str) -> dict[str, Any]:
        return dict(SHAPES["smoke" if self.smoke else name])

    def policy_dir(self) -> Path:
        """The Qwen3-0.6B-shaped random model (bf16 on disk, the byte-level tokenizer), built once per run."""
        if self._policy is None:
            t0 = time.perf_counter()
            self._policy = build_shaped_model(self.scratch / "policy-0.6b", self.shape("qwen3-0.6b"), self.device)
            print(f"  model: Qwen3-0.6B-shaped random model ({describe_shape(self.shape('qwen3-0.6b'))}) written to "
                  f"{self._policy} in {time.perf_counter() - t0:.1f} s")
        return self._policy

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p])
        env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        return env


def describe_shape(shape: dict[str, Any]) -> str:
    return (f"{shape['num_hidden_layers']} layers x {shape['hidden_size']}, {shape['num_attention_heads']} heads, "
            f"{shape['num_key_value_heads']} kv heads, head_dim {shape['head_dim']}, MLP {shape['intermediate_size']}"
            + (f", vocab {shape['vocab_size']}" if "vocab_size" in shape else ""))


def build_shaped_model(out: Path, shape: dict[str, Any], device: str = "cpu") -> Path:
    """A random-init Qwen3 of `shape` with the offline tiny model's tokenizer and generation config (its
    `build_tiny_model` has no head_dim option: its files are written first, then config and weights replaced)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from verifiers_rl.models.tiny import build_tiny_model

    build_tiny_model(out, num_layers=1, hidden_size=16, num_heads=2, num_kv_heads=1, intermediate_size=32)
    tiny = Qwen3Config.from_pretrained(out)
    config = Qwen3Config(**{"vocab_size": tiny.vocab_size, "eos_token_id": tiny.eos_token_id, "bos_token_id": None,
                            "pad_token_id": tiny.pad_token_id, "max_position_embeddings": tiny.max_position_embeddings,
                            **shape})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
    for f in out.glob("model*.safetensors*"):
        f.unlink()
    model.to(torch.bfloat16).save_pretrained(out)
    del model
    return out


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


def cuda_reset() -> None:
    """Free what earlier checks left in torch's cache and start the peak-memory count afresh."""
    import gc

    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def cuda_peak_gib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / GiB if torch.cuda.is_available() else None


def fmt_gib(x: float | None) -> str:
    return "n/a (no CUDA)" if x is None else f"{x:.2f} GiB"


class Tee:
    """Everything written to fd 1 and 2 (this process's prints, libraries' C++ warnings, child processes that
    inherit them) goes to the console and, as it comes, to the log file: a run killed at its time limit still
    leaves the log up to that point."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.log = open(path, "ab", buffering=0)
        self.lock = threading.Lock()
        sys.stdout.flush()
        sys.stderr.flush()
        self.console = os.dup(1)
        r, w = os.pipe()
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.close(w)
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="replace")
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="replace")
        self.thread = threading.Thread(target=self._pump, args=(r,), name="gpu-check-tee", daemon=True)
        self.thread.start()

    def _pump(self, r: int) -> None:
        while True:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                return
            view = memoryview(chunk)
            while view:
                try:
                    view = view[os.write(self.console, view):]
                except OSError:
                    break
            with self.lock:
                self.log.write(chunk)

    def log_only(self, text: str) -> None:
        """Text for the log file alone (tracebacks): the console keeps the one-line reasons."""
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.05)  # let the pump write what was printed before
        with self.lock:
            self.log.write(text.encode(errors="replace"))

    def close(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.console, 1)
        os.dup2(self.console, 2)
        self.thread.join(timeout=5)


def run_logged(cmd: list[str], *, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None,
               prefix: str = "  | ", keep: Callable[[str], bool] | None = None) -> tuple[int, list[str]]:
    """Run a child process, printing its output line by line (prefixed) as it comes; kill its whole process
    group past `timeout` (returns rc 124). Returns (exit code, the lines)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd or REPO,
                         start_new_session=True, text=True, errors="replace", bufsize=1)
    lines: list[str] = []
    q: queue.Queue[str | None] = queue.Queue()

    def reader() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            q.put(line.rstrip("\n"))
        q.put(None)

    threading.Thread(target=reader, daemon=True).start()
    end = time.monotonic() + timeout
    try:
        while True:
            try:
                line = q.get(timeout=max(0.1, min(1.0, end - time.monotonic())))
            except queue.Empty:
                if time.monotonic() > end:
                    print(f"{prefix}(killed after {timeout:.0f} s)")
                    return 124, lines
                continue
            if line is None:
                break
            lines.append(line)
            if keep is None or keep(line):
                print(prefix + line)
        return p.wait(timeout=30), lines
    finally:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
