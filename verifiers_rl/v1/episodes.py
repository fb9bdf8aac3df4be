"""verifiers v1 episodes → states of ours, and this run's sampling → a v1 `ModelContext`.

Each trainable root→leaf branch of a v1 `Trace` becomes one trajectory step (prompt = the tokens before the first
sampled one, loss mask = `sampled_mask`), so batching treats it like any rollout; branches that are not one another's
prefix (compaction, subagents) train as one sample each. A failed episode keeps its place with `error` set (no loss).
"""

from __future__ import annotations

import re
from typing import Any

from verifiers_rl.rewards import reward_of
from verifiers_rl.v1.loading import require_v1

NON_FINITE = re.compile(r"reward '([^']+)' must be finite")  # verifiers 0.4.1's Trace.record_reward
# The run's sampling keys the v1 client sets itself (token ids, logprobs, n) or that mean nothing to it.
DROPPED = ("logprobs", "top_logprobs", "n", "stream", "extra_headers")


def sampling_config(sampling_args: dict | None) -> Any:
    """`vf.SamplingConfig` for the run's chat-completions sampling args (`extra_body` keys flattened by it)."""
    vf = require_v1()
    args = {k: v for k, v in (sampling_args or {}).items() if k not in DROPPED and v is not None}
    extra = dict(args.pop("extra_body", None) or {})
    extra.pop("return_token_ids", None)
    return vf.SamplingConfig(**{**extra, **args})


def model_context(base_url: str, model: str, renderer_model_name: str, sampling_args: dict | None,
                  api_key_var: str = "VF_RL_LOCAL_KEY", renderer_config: dict | None = None) -> Any:
    """What `env.run_slot` needs: the served model name, a `TrainClientConfig` (only the train client returns
    tokens and logprobs) and the sampling."""
    vf = require_v1()
    extra = {"renderer": renderer_config} if renderer_config else {}
    client = vf.TrainClientConfig(base_url=base_url, api_key_var=api_key_var,
                                  renderer_model_name=renderer_model_name, **extra)
    return vf.ModelContext(model=model, client=client, sampling=sampling_config(sampling_args))


def _plain(values: Any) -> list:
    """A branch's array as a list of Python numbers: verifiers 0.4.1 makes them numpy arrays (whose items JSON and
    torch's int lists refuse), 0.4.0 lists."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def branch_step(branch: Any) -> dict | None:
    """One trajectory step of ours for a v1 branch; None when nothing in it was sampled."""
    ids = [int(t) for t in _plain(branch.token_ids)]
    mask = [bool(m) for m in _plain(branch.sampled_mask)]
    lps = [float(x) for x in _plain(branch.logprobs)]
    if not any(mask):
        return None
    first = mask.index(True)
    tokens = {"prompt_ids": ids[:first], "completion_ids": ids[first:],
              "completion_mask": [int(m) for m in mask[first:]], "completion_logprobs": lps[first:]}
    # the completion interleaves the environment's tokens (user turns, tool results) with the model's turns: what
    # the model sampled and in how many turns (one span each), as turn_tokens counts a rollout's tokens and turns
    turns = 1 + sum(1 for i in range(first + 1, len(mask)) if mask[i] and not mask[i - 1])
    return {"tokens": tokens, "is_truncated": False, "model_tokens": sum(mask), "model_turns": turns}


def _errors(items: Any) -> list[str]:
    return [f"{getattr(e, 'type', None) or type(e).__name__}: {getattr(e, 'message', e)}" for e in items or []]


def trainable_traces(episode: Any) -> list[Any]:
    return [t for t in episode.traces if getattr(t.agent, "trainable", True)]


def _trace_metrics(trace: Any) -> dict[str, float]:
    metrics = {k: float(v) for k, v in (trace.metrics or {}).items() if v is not None}
    for name, r in (trace.rewards or {}).items():
        if r is not None:
            metrics[name] = float(r.score)
    return metrics


def _messages(messages: Any) -> list[dict]:
    out = []
    for m in messages or []:
        d = m.model_dump(mode="json") if hasattr(m, "model_dump") else dict(m)
        out.append({k: v for k, v in d.items() if v is not None})
    return out


def episode_states(episode: Any, row: dict, seats: list[str]) -> list[dict]:
    """One state of ours per seat, in `seats` order (each advantage group is then one task x one seat); a seat
    with no trace keeps its place with `error` set."""
    if len(seats) <= 1:
        return [seat_state(episode, trainable_traces(episode), row)]
    by_seat: dict[Any, list[Any]] = {}
    for t in episode.traces:
        by_seat.setdefault(getattr(t.agent, "name", None), []).append(t)
    return [seat_state(episode, by_seat.get(seat, []), row, seat) for seat in seats]


def seat_state(episode: Any, traces: list[Any], row: dict, seat: str | None = None) -> dict:
    """A seat's state from its traces in the episode: a seat that played several times (a retry loop, verifiers'
    proposer_solver's n solver runs) is merged; none left is the state with `error` set."""
    if len(traces) > 1:
        return merged_state(episode, traces, row, seat)
    return trace_state(episode, traces[0] if traces else None, row, seat)


def merged_state(episode: Any, traces: list[Any], row: dict, seat: str | None = None) -> dict:
    """One state for a seat that played several traces in one episode: one sample per trace, all with the
    episode's advantage, its reward the mean of the traces'."""

    states = [trace_state(episode, t, row, seat) for t in traces]
    out = dict(states[0])
    out["trajectory"] = [step for s in states for step in s["trajectory"]]
    out["reward"] = sum(s["reward"] for s in states) / len(states)
    names = {k for s in states for k in s["metrics"]}
    out["metrics"] = {k: sum(s["metrics"].get(k, 0.0) for s in states) / len(states) for k in names}
    out["num_turns"] = sum(s["num_turns"] for s in states)
    out["error"] = "; ".join(dict.fromkeys(s["error"] for s in states if s["error"])) or None
    out["dropped"] = all(s["dropped"] for s in states)
    out["is_truncated"] = any(s["is_truncated"] for s in states)
    return out


def trace_state(episode: Any, trace: Any, row: dict, seat: str | None = None) -> dict:
    """A state of ours for one trace of an episode (None: the seat never played)."""
    errors = _errors(episode.errors) + (_errors(trace.errors) if trace is not None else [])
    # verifiers 0.4.1 raises on a NaN / inf reward: counted as a failing reward function, as the classic path does
    reward_errors = {m.group(1): e for e in errors if (m := NON_FINITE.search(e))}
    errors = [e for e in errors if not NON_FINITE.search(e)]
    if trace is None:
        errors.append(f"the episode has no trace for agent {seat!r}" if seat else "the episode has no trainable trace")
    elif (not trace.ok or not episode.ok) and not reward_errors:
        errors = errors or ["the episode failed"]
    trainable = trace is not None and getattr(trace.agent, "trainable", True)
    steps = [s for s in (branch_step(b) for b in (trace.branches if trace is not None else [])
                         if getattr(b, "trainable", True)) if s is not None]
    if not trainable:
        for step in steps:  # an agent the env does not train (a judge, a pinned opponent): scored, no loss
            step["tokens"]["completion_mask"] = [0] * len(step["tokens"]["completion_mask"])
    messages = _messages(trace.messages) if trace is not None else []
    n_prompt = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    # the task's info, then what the episode wrote in its trace's scratch space (a judge's calls, a game's moves)
    info = {**(row.get("info") or {}), **(getattr(trace, "info", None) or {})}
    if seat:
        info["agent"] = seat
    return {
        "example_id": row.get("example_id"), "task": row.get("task") or "default", "answer": row.get("answer", ""),
        "info": info, "prompt": (row.get("prompt") if not seat else None) or messages[:n_prompt],
        "completion": messages[n_prompt:], "trajectory": steps, "reward": reward_of(trace),
        "metrics": _trace_metrics(trace) if trace is not None else {}, "reward_errors": reward_errors,
        "error": "; ".join(errors) or None, "is_completed": True,
        "is_truncated": bool(trace is not None and trace.is_truncated),
        "stop_condition": getattr(trace, "stop_condition", None), "num_turns": trace.num_turns if trace else 0,
        "timing": {}, "v1_episode_id": str(episode.id),
        # verifiers 0.4.1's Trace.drop(): out of reward means, advantage baselines and training batches
        "dropped": bool(getattr(trace, "dropped", False)),
    }
