"""Full-weight sync over vLLM's native weight-transfer protocol: the trainer broadcasts its parameters straight
into the servers' workers, which load them with vLLM's layerwise reload. Nothing touches the disk.

Per sync, for each server: `/pause?mode=keep` (requests in flight freeze, none is aborted) → `/start_weight_update`
→ `/update_weights` while the trainer broadcasts → `/finish_weight_update` (tagged with the policy version, see
`/weight_info`) → `/reset_prefix_cache?reset_running_requests=true` (no cached prefix of the old weights survives)
→ `/resume`. The servers must run with `--weight-transfer-config '{"backend": ...}'` and `VLLM_SERVER_DEV_MODE=1`
(the launcher adds both).

Transports (`RLConfig.vllm_weight_transfer`):
- `nccl`: vLLM's own NCCL engine (`NCCLTrainerWeightTransferEngine`); the trainer's GPU → the servers' GPUs.
  Needs CUDA and `vllm` importable in the trainer's Python.
- `gloo`: our backend for CPU servers (`vllm_worker/vf_gloo_transfer.py`, loaded into the server with
  `--worker-extension-cls`); the same protocol over TCP.
`disk` (safetensors + `reload_weights`, `vllm_sync.FullWeightReload`) is the fallback that works everywhere.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verifiers_rl.errors import ModelServerError
from verifiers_rl.inference.vllm_client import VLLMClient
from verifiers_rl.inference.vllm_server import free_port
from verifiers_rl.inference.vllm_sync import _unwrap, refresh_tied_head, reset_prefix_cache
from verifiers_rl.inference.weight_sync import WeightSync
from verifiers_rl.plan.transfer import NATIVE

logger = logging.getLogger(__name__)


class ServerControl:
    """vLLM's weight-sync control plane for one server (the four-method `VLLMWeightSyncClient` protocol, plus
    pause/resume/version), over our client: one-line errors that name the server. Requests that rendezvous with
    the trainer's broadcast are never retried."""

    def __init__(self, client: VLLMClient, idx: int, timeout: float):
        self.client, self.idx, self.timeout = client, idx, timeout
        self.root = client.roots[idx]

    def status(self) -> str | None:
        """Why the server is gone (a server we launched), or None."""
        return self.client._status(self.idx)

    def _post(self, path: str, payload: dict | None = None, retries: int = 0) -> Any:
        return self.client.post(self.idx, path, payload, what="weight transfer", timeout=self.timeout,
                                retries=retries)

    def world_size(self) -> int:
        try:
            return int(self.client.get_json(self.idx, "/get_world_size")["world_size"])
        except Exception as e:
            raise ModelServerError(f"weight transfer: GET {self.root}/get_world_size failed "
                                   f"({type(e).__name__}: {e}); start the server with VLLM_SERVER_DEV_MODE=1 and "
                                   "--weight-transfer-config, or use vllm_weight_transfer='disk'") from None

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._post("/init_weight_transfer_engine", {"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        self._post("/shutdown_weight_transfer_engine", retries=1)

    def start_weight_update(self) -> None:
        self._post("/start_weight_update")

    def update_weights(self, update_info: dict) -> None:
        self._post("/update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._post("/finish_weight_update", {"weight_version": weight_version} if weight_version else None)

    def update_weight_version(self, version: str) -> None:
        self._post("/update_weight_version", {"new_version": version}, retries=1)

    def pause(self) -> None:
        self._post("/pause?mode=keep", retries=2)

    def resume(self) -> None:
        self._post("/resume", retries=2)


class GlooSender:
    """Trainer side of the gloo backend: rank 0 of a gloo group with the server's workers (ranks 1..N)."""

    def __init__(self, control: ServerControl, master_address: str, world_size: int, timeout: float):
        import torch.distributed as dist

        from verifiers_rl.inference.vllm_worker.vf_weight_wire import STORE_PREFIX

        self.control = control
        port = free_port(master_address)
        init = {"master_address": master_address, "master_port": port, "rank_offset": 1,
                "world_size": world_size, "timeout_s": timeout}
        td = datetime.timedelta(seconds=timeout)
        formed: dict[str, Any] = {}

        def form() -> None:
            try:
                store = dist.TCPStore(master_address, port, world_size, is_master=True, timeout=td,
                                      wait_for_workers=False)
                formed["group"] = dist.ProcessGroupGloo(dist.PrefixStore(STORE_PREFIX, store), 0, world_size, td)
                formed["store"] = store
            except Exception as e:
                formed["error"] = e

        # Both sides block until the group forms: open rank 0 on a daemon thread (a server that refuses the init
        # must not leave us waiting out the timeout) while the workers are asked to join.
        opener = threading.Thread(target=form, daemon=True)
        opener.start()
        pool = ThreadPoolExecutor(1)
        try:
            fut = pool.submit(control.init_weight_transfer_engine, init)
            while opener.is_alive() and not fut.done():
                opener.join(0.05)
            if fut.done() and fut.exception() is not None:
                raise _init_error(control, fut.exception())
            opener.join()
            if "error" in formed:
                e = formed["error"]
                raise ModelServerError(f"weight transfer: could not form the gloo group with "
                                       f"{control.root} ({type(e).__name__}: {e})")
            fut.result()
        finally:
            pool.shutdown(wait=False)
        self.group, self.store = formed["group"], formed["store"]

    def send(self, model: Any, version: int) -> None:
        import torch.distributed as dist

        from verifiers_rl.inference.vllm_worker.vf_weight_wire import pack, update_info

        named = list(model.named_parameters())
        info = update_info(named)
        buffers = pack(named)
        self.control.start_weight_update()
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        pool = ThreadPoolExecutor(1)
        try:
            fut = pool.submit(self.control.update_weights, info)
            time.sleep(0.01)
            if fut.done():
                fut.result()  # rejected before any broadcast: say why instead of waiting for a peer
            try:
                for flat in buffers:
                    self.group.broadcast([flat], opts).wait()
            except Exception as e:  # the server died mid-transfer, or the group timed out
                note = self.control.status()
                raise ModelServerError(f"weight transfer: broadcast to {self.control.root} "
                                       f"failed ({type(e).__name__}: {' '.join(str(e).split())[:160]})"
                                       + (f"; {note}" if note else "")) from None
            fut.result()
        finally:
            pool.shutdown(wait=False)  # after a failed broadcast the request may never return: don't wait on it
        self.control.finish_weight_update(str(version))

    def close(self) -> None:
        self.group = None
        self.store = None


def _init_error(control: ServerControl, err: BaseException) -> BaseException:
    if isinstance(err, ModelServerError) and "not configured" in str(err):
        return ModelServerError(f"{err} — start the server with --weight-transfer-config '{{\"backend\": ...}}' "
                                "(vf-rl does for the servers it launches), or use vllm_weight_transfer='disk'")
    return err


class NCCLSender:
    """Trainer side of vLLM's NCCL backend: vLLM's own trainer engine, driven through our control client."""

    def __init__(self, control: ServerControl, master_address: str, world_size: int, model: Any):
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerInitInfo,
            NCCLTrainerWeightTransferEngine,
        )

        self.control = control
        info = NCCLTrainerInitInfo(master_address=master_address, master_port=free_port(master_address),
                                   world_size=world_size, rank=0)
        self.engine = NCCLTrainerWeightTransferEngine.trainer_init(info, client=control, source=ModuleSource(model))

    def send(self, model: Any, version: int) -> None:
        self.engine.send_weights()  # start → update ∥ broadcast → finish
        self.control.update_weight_version(str(version))

    def close(self) -> None:
        self.engine.shutdown()


class NativeWeightTransfer(WeightSync):
    """Full weights into every server over vLLM's native weight transfer (`backend` 'nccl' or 'gloo')."""

    def __init__(self, client: VLLMClient, served_model_name: str, backend: str, master_address: str = "127.0.0.1",
                 is_main_process: bool = True, timeout: float = 600.0):
        if backend not in NATIVE:
            raise ValueError(f"backend={backend!r}: one of {NATIVE}")
        self.client = client
        self.served_model_name = served_model_name
        self.backend = backend
        self.master_address = master_address
        self.is_main_process = is_main_process
        self.timeout = timeout
        self.controls = [ServerControl(client, i, timeout) for i in range(len(client.roots))]
        self.senders: list[Any] = []
        self.version: int | None = None
        self.last: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self._refresh_head = True  # until a server turns out to lack the worker extension

    def model_name(self) -> str:
        return self.served_model_name

    def _connect(self, model: Any) -> None:
        for control in self.controls:
            world = 1 + control.world_size()  # the trainer (rank 0) + the server's workers
            if self.backend == "nccl":
                self.senders.append(NCCLSender(control, self.master_address, world, model))
            else:
                self.senders.append(GlooSender(control, self.master_address, world, self.timeout))

    def sync(self, model: Any, version: int) -> None:
        if not self.is_main_process:  # rank 0 sends; the trainer has the other ranks wait for it
            self.version = version
            return
        model = _unwrap(model)
        t0 = time.perf_counter()
        if not self.senders:
            self._connect(model)
        t1 = time.perf_counter()
        for control, sender in zip(self.controls, self.senders):
            control.pause()
            try:
                sender.send(model, version)
                if self._refresh_head:
                    self._refresh_head = refresh_tied_head(self.client, control.idx, model)
                reset_prefix_cache(self.client, control.idx)
            except BaseException:
                try:
                    control.resume()
                except Exception:
                    pass  # the transfer's own error says more
                raise
            control.resume()
        t2 = time.perf_counter()
        self.version = version
        self.last = {"time/weight_sync_connect": t1 - t0, "time/weight_sync_load": t2 - t1,
                     "time/weight_sync_total": t2 - t0}
        self.history.append({"version": float(version), **self.last})

    def metrics(self) -> dict[str, float]:
        return dict(self.last)

    def close(self) -> None:
        for control, sender in zip(self.controls, self.senders):
            try:
                sender.close()
                control.shutdown_weight_transfer_engine()
            except Exception as e:  # the server may already be gone
                logger.debug("weight transfer shutdown: %s", e)
        self.senders = []
