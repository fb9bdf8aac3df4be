"""Running many rollouts: `run_rollout` / `run_group` (score, then serialize), `generate` (all inputs, at most
`max_concurrent` groups at once, a progress bar or callbacks, optional JSONL results) and `evaluate` on the eval
split, each with a `_sync` twin for scripts and notebooks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from copy import deepcopy
from typing import Any, Callable

from verifiers_rl.clients import resolve_client
from verifiers_rl.rollout_timing import spans_of
from verifiers_rl.types import GenerateOutputs, RolloutInput, RolloutOutput, SamplingArgs, State
from verifiers_rl.utils import results_store as store
from verifiers_rl.utils.async_utils import maybe_retry, run_sync
from verifiers_rl.utils.save_utils import OutputsBuilder, state_to_output

logger = logging.getLogger(__name__)
RETRY_WAIT_S = 0.05  # first backoff of run_rollout/run_group retries (then doubling, plus jitter up to this)


def input_rows(inputs: Any) -> list[dict[str, Any]]:
    """Rollout inputs as a list of row dicts, from a Dataset, a column dict or an iterable of rows."""
    if hasattr(inputs, "to_list"):
        return inputs.to_list()
    if isinstance(inputs, dict):  # a column dict
        keys = list(inputs)
        return [dict(zip(keys, vals)) for vals in zip(*(inputs[k] for k in keys))]
    return list(inputs)


def _base_url(client: Any) -> str:
    url = getattr(client, "api_base_url", None) or getattr(getattr(client, "client", None), "base_url", None)
    return str(url or getattr(client, "base_url", "") or "")


async def rubric_cleanup(rubric: Any, states: list[State]) -> None:
    """The rubric's cleanup handlers on each scored state (verifiers 0.3; a rubric without them: nothing)."""
    cleanup = getattr(rubric, "cleanup", None)
    for state in states if callable(cleanup) else []:
        await cleanup(state)


class Generation:
    rubric: Any
    score_rollouts: bool
    sampling_args: dict
    env_id: str
    env_args: dict
    pass_threshold: float
    max_workers: int

    async def _score(self, states: list[State], single: bool = False) -> None:
        """Score (one rollout, or a group together) inside the states' scoring span, then run the rubric's
        cleanup on each (verifiers 0.3)."""
        start = time.time()
        if not self.score_rollouts:
            await (self.rubric.dummy_score_rollout(states[0]) if single else self.rubric.dummy_score_group(states))
        else:
            await (self.rubric.score_rollout(states[0]) if single else self.rubric.score_group(states))
        end = time.time()
        for state in states:
            timing = spans_of(state)
            if timing is not None:
                timing.scoring.start, timing.scoring.end = start, end
        await rubric_cleanup(self.rubric, states)

    async def run_rollout(self, input: RolloutInput, client: Any, model: str, sampling_args: SamplingArgs,
                          max_retries: int = 0, state_columns: list[str] | None = None,
                          env_client: Any = None) -> RolloutOutput:
        client = resolve_client(client)

        async def attempt() -> State:
            state = await self.rollout(input, client, model, sampling_args)  # type: ignore[attr-defined]
            await self._score([state], single=True)
            return state

        return state_to_output(await maybe_retry(attempt, max_retries, initial=RETRY_WAIT_S)(), state_columns or [])

    async def run_group(self, group_inputs: list[RolloutInput], client: Any, model: str,
                        sampling_args: SamplingArgs, max_retries: int = 0, state_columns: list[str] | None = None,
                        env_client: Any = None, **kwargs: Any) -> list[RolloutOutput]:
        states = await self.run_group_states(group_inputs, client, model, sampling_args, max_retries)
        return [state_to_output(s, state_columns or []) for s in states]

    async def run_group_states(self, group_inputs: list[RolloutInput], client: Any, model: str,
                               sampling_args: SamplingArgs, max_retries: int = 0) -> list[State]:
        """One group's rollouts, scored together: the states themselves (what a trainer needs)."""
        client = resolve_client(client)

        async def attempt() -> list[State]:
            states = list(await asyncio.gather(*(self.rollout(i, client, model, sampling_args)  # type: ignore
                                                 for i in group_inputs)))
            await self._score(states)
            return states

        return await maybe_retry(attempt, max_retries, initial=RETRY_WAIT_S)()

    async def generate(self, inputs: Any, client: Any, model: str, sampling_args: SamplingArgs | None = None,
                       max_concurrent: int = -1, results_path: Any = None, state_columns: list[str] | None = None,
                       save_results: bool = False, push_to_hf_hub: bool = False,
                       hf_hub_dataset_name: str | None = None, independent_scoring: bool = False,
                       max_retries: int = 0, shuffle: bool = False, shuffle_seed: int | None = None,
                       on_start: Callable | None = None, on_progress: Callable | list[Callable] | None = None,
                       on_log: Callable[[str], None] | None = None) -> GenerateOutputs:
        """Rollouts for every input (rows sharing an `example_id` form a group, scored together unless
        `independent_scoring`), at most `max_concurrent` groups in flight. `shuffle`/`shuffle_seed` say how
        the inputs were ordered (recorded in the metadata, checked when resuming)."""
        rows = input_rows(inputs)
        sampling = {**deepcopy(self.sampling_args), **(sampling_args or {})}
        n_examples = len({r["example_id"] for r in rows})
        per_example = len(rows) // n_examples if n_examples else 0
        shuffle_seed = (0 if shuffle_seed is None else shuffle_seed) if shuffle else None
        builder = OutputsBuilder(self.env_id, self.env_args, model, _base_url(client), n_examples, per_example,
                                 state_columns, sampling, results_path, self.pass_threshold, shuffle, shuffle_seed)
        log = on_log or logger.info
        if save_results and results_path is not None and not store.is_resumable(results_path):
            store.check_new_results_path(results_path)
        if store.is_resumable(results_path):
            store.validate_resume_metadata(results_path, self.env_id, model, n_examples, per_example, shuffle,
                                           shuffle_seed)
            saved = store.load_outputs(results_path)
            builder.add_outputs(saved)
            rows = store.pending_inputs(rows, saved, per_example)
            log(f"Resuming from {results_path}: {len(saved)} rollouts done, {len(rows)} to run")
        if independent_scoring:
            units: list[Any] = rows
        else:
            grouped: dict[Any, list] = defaultdict(list)
            for r in rows:
                grouped[r["example_id"]].append(r)
            units = list(grouped.values())
        callbacks, bar = self._progress(on_start, on_progress, rows, units)
        client = resolve_client(client)
        sem = asyncio.Semaphore(max_concurrent) if max_concurrent and max_concurrent > 0 else None

        async def run(unit: Any) -> list[RolloutOutput]:
            async with sem or contextlib.nullcontext():
                if independent_scoring:
                    return [await self.run_rollout(unit, client, model, sampling, max_retries, state_columns)]
                return await self.run_group(unit, client, model, sampling, max_retries, state_columns)

        tasks = [asyncio.ensure_future(run(u)) for u in units]
        try:
            for done in asyncio.as_completed(tasks):
                new = await done
                builder.add_outputs(new)
                meta = builder.build_metadata()
                for cb in callbacks:
                    cb(builder.outputs, new, meta)
                if save_results and results_path is not None:
                    store.append_outputs(new, results_path)
                    store.save_metadata(meta, results_path)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if bar is not None:
                bar.close()
        results = builder.build(sort_by_example_id=True)
        if save_results and results_path is not None:
            store.save_metadata(results["metadata"], results_path)
            log(f"Saved final results to {results_path}")
        return results

    def _progress(self, on_start: Callable | None, on_progress: Any, rows: list, units: list) -> tuple[list, Any]:
        """The progress callbacks: a tqdm bar unless a single callback replaces it (a list runs beside it)."""
        if on_start is not None:
            on_start(rows, units)
        if on_progress is not None and not isinstance(on_progress, list):
            return [on_progress] if on_progress else [], None
        if not units:
            return list(on_progress or []), None
        from tqdm import tqdm

        bar = tqdm(total=len(units), desc=f"Processing {len(units)} "
                   f"{'groups' if isinstance(units[0], list) else 'rollouts'} ({len(rows)} total)", disable=None)

        def tick(all_outputs: list, new: list, meta: dict) -> None:
            bar.update(1)
            bar.set_postfix(reward=meta.get("avg_reward"))

        return [tick, *(on_progress or [])], bar

    def generate_sync(self, inputs: Any, client: Any, **kwargs: Any) -> GenerateOutputs:
        return run_sync(self.generate(inputs, client=client, **kwargs))

    def _get_eval_inputs(self, num_examples: int = -1, rollouts_per_example: int = 1, shuffle: bool = False,
                         shuffle_seed: int | None = None) -> list[RolloutInput]:
        """The eval rows: shuffled first when asked (seed 0 by default), then the first `num_examples`, each
        repeated `rollouts_per_example` times."""
        ds = self.get_eval_dataset()  # type: ignore[attr-defined]
        assert ds is not None, "No dataset found"
        if shuffle:
            ds = ds.shuffle(seed=0 if shuffle_seed is None else shuffle_seed)
        if num_examples > 0:
            ds = ds.select(range(min(num_examples, len(ds))))
        if rollouts_per_example > 1:
            ds = ds.repeat(rollouts_per_example)
        return ds.to_list()

    async def evaluate(self, client: Any, model: str, sampling_args: SamplingArgs | None = None,
                       num_examples: int = -1, rollouts_per_example: int = 1, max_concurrent: int = -1,
                       shuffle: bool = False, shuffle_seed: int | None = None, **kwargs: Any) -> GenerateOutputs:
        inputs = self._get_eval_inputs(num_examples, rollouts_per_example, shuffle, shuffle_seed)
        return await self.generate(inputs, client=client, model=model, sampling_args=sampling_args,
                                   max_concurrent=max_concurrent, shuffle=shuffle, shuffle_seed=shuffle_seed,
                                   **kwargs)

    def evaluate_sync(self, client: Any, model: str, sampling_args: SamplingArgs | None = None,
                      num_examples: int = -1, rollouts_per_example: int = 1, max_concurrent: int = -1,
                      **kwargs: Any) -> GenerateOutputs:
        return run_sync(self.evaluate(client, model, sampling_args, num_examples, rollouts_per_example,
                                      max_concurrent, **kwargs))
