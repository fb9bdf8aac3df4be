"""Which GPUs the vLLM server and the trainer see: split (inference first, trainer after) or colocated on one."""

from __future__ import annotations

from dataclasses import dataclass

from verifiers_rl.errors import ConfigError, VLLMLaunchError

DEFAULT_COLOCATED_GPU_MEMORY = 0.3  # the server's share of a GPU it shares with the trainer


@dataclass(frozen=True)
class GPULayout:
    """Which devices the inference server and the trainer see."""

    inference: tuple[int, ...]
    trainer: tuple[int, ...]
    colocated: bool = False

    @property
    def data_parallel_size(self) -> int:
        return max(1, len(self.inference))

    def inference_env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.inference))} if self.inference else {}


def gpu_ids(spec: int | list[int], key: str) -> int:
    """How many GPUs a config's `gpus` asks for (a count or device ids); a one-line ConfigError naming `key`."""
    if isinstance(spec, list):
        if any(g < 0 for g in spec) or len(set(spec)) != len(spec):
            raise ConfigError(f"{key}: {spec} must be distinct device ids >= 0")
        return len(spec)
    if spec < 0:
        raise ConfigError(f"{key}: {spec} must be >= 0")
    return spec


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


def plan_gpus(inference_gpus: int | list[int] | None, trainer_gpus: int | list[int] | None = None,
              available: int | None = None, colocate: bool | None = None) -> GPULayout:
    """Split (inference GPUs first, trainer GPUs after) or colocated (both on the same single GPU).

    `colocate=None` colocates exactly when one GPU is available and both sides ask for one."""
    n_inf = len(devices(inference_gpus, 0))
    n_tr = len(devices(trainer_gpus, 0))
    if colocate is None:
        colocate = available == 1 and n_inf == 1 and n_tr <= 1
    if colocate:
        inf = devices(inference_gpus, 0)
        if len(inf) != 1:
            raise VLLMLaunchError(f"colocated mode shares one GPU; inference gpus={inference_gpus!r} names {len(inf)}")
        tr = devices(trainer_gpus, 0) if not isinstance(trainer_gpus, int) else inf
        if tr and tr != inf:
            raise VLLMLaunchError(f"colocated mode: trainer gpus {list(tr)} must be the inference GPU {list(inf)}")
        return GPULayout(inf, inf, colocated=True)
    inf = devices(inference_gpus, 0)
    tr = devices(trainer_gpus, len(inf))
    overlap = sorted(set(inf) & set(tr))
    if overlap:
        raise VLLMLaunchError(f"inference and trainer GPUs overlap on {overlap}; give disjoint lists, or one GPU "
                              "with colocate=True")
    if available is not None:
        used = set(inf) | set(tr)
        if used and max(used) >= available:
            raise VLLMLaunchError(f"the layout needs GPU ids {sorted(used)} but only {available} GPU(s) are visible")
    return GPULayout(inf, tr, colocated=False)
