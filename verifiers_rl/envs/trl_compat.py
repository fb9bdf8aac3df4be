"""TRL's way in: `RLTrainer(model, reward_funcs=..., train_dataset=..., args=...)`, as `GRPOTrainer` takes them,
becomes a one-turn environment (`trl_environment`; a ToolEnv with TRL's `tools`, or its `environment_factory`:
trl_environments.py; reward models among the functions: trl_reward_models.py). The dataset's `prompt` column is the prompt; each reward function
is called as TRL calls it (`prompts`, `completions`, `completion_ids`, every other dataset column as a list, by
keyword), here once per group of a prompt's rollouts; a None reward counts 0 in the weighted sum, as TRL's nansum,
and a rollout every function gave None is TRL's unscorable one: dropped (advantage 0, out of its group's baseline and
the reward means).
What a function logs with TRL's `log_metric(name, value)` is the step's `metrics/<name>/mean` (averaged over the
step's calls, as TRL's), and `log_extra(column, values)` a column of the sample tables (console and W&B)."""

from __future__ import annotations

import inspect
from collections import defaultdict
from typing import Any, Callable

from verifiers_rl.envs.trl_environments import KEY, SYNTHETIC_ROWS, FactoryToolEnv, InstancePool
from verifiers_rl.envs.trl_reward_models import RewardModel, reward_funcs_of
from verifiers_rl.rubrics.rubric import Rubric, func_name

ORIGINAL = "trl_prompt"  # a string prompt as the dataset gave it (the rollout's is a user message)
LOGGED_METRICS = "trl_logged_metrics"  # a rollout's share of what its group's calls gave `log_metric`
LOGGED_COLUMNS = "logged_columns"  # a rollout's values of `log_extra`'s columns (the sample tables show them)
NONE_FROM = "trl_none_from"  # the reward functions that returned None for a rollout


def logged_columns(states: list[dict[str, Any]]) -> list[str]:
    """The `log_extra` columns of these rollouts, in the order first logged."""
    return list(dict.fromkeys(c for s in states for c in s.get(LOGGED_COLUMNS) or {}))


class _LoggingRubric(Rubric):
    """A Rubric whose rollouts' metrics also hold what the reward functions gave `log_metric` (a reward function's
    own score keeps its name); a scored rollout's environment instance goes back to its pool."""

    pool: InstancePool | None = None

    async def score_group(self, states: list[Any]) -> None:
        await super().score_group(states)
        every = set(self.get_reward_func_names())
        for s in states:
            s["metrics"] = {**s.pop(LOGGED_METRICS, {}), **(s.get("metrics") or {})}
            nones = set(s.pop(NONE_FROM, ()))
            if nones and nones >= every:  # TRL's unscorable rollout: out of its group's baseline, advantage 0, out of
                s["dropped"] = True       # the reward means (a None beside another function's score counts 0)
            if self.pool is not None:
                self.pool.release(s.get(KEY))


def _completions(states: list[dict[str, Any]], conversational: bool, turns: bool) -> list[Any]:
    """TRL's `completions`: the reply's text (string prompts), `[{"role": "assistant", "content": text}]`, or with
    tools every message after the prompt (calls and results)."""
    if turns:
        return [[m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
                 for m in s.get("completion") or []] for s in states]
    texts = [str((s.get("completion") or [{}])[-1].get("content") or "") for s in states]
    return [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts


def _prompts(states: list[dict[str, Any]]) -> list[Any]:
    """TRL's `prompts`: a string prompt as the dataset gave it, else the chat messages (a state's prompt is its
    input's, so with environment_factory as reset() left them)."""
    return [(s.get("input") or {}).get(ORIGINAL, s.get("prompt")) for s in states]


def _model_reward_fn(rm: RewardModel, conversational: bool, turns: bool, trainer: dict) -> Callable:
    """A reward model as a group reward function: TRL's scoring, on the trainer's device."""

    async def reward(states: list[dict[str, Any]]) -> list[float]:
        args = getattr(trainer["ref"](), "args", None)
        return rm.score(_prompts(states), _completions(states, conversational, turns),
                        getattr(args, "device", None),
                        getattr(args, "chat_template_kwargs", None))

    reward.__name__ = rm.name
    return reward


def _reward_fn(func: Any, columns: list[str], conversational: bool, turns: bool, trainer: dict,
               pool: InstancePool | None = None) -> Callable:
    """`func` (TRL's signature, or a RewardModel) as a group reward function of this package's rubric (takes
    `states`); its `trainer_state` is the trainer's (`trainer["ref"]`, set by RLTrainer) at the call, its
    `environments` the rollouts' instances of TRL's environment_factory."""
    if isinstance(func, RewardModel):
        return _model_reward_fn(func, conversational, turns, trainer)

    async def reward(states: list[dict[str, Any]]) -> list[float]:
        metrics: dict[str, list[float]] = defaultdict(list)
        columns_: dict[str, list[Any]] = defaultdict(list)
        rows = [s.get("input") or {} for s in states]
        kwargs = {c: [row.get(c) for row in rows] for c in columns}
        if pool is not None:
            kwargs.update(environments=[pool.get(s.get(KEY)) for s in states])
        ids = [[t for step in s.get("trajectory") or [] for t in (step.get("tokens") or {}).get("completion_ids") or []]
               for s in states]
        out = func(prompts=_prompts(states),
                   completions=_completions(states, conversational, turns), completion_ids=ids,
                   trainer_state=getattr(trainer["ref"](), "state", None),
                   log_metric=lambda name, value: metrics[name].append(float(value)),
                   log_extra=lambda column, values: columns_[column].extend(values), **kwargs)
        if inspect.isawaitable(out):
            out = await out
        for i, s in enumerate(states):
            s.setdefault(LOGGED_METRICS, {}).update({k: sum(v) / len(v) for k, v in metrics.items()})
            s.setdefault(LOGGED_COLUMNS, {}).update({c: v[i] if i < len(v) else None for c, v in columns_.items()})
            if i < len(out) and out[i] is None:
                s.setdefault(NONE_FROM, []).append(reward.__name__)
        return [0.0 if x is None else float(x) for x in out]

    reward.__name__ = func_name(func)
    return reward


def trl_environment(train_dataset: Any, reward_funcs: Any, reward_weights: list[float] | None = None,
                    tools: list[Callable] | None = None, reward_processing_classes: Any = None,
                    pool: InstancePool | None = None, trainer: dict | None = None, eval_only: bool = False) -> Any:
    """A SingleTurnEnv (a ToolEnv with TRL's `tools`: plain functions with docstrings, as both take them) training
    on `train_dataset` (a `datasets.Dataset` or a list of rows with a `prompt` column: a string, sent as one user
    message through the chat template, or a list of chat messages) and scored by TRL's `reward_funcs` (a function, a
    reward model or its id, or a list of them: trl_reward_models.py). `pool`: TRL's environment_factory's instances
    (trl_environments.py; then train_dataset may be None). ValueError (one line) for what it cannot take.
    `eval_only`: the rows are its eval dataset (TRL's eval_dataset); `trainer`: the training env's `trl_trainer`."""
    import verifiers_rl as vf

    funcs = reward_funcs_of(reward_funcs, reward_processing_classes) if reward_funcs is not None else []
    if reward_weights is not None and len(reward_weights) != len(funcs):
        raise ValueError(f"reward_weights: {len(reward_weights)} weights for {len(funcs)} reward functions")
    if not funcs and not (pool is not None and pool.rewarded):
        raise ValueError("reward_funcs: none given, and no environment_factory whose environment has get_reward "
                         "(TRL: one reward source at least)")
    if pool is not None and pool.named and train_dataset is None:
        raise ValueError("environment_factory: a dict of environments needs a train_dataset whose 'environment' "
                         "column names each row's (TRL's rule)")
    data, columns, conversational = _dataset(train_dataset, pool is not None, "eval_dataset" if eval_only else
                                             "train_dataset")
    trainer = trainer if trainer is not None else {"ref": lambda: None}  # RLTrainer's weak reference, once it exists
    turns = bool(tools) or pool is not None
    scorers = [_reward_fn(f, columns, conversational, turns, trainer, pool) for f in funcs]
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(funcs)
    if pool is not None:  # the environments' own rewards, weight 1 each (TRL's)
        scorers, weights = scorers + pool.reward_fns(), weights + [1.0] * len(pool.rewarded)
    rubric = _LoggingRubric(funcs=scorers, weights=weights)
    rubric.pool = pool
    rows = {"eval_dataset" if eval_only else "dataset": data}
    if pool is not None:
        def reset_row(row: dict[str, Any]) -> dict[str, Any]:  # TRL's: the row but the routing `environment`
            kept = [c for c in columns if not (pool.named and c == "environment")]
            return {"prompt": row.get(ORIGINAL, row.get("prompt")), **{c: row.get(c) for c in kept}}

        env = FactoryToolEnv(pool, reset_row, list(tools or []), **rows, rubric=rubric)
    elif tools:
        env = vf.ToolEnv(**rows, tools=list(tools), rubric=rubric)
    else:
        env = vf.SingleTurnEnv(**rows, rubric=rubric)
    env.trl_string_prompts = not conversational  # RLTrainer says so: TRL would send the raw text
    env.trl_trainer = trainer
    env.trl_placeholder = train_dataset is None  # the environment writes the prompts: max_steps sizes the run
    return env


def _dataset(train_dataset: Any, placeholder_ok: bool, name: str) -> tuple[Any, list[str], bool]:
    """(the rows as a Dataset with chat prompts, TRL's other columns, whether TRL's prompts were chat messages);
    `name`: the argument the rows came as, for its errors."""
    from datasets import Dataset, IterableDataset

    from verifiers_rl.envs.dataset_format import quiet_map

    if train_dataset is None and placeholder_ok:  # TRL's placeholder rows: reset() writes each prompt
        train_dataset = [{"prompt": [{"role": "user", "content": ""}]}] * SYNTHETIC_ROWS
    if isinstance(train_dataset, IterableDataset):  # groups are drawn from a shuffled index of the rows
        raise ValueError(f"{name}: a streamed IterableDataset is not supported yet; pass a Dataset (e.g. "
                         "Dataset.from_list(list(ds.take(N))))")
    if isinstance(train_dataset, dict):
        raise ValueError(f"{name}: a dict of datasets is not supported yet; pass one Dataset (several named evals: "
                         "RLTrainer(..., eval_envs={name: env}))")
    data = Dataset.from_list(list(train_dataset)) if isinstance(train_dataset, (list, tuple)) else train_dataset
    if not hasattr(data, "column_names") or "prompt" not in data.column_names:
        raise ValueError(f"{name} needs a 'prompt' column, as TRL's; it has "
                         f"{sorted(getattr(data, 'column_names', []) or [])}")
    columns = [c for c in data.column_names if c not in ("prompt", "completion", "completion_ids")]
    conversational = bool(len(data)) and isinstance(data[0]["prompt"], list)
    if not conversational:  # the reward functions still get the strings
        data = quiet_map(data, lambda rows: {ORIGINAL: rows["prompt"],
                                             "prompt": [[{"role": "user", "content": p}] for p in rows["prompt"]]})
    return data, columns, conversational
