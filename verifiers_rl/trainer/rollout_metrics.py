"""A step's rollout metrics, by prime-rl's names where the meaning is the same: `reward`, `seq_len`,
`is_truncated`, `num_turns` for all rollouts and per env (`<name>/all/mean`, `<name>/<env>/mean` when a step
mixes envs), empty and errored rollout rates, and the step's throughput, MFU and peak memory."""

from __future__ import annotations

import math
import resource
from collections import defaultdict
from typing import Any

from verifiers_rl.rewards import is_dropped, reward_of


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _error_name(err: Any) -> str:
    return err if isinstance(err, str) else str(err.get("type", "")) if isinstance(err, dict) else type(err).__name__


def is_empty(state: dict[str, Any]) -> bool:
    """The model ended its turn at once (verifiers records EmptyModelResponseError)."""
    err = state.get("error")
    return err is not None and "EmptyModelResponse" in _error_name(err)


def per_rollout(state: dict[str, Any]) -> dict[str, float]:
    from verifiers_rl.envs.turn_tokens import turn_count
    from verifiers_rl.evaluation import completion_length

    return {"reward": reward_of(state), "seq_len": float(completion_length(state)),
            "is_truncated": float(bool(state.get("is_truncated"))),
            "num_turns": float(turn_count(state)),
            "empty_rollouts": float(is_empty(state)),
            "errored_rollouts": float(state.get("error") is not None and not is_empty(state)),
            "kept": not is_dropped(state)}  # a dropped rollout counts in no reward mean


def rollout_metrics(states: list[dict[str, Any]], advantages: Any, env: Any = None) -> dict[str, float]:
    """The step's metrics of its rollouts (every rank sees all of them)."""
    from verifiers_rl.evaluation import summarize

    summary = summarize(states)
    out = {"reward/all/mean": summary["reward/mean"], "reward/all/std": summary["reward/std"],
           "advantage/abs_mean": float(advantages.abs().mean())}
    rows = [per_rollout(s) for s in states]
    by_env: dict[str, list[dict[str, float]]] = defaultdict(list)
    for s, row in zip(states, rows):
        by_env[str(s.get("task") or "default")].append(row)
    several = len(by_env) > 1 or len(getattr(env, "env_names", None) or []) > 1
    for name in ("seq_len", "is_truncated", "num_turns", "empty_rollouts", "errored_rollouts"):
        out[f"{name}/all/mean"] = _mean([r[name] for r in rows])
    for env_name, env_rows in by_env.items() if several else ():
        for name in ("reward", "seq_len", "is_truncated", "num_turns", "empty_rollouts", "errored_rollouts"):
            out[f"{name}/{env_name}/mean"] = _mean([r[name] for r in env_rows if name != "reward" or r["kept"]])
    for k, v in summary.items():
        if k.startswith("metrics/"):
            out[f"{k}/mean"] = v
    # the names this project logged first, kept for dashboards and plots that read them
    out.update({k: summary[k] for k in ("errors/rollouts", "errors/reward_funcs", "is_truncated/mean",
                                        "num_turns/mean", "seq_len/completion_mean", "turns/stitched",
                                        "turns/separate", "dropped/rollouts")})
    return out


def sequence_lengths(states: list[dict[str, Any]]) -> list[int]:
    """Each rollout's prompt + completion tokens (what the trainer ran a forward/backward over)."""
    from verifiers_rl.evaluation import completion_length
    from verifiers_rl.trainer.batching import prompt_length

    return [prompt_length(s) + completion_length(s) for s in states]


def peak_memory_gib(device: Any = None) -> float:
    """The training process's peak memory: CUDA's max allocated on a GPU, the process's max RSS on the CPU."""
    import torch

    if device is not None and getattr(device, "type", "") == "cuda" and torch.cuda.is_available():
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def perf_metrics(states: list[dict[str, Any]], step_seconds: float, world: int, device: Any = None,
                 model: Any = None) -> dict[str, float]:
    """`perf/throughput` (tokens per second of the whole step, generation included), per GPU, peak memory, and
    `perf/mfu` over the same time when `model` is given and the device's peak is known (trainer/mfu.py)."""
    lengths = sequence_lengths(states)
    rate = sum(lengths) / step_seconds if step_seconds > 0 else math.nan
    out = {"perf/throughput": rate, "perf/throughput_per_gpu": rate / max(1, world),
           "perf/peak_memory": peak_memory_gib(device)}
    if model is not None:
        from verifiers_rl.trainer.mfu import device_peak_flops, mfu_percent, step_flops

        peak = device_peak_flops(device)
        mfu = mfu_percent(step_flops(model, lengths), step_seconds, world, peak) if peak else None
        if mfu is not None:
            out["perf/mfu"] = mfu
    return out
