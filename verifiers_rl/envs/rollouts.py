"""What trainers and `vf-eval` run: rollouts of dataset rows as scored STATES (tokens kept), not outputs.

Beyond verifiers' `run_group`: a crash inside environment code is recorded in `state["error"]` and counted instead of
ending the run, while a dead inference server (`ModelServerError`) still ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Awaitable, Callable

from verifiers_rl.clients import Client
from verifiers_rl.env_output import env_output
from verifiers_rl.envs.environment import RUN_MAX_SEQ_LEN
from verifiers_rl.envs.dataset_format import with_example_id
from verifiers_rl.envs.generation import input_rows, rubric_cleanup
from verifiers_rl.envs.real_runtime import generate_states_real, is_real_env, limit_real_env
from verifiers_rl.errors import ModelServerError
from verifiers_rl.rewards import contain_non_finite
from verifiers_rl.envs.turn_tokens import rollout_tokens
from verifiers_rl.types import State
from verifiers_rl.utils.async_utils import gather_flat, maybe_await

logger = logging.getLogger(__name__)


async def _contained(env: Any, row: dict[str, Any], client: Any, model: str, sampling_args: dict) -> State:
    try:
        return await env.rollout(row, client, model, sampling_args)
    except (ModelServerError, asyncio.CancelledError):
        raise
    except Exception as e:  # a crashing harness/tool is counted, not fatal
        logger.warning("rollout failed: %s: %s", type(e).__name__, e)
        state = await env.init_state(row, client, model, sampling_args)
        state["error"], state["is_completed"], state["completion"] = e, True, []
        return state


def local_engine_of(client: Any) -> Any:
    """The in-process engine behind `client` (ours or wrapped in a `vf.Client`), or None."""
    raw = getattr(client, "client", client)
    return getattr(raw, "engine", None) if hasattr(getattr(raw, "engine", None), "rollouts_in_flight") else None


@contextlib.contextmanager
def in_flight(engine: Any):
    """Count a rollout as in flight on the local engine, whose batches wait for it (`BatchWorker._gather_rollouts`)."""
    if engine is None:
        yield
        return
    engine.rollouts_in_flight += 1
    engine.driver_loop = asyncio.get_running_loop()  # where this engine's generate route decodes meanwhile
    try:
        yield
    finally:
        engine.rollouts_in_flight -= 1
        if engine.rollouts_in_flight == 0:
            engine.driver_loop = None  # no rollout runs there now: the route decodes on its own loop again


def agents_per_rollout(env: Any) -> int:
    """How many agents' states one rollout of `env` gives (a multi-agent v1 env: one per seat; else 1)."""
    return int(getattr(env, "agents_per_rollout", 1) or 1)


def per_agent(states: list[State], agents: int) -> list[State]:
    """A group's states agent by agent (a multi-agent v1 env's `agent_states`; a crashed rollout's one state stands
    for each agent), so each slice of `rollouts_per_example` states is one agent's group (its own baseline)."""
    if agents <= 1:
        return states
    seats = [s.pop("agent_states", None) or [] for s in states]
    return [seat[k] if k < len(seat) else {**s, "timing": dict(s.get("timing") or {})}
            for k in range(agents) for s, seat in zip(states, seats)]


async def generate_states(env: Any, rows: Any, client: Any, model: str, sampling_args: dict | None = None,
                          rollouts_per_example: int = 1, max_concurrent: int = -1, score: bool = True,
                          on_group_done: Callable[[list[State]], Awaitable[None] | None] | None = None,
                          keep_empty: bool = False, max_seq_len: int | None = None) -> list[State]:
    """States in row order, each group scored as soon as it completes. `keep_empty` (a raw client): a reply with no
    text is a sample, not verifiers' `EmptyModelResponseError`. `max_seq_len`: the trainer's context limit, for an
    environment without its own (rollouts stop once it is full, and their tokens are cut to it)."""
    rows = input_rows(rows)
    with env_output():  # a vf-rl run: what environment code prints goes to logs/env.log (env_output.py)
        if is_real_env(env):  # the installed verifiers package's environment: its own runtime (envs.real_runtime)
            limit_real_env(env, max_seq_len)
            return await generate_states_real(env, rows, client, model, sampling_args, rollouts_per_example,
                                              max_concurrent, score, on_group_done)
        engine = local_engine_of(client)
        if not isinstance(client, Client):
            from verifiers_rl.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

            client = OpenAIChatCompletionsClient(client, allow_empty=keep_empty)
        sampling = {**{k: v for k, v in env.sampling_args.items() if k != "n"}, **(sampling_args or {})}
        sem = asyncio.Semaphore(max_concurrent) if max_concurrent and max_concurrent > 0 else None

        async def one(row: dict[str, Any]) -> State:
            async with sem or contextlib.nullcontext():
                with in_flight(engine):
                    return await _contained(env, row, client, model, sampling)

        async def group(row: dict[str, Any]) -> list[State]:
            t0 = time.perf_counter()
            states = per_agent(list(await asyncio.gather(*(one(row) for _ in range(rollouts_per_example)))),
                               agents_per_rollout(env))
            t1 = time.perf_counter()
            if score:
                await env.rubric.score_group(states)
                await rubric_cleanup(env.rubric, states)
            for s in states:
                contain_non_finite(s)  # an env's own scoring that let NaN / inf through: 0 and counted
                s["timing"]["generation_s"], s["timing"]["scoring_s"] = t1 - t0, time.perf_counter() - t1
                s["tokens"] = rollout_tokens(s)
            if on_group_done is not None:
                await maybe_await(on_group_done, states)
            return states

        token = RUN_MAX_SEQ_LEN.set(max_seq_len)  # the rollout tasks below copy this context
        try:
            return await gather_flat(group(with_example_id(r, i)) for i, r in enumerate(rows))
        finally:
            RUN_MAX_SEQ_LEN.reset(token)
