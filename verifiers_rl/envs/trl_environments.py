"""TRL's `environment_factory` (GRPOTrainer, TRL 1.x): each rollout gets an instance of the user's environment class,
`reset(**row)` at its start (a returned string is appended to the last user message), its public methods as the
model's tools (beside TRL's `tools`), an optional `get_reward()` as one more reward function named by the class
(weight 1), and the instances handed to the reward functions as `environments`. Instances are pooled: made once,
reset for each rollout, released when the rollout's group is scored."""

from __future__ import annotations

import contextvars
import inspect
from typing import Any, Callable

from verifiers_rl.envs.tool_env import ToolEnv, run_tool
from verifiers_rl.types import ToolMessage
from verifiers_rl.utils.tool_utils import is_valid_tool_content_parts

KEY = "trl_environment"  # a rollout's instance in its pool (an int: states travel between processes)
SYNTHETIC_ROWS = 1024  # prompts of a run without train_dataset: the environment's reset() writes each one
_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("trl_environment")  # the rollout answering a tool call


class InstancePool:
    """The factory's instances, by the key a rollout's state holds."""

    def __init__(self, factory: Callable[[], Any]):
        if isinstance(factory, dict):
            raise ValueError("environment_factory: a dict of environments (one per row's 'environment') is not taken "
                             "here; give one factory, or a verifiers vf.EnvGroup of environments")
        self.factory = factory
        self.spare: list[Any] = [factory()]  # TRL probes one: its class names the tools and the reward
        self.live: dict[int, Any] = {}
        self.count = 0
        cls = type(self.spare[0])
        if not callable(getattr(cls, "reset", None)):
            raise ValueError(f"environment_factory: {cls.__name__} has no reset method (TRL requires one: it starts "
                             "each rollout, returning None or text for the prompt)")
        self.methods = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
                        if not n.startswith("_") and n not in ("reset", "get_reward")]
        self.rewarded = callable(getattr(cls, "get_reward", None))

    def acquire(self) -> tuple[int, Any]:
        self.count += 1
        self.live[self.count] = self.spare.pop() if self.spare else self.factory()
        return self.count, self.live[self.count]

    def get(self, key: Any) -> Any:
        return self.live.get(key)

    def release(self, key: Any) -> None:
        if key in self.live:
            self.spare.append(self.live.pop(key))

    def reward_fn(self) -> Callable:
        """`get_reward()` of each rollout's instance, as a group reward function named by the class."""

        async def reward(states: list[dict[str, Any]]) -> list[float]:
            out = []
            for s in states:
                instance = self.get(s.get(KEY))
                value = instance.get_reward() if instance is not None else 0.0  # a rollout that failed to start
                out.append(float(await value if inspect.isawaitable(value) else value))
            return out

        reward.__name__ = type(self.spare[0] if self.spare else next(iter(self.live.values()))).__name__
        return reward


class FactoryToolEnv(ToolEnv):
    """A ToolEnv whose rollouts each use one instance of the pool (its methods answer the model's tool calls)."""

    def __init__(self, pool: InstancePool, reset_row: Callable[[dict[str, Any]], dict[str, Any]],
                 tools: list[Callable], **kwargs: Any):
        self.pool, self.reset_row = pool, reset_row
        probe = pool.spare[0]
        super().__init__(tools=list(tools) + [getattr(probe, m) for m in pool.methods], **kwargs)

    async def setup_state(self, state: Any) -> Any:
        state = await super().setup_state(state) or state
        key, instance = self.pool.acquire()
        try:
            observation = instance.reset(**self.reset_row(dict(state["input"])))
            if inspect.isawaitable(observation):
                observation = await observation
        except BaseException:  # the failed rollout's state is made anew (rollouts.py): nothing would release it
            self.pool.release(key)
            raise
        state[KEY] = key
        if observation is not None:  # appended to the last user message, as TRL does
            *head, last = list(state["prompt"])
            state["prompt"] = [*head, {**dict(last), "content": f"{last.get('content') or ''}{observation}"}]
        return state

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        token = _CURRENT.set(self.pool.get(state.get(KEY)))
        try:
            return await super().env_response(messages, state, **kwargs)
        finally:
            _CURRENT.reset(token)

    async def call_tool(self, tool_name: str, tool_args: dict, tool_call_id: str, **kwargs: Any) -> ToolMessage:
        instance = _CURRENT.get(None)
        if instance is None or tool_name not in self.pool.methods:
            return await super().call_tool(tool_name, tool_args, tool_call_id, **kwargs)
        result = await run_tool(getattr(instance, tool_name), tool_args)
        content = result if is_valid_tool_content_parts(result) else str(result)
        return ToolMessage(role="tool", content=content, tool_call_id=tool_call_id)
