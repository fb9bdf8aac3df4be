"""Several training processes (torchrun): who generates what, and the few collectives a step makes (how a step is
split: docs/multi-node.md). Every function here is a no-op with one process (no process group).
"""

from __future__ import annotations

import functools
import pickle
from typing import Any, Callable, Sequence, TypeVar

from verifiers_rl.plan.gpus import several_processes_problem

T = TypeVar("T")


def rank_world() -> tuple[int, int]:
    """(this process's rank, the number of training processes); (0, 1) without a process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def share(items: Sequence[T], rank: int, world: int) -> list[T]:
    """This rank's share of a step's groups: every `world`-th one from `rank` (counts differ by at most one)."""
    return list(items[rank::world])


def _pickles(value: Any) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


def _picklable(state: dict[str, Any]) -> dict[str, Any]:
    """The state, without values that can't cross a process boundary (a client, a lock ...: their repr)."""
    return state if _pickles(state) else {k: v if _pickles(v) else repr(v) for k, v in state.items()}


def all_gather(obj: Any, world: int) -> list[Any]:
    """Every rank's `obj`, in rank order (one collective)."""
    if world <= 1:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def gather_states(states: list[dict[str, Any]], world: int) -> tuple[list[dict[str, Any]], int]:
    """(the step's states from every rank, rank order; the offset of this rank's own states in that list)."""
    if world <= 1:
        return states, 0
    rank = rank_world()[0]
    parts = all_gather([_picklable(dict(s)) for s in states], world)
    offset = sum(len(p) for p in parts[:rank])
    merged: list[dict[str, Any]] = []
    for r, part in enumerate(parts):
        merged += states if r == rank else part  # our own states stay the objects we generated
    return merged, offset


def step_totals(loss_tokens: float, sequences: int, micro_batches: int, world: int) -> tuple[float, int, int]:
    """(the step's loss tokens over all ranks: the loss normalizer; its sequences over all ranks; the most
    micro-batches any rank has)."""
    if world <= 1:
        return loss_tokens, sequences, micro_batches
    parts = all_gather((float(loss_tokens), int(sequences), int(micro_batches)), world)
    return sum(p[0] for p in parts), sum(p[1] for p in parts), max(p[2] for p in parts)


def pad_micro_batches(micro: list[list[Any]], target: int, filler: Any) -> list[tuple[list[Any], bool]]:
    """[(micro-batch, is_padding)] with `target` entries: this rank's, then zero-weight ones of `filler` (no loss
    tokens), since FSDP gathers on every forward and DDP reduces on every backward: an uneven count is a hang."""
    return [(mb, False) for mb in micro] + [([filler], True) for _ in range(target - len(micro))]


def merge_metrics(per_rank: list[dict[str, float]], weight_key: str = "loss_tokens") -> dict[str, float]:
    """One step's loss metrics from each rank's, merged as over micro-batches (trainer/metrics.py)."""

    from verifiers_rl.trainer.metrics import extreme, with_std

    if len(per_rank) == 1:
        return with_std(per_rank[0])
    total = sum(float(m.get(weight_key, 0.0)) for m in per_rank)
    out: dict[str, float] = {}
    for name in {k for m in per_rank for k in m}:
        if name == weight_key:
            continue
        vals = [(float(m[name]), float(m.get(weight_key, 0.0))) for m in per_rank if name in m]
        pick = extreme(name)
        if pick is not None:
            out[name] = pick([v for v, n in vals if n] or [v for v, _ in vals])
        elif total:
            out[name] = sum(v * n for v, n in vals) / total
        else:
            out[name] = sum(v for v, _ in vals) / len(vals)
    out[weight_key] = total
    return with_std(out)


def barrier(world: int) -> None:
    """Wait for every rank (e.g. all of a checkpoint's files are written before it is renamed into place)."""
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def build_inference_on_every_rank(plan: Any, build: Callable[[Any], T], world: int) -> T:
    """The inference runtime on every rank. A vLLM server the plan starts is started by rank 0 alone, and the other
    ranks join it (`plan.joining(url)`). Returns after a barrier, so no rank generates before the policy is served."""
    if world <= 1:
        return build(plan)
    rank = rank_world()[0]
    starts = plan.backend == "vllm" and plan.start_server
    inference = build(plan) if rank == 0 or not starts else None
    if starts:
        url = all_gather(inference.base_url if rank == 0 else None, world)[0]
        if rank != 0:
            inference = build(plan.joining(url))
    barrier(world)
    return inference


def die_with_launcher() -> None:
    """Under torchrun (Linux): have the kernel kill this rank when torchrun dies, even by SIGKILL (each rank has a
    session of its own, out of reach of a process-group kill)."""
    import os
    import sys

    if not os.environ.get("TORCHELASTIC_RUN_ID") or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except OSError:
        pass


@functools.cache  # registered once per process
def release_process_group_at_exit() -> None:
    """Destroy the default process group at interpreter exit, while Python is still whole: left to finalization,
    gloo's threads can abort a finished rank (SIGABRT) and torchrun reports the run failed."""

    import atexit

    atexit.register(_destroy_process_group)


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # exiting anyway: a group that cannot be destroyed cleanly must not change the exit code
            pass


def check_supported(args: Any) -> None:
    """One-line ConfigError for what several training processes do not support yet; with several, this rank also
    dies with its launcher and releases its process group at exit."""
    if args.world_size <= 1:
        return
    die_with_launcher()
    release_process_group_at_exit()
    problem = several_processes_problem(args)
    if problem:
        from verifiers_rl.errors import ConfigError

        raise ConfigError(problem)
