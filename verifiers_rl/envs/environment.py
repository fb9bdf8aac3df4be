"""Environment: a dataset of tasks, a harness that runs the model on them, and a rubric that scores them.

The classic verifiers API with verifiers' semantics: `rollout(...) -> State` is the harness (MultiTurnEnv implements
it). `@vf.stop` / `@vf.cleanup` / `@vf.teardown` methods are collected once per instance, highest priority first, ties
by name; as in verifiers 0.3, `cleanup(state)` runs however a rollout ends.
"""

from __future__ import annotations

import asyncio
import atexit
from abc import ABC, abstractmethod
import json
import logging
import uuid
import warnings
from contextvars import ContextVar
from copy import deepcopy
from typing import Any, Callable

from verifiers_rl.clients import resolve_client
from verifiers_rl.decorators import call_marked, marked_methods
from verifiers_rl.envs.dataset_format import DatasetFormatting
from verifiers_rl.envs.generation import Generation
from verifiers_rl.errors import ModelServerError  # noqa: F401  (re-exported: older import path)
from verifiers_rl.parsers.parser import Parser
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.rubrics.rubric_group import RubricGroup
from verifiers_rl.rollout_timing import new_rollout_timing
from verifiers_rl.types import Messages, Response, RolloutInput, SamplingArgs, State, Tool
from verifiers_rl.utils.async_utils import maybe_await
from verifiers_rl.utils.message_utils import normalize_messages
from verifiers_rl.utils.usage_utils import StateUsageTracker, state_usage

_UNSET = object()
# The context limit of the run whose rollouts are in flight, for an environment without its own: the trainer passes it
# per `generate_states` call instead of writing it into the environment object.
RUN_MAX_SEQ_LEN: ContextVar[int | None] = ContextVar("vf_run_max_seq_len", default=None)


def normalize_tool_defs(tools: Any) -> list[Tool] | None:
    """`vf.Tool`s from Tool-shaped dicts; OpenAI's `{"type": "function", "function": {...}}` form is refused."""
    if tools is None:
        return None
    out = []
    for t in tools:
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict):
            raise ValueError("Legacy OpenAI tool schema is no longer supported. Use `tool_defs` entries in vf.Tool "
                             "format: {'name': ..., 'description': ..., 'parameters': {...}}.")
        out.append(t if isinstance(t, Tool) else Tool.model_validate(t))
    return out


class Environment(DatasetFormatting, Generation, ABC):
    def __init__(self, dataset: Any = None, eval_dataset: Any = None, system_prompt: str | None = None,
                 few_shot: Messages | None = None, parser: Parser | None = None, rubric: Rubric | None = None,
                 sampling_args: SamplingArgs | None = None, message_type: Any = _UNSET,
                 tool_defs: list[Tool] | None = None, max_workers: int = 512, env_id: str | None = None,
                 env_args: dict | None = None, map_kwargs: dict | None = None, max_seq_len: int | None = None,
                 score_rollouts: bool = True, pass_threshold: float = 0.5, **kwargs: Any):
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")
        if message_type is not _UNSET and message_type != "chat":
            warnings.warn("message_type is deprecated and will be removed", DeprecationWarning, stacklevel=2)
        self.message_type = "chat" if message_type is _UNSET else message_type
        if "oai_tools" in kwargs:
            raise ValueError("`oai_tools` is no longer supported. Use `tool_defs` with provider-agnostic tool "
                             "definitions: [{'name': ..., 'description': ..., 'parameters': {...}}].")
        self.tool_defs = normalize_tool_defs(tool_defs)
        self.system_prompt, self.few_shot = system_prompt, few_shot
        self.parser = parser or Parser()
        self.rubric = rubric or Rubric()
        if type(self.parser) is not type(getattr(self.rubric, "parser", None)):
            self.logger.warning("The parser and rubric parser are different. This may cause unexpected behavior.")
        self.env_id, self.env_args = env_id or "", env_args or {}
        self.max_seq_len, self.map_kwargs = max_seq_len, dict(map_kwargs or {})
        self.set_score_rollouts(score_rollouts)
        self.pass_threshold, self.max_workers = pass_threshold, max_workers
        self.env_client = None
        self.dataset = self.eval_dataset = None
        self.dataset_source = _builder(dataset)
        if self.dataset_source is not None and not _is_builder(dataset):
            self.build_dataset()  # data given as data is formatted at once
        self.eval_dataset_source = _builder(eval_dataset)
        if self.eval_dataset_source is not None and not _is_builder(eval_dataset):
            self.build_eval_dataset()
        given = dict(sampling_args or {})
        self.sampling_args: dict[str, Any] = {"n": 1, "extra_body": dict(given.pop("extra_body", None) or {}),
                                              **given}
        for key, value in kwargs.items():  # environments pass their own settings through
            setattr(self, key, value)
        if self.dataset_source is None and self.eval_dataset_source is None:
            raise ValueError("Either dataset or eval_dataset must be provided")
        self.rollouts_per_example = None
        self.__post_init__()

    def __post_init__(self) -> None:
        self._stop_conditions = marked_methods(self, "stop")
        self._cleanup_handlers = marked_methods(self, "cleanup")
        self._teardown_handlers = marked_methods(self, "teardown")
        if self._teardown_handlers:
            atexit.register(self._sync_teardown)

    def _sync_teardown(self) -> None:
        try:
            asyncio.run(self._teardown())
        except RuntimeError:  # called inside a running loop: schedule it there
            asyncio.get_event_loop().create_task(self._teardown())

    # --- one model call -------------------------------------------------------------------------
    async def get_model_response(self, state: State, prompt: Messages | str, client: Any = None,
                                 model: str | None = None, tool_defs: list[Tool] | None = None,
                                 sampling_args: SamplingArgs | None = None) -> Response:
        """Call the model once with `prompt`; client, model, tools and sampling default to the rollout's."""
        client = client if client is not None else state["client"]
        model = model or state["model"]
        tools = tool_defs if tool_defs is not None else state.get("tool_defs")
        if tools is not None and not all(isinstance(t, Tool) for t in tools):
            raise TypeError("tool_defs must be a list of vf.Tool objects at runtime. "
                            "Normalize tool dicts during state initialization.")
        args = sampling_args or state.get("sampling_args") or {}
        self._usage(state)
        response = await client.get_response(prompt=normalize_messages(prompt, field_name="prompt"), model=model,
                                             tools=tools or None, sampling_args=args, state=state)
        self.increment_state_usage_from_response(state, response)
        return response

    # --- token usage ------------------------------------------------------------------------------
    def _usage(self, state: State) -> StateUsageTracker:
        """The state's usage tracker, made (and shown in `state["usage"]`) on first use."""
        tracker = state.get("usage_tracker")
        if not isinstance(tracker, StateUsageTracker):
            state["usage_tracker"] = tracker = StateUsageTracker()
            state["usage"] = tracker.usage
        return tracker

    def increment_state_usage(self, state: State, input_tokens: float = 0, output_tokens: float = 0) -> None:
        self._usage(state).increment(input_tokens, output_tokens)

    def increment_state_usage_from_response(self, state: State, response: Any) -> None:
        self._usage(state).increment_from_response(response)

    def get_state_usage(self, state: State) -> dict[str, float] | None:
        return state_usage(state)

    # --- rollouts ---------------------------------------------------------------------------------
    async def init_state(self, input: RolloutInput, client: Any, model: str,
                         sampling_args: SamplingArgs | None = None) -> State:
        """A fresh State for one dataset row: the row lives in `state["input"]` (and reads through)."""
        row = deepcopy(dict(input))
        if isinstance(row.get("info"), str):
            row["info"] = json.loads(row["info"])
        row.setdefault("task", self.env_id or "default")
        state = State(input=row)
        if isinstance(row.get("prompt"), (str, list)):
            state["prompt"] = normalize_messages(row["prompt"], field_name="input.prompt")
        state["client"] = resolve_client(client)
        state["model"], state["sampling_args"] = model, sampling_args
        state["is_completed"] = state["is_truncated"] = False
        info = state.get("info")
        if isinstance(info, dict) and "oai_tools" in info:
            raise ValueError("info['oai_tools'] is no longer supported. Use info['tool_defs'] with "
                             "provider-agnostic tool definitions: [{'name': ..., 'description': ..., "
                             "'parameters': {...}}].")
        tools = info["tool_defs"] if isinstance(info, dict) and "tool_defs" in info else self.tool_defs
        state["tool_defs"] = normalize_tool_defs(tools or []) or []
        state["trajectory"], state["completion"] = [], None
        self._usage(state)
        state["trajectory_id"] = uuid.uuid4().hex
        state["reward"] = state["metrics"] = state["error"] = state["final_env_response"] = None
        state["timing"] = new_rollout_timing()
        return state

    @abstractmethod
    async def rollout(self, input: RolloutInput, client: Any, model: str,
                      sampling_args: SamplingArgs | None = None) -> State:
        raise NotImplementedError(f"{type(self).__name__} must implement rollout(input, client, model, ...)")

    @property
    def requires_group_rollouts(self) -> bool:
        """Whether rollouts must be scored as groups (the rubric has group reward functions)."""
        return bool(getattr(self.rubric, "has_group_rewards", False))

    @property
    def provides_advantages(self) -> bool:
        return bool(getattr(self.rubric, "has_advantages", False))

    async def cleanup(self, state: State, task: Any = None, resources: Any = None) -> None:
        """End a rollout: every `@vf.cleanup` handler, given what it names of `state`, `env`, `task`, `resources`."""
        for handler in self._cleanup_handlers:
            await call_marked(handler, state, task=task, env=self, resources=resources)

    async def _cleanup(self, state: State) -> None:
        """The cleanup a rollout's end runs (0.1.11's name); an environment whose own `cleanup` method is a
        marked handler (written before `Environment.cleanup` existed) still gets every handler run once."""
        own = getattr(type(self), "cleanup", None)
        if getattr(own, "cleanup", False) is True:
            await Environment.cleanup(self, state)
        else:
            await self.cleanup(state)

    async def _teardown(self) -> None:
        """The rubric's teardown, then this environment's `@vf.teardown` handlers."""
        teardown = getattr(self.rubric, "teardown", None)
        if callable(teardown):
            await maybe_await(teardown)
        for handler in self._teardown_handlers:
            await handler()

    async def _render_stop(self, state: State, condition: Callable, **kwargs: Any) -> bool:
        if not await call_marked(condition, state, env=self, **kwargs):
            return False
        state["is_completed"] = True
        state["is_truncated"] = bool(state.get("is_truncated")) or any(
            step.get("is_truncated", False) for step in state.get("trajectory") or [])
        state["stop_condition"] = condition.__name__
        if condition.__name__ == "has_error":
            err = state["error"]
            self.logger.error(f"Aborted rollout due to {type(err).__name__}: {err}")
        return True

    async def is_completed(self, state: State, **kwargs: Any) -> bool:
        """Whether a stop condition holds; the first that does is named in `state["stop_condition"]`."""
        return await Environment._check_stop(self, state, **kwargs)

    async def _check_stop(self, state: State, **kwargs: Any) -> bool:
        for condition in self._stop_conditions:
            if await self._render_stop(state, condition, **kwargs):
                return True
        return False

    # --- settings trainers change -------------------------------------------------------------------
    def set_kwargs(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setter = getattr(self, f"set_{key}", None)
            setter(value) if callable(setter) else setattr(self, key, value)

    def add_rubric(self, rubric: Rubric) -> None:
        if self.rubric is None:
            self.rubric = rubric
        elif isinstance(self.rubric, RubricGroup):
            self.rubric.rubrics.append(rubric)
        else:
            self.rubric = RubricGroup(rubrics=[self.rubric, rubric])

    @property
    def max_seq_len(self) -> int | None:
        """Prompt + completion tokens a rollout may hold: the environment's own limit, else its run's (None: none)."""
        own = getattr(self, "_max_seq_len", None)
        return own if own is not None else RUN_MAX_SEQ_LEN.get()

    @max_seq_len.setter
    def max_seq_len(self, max_seq_len: int | None) -> None:
        self._max_seq_len = max_seq_len

    def set_max_seq_len(self, max_seq_len: int | None) -> None:
        self.max_seq_len = max_seq_len

    def set_score_rollouts(self, score_rollouts: bool) -> None:
        self.score_rollouts = score_rollouts


def _is_builder(data: Any) -> bool:
    """A DatasetBuilder (a function returning the dataset), as opposed to the data itself."""
    return callable(data) and not hasattr(data, "column_names")


def _builder(data: Any) -> Callable[[], Any] | None:
    if data is None:
        return None
    return data if _is_builder(data) else (lambda: data)
