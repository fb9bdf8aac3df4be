"""Evaluation: run an environment against a client and summarize the scored rollouts (vf-eval, the trainer's eval)."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import pstdev
from typing import Any, Iterable

from verifiers_rl.rewards import is_dropped, reward_of


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def completion_length(state: dict[str, Any]) -> int:
    """The tokens the model sampled in a rollout (0 when the server returned no token ids): each step's completion,
    less the environment's tokens a v1 branch interleaves between its turns (the step's `model_tokens`, set by
    v1/episodes.py)."""
    from verifiers_rl.envs.turn_tokens import token_record

    total = 0
    for step in state.get("trajectory") or []:
        t = token_record(step)  # read, not copied: this runs over every rollout of a step
        if t is not None:
            total += int(step.get("model_tokens", len(t["completion_ids"])))
    return total


def first_error(states: list[dict[str, Any]]) -> str | None:
    """The first errored rollout's error as one line: its type and the last line of its message (a traceback's
    own last line says what went wrong), or None when no rollout errored."""
    err = next((s.get("error") for s in states if s.get("error")), None)
    if err is None:
        return None
    text = f"{type(err).__name__}: {err}" if isinstance(err, BaseException) else str(err)
    # a traceback's last line, inside an exception group's box (`| ...`, `+----`) too
    lines = [t for t in (line.strip().lstrip("|+").strip() for line in text.splitlines()) if any(c.isalnum() for c in t)]
    line = lines[-1] if lines else type(err).__name__
    # a long line keeps its end too: a server's message ends with where its log is
    return line if len(line) <= 200 else f"{line[:120]} ... {line[-75:]}"


def errors_line(states: list[dict[str, Any]]) -> str | None:
    """'N of M rollouts errored (first: ...)', or None when none did."""
    n = sum(1 for s in states if s.get("error"))
    if not n:
        return None
    return f"{n} of {len(states)} rollouts errored (first: {first_error(states)})"


def all_errored(states: list[dict[str, Any]]) -> bool:
    """Every rollout errored: an evaluation (or a step) that measured nothing."""
    return bool(states) and all(s.get("error") for s in states)


def summarize(states: list[dict[str, Any]]) -> dict[str, float]:
    """Flat statistics of scored rollouts: reward, metrics, errors, truncation, turns, lengths (dropped rollouts are
    counted in `dropped/rollouts`, left out of the means)."""
    kept = [s for s in states if not is_dropped(s)]  # a rollout its environment dropped counts in no mean
    rewards = [reward_of(s) for s in kept]
    out: dict[str, float] = {"reward/mean": _mean(rewards), "reward/std": pstdev(rewards) if rewards else 0.0,
                             "num_rollouts": len(states)}
    names: list[str] = []
    for s in kept:
        names += [k for k in (s.get("metrics") or {}) if k not in names]
    for name in names:
        out[f"metrics/{name}"] = _mean([float(s["metrics"].get(name, 0.0)) for s in kept if s.get("metrics")])
    out["dropped/rollouts"] = len(states) - len(kept)
    out["errors/rollouts"] = sum(1 for s in states if s.get("error"))
    out["errors/reward_funcs"] = sum(len(s.get("reward_errors") or {}) for s in states)
    out["is_truncated/mean"] = _mean([float(bool(s.get("is_truncated"))) for s in states])
    from verifiers_rl.envs.turn_tokens import turn_count, turn_split

    out["num_turns/mean"] = _mean([float(turn_count(s)) for s in states])
    out["seq_len/completion_mean"] = _mean([float(completion_length(s)) for s in states])

    split = [turn_split(s) for s in states]  # multi-turn: prefix-matched turns form one sample, the rest one each
    out["turns/stitched"] = float(sum(a for a, _ in split))
    out["turns/separate"] = float(sum(b for _, b in split))
    return out


def _jsonable(x: Any) -> Any:
    if hasattr(x, "model_dump"):
        return x.model_dump(exclude_none=True)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


ROW_KEYS = ("example_id", "task", "prompt", "completion", "answer", "info", "reward", "metrics", "error",
            "reward_errors", "stop_condition", "is_truncated")


def state_to_row(state: dict[str, Any], columns: Iterable[str] = ()) -> dict[str, Any]:
    """A rollout's saved row; `columns`: more of its state's keys (vf-eval's -C/--state-columns)."""
    from verifiers_rl.envs.turn_tokens import turn_count

    row = {k: _jsonable(state.get(k)) for k in ROW_KEYS}
    row["num_turns"] = turn_count(state)
    row["completion_tokens"] = completion_length(state)
    row.update({k: _jsonable(state.get(k)) for k in columns if k not in row})
    return row


def write_jsonl(states: Iterable[dict[str, Any]], path: str | Path, columns: Iterable[str] = ()) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(columns)
    with path.open("w") as f:
        for s in states:
            f.write(json.dumps(state_to_row(s, columns)) + "\n")
    return path


def save_results(states: list[dict[str, Any]], summary: dict[str, float], metadata: dict[str, Any],
                 directory: str | Path, columns: Iterable[str] = ()) -> Path:
    """verifiers' saved evaluation: `results.jsonl` (a row per rollout) and `metadata.json` (the run's settings and
    its averages, from `summarize(states)`) in `directory`."""
    import datetime

    directory = Path(directory)
    write_jsonl(states, directory / "results.jsonl", columns)
    meta = {**metadata, "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
            "avg_reward": summary["reward/mean"],
            "avg_metrics": {k.removeprefix("metrics/"): v for k, v in summary.items() if k.startswith("metrics/")},
            "avg_error": summary["errors/rollouts"] / max(len(states), 1), "path_to_save": str(directory)}
    (directory / "metadata.json").write_text(json.dumps(_jsonable(meta), indent=2) + "\n")
    return directory
