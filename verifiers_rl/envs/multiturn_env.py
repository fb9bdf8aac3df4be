"""MultiTurnEnv: model turn, environment response, repeat until a stop condition holds.

verifiers' loop: a reply cut by max_tokens does NOT end it (the stop conditions do); the end always runs the cleanups,
`render_state` first. Older environment code keeps working: an `is_completed(self, messages, state)` override is one
more stop condition, and `env_response` may return `(messages, state)`, one message dict, or a string.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from abc import abstractmethod
from typing import Any

from verifiers_rl.decorators import cleanup, stop
from verifiers_rl.envs.environment import Environment
from verifiers_rl.errors import Error, OverlongPromptError
from verifiers_rl.rollout_timing import TimeSpan, new_rollout_timing, spans_of
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages, Response, RolloutInput, SamplingArgs, State, TrajectoryStep, UserMessage
from verifiers_rl.utils.async_utils import maybe_await
from verifiers_rl.utils.message_utils import concat_messages, normalize_messages
from verifiers_rl.utils.response_utils import parse_response_message, parse_response_tokens


class MultiTurnMonitorRubric(Rubric):
    """Logs the number of model turns of each rollout (a metric, weight 0)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.add_metric(self.num_turns)

    async def num_turns(self, state: State) -> int:
        return len(state["trajectory"])


def _as_messages(reply: Any, field_name: str) -> Messages:
    if reply is None:
        return []
    if isinstance(reply, dict):
        reply = [reply]
    return normalize_messages(reply, field_name=field_name)


class MultiTurnEnv(Environment):
    def __init__(self, max_turns: int = -1, timeout_seconds: float | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.max_turns = max_turns
        self.timeout_seconds = timeout_seconds
        self.add_rubric(MultiTurnMonitorRubric())

    def __post_init__(self) -> None:
        super().__post_init__()
        if _legacy_is_completed(self) is None:  # only older environments need the extra condition
            self._stop_conditions = [c for c in self._stop_conditions if c.__name__ != "legacy_is_completed"]

    @abstractmethod
    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages | str:
        """The environment's reply to the model's last turn (messages to append)."""
        raise NotImplementedError(f"{type(self).__name__} must implement env_response(messages, state)")

    # --- stop conditions --------------------------------------------------------------------------
    @stop(priority=100)  # errors first
    async def has_error(self, state: State, **kwargs: Any) -> bool:
        return state.get("error") is not None

    @stop
    async def prompt_too_long(self, state: State) -> bool:
        return bool(state.get("prompt_too_long", False))

    @stop
    async def max_turns_reached(self, state: State) -> bool:
        return self.max_turns > 0 and len(state["trajectory"]) >= self.max_turns

    @stop
    async def has_final_env_response(self, state: State) -> bool:
        return state.get("final_env_response") is not None

    @stop(priority=-100)
    async def legacy_is_completed(self, state: State) -> bool:
        """An older environment's own `is_completed(messages, state)`, asked after the built-in conditions."""
        own = _legacy_is_completed(self)
        if own is None or not state["trajectory"]:
            return False
        step = state["trajectory"][-1]
        return bool(await maybe_await(own, concat_messages([step["prompt"], step["completion"]]), state))

    async def setup_state(self, state: State) -> State | None:
        """Override to prepare the state (in place, or return the prepared state)."""
        return state

    def mark_timed_out(self, state: State) -> None:
        state["timed_out"] = True
        state["is_completed"] = True
        state["stop_condition"] = "timeout_reached"

    # --- the conversation ---------------------------------------------------------------------------
    async def _reply(self, messages: Messages, state: State) -> Messages:
        reply = await maybe_await(self.env_response, messages, state)
        if isinstance(reply, tuple):  # older API: (messages, state)
            reply, new_state = reply
            if isinstance(new_state, dict) and new_state is not state:
                state.update(new_state)
        if isinstance(reply, str):
            reply = [UserMessage(content=reply)]
        return _as_messages(reply, "env_response")

    async def get_prompt_messages(self, state: State) -> Messages:
        """The next model call's prompt: the dataset prompt first, then last prompt + completion + env reply."""
        if not state["trajectory"]:
            return normalize_messages(state["prompt"], field_name="state.prompt")
        last = state["trajectory"][-1]
        messages = concat_messages([normalize_messages(last["prompt"], field_name="trajectory.prompt"),
                                    normalize_messages(last["completion"], field_name="trajectory.completion")])
        return concat_messages([messages, await self._reply(messages, state)])

    def _last_turn(self, state: State) -> TrajectoryStep | None:
        """The step the completion is rendered from: the last one."""
        return state["trajectory"][-1] if state["trajectory"] else None

    async def render_completion(self, state: State) -> None:
        """`state["completion"]`: everything after the dataset prompt (model turns, env replies, final reply)."""
        last = self._last_turn(state)
        if last is None:
            state["completion"] = []
            return
        conversation = concat_messages([normalize_messages(last["prompt"], field_name="trajectory.prompt"),
                                        normalize_messages(last["completion"], field_name="trajectory.completion")])
        if state.get("final_env_response"):
            conversation += _as_messages(state["final_env_response"], "final_env_response")
        state["completion"] = conversation[len(normalize_messages(state["prompt"], field_name="state.prompt")):]

    @cleanup(priority=100)
    async def render_state(self, state: State) -> None:
        """The rollout's own fields, before any other cleanup handler sees the state: the generation span's
        end (and 0.1.11's `generation_ms`/`total_ms`), then the completion."""
        timing, now = spans_of(state), time.time()
        if timing is not None:
            timing.generation.end = now
            if "generation_ms" in timing:
                timing["generation_ms"] = timing["total_ms"] = (now - timing["start_time"]) * 1000
        await self.render_completion(state)

    async def add_trajectory_step(self, state: State, trajectory_step: TrajectoryStep) -> None:
        """Override to set per-step rewards, advantages or extras."""
        state["trajectory"].append(trajectory_step)

    async def add_model_response(self, state: State, prompt_messages: Messages, response: Response) -> None:
        tokens = await parse_response_tokens(response, self.max_seq_len)
        truncated = bool(response.message.get("is_truncated")) or bool(tokens and tokens.get("is_truncated"))
        step = TrajectoryStep(prompt=prompt_messages, completion=await parse_response_message(response),
                              response=response, tokens=tokens, reward=None, advantage=None,
                              is_truncated=truncated, trajectory_id=state["trajectory_id"], extras={})
        await self.add_trajectory_step(state, step)
        if tokens is not None and self.max_seq_len and \
                len(tokens["prompt_ids"]) + len(tokens["completion_ids"]) >= self.max_seq_len:
            state["prompt_too_long"] = True  # the context is full: another turn cannot fit

    async def rollout(self, input: RolloutInput, client: Any, model: str,
                      sampling_args: SamplingArgs | None = None) -> State:
        state = await self.init_state(input, client, model, sampling_args)
        box = [state]  # setup_state may hand back another state object
        try:
            await asyncio.wait_for(self._run_turns(box), timeout=self.timeout_seconds)
        except asyncio.TimeoutError:
            self.mark_timed_out(box[0])
        finally:  # however the rollout ended (stop, timeout, crash, cancellation)
            await self._cleanup(box[0])
        return box[0]

    async def _run_turns(self, box: list[State]) -> None:
        state, timing = box[0], spans_of(box[0])
        if timing is None:  # an init_state of its own that set none
            state["timing"] = timing = new_rollout_timing()
        timing.generation.start = timing.setup.start = time.time()
        try:
            box[0] = state = await maybe_await(self.setup_state, state) or state
        except Error as e:
            state["error"] = e
        finally:
            timing.setup.end = time.time()
        while not await self._stopped(state):
            try:
                start = time.time()
                prompt = await self.get_prompt_messages(state)
                if state["trajectory"]:  # the first prompt is the dataset's, not an env reply
                    timing.env.spans.append(TimeSpan(start=start, end=time.time()))
                if state.get("final_env_response") is not None:
                    continue
                start = time.time()
                response = await self.get_model_response(state, prompt)
                timing.model.spans.append(TimeSpan(start=start, end=time.time()))
                await self.add_model_response(state, prompt, response)
            except OverlongPromptError:
                state["prompt_too_long"] = True
                state["is_truncated"] = True
            except Error as e:
                state["error"] = e

    async def _stopped(self, state: State) -> bool:
        # verifiers' loop asks `self.is_completed(state)`: an override of it (prime-environments' autodiff) takes
        # the place of the stop conditions; an older `is_completed(messages, state)` is one of them instead
        if _overrides_is_completed(self):
            done = bool(await self.is_completed(state))
            state["is_completed"] = state.get("is_completed") or done
            return done
        return await self._check_stop(state)


def _overrides_is_completed(env: MultiTurnEnv) -> bool:
    method = getattr(type(env), "is_completed", None)
    return method is not Environment.is_completed and _legacy_is_completed(env) is None


def _legacy_is_completed(env: MultiTurnEnv) -> Any:
    """The bound `is_completed(messages, state)` of an environment written for the older API, else None."""
    method = getattr(type(env), "is_completed", None)
    if method is None or method is Environment.is_completed:
        return None
    if "messages" not in inspect.signature(method).parameters:
        return None
    return getattr(env, "is_completed")
