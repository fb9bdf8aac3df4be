"""Orchestrator: which examples each step trains on, and generating their rollouts.

The data order is a pure function of (seed, step) (`data_order.py`), so a resumed run replays a straight run's
examples. Inline (the local engine shares the policy's weights), `get_batch(k)` generates between optimizer steps;
async (a server), a background thread generates up to `max_async_level` steps ahead.
"""


from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from verifiers_rl.envs.dataset_format import without_training_rows
from verifiers_rl.errors import GenerationTimeoutError
from verifiers_rl.trainer.buffer import BufferConfig, DifficultyBuffer
from verifiers_rl.envs.rollouts import agents_per_rollout, generate_states
from verifiers_rl.trainer.data_order import DataOrder
from verifiers_rl.trainer.distributed import share
from verifiers_rl.utils.async_utils import cancel_other_tasks


@dataclass
class Batch:
    step: int
    states: list[dict[str, Any]]
    policy_version: int
    generate_s: float
    metrics: dict[str, float] = field(default_factory=dict)


def salted(sampling_args: dict[str, Any] | None, version: int) -> dict[str, Any]:
    """The run's sampling with vLLM's `cache_salt` naming the policy version: prefix-cache blocks computed under
    older weights are never reused for a newer policy's requests (a salt the user set is kept)."""
    args = dict(sampling_args or {})
    extra = dict(args.get("extra_body") or {})
    if "cache_salt" not in args and "cache_salt" not in extra:
        args["extra_body"] = {**extra, "cache_salt": f"policy-{version}"}
    return args


class Orchestrator:
    def __init__(self, env: Any, client: Any, model_name: Callable[[], str], sampling_args: dict[str, Any],
                 batch_size: int, rollouts_per_example: int, max_concurrent: int, seed: int,
                 shuffle: bool = True, max_async_level: int = 0, inline: bool = True,
                 generation_timeout: float = 600.0, before_generate: Callable[[int], None] | None = None,
                 buffer: BufferConfig | None = None, rank: int = 0, world: int = 1, max_seq_len: int | None = None):
        self.env = env
        self.max_seq_len = max_seq_len  # the context limit of the env's rollouts (one without its own limit)
        self.client = client
        self.model_name = model_name
        self.sampling_args = sampling_args
        self.rollouts_per_example = rollouts_per_example
        self.max_concurrent = max_concurrent
        if without_training_rows(env):
            raise ValueError(f"environment {getattr(env, 'env_id', None) or type(env).__name__!r} has no training "
                             "dataset (it was given an eval_dataset only, or a dataset of no rows): give it a dataset "
                             "to train on, and evaluate it with eval_envs")
        self.dataset = env.get_dataset()
        # rows read as arrow: select(indices).to_list()'s rows without a new Dataset per step (0.1 ms, not 2)
        self._arrow_rows = self.dataset.with_format("arrow")
        # a multi-agent environment's rollout is one state per agent (envs.rollouts.per_agent): fewer examples
        agents = agents_per_rollout(env)
        if agents > 1 and (batch_size % (rollouts_per_example * agents) or (buffer is not None and buffer.active)):
            raise ValueError(f"the environment plays {agents} agents per rollout: batch_size ({batch_size}) must be a "
                             f"multiple of rollouts_per_example x {agents} = {rollouts_per_example * agents}, and "
                             "the difficulty buffer (per example, not per agent) must be off")
        self.groups_per_step = batch_size // (rollouts_per_example * agents)
        # With several training processes each rank generates only its share of a step's groups (distributed.py).
        self.rank, self.world = rank, world
        self.order = DataOrder.for_env(env, self.dataset, seed, shuffle)
        self.buffer = DifficultyBuffer(self.order, buffer, seed) if buffer is not None and buffer.active else None
        self._buffer_snapshots: dict[int, dict[str, Any]] = {}
        self.max_async_level = 0 if inline else max_async_level
        self.inline = inline
        self.generation_timeout = generation_timeout
        self.before_generate = before_generate
        self.policy_version = 0
        self._futures: dict[int, Future] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # --- generation ---------------------------------------------------------------------------------
    async def _rollouts(self, indices: list[int], version: int = 0) -> list[list[dict[str, Any]]]:
        rows = self._arrow_rows[indices].to_pylist()
        try:
            states = await asyncio.wait_for(
                generate_states(self.env, rows, self.client, self.model_name(), salted(self.sampling_args, version),
                                rollouts_per_example=self.rollouts_per_example, max_concurrent=self.max_concurrent,
                                max_seq_len=self.max_seq_len),
                timeout=self.generation_timeout)
        except TimeoutError:  # asyncio's: the step's rollouts as a whole, not one request
            raise GenerationTimeoutError(
                f"generation_timeout: {len(rows)} groups of {self.rollouts_per_example} rollouts took longer than "
                f"{self.generation_timeout:g} s; raise trainer.args.generation_timeout, or make the environment's "
                "turns (max_turns, tools, env_response) or max_tokens shorter") from None
        r = self.rollouts_per_example
        return [states[i:i + r] for i in range(0, len(states), r)]

    async def _generate(self, step: int, version: int) -> Batch:
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        if self.buffer is None:
            start = step * self.groups_per_step
            indices = share(self.order.slice(start, self.groups_per_step), self.rank, self.world)
            groups = await self._rollouts(indices, version) if indices else []
        else:
            self._buffer_snapshots[step] = copy.deepcopy(self.buffer.state_dict())
            groups, metrics = await self.buffer.fill(step, self.groups_per_step,
                                                     functools.partial(self._rollouts, version=version))
        states = [s for g in groups for s in g]
        for s in states:
            s["policy_version"] = version
        return Batch(step=step, states=states, policy_version=version, generate_s=time.perf_counter() - t0,
                     metrics=metrics)

    def epochs_done(self, steps: int) -> float:
        """Passes over the training rows after `steps` steps, the `epoch` HF and TRL log (not steps / max_steps)."""
        return steps * self.groups_per_step / max(sum(len(r) for r in self.order.env_rows), 1)

    def state_dict(self, step: int) -> dict[str, Any]:
        """What resuming at `step` needs beyond the step itself: the buffer as it was before drawing `step`."""
        if self.buffer is None:
            return {}
        snap = self._buffer_snapshots.get(step, self.buffer.state_dict())
        for k in [k for k in self._buffer_snapshots if k < step]:
            del self._buffer_snapshots[k]
        return {"buffer": snap}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if self.buffer is not None and d.get("buffer"):
            self.buffer.load_state_dict(d["buffer"])

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            if not self.inline:
                self._thread = threading.Thread(target=self._loop.run_forever, name="vf-orchestrator", daemon=True)
                self._thread.start()
        return self._loop

    def run(self, coro: Any) -> Any:
        """Run a coroutine on the orchestrator's loop and wait for it (used for eval too)."""
        loop = self._ensure_loop()
        if self.inline:
            return loop.run_until_complete(coro)
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _submit(self, step: int) -> None:
        if step in self._futures:
            return
        if self.before_generate is not None:
            self.before_generate(step)
        loop = self._ensure_loop()
        self._futures[step] = asyncio.run_coroutine_threadsafe(self._generate(step, self.policy_version), loop)

    def get_batch(self, step: int, max_steps: int) -> tuple[Batch, float]:
        """The batch for `step`, and how long the trainer waited for it."""
        t0 = time.perf_counter()
        if self.inline:
            if self.before_generate is not None:
                self.before_generate(step)
            batch = self.run(self._generate(step, self.policy_version))
        else:  # keep up to max_async_level batches in flight beyond the one we need now
            for k in range(step, min(step + self.max_async_level, max_steps - 1) + 1):
                self._submit(k)
            batch = self._futures.pop(step).result()
        return batch, time.perf_counter() - t0

    def close(self) -> None:
        for f in self._futures.values():
            f.cancel()
        self._futures.clear()
        loop, self._loop = self._loop, None
        # Cancel what is still running there (batches generated ahead, the local engine's batching worker), then stop.
        if loop is not None and self._thread is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(cancel_other_tasks(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout=5)
        elif loop is not None and not loop.is_running():
            loop.run_until_complete(cancel_other_tasks())
            loop.close()
