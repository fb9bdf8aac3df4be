"""EnvGroup: several environments served as one (verifiers 0.1.11 semantics).

The members' datasets are stacked, each row's `task` (and `info["env_id"]`) naming its member, which runs and scores it;
`EnvGroupRubric` reports ALL members' metrics, 0.0 where one does not apply. Beyond verifiers: `ratios` weight the
training batches, and members whose columns differ still stack (a missing column is None, removed before the member sees
the row; `info` dicts of differing shapes are stored as JSON text).
"""

from __future__ import annotations

import functools
import json
import time
from collections import Counter
from typing import Any, Mapping, Sequence

from verifiers_rl.envs.dataset_format import batch_len, group_member, quiet_map
from verifiers_rl.envs.environment import Environment
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages, RolloutInput, RolloutOutput, SamplingArgs, State
from verifiers_rl.verbosity import no_progress_bars


class EnvGroupRubric(Rubric):
    """Scores each state with the rubric of the member environment named by the state's `task`."""

    def __init__(self, env_map: Mapping[str, Environment]):
        super().__init__()
        self.env_map = env_map
        self.logger.info("EnvGroupRubric tracking %d unique reward functions", len(self.all_reward_names))

    @property
    def all_reward_names(self) -> list[str]:
        """Every member's reward function names, each once, sorted (read live: members may add some)."""
        names: set[str] = set()
        for env in self.env_map.values():
            names.update(env.rubric._get_reward_func_names())
        return sorted(names)

    def _get_reward_func_names(self) -> list[str]:
        return self.all_reward_names

    @property
    def error_counts(self) -> Counter[str]:  # type: ignore[override]
        """The members' reward-function failure counts, summed by name (a shared rubric counted once)."""
        total: Counter[str] = Counter()
        seen: set[int] = set()
        for env in getattr(self, "env_map", {}).values():
            if id(env.rubric) not in seen:
                seen.add(id(env.rubric))
                total.update(env.rubric.error_counts)
        return total

    @error_counts.setter
    def error_counts(self, value: Counter[str]) -> None:
        pass  # the base constructor assigns one; the members own the counts

    def _member(self, state: Any) -> Environment | None:
        name = route_name(state, self.env_map)
        env = self.env_map.get(name)
        if env is None:
            self.logger.warning(f"No environment found for task '{name}'")
        return env

    def _padded(self, metrics: Any) -> dict[str, float]:
        """All members' metric names: this state's scores where its member has them, else 0.0."""
        metrics = metrics or {}
        return {name: metrics.get(name, 0.0) for name in self.all_reward_names}

    async def score_rollout(self, state: Any) -> None:
        env = self._member(state)
        if env is None:
            state["reward"], state["metrics"] = 0.0, self._padded(None)
            return
        await env.rubric.score_rollout(state)
        state["reward"] = state.get("reward", 0.0)
        state["metrics"] = self._padded(state.get("metrics"))

    async def score_group(self, states: list[Any]) -> None:
        """Score a group with its member's rubric. A group is one example, so one task; states of several
        tasks (ours, not verifiers') are scored as one sub-group per task."""
        if not states:
            return
        start = time.time()
        totals_before = [_timing(s).get("total_ms", 0.0) for s in states]
        by_task: dict[Any, list[Any]] = {}
        for s in states:
            by_task.setdefault(route_name(s, self.env_map), []).append(s)
        for group in by_task.values():
            env = self._member(group[0])
            if env is None:
                for s in group:
                    s["reward"], s["metrics"] = 0.0, self._padded(None)
                    _timing(s)["scoring_ms"] = 0.0
                continue
            await env.rubric.score_group(group)
        elapsed_ms = (time.time() - start) * 1000
        for s, total in zip(states, totals_before):
            if self.env_map.get(route_name(s, self.env_map)) is None:
                continue
            s["metrics"] = self._padded(s.get("metrics"))
            if isinstance(s.get("timing"), dict):  # the whole routing counts once toward the total
                s["timing"]["scoring_ms"] = elapsed_ms
                s["timing"]["total_ms"] = (total or 0.0) + elapsed_ms


def route_name(row: Any, env_map: Mapping[str, Any]) -> Any:
    """The member a row or state belongs to: its `task` (0.1.11), else its `info["env_id"]` (0.3; read by
    `dataset_format.group_member`), else its task as given ("default" when it has none)."""
    task = row.get("task", "default")
    if task in env_map:
        return task
    env_id = group_member({"info": row.get("info")})
    return env_id if env_id in env_map else task


def _timing(state: Any) -> dict[str, Any]:
    timing = state.get("timing")
    return timing if isinstance(timing, dict) else {}


class EnvGroup(Environment):
    def __init__(self, envs: Sequence[Environment], env_names: Sequence[str] | None = None,
                 map_kwargs: dict | None = None, *, ratios: Sequence[float] | None = None, **kwargs: Any):
        """`env_names` default to env_0, env_1, ...; `ratios` (ours) weight how often each member's rows
        appear in training batches."""
        if not envs:
            raise ValueError("EnvGroup requires at least one environment")
        self.envs = list(envs)
        self.env_names = list(env_names) if env_names else [f"env_{i}" for i in range(len(self.envs))]
        if len(self.env_names) != len(self.envs):
            raise ValueError("Number of env_names must match number of envs")
        if ratios is not None and (len(ratios) != len(self.envs) or any(not r > 0 for r in ratios)):
            raise ValueError(f"EnvGroup: ratios {list(ratios)} must be {len(self.envs)} positive numbers")
        self.ratios = [float(r) for r in ratios] if ratios is not None else None
        self.env_map = dict(zip(self.env_names, self.envs))
        map_kwargs = dict(map_kwargs or {})
        train, evals = {}, {}
        self._info_added: dict[str, str | None] = {}  # per member: "column"/"key" when `info["env_id"]` is ours
        for env, name in zip(self.envs, self.env_names):
            for ds, split in ((env.build_dataset(), train), (env.build_eval_dataset(), evals)):
                if ds is not None:
                    self._info_added[name] = _info_addition(ds)
                    split[name] = _tag_task(ds, name, map_kwargs)
        self._filled: dict[str, set[str]] = {}  # per member: columns it lacks, filled with None when stacked
        dataset, eval_dataset = _stack(train, self._filled), _stack(evals, self._filled)
        # members keep their own tools: the group has none of its own
        super().__init__(dataset=dataset, eval_dataset=eval_dataset, rubric=EnvGroupRubric(self.env_map),
                         tool_defs=None, map_kwargs=map_kwargs, **kwargs)
        if kwargs.get("max_seq_len") is not None:  # ours: a limit given to the group applies to its members
            self.set_max_seq_len(kwargs["max_seq_len"])
        self.logger.info(f"Initialized EnvGroup with {len(self.envs)} environments: {self.env_names}")

    # --- datasets: rows were formatted by their members; ids are renumbered across the stack -----------
    def _format_dataset(self, dataset: Any, system_prompt: str | None = None, few_shot: Messages | None = None,
                        question_key: str = "question", answer_key: str = "answer",
                        map_kwargs: dict | None = None) -> Any:
        dataset = self._ensure_prompt(dataset, system_prompt, few_shot, question_key, answer_key, map_kwargs)
        return self._format_completion_dataset(dataset, map_kwargs)

    def _format_completion_dataset(self, dataset: Any, map_kwargs: dict | None = None) -> Any:
        if "example_id" in dataset.column_names:
            dataset = dataset.remove_columns(["example_id"])
        dataset = dataset.add_column("example_id", list(range(len(dataset))))
        assert "task" in dataset.column_names, "EnvGroup rows carry their member's name in `task`"
        return dataset

    # --- rollouts: the member named by the row's task runs them --------------------------------------
    def get_env_for_task(self, task: str) -> Environment:
        return self.env_map.get(task, self.envs[0])

    def get_env_for_name(self, name: str) -> Environment:
        """The member named `name` (verifiers 0.3); ValueError for an unknown one."""
        if name not in self.env_map:
            raise ValueError(f"No environment found for {name!r}: the group has {', '.join(self.env_names)}")
        return self.env_map[name]

    def _route(self, input: Any) -> tuple[Environment, Any]:
        """The member for a row, and the row as the member knows it: without the None columns stacking
        added (a member without `info` sees none, not None). A row without a `task` goes to the first
        member, tagged with its name (so that the group's rubric finds that member again)."""
        named = route_name(input, self.env_map)
        task = named if named in self.env_map or "task" in input else self.env_names[0]
        filled, added = self._filled.get(task, ()), self._info_added.get(task)
        if input.get("task") == task and not added and not any(input.get(c, 0) is None for c in filled):
            return self.get_env_for_task(task), input
        row = {k: v for k, v in input.items() if not (k in filled and v is None)}
        row["task"] = task
        if added == "column":
            row.pop("info", None)
        elif added == "key":  # stacking may have stored it as JSON text (shapes differing between members)
            info = json.loads(row["info"]) if isinstance(row.get("info"), str) else row.get("info")
            if isinstance(info, dict):
                row["info"] = {k: v for k, v in info.items() if k != "env_id"}
        return self.get_env_for_task(task), row

    async def rollout(self, input: RolloutInput, client: Any, model: str,
                      sampling_args: SamplingArgs | None = None) -> State:
        env, input = self._route(input)
        return await env.rollout(input, client, model, sampling_args)

    async def run_rollout(self, input: RolloutInput, client: Any, model: str, sampling_args: SamplingArgs,
                          max_retries: int = 0, state_columns: list[str] | None = None,
                          env_client: Any = None) -> RolloutOutput:
        env, input = self._route(input)
        return await env.run_rollout(input, client, model, sampling_args, max_retries, state_columns,
                                     env_client or env.env_client or self.env_client)

    async def run_group(self, group_inputs: list[RolloutInput], client: Any, model: str,
                        sampling_args: SamplingArgs, max_retries: int = 0, state_columns: list[str] | None = None,
                        env_client: Any = None, **kwargs: Any) -> list[RolloutOutput]:
        env, _ = self._route(group_inputs[0])
        group_inputs = [self._route(i)[1] for i in group_inputs]
        return await env.run_group(group_inputs, client, model, sampling_args, max_retries, state_columns,
                                   env_client or env.env_client or self.env_client)

    async def run_group_states(self, group_inputs: list[RolloutInput], client: Any, model: str,
                               sampling_args: SamplingArgs, max_retries: int = 0) -> list[State]:
        env, _ = self._route(group_inputs[0])
        return await env.run_group_states([self._route(i)[1] for i in group_inputs], client, model,
                                          sampling_args, max_retries)

    # --- settings: the group's and every member's ------------------------------------------------------
    def set_max_seq_len(self, max_seq_len: int | None) -> None:
        self.max_seq_len = max_seq_len
        for env in self.envs:
            env.set_max_seq_len(max_seq_len)

    def set_score_rollouts(self, score_rollouts: bool) -> None:
        self.score_rollouts = score_rollouts
        for env in self.envs:
            env.set_score_rollouts(score_rollouts)


def _tag_rows(name: str, tag_info: bool, rows: dict) -> dict:
    """A batch of rows (as columns, quiet_map) with its member's name as `task` (and `info["env_id"]`); bound
    with functools.partial, not a closure, so each member keeps its own name under lazy mapping."""
    n = batch_len(rows)
    if tag_info:
        infos = rows.get("info") or [None] * n
        return {"task": [name] * n, "info": [{**(i or {}), "env_id": name} for i in infos]}
    return {"task": [name] * n}


def _info_addition(dataset: Any) -> str | None:
    """What tagging adds to a member's `info`: the whole column, the `env_id` key, nothing new (it has one),
    or None: an `info` that is not a dict column (JSON text) is left as it is, routed by `task` alone."""
    if "info" not in dataset.column_names:
        return "column"
    feature = dataset.features["info"]
    if not isinstance(feature, dict):
        return None
    return "" if "env_id" in feature else "key"


def _tag_task(dataset: Any, name: str, map_kwargs: dict) -> Any:
    tag_info = _info_addition(dataset) is not None
    if "task" in dataset.column_names:
        dataset = dataset.remove_columns(["task"])
    return quiet_map(dataset, functools.partial(_tag_rows, name, tag_info), **map_kwargs)


def _stack(parts: dict[str, Any], filled: dict[str, set[str]]) -> Any:
    """The members' rows, in order, as one dataset (None when no member has any); the columns each
    member lacked are added to `filled`."""
    if not parts:
        return None
    from datasets import Dataset, concatenate_datasets

    features: dict[str, Any] = {}  # each column's type in the first member that has it
    for p in parts.values():
        features.update({c: f for c, f in p.features.items() if c not in features})
    for name, p in parts.items():
        filled.setdefault(name, set()).update(c for c in features if c not in p.column_names)
    stacked = [_with_columns(p, features) for p in parts.values()]
    if "info" in features and len({str(p.features["info"]) for p in stacked}) > 1:
        stacked = [_info_as_json(p) for p in stacked]  # Arrow would merge the shapes: keep each exact
    try:
        return concatenate_datasets(stacked)
    except (ValueError, TypeError, AttributeError):  # other columns whose types cannot be aligned
        return Dataset.from_list([row for p in stacked for row in p.to_list()])  # let Arrow infer a union


def _with_columns(dataset: Any, features: dict[str, Any]) -> Any:
    """`dataset` with every column of `features` (a missing one all None, of that type), in that order."""
    with no_progress_bars():
        for c, feature in features.items():
            if c not in dataset.column_names:
                dataset = dataset.add_column(c, [None] * len(dataset)).cast_column(c, feature)
        return dataset.select_columns(list(features))


def _info_as_json(dataset: Any) -> Any:
    from datasets import Features, Value

    if dataset.features["info"] == Value("string"):
        return dataset
    return quiet_map(dataset, lambda rows: {"info": [None if i is None else json.dumps(i) for i in rows["info"]]},
                     features=Features({**dataset.features, "info": Value("string")}))
