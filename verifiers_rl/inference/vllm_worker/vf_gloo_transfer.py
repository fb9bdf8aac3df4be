"""Runs inside a vLLM server (only torch and vLLM): a "gloo" backend for vLLM's native weight-transfer protocol.

vLLM's built-in backends need CUDA; this one broadcasts the same weights over a gloo (TCP) group from rank 0 (the
trainer), so the protocol also runs on CPU servers. Wire format: `vf_weight_wire`.
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import asdict, dataclass

import torch.distributed as dist
from vllm.distributed.weight_transfer.base import WeightTransferEngine, WeightTransferInitInfo
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

try:  # inside the trainer's package
    from .vf_weight_wire import STORE_PREFIX, empty_buffers, unpack
except ImportError:  # inside the vLLM server: this folder is on PYTHONPATH
    from vf_weight_wire import STORE_PREFIX, empty_buffers, unpack

BACKEND = "gloo"


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    timeout_s: float = 600.0


@dataclass
class GlooUpdateInfo:
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]

    def __post_init__(self) -> None:
        if not (len(self.names) == len(self.dtype_names) == len(self.shapes)):
            raise ValueError("names, dtype_names and shapes must have the same length")


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.group = None
        self.store = None

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        pc = self.parallel_config
        rank = pc.data_parallel_index * pc.world_size + pc.rank + init_info.rank_offset
        timeout = datetime.timedelta(seconds=init_info.timeout_s)
        self.store = dist.TCPStore(init_info.master_address, init_info.master_port, init_info.world_size,
                                   is_master=False, timeout=timeout)
        self.group = dist.ProcessGroupGloo(dist.PrefixStore(STORE_PREFIX, self.store), rank,
                                           init_info.world_size, timeout)

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict) -> None:
        # The base class ends with torch.accelerator.synchronize(); gloo is synchronous and CPU-side.
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("gloo weight transfer not initialized: call /init_weight_transfer_engine first")
        info = asdict(update_info)
        buffers = empty_buffers(info)
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        for flat in buffers:
            self.group.broadcast([flat], opts).wait()
        self.model.load_weights([(name, t.to(self.device)) for name, t in unpack(info, buffers)])

    def shutdown(self) -> None:
        self.group = None
        self.store = None


with contextlib.suppress(ValueError):  # already registered (the module was imported twice)
    WeightTransferEngineFactory.register_engine(BACKEND, GlooWeightTransferEngine)

