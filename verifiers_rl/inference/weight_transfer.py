"""Full-weight sync over vLLM's native weight-transfer protocol: parameters broadcast straight into the servers' workers
(`nccl`, `gloo` for CPU servers, `ipc`; else `disk`: `vllm_sync.FullWeightReload`). Sequence: docs/vllm.md#weight-sync.

vLLM's NCCL engine has no timeout (a server dying mid-transfer hangs the broadcast), hence `bounded`;
`check_nccl_compat` compares the trainer's torch / NCCL with the server Python's before a launch.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import logging
import pickle
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verifiers_rl.errors import ModelServerError
from verifiers_rl.inference.vllm_client import VLLMClient
from verifiers_rl.inference.vllm_server import free_port
from verifiers_rl.inference.vllm_sync import ServerSync, unwrap_model
from verifiers_rl.plan.transfer import NATIVE

logger = logging.getLogger(__name__)

POLL_S = 0.5  # how often a waiting NCCL transfer asks whether its server is still there
TIMEOUT_SETTING = "generation_timeout"  # the RLConfig setting the transfer's timeout comes from (vllm_backend.py)
DISK_HINT = "check the server's log, or use vllm_weight_transfer='disk'"


class ServerControl:
    """One server's weight-sync control plane (vLLM's `VLLMWeightSyncClient` protocol plus pause/resume/version):
    one-line errors that name the server; requests that rendezvous with the broadcast are never retried."""

    def __init__(self, client: VLLMClient, idx: int, timeout: float):
        self.client, self.idx, self.timeout = client, idx, timeout
        self.root = client.roots[idx]
        self.failed: str | None = None  # the last rendezvous request that failed (a server given by URL, too)

    def status(self) -> str | None:
        """Why the server is gone (a server we launched), or None."""
        return self.client.server_note(self.idx)

    def gone(self) -> str | None:
        """Why the transfer's other side is not coming (the server exited, or a rendezvous request failed)."""
        return self.status() or self.failed

    def _rendezvous(self, path: str, payload: dict) -> Any:
        """A request answered only once the broadcast is through: never retried; a failure is kept for `gone`."""
        try:
            return self._post(path, payload)
        except Exception as e:
            self.failed = " ".join(str(e).split())[:240] or type(e).__name__
            raise

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
        self._rendezvous("/init_weight_transfer_engine", {"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        self._post("/shutdown_weight_transfer_engine", retries=1)

    def start_weight_update(self) -> None:
        self._post("/start_weight_update")

    def update_weights(self, update_info: dict) -> None:
        handles = update_info.get("ipc_handles")
        if handles is not None:  # CUDA IPC handles (tuples of non-JSON objects): the base64 pickle vLLM's route reads
            update_info = {k: v for k, v in update_info.items() if k != "ipc_handles"}
            update_info["ipc_handles_pickled"] = base64.b64encode(pickle.dumps(handles)).decode()
        self._rendezvous("/update_weights", {"update_info": update_info})

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

        # both sides block until the group forms: rank 0 on a daemon thread, so a refused init doesn't wait it out
        opener = threading.Thread(target=form, daemon=True)
        opener.start()
        pool = ThreadPoolExecutor(1)
        try:
            fut = pool.submit(control.init_weight_transfer_engine, init)
            while opener.is_alive() and not fut.done():
                opener.join(0.05)
            err = fut.exception() if fut.done() else None
            if isinstance(err, ModelServerError) and "not configured" in str(err):
                raise ModelServerError(f"{err} — start the server with --weight-transfer-config "
                                       "'{\"backend\": ...}' (vf-rl does for the servers it launches), or use "
                                       "vllm_weight_transfer='disk'")
            if err is not None:
                raise err
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


def bounded(fn: Any, what: str, control: ServerControl, timeout: float, poll: float = POLL_S) -> Any:
    """`fn()` on a daemon thread, waited for in polls that ask whether the server is gone; a one-line
    ModelServerError when it raises, the server is gone or `timeout` passes (the thread is then left blocked)."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported on the waiting thread
            done["error"] = e

    control.failed = None
    worker = threading.Thread(target=run, name=f"vf-nccl-{what.split()[0]}", daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout
    while True:
        worker.join(min(poll, max(deadline - time.monotonic(), 0.0)))
        if not worker.is_alive():
            break
        note = control.gone()
        if note:
            raise ModelServerError(f"weight transfer (nccl): {what} to {control.root} stopped: {note}; {DISK_HINT}")
        if time.monotonic() >= deadline:
            raise ModelServerError(f"weight transfer (nccl): {what} to {control.root} did not finish in {timeout:g} s "
                                   f"(the server is up but NCCL has no timeout of its own); {DISK_HINT}, or raise "
                                   f"{TIMEOUT_SETTING}")
    if "error" in done:
        e = done["error"]
        if isinstance(e, ModelServerError):
            raise ModelServerError(" ".join(str(e).split())) from None
        note = control.gone()
        raise ModelServerError(f"weight transfer (nccl): {what} to {control.root} failed ({type(e).__name__}: "
                               f"{' '.join(str(e).split())[:160]})" + (f"; {note}" if note else "")
                               + f"; {DISK_HINT}") from None
    return done.get("result")


def _on_this_device(fn: Any) -> Any:
    """`fn` run on another thread with this thread's CUDA device (a new thread starts on cuda:0; vLLM opens its
    communicator on the current device)."""
    import torch

    if not torch.cuda.is_available():
        return fn
    index = torch.cuda.current_device()

    def run() -> Any:
        torch.cuda.set_device(index)
        return fn()

    return run


class NCCLSender:
    """Trainer side of vLLM's NCCL backend: vLLM's own trainer engine, its init and each send `bounded`."""

    opening, sending = "opening the NCCL group", "sending the weights"

    def __init__(self, control: ServerControl, master_address: str, world_size: int, model: Any,
                 timeout: float = 600.0, poll: float = POLL_S):
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        info = NCCLTrainerInitInfo(master_address=master_address, master_port=free_port(master_address),
                                   world_size=world_size, rank=0)
        self._open(control, NCCLTrainerWeightTransferEngine, info, model, timeout, poll)

    def _open(self, control: ServerControl, engine_cls: Any, info: Any, model: Any, timeout: float,
              poll: float) -> None:
        from vllm.distributed.weight_transfer.base import ModuleSource

        self.control, self.timeout, self.poll = control, timeout, poll
        self.broken = False  # a send that failed or hung: the communicator is unusable
        self.engine = bounded(_on_this_device(lambda: engine_cls.trainer_init(
            info, client=control, source=ModuleSource(model))), self.opening, control, timeout, poll)

    def send(self, model: Any, version: int) -> None:
        try:  # start → update ∥ broadcast → finish
            bounded(_on_this_device(self.engine.send_weights), self.sending, self.control, self.timeout, self.poll)
        except ModelServerError:
            self.broken = True
            raise
        self.control.update_weight_version(str(version))

    def close(self) -> None:
        self.engine.shutdown()  # vLLM aborts the communicator (ncclCommAbort, waited on for at most 5 s)


class IPCSender(NCCLSender):
    """Trainer side of vLLM's CUDA-IPC engine (vLLM 0.32+): the server on the trainer's own GPU, where NCCL can't
    pair two processes; the workers map a CUDA IPC handle per parameter, no host copy. Needs vllm in the trainer."""

    opening, sending = "opening the IPC transfer", "sending the weights over CUDA IPC"

    def __init__(self, control: ServerControl, model: Any, timeout: float = 600.0, poll: float = POLL_S):
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo, IPCTrainerWeightTransferEngine

        self._open(control, IPCTrainerWeightTransferEngine, IPCTrainerInitInfo(rank=0), model, timeout, poll)


_SERVER_VERSIONS = """import json, torch
try:
    v = torch.cuda.nccl.version()
    nccl = ".".join(map(str, v)) if isinstance(v, tuple) else None
except Exception:
    nccl = None
print(json.dumps({"torch": torch.__version__, "nccl": nccl}))
"""


def _major_minor(version: str | None) -> tuple[str, ...] | None:
    return tuple(version.split("+")[0].split(".")[:2]) if version else None


def check_nccl_compat(server_python: str, timeout: float = 30.0) -> str | None:
    """One line naming the mismatch and the fix when the trainer's and the server Python's NCCL or torch
    (major.minor) differ; None when they match or it can't tell."""
    try:
        r = subprocess.run([server_python, "-c", _SERVER_VERSIONS], capture_output=True, text=True, timeout=timeout)
        theirs = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        theirs = None
    if not isinstance(theirs, dict) or not theirs.get("torch"):
        return None
    import torch

    torch_v, nccl_v = torch.__version__, None
    if torch.cuda.is_available():
        v = torch.cuda.nccl.version()
        nccl_v = ".".join(map(str, v)) if isinstance(v, tuple) else None  # an int: torch < 1.13, not told apart
    server = f"the vLLM server's Python ({server_python})"
    fix = (f"install torch {theirs['torch'].split('+')[0]} (the one that vLLM pins) in the trainer's Python, or use "
           "vllm_weight_transfer='disk'")
    ours, their_nccl = _major_minor(nccl_v), _major_minor(theirs.get("nccl"))
    if ours and their_nccl and ours != their_nccl:
        return (f"weight transfer (nccl): the trainer has NCCL {nccl_v} (torch {torch_v}) but {server} has NCCL "
                f"{theirs['nccl']} (torch {theirs['torch']}); {fix}")
    if _major_minor(torch_v) != _major_minor(theirs["torch"]):
        return (f"weight transfer (nccl): the trainer runs torch {torch_v} but {server} runs torch {theirs['torch']} "
                f"(the NCCL builds must match); {fix}")
    return None


class NativeWeightTransfer(ServerSync):
    """Full weights into every server over vLLM's native weight transfer; `transport` is vLLM's "backend"."""

    def __init__(self, client: VLLMClient, served_model_name: str, transport: str, master_address: str = "127.0.0.1",
                 is_main_process: bool = True, timeout: float = 600.0):
        if transport not in NATIVE:
            raise ValueError(f"transport={transport!r}: one of {NATIVE}")
        super().__init__(client, is_main_process)
        self.served_model_name = served_model_name
        self.transport = transport
        self.master_address = master_address
        self.timeout = timeout
        self.controls = [ServerControl(client, i, timeout) for i in range(len(client.roots))]
        self.senders: list[Any] = []

    def model_name(self) -> str:
        return self.served_model_name

    def _connect(self, model: Any) -> None:
        for control in self.controls:
            if self.transport == "ipc":  # no process group: handles over HTTP
                self.senders.append(IPCSender(control, model, self.timeout))
                continue
            world = 1 + control.world_size()  # the trainer (rank 0) + the server's workers
            if self.transport == "nccl":
                self.senders.append(NCCLSender(control, self.master_address, world, model, self.timeout))
            else:
                self.senders.append(GlooSender(control, self.master_address, world, self.timeout))

    def _send(self, model: Any, version: int) -> dict[str, float]:
        model = unwrap_model(model)
        t0 = time.perf_counter()
        if not self.senders:
            self._connect(model)
        t1 = time.perf_counter()
        for control, sender in zip(self.controls, self.senders):
            control.pause()
            try:
                sender.send(model, version)
                self._after_update(control.idx, model)
            except BaseException:
                with contextlib.suppress(Exception):  # the transfer's own error says more
                    control.resume()
                raise
            control.resume()
        return {"connect": t1 - t0, "load": time.perf_counter() - t1}

    def close(self) -> None:
        for control, sender in zip(self.controls, self.senders):
            try:
                sender.close()
                control.shutdown_weight_transfer_engine()
            except Exception as e:  # the server may already be gone
                logger.debug("weight transfer shutdown: %s", e)
        self.senders = []
