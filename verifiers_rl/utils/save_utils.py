"""Rollouts as JSON-ready outputs (`state_to_output`) and the summary of a `generate` call (`OutputsBuilder`)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from datetime import datetime
from math import comb
from typing import Any

from verifiers_rl.types import GenerateMetadata, GenerateOutputs, RolloutOutput, State
from verifiers_rl.rewards import reward_of
from verifiers_rl.utils.error_utils import error_data, is_error_data
from verifiers_rl.utils.message_utils import messages_to_printable, sanitize_tool_calls
from verifiers_rl.utils.usage_utils import extract_usage_tokens, state_usage

# Output fields taken from the state, with the value used when the state lacks them.
_FIELDS = {"example_id": 0, "prompt": None, "completion": None, "answer": "", "task": "default", "info": {},
           "reward": 0.0, "error": None, "timing": {}, "is_completed": False, "is_truncated": False,
           "stop_condition": None, "metrics": {}, "tool_defs": None}


def is_json_serializable(value: object) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


def make_serializable(value: Any) -> Any:
    """A JSON-ready copy: records and pydantic models dumped, paths and dates as strings, others by repr."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): make_serializable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [make_serializable(v) for v in value]
    if hasattr(value, "model_dump"):
        return make_serializable(value.model_dump())
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _usage(state: State) -> dict[str, float] | None:
    """The state's tracked usage, else the sum over its steps' responses (states made without a tracker)."""
    usage = state_usage(state)
    if usage is not None:
        return usage
    responses = [step.get("response") for step in state.get("trajectory") or []]
    counted = [extract_usage_tokens(r) for r in responses if r is not None and getattr(r, "usage", None) is not None]
    if not counted:
        return None
    return {"input_tokens": float(sum(i for i, _ in counted)), "output_tokens": float(sum(o for _, o in counted))}


def state_to_output(state: State, state_columns: list[str] | None = None) -> RolloutOutput:
    """One rollout as a JSON-ready dict; `state_columns` adds state fields (which must be JSON-ready)."""
    out = RolloutOutput({k: state.get(k, default) for k, default in _FIELDS.items()})
    if hasattr(out["timing"], "model_dump"):  # its derived fields (durations, total) written out
        out["timing"] = out["timing"].model_dump()
    usage = _usage(state)
    if usage is not None:
        out["token_usage"] = usage
    for key in ("prompt", "completion"):
        if state.get(key) is not None:
            out[key] = sanitize_tool_calls(messages_to_printable(state.get(key)))
    error = state.get("error")
    if error is not None:  # verifiers' ErrorData; one already in that form stays as it is
        out["error"] = error if is_error_data(error) else error_data(
            error if isinstance(error, BaseException) else Exception(str(error)))
        out["error_chain"], out["long_error_chain"] = out["error"]["error_chain_repr"], out["error"]["error_chain_str"]
    for key in ("answer", "info"):
        if not out.get(key):
            out.pop(key, None)
    for k, v in (state.get("metrics") or {}).items():
        out[k] = v  # flat too: older readers look for metrics at the top level
    for col in state_columns or []:
        value = state.get(col)
        if not is_json_serializable(value):
            raise ValueError(f"state_columns value for '{col}' is not JSON-serializable: {type(value).__name__}. "
                             f"Only JSON-serializable types are allowed.")
        out[col] = value
    return out


def states_to_outputs(states: list[State], state_columns: list[str] | None = None) -> list[RolloutOutput]:
    return [state_to_output(s, state_columns) for s in states]


def pass_at_k(outputs: list[dict], rollouts_per_example: int,
              threshold: float = 0.5) -> tuple[dict[str, float], dict[str, float]]:
    """Unbiased pass@k (some of k correct) and pass^k (all k correct), k = powers of 2 up to n, averaged over
    examples."""
    if rollouts_per_example <= 1:
        return {}, {}
    ks = [2 ** i for i in range(rollouts_per_example.bit_length()) if 2 ** i <= rollouts_per_example]
    groups: dict[Any, list[dict]] = defaultdict(list)
    for o in outputs:
        groups[o.get("example_id", 0)].append(o)
    at: dict[str, list[float]] = defaultdict(list)
    every: dict[str, list[float]] = defaultdict(list)
    for group in groups.values():
        n = len(group)
        c = sum(1 for o in group if reward_of(o) >= threshold)
        for k in (k for k in ks if k <= n):
            at[f"{k}"].append(1.0 - comb(n - c, k) / comb(n, k))
            every[f"{k}"].append(comb(c, k) / comb(n, k))
    mean = lambda d: {k: sum(v) / len(v) for k, v in d.items()}  # noqa: E731
    return mean(at), mean(every)


class OutputsBuilder:
    """Collects outputs of a `generate` call and summarizes them (`GenerateOutputs`)."""

    def __init__(self, env_id: str, env_args: dict, model: str, base_url: str, num_examples: int,
                 rollouts_per_example: int, state_columns: list[str] | None, sampling_args: dict,
                 results_path: Any = None, pass_threshold: float = 0.5, shuffle: bool = False,
                 shuffle_seed: int | None = None):
        self.meta = dict(env_id=env_id, env_args=env_args, model=model, base_url=base_url,
                         num_examples=num_examples, rollouts_per_example=rollouts_per_example,
                         shuffle=shuffle, shuffle_seed=shuffle_seed,
                         sampling_args=sampling_args, state_columns=list(state_columns or []))
        self.results_path, self.pass_threshold = results_path, pass_threshold
        self.start = time.time()
        self.outputs: list[RolloutOutput] = []

    def add_outputs(self, outputs: list[RolloutOutput]) -> None:
        self.outputs.extend(outputs)

    def build_metadata(self) -> GenerateMetadata:
        outs = self.outputs
        rewards = [reward_of(o) for o in outs]
        metrics: dict[str, list[float]] = defaultdict(list)
        for o in outs:
            for name, value in (o.get("metrics") or {}).items():
                if isinstance(value, (int, float)):
                    metrics[name].append(value)
        at, every = pass_at_k(outs, self.meta["rollouts_per_example"], self.pass_threshold)
        usages = [o["token_usage"] for o in outs if isinstance(o.get("token_usage"), dict)]
        usage = None if not usages else {
            "input_tokens": sum(float(u.get("input_tokens", 0)) for u in usages) / len(usages),
            "output_tokens": sum(float(u.get("output_tokens", 0)) for u in usages) / len(usages)}
        tool_sets = {str(sorted(t.get("name", "") for t in o.get("tool_defs") or [])) for o in outs}
        tools = next((o.get("tool_defs") for o in outs if o.get("tool_defs")), None) if len(tool_sets) == 1 else None
        from verifiers_rl import __version__

        elapsed = time.time() - self.start  # `time` in seconds (verifiers 0.3), `time_ms` (0.1.11)
        return GenerateMetadata(
            **self.meta, date=datetime.now().isoformat(), time=elapsed, time_ms=elapsed * 1000.0,
            avg_reward=sum(rewards) / len(rewards) if rewards else 0.0,
            avg_metrics={k: sum(v) / len(v) for k, v in metrics.items()},
            avg_error=sum(o.get("error") is not None for o in outs) / len(outs) if outs else 0.0,
            pass_at_k=at, pass_all_k=every, pass_threshold=self.pass_threshold, usage=usage,
            version_info={"vf_version": __version__, "vf_commit": None, "env_version": None, "env_commit": None},
            path_to_save=self.results_path, tools=tools)

    def build(self, sort_by_example_id: bool = False) -> GenerateOutputs:
        outs = sorted(self.outputs, key=lambda o: o.get("example_id", 0)) if sort_by_example_id else self.outputs
        return GenerateOutputs(outputs=outs, metadata=self.build_metadata())


def make_dataset(results: GenerateOutputs) -> Any:
    from datasets import Dataset

    return Dataset.from_list(list(results["outputs"]))
