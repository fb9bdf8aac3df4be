"""Driving a REAL verifiers environment (the extra `verifiers-rl[verifiers]`) with verifiers' own runtime.

Each group runs through verifiers' own `run_group` against this run's inference (`real_client`), its outputs turned into
state dicts like ours so batching, advantages and metrics are one code path (docs/verifiers-runtime.md). A raising
reward function, which verifiers only logs, is counted as `reward_errors`. No module-level `verifiers` import.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import logging
import sys
import time
from typing import Any, Awaitable, Callable

from verifiers_rl.envs.dataset_format import group_member, with_example_id
from verifiers_rl.envs.turn_tokens import rollout_tokens
from verifiers_rl.errors import ModelServerError
from verifiers_rl.rewards import contain_non_finite, reward_of
from verifiers_rl.utils.async_utils import gather_flat, maybe_await

logger = logging.getLogger(__name__)

# Errors a model server or client gives: not drift in the environment file.
MODEL_ERRORS = ("ModelError", "EmptyModelResponseError", "InvalidModelResponseError", "OverlongPromptError",
                "ModelServerError", "APIConnectionError", "APITimeoutError", "RateLimitError")
FIX = ("pin the verifiers release it was written for in its requirements, or run it on verifiers-rl's own "
       "runtime with VF_VERIFIERS_RUNTIME=ours (or verifiers_runtime = \"ours\" in the vf-rl config)")


def is_real_env(env: Any) -> bool:
    """True for an environment object of the installed `verifiers` package (never for ours, whose classes live
    in `verifiers_rl` even when reached as `verifiers`). Reads class names only: imports nothing."""
    return any(c.__module__.split(".")[0] == "verifiers" for c in type(env).__mro__)


def real_version() -> str:
    from verifiers_rl.verifiers_runtime import installed_verifiers_version

    return installed_verifiers_version() or "?"


def env_name(env: Any) -> str:
    return getattr(env, "env_id", None) or type(env).__name__


# --- the client ----------------------------------------------------------------------------------------------
@functools.cache
def _adapter_class() -> type:
    """verifiers' chat-completions client, calling `client.chat.completions.create` instead of a raw `client.post`
    so any AsyncOpenAI-shaped object serves it (the local engine has no HTTP layer; our vLLM router keeps its
    retries and dead-server errors). Defined on first use: it subclasses the installed package."""
    from verifiers.clients.openai_chat_completions_client import (OpenAIChatCompletionsClient,
                                                                  handle_openai_overlong_prompt)

    from verifiers_rl.clients.openai_chat_completions_client import (chat_completion_args, refuses_token_fields,
                                                                   without_token_fields)

    class EngineClient(OpenAIChatCompletionsClient):
        fatal: BaseException | None = None  # a dead server seen by any request: ends the run after the group
        want_tokens = True  # until a server refuses vLLM's token fields (a hosted API): then asked without them

        def setup_client(self, config: Any) -> Any:
            raise TypeError("EngineClient wraps a client object; pass a ClientConfig to verifiers' own clients")

        async def close(self) -> None:
            return None  # the run owns the engine / server client and closes it

        @handle_openai_overlong_prompt
        async def get_native_response(self, prompt: Any, model: str, sampling_args: Any, tools: Any = None,
                                      **kwargs: Any) -> Any:
            import openai

            args = chat_completion_args(sampling_args)  # as verifiers sends them
            asked_tokens = self.want_tokens  # this request's: rollouts in flight may have asked before it changed
            if not asked_tokens:
                args = without_token_fields(args)
            if kwargs.get("extra_headers"):
                args["extra_headers"] = kwargs["extra_headers"]
            if tools:
                args["tools"] = tools
            try:
                return await self.client.chat.completions.create(model=model, messages=prompt, **args)
            except ModelServerError as e:
                self.fatal = e  # verifiers would wrap it into a per-rollout ModelError; a dead server ends runs
                raise
            except openai.BadRequestError as e:
                if not (asked_tokens and refuses_token_fields(e)):
                    raise
                self.want_tokens = False  # as our own client does: vf-eval against a hosted API works
                return await self.get_native_response(prompt, model, sampling_args, tools, **kwargs)

    return EngineClient


def real_client(client: Any) -> Any:
    """A verifiers `Client` for `client`: a verifiers Client or ClientConfig as it is, our `vf.Client` wrappers
    unwrapped to the object they call, anything AsyncOpenAI-shaped wrapped in `EngineClient`."""
    import verifiers.clients as vc
    from verifiers.types import ClientConfig

    if isinstance(client, (vc.Client, ClientConfig)):
        return client
    from verifiers_rl.clients import Client as OurClient

    if isinstance(client, OurClient):
        client = client.client
    return _adapter_class()(client)


def request_sampling(env: Any, sampling_args: dict | None) -> dict:
    """The env's sampling args, the run's on top, plus what training needs back: token ids and logprobs. vLLM's
    own keys (`min_tokens`, `top_k`, ...) go in `extra_body`, where the OpenAI SDK lets them through."""
    from verifiers_rl.clients.openai_chat_completions_client import pop_extra_body

    env_args = {k: v for k, v in (getattr(env, "sampling_args", None) or {}).items() if k != "n"}
    out = {**env_args, **(sampling_args or {}), "logprobs": True}
    # the env's extra_body under the run's (which replaced it in `out`)
    out["extra_body"] = {**(env_args.get("extra_body") or {}), **pop_extra_body(out), "return_token_ids": True}
    return out


# --- reward-function errors verifiers only logs ----------------------------------------------------------------
_GROUP_ERRORS: contextvars.ContextVar[list | None] = contextvars.ContextVar("vf_real_reward_errors", default=None)
_PREFIXES = ("Error calling reward function ", "Error calling group reward function ")


class _RewardErrorTap(logging.Handler):
    """verifiers' rubric logs a raising reward function and scores it 0; this collects those records for the
    group whose task logged them (a context variable: groups run concurrently)."""

    def emit(self, record: logging.LogRecord) -> None:
        sink = _GROUP_ERRORS.get()
        if sink is None:
            return
        msg = record.getMessage()
        for p in _PREFIXES:
            if msg.startswith(p):
                name, _, err = msg[len(p):].partition(": ")
                sink.append((name, err))


def _install_tap() -> None:
    lg = logging.getLogger("verifiers")
    if not any(isinstance(h, _RewardErrorTap) for h in lg.handlers):
        lg.addHandler(_RewardErrorTap(level=logging.ERROR))


# --- outputs → states ---------------------------------------------------------------------------------------
def _error_text(error: Any) -> str | None:
    if not error:
        return None
    if isinstance(error, dict):
        return str(error.get("error_chain_repr") or error.get("error") or error)
    return str(error)


def output_state(output: dict, row: dict) -> dict:
    """A verifiers RolloutOutput as a state dict of ours (trajectory with tokens, reward, metrics, error)."""
    state = dict(output)
    state["task"] = group_member(output) or group_member(row) or "default"  # verifiers 0.3's EnvGroup: its route
    state["answer"] = output.get("answer", row.get("answer", ""))
    state["info"] = output.get("info") or row.get("info") or {}
    state["metrics"] = dict(output.get("metrics") or {})
    state["trajectory"] = list(output.get("trajectory") or [])
    state["error"] = _error_text(output.get("error"))
    state["reward"], state["reward_errors"] = reward_of(output), {}
    contain_non_finite(state)  # a reward function that returned NaN / inf: 0 and counted, as a raising one
    state["completion"] = output.get("completion") or []
    return state


def _crashed_state(row: dict, error: BaseException) -> dict:
    return output_state({"example_id": row.get("example_id"), "prompt": row.get("prompt"), "reward": 0.0,
                         "error": f"{type(error).__name__}: {error}", "is_completed": True}, row)


_reported: set[tuple[str, str]] = set()


def report_drift(env: Any, what: str, detail: str) -> None:
    """One line, once per environment and kind of failure: the env, the installed verifiers version, the fix."""
    key = (env_name(env), what)
    if key in _reported:
        return
    _reported.add(key)
    line = (f"environment {env_name(env)!r} under verifiers {real_version()}: {what} ({' '.join(detail.split())[:200]})"
            f"; the env file may target another verifiers release: {FIX}")
    print(line, file=sys.stderr)  # not the logger: a notebook without logging set up must see it too


def _note_group(env: Any, states: list[dict], reward_errors: list[tuple[str, str]]) -> None:
    # verifiers does not say which rollout's reward raised: the group's errors go on its first state.
    for k, (name, err) in enumerate(reward_errors):
        states[0]["reward_errors"][f"{name}#{k}" if k else name] = err
    if reward_errors:
        report_drift(env, f"reward function {reward_errors[0][0]!r} raised and was scored 0", reward_errors[0][1])
    for s in states:
        err = s.get("error")
        if err and not any(m in err for m in MODEL_ERRORS):
            report_drift(env, "environment code failed in a rollout", err)
            break


# --- the runner ---------------------------------------------------------------------------------------------
def limit_real_env(env: Any, max_seq_len: int | None) -> None:
    """A trainer's context limit for a verifiers environment (and its members) without one of its own: verifiers'
    objects read only their `max_seq_len` attribute, so it is set there (as verifiers' trainers do)."""
    if max_seq_len is None:
        return
    for e in [env, *getattr(env, "envs", [])]:
        if getattr(e, "max_seq_len", 0) is None:
            e.max_seq_len = max_seq_len


async def generate_states_real(env: Any, rows: list[dict], client: Any, model: str,
                               sampling_args: dict | None = None, rollouts_per_example: int = 1,
                               max_concurrent: int = -1, score: bool = True,
                               on_group_done: Callable[[list[dict]], Awaitable[None] | None] | None = None
                               ) -> list[dict]:
    """`generate_states` for a real verifiers environment: one `env.run_group` per row (verifiers' rollout loop
    and group scoring), states in row order. `max_concurrent` bounds rollouts in flight (whole groups)."""
    _install_tap()
    vclient = real_client(client)
    sampling = request_sampling(env, sampling_args)
    r = max(1, rollouts_per_example)
    sem = asyncio.Semaphore(max(1, max_concurrent // r)) if max_concurrent and max_concurrent > 0 else None
    if not score and hasattr(env, "set_score_rollouts"):
        env.set_score_rollouts(False)

    async def run(row: dict) -> tuple[list[dict], list[tuple[str, str]]]:
        sink: list[tuple[str, str]] = []
        token = _GROUP_ERRORS.set(sink)
        try:
            inputs = [copy.deepcopy(row) for _ in range(r)]
            outputs = await env.run_group(inputs, vclient, model, sampling, state_columns=["trajectory"])
            return [output_state(o, row) for o in outputs], sink
        except (ModelServerError, asyncio.CancelledError):
            raise
        except Exception as e:  # harness code outside verifiers' own containment: counted, not fatal
            logger.debug("rollout group failed", exc_info=True)  # said once per env by report_drift
            return [_crashed_state(row, e) for _ in range(r)], sink
        finally:
            _GROUP_ERRORS.reset(token)

    async def group(i: int, row: dict) -> list[dict]:
        row = with_example_id(row, i)
        t0 = time.perf_counter()
        async with sem or contextlib.nullcontext():
            states, sink = await run(row)
        if getattr(vclient, "fatal", None) is not None:
            raise vclient.fatal
        _note_group(env, states, sink)
        for s in states:
            s["timing"] = {**(s.get("timing") or {}), "generation_s": time.perf_counter() - t0, "scoring_s": 0.0}
            s["tokens"] = rollout_tokens(s)
        if on_group_done is not None:
            await maybe_await(on_group_done, states)
        return states

    try:
        return await gather_flat(group(i, row) for i, row in enumerate(rows))
    finally:
        if not score and hasattr(env, "set_score_rollouts"):
            env.set_score_rollouts(True)
