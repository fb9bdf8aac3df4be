"""How an environment brings its dataset to rollout inputs: `example_id`, `prompt` (chat messages built from a
`question` column with the system prompt and few-shot examples), `task`; built lazily from a DatasetBuilder."""

from __future__ import annotations

import json
from typing import Any

from verifiers_rl.record import get_field
from verifiers_rl.types import Messages
from verifiers_rl.verbosity import no_progress_bars


def quiet_map(dataset: Any, fn: Any, **kwargs: Any) -> Any:
    """`dataset.map(fn, batched=True)` (``fn`` takes and returns columns) without a progress bar per env."""
    with no_progress_bars():
        return dataset.map(fn, **{**kwargs, "batched": True})


def with_example_id(row: dict, index: int) -> dict:
    """A copy of a rollout input row with its `example_id`: its own when it has one, else its index in the batch."""
    return {**row, "example_id": row.get("example_id", index)}


def group_member(row: Any) -> str | None:
    """The EnvGroup member a row or a rollout belongs to: its `task` (this package's EnvGroup), else verifiers
    0.3's route `info["env_id"]` (a name, or a list whose first name is the member; `info` may be JSON text)."""
    task = row.get("task")
    if isinstance(task, str) and task:
        return task
    info = row.get("info")
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except ValueError:
            return None
    route = info.get("env_id") if isinstance(info, dict) else None
    if isinstance(route, (list, tuple)):
        route = route[0] if route else None
    return route if isinstance(route, str) else None


def without_training_rows(env: Any) -> bool:
    """An environment built with no training rows (an eval_dataset only, ours or verifiers' classic one, or an
    empty dataset: a split that gave every row to eval): the trainer says so first, naming the environment."""
    dataset = getattr(env, "dataset", False)
    if dataset is None:
        return getattr(env, "dataset_source", None) is None
    return hasattr(dataset, "num_rows") and dataset.num_rows == 0


def rows_dataset(rows: list[dict], columns: tuple[str, ...]) -> Any:
    """Row dicts as a Dataset of `columns`; with no rows still a Dataset with those columns (it formats)."""
    from datasets import Dataset

    return Dataset.from_dict({c: [row[c] for row in rows] for c in columns})


def batch_len(rows: dict) -> int:
    """How many rows a batch of columns (``quiet_map``'s ``fn`` argument) holds."""
    return len(next(iter(rows.values()), []))


class DatasetFormatting:
    system_prompt: str | None
    few_shot: Messages | None
    map_kwargs: dict
    env_id: str
    dataset: Any
    eval_dataset: Any
    dataset_source: Any
    eval_dataset_source: Any
    logger: Any

    def _ensure_example_id(self, dataset: Any) -> Any:
        cols = dataset.column_names
        if "example_id" in cols and len(dataset) and not isinstance(dataset["example_id"][0], int):
            dataset = dataset.rename_column("example_id", "src_id")
        if "example_id" not in dataset.column_names:
            dataset = dataset.add_column("example_id", range(len(dataset)))
        return dataset

    def _ensure_prompt(self, dataset: Any, system_prompt: str | None = None, few_shot: Messages | None = None,
                       question_key: str = "question", answer_key: str = "answer",
                       map_kwargs: dict | None = None) -> Any:
        map_kwargs = map_kwargs or {}
        if "prompt" not in dataset.column_names:
            if question_key not in dataset.column_names:
                if len(dataset) == 0:  # as verifiers (a map over no rows): an empty split loads, e.g. a train
                    return dataset     # split an environment left empty by giving every row to eval
                raise ValueError(f"dataset needs a 'prompt' or '{question_key}' column; it has "
                                 f"{sorted(dataset.column_names)}")
            head = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + list(few_shot or [])

            def build(rows: dict) -> dict:
                out = {"prompt": [head + [{"role": "user", "content": q}] for q in rows[question_key]]}
                if answer_key != "answer":
                    out["answer"] = rows[answer_key]
                return out

            return quiet_map(dataset, build, **map_kwargs)
        if system_prompt is not None:
            def prepend(rows: dict) -> dict:
                out = []
                for prompt in rows["prompt"]:
                    assert isinstance(prompt, list), \
                        f"prompt must be a list of messages when system_prompt is provided, got {type(prompt)}"
                    system = bool(prompt) and get_field(prompt[0], "role") == "system"
                    out.append(prompt if system else [{"role": "system", "content": system_prompt}, *prompt])
                return {"prompt": out}

            dataset = quiet_map(dataset, prepend, **map_kwargs)
        if few_shot is not None:
            self.logger.warning("Dataset already has a 'prompt' column, so the provided few_shot examples will be "
                                "ignored.")
        return dataset

    def _ensure_task(self, dataset: Any, map_kwargs: dict | None = None) -> Any:
        if "task" in dataset.column_names:
            return dataset
        task = self.env_id or "default"
        return quiet_map(dataset, lambda rows: {"task": [task] * batch_len(rows)}, **(map_kwargs or {}))

    def _format_dataset(self, dataset: Any, system_prompt: str | None = None, few_shot: Messages | None = None,
                        question_key: str = "question", answer_key: str = "answer",
                        map_kwargs: dict | None = None) -> Any:
        dataset = self._ensure_example_id(dataset)
        dataset = self._ensure_prompt(dataset, system_prompt, few_shot, question_key, answer_key, map_kwargs)
        return self._ensure_task(dataset, map_kwargs)

    def _format_completion_dataset(self, dataset: Any, map_kwargs: dict | None = None) -> Any:
        return self._ensure_task(self._ensure_example_id(dataset), map_kwargs)

    def _format_dataset_source(self, dataset: Any) -> Any:
        if isinstance(dataset, list):  # a list of row dicts is accepted as a dataset
            from datasets import Dataset

            dataset = Dataset.from_list(dataset)
        return self._format_dataset(dataset, self.system_prompt, self.few_shot, map_kwargs=self.map_kwargs)

    def build_dataset(self) -> Any:
        if self.dataset is None and self.dataset_source is not None:
            self.dataset = self._format_dataset_source(self.dataset_source())
        return self.dataset

    def build_eval_dataset(self) -> Any:
        if self.eval_dataset is None and self.eval_dataset_source is not None:
            self.eval_dataset = self._format_dataset_source(self.eval_dataset_source())
        return self.eval_dataset

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        self.build_dataset()
        if self.dataset is None:
            raise ValueError("dataset is not set")
        if seed is not None:
            self.dataset = self.dataset.shuffle(seed=seed)
        return self.dataset.select(range(min(n, len(self.dataset)))) if n > 0 else self.dataset

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        self.build_eval_dataset()
        if self.eval_dataset is None:
            if not getattr(self, "_said_no_eval", False):  # once per environment, not at every validation
                self.logger.warning("eval_dataset is not set, falling back to train dataset")
                self._said_no_eval = True
            return self.get_dataset(n, seed)
        if seed is not None:
            self.eval_dataset = self.eval_dataset.shuffle(seed=seed)
        return self.eval_dataset.select(range(min(n, len(self.eval_dataset)))) if n > 0 else self.eval_dataset
