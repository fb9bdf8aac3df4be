"""TRL's `environment_factory` (GRPOTrainer, TRL 1.x): each rollout gets an instance of the user's environment class
(or, with TRL's {name: factory}, of the class its row's `environment` names, offered only that class's tools),
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
    """The factories' instances (one factory, or TRL's {name: factory}, each row's `environment` naming its own), by
    the key a rollout's state holds."""

    def __init__(self, factory: Callable[[], Any] | dict[str, Callable[[], Any]]):
        self.named = isinstance(factory, dict)
        self.factories: dict[str | None, Callable[[], Any]] = dict(factory) if self.named else {None: factory}
        if not self.factories:
            raise ValueError("environment_factory: an empty dict of environments")
        self.probes = {n: f() for n, f in self.factories.items()}  # TRL probes one: tools, rewards; then pooled
        self.spare: dict[str | None, list[Any]] = {n: [p] for n, p in self.probes.items()}
        self.live: dict[int, tuple[str | None, Any]] = {}
        self.count = 0
        self.methods: dict[str | None, list[str]] = {}
        for name, probe in self.probes.items():
            cls = type(probe)
            if not callable(getattr(cls, "reset", None)):
                raise ValueError(f"environment_factory: {cls.__name__} has no reset method (TRL requires one: it "
                                 "starts each rollout, returning None or text for the prompt)")
            self.methods[name] = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
                                  if not n.startswith("_") and n not in ("reset", "get_reward")]
        # one reward function per class with get_reward, scoring its own instances (TRL: exact type)
        self.rewarded = list(dict.fromkeys(type(p) for p in self.probes.values()
                                           if callable(getattr(type(p), "get_reward", None))))

    def name_of(self, row: dict[str, Any]) -> str | None:
        if not self.named:
            return None
        name = row.get("environment")
        if name not in self.factories:
            raise ValueError(f"environment={name!r}: not one of environment_factory's {sorted(self.factories)}")
        return name

    def acquire(self, name: str | None = None) -> tuple[int, Any]:
        self.count += 1
        spare = self.spare[name]
        self.live[self.count] = (name, spare.pop() if spare else self.factories[name]())
        return self.count, self.live[self.count][1]

    def get(self, key: Any) -> Any:
        return self.live.get(key, (None, None))[1]

    def release(self, key: Any) -> None:
        if key in self.live:
            name, instance = self.live.pop(key)
            self.spare[name].append(instance)

    def reward_fns(self) -> list[Callable]:
        """`get_reward()` of each rollout's instance, as one group reward function per class that has it (named by
        the class; 0 for another class's rollouts and for a rollout that failed to start)."""
        return [self._reward_fn(cls) for cls in self.rewarded]

    def _reward_fn(self, cls: type) -> Callable:
        async def reward(states: list[dict[str, Any]]) -> list[float]:
            out = []
            for s in states:
                instance = self.get(s.get(KEY))
                value = instance.get_reward() if type(instance) is cls else 0.0
                out.append(float(await value if inspect.isawaitable(value) else value))
            return out

        reward.__name__ = cls.__name__
        return reward


class FactoryToolEnv(ToolEnv):
    """A ToolEnv whose rollouts each use one instance of the pool (its methods answer the model's tool calls; with
    named environments only the row's environment's tools are offered)."""

    def __init__(self, pool: InstancePool, reset_row: Callable[[dict[str, Any]], dict[str, Any]],
                 tools: list[Callable], **kwargs: Any):
        from verifiers_rl.utils.tool_utils import convert_func_to_tool_def

        self.pool, self.reset_row = pool, reset_row
        own = {name: [getattr(pool.probes[name], m) for m in methods] for name, methods in pool.methods.items()}
        union = list({m.__name__: m for ms in own.values() for m in ms}.values())
        self.tool_defs_of = {name: [convert_func_to_tool_def(t) for t in list(tools) + ms] for name, ms in own.items()}
        super().__init__(tools=list(tools) + union, **kwargs)

    async def setup_state(self, state: Any) -> Any:
        state = await super().setup_state(state) or state
        name = self.pool.name_of(state["input"])
        key, instance = self.pool.acquire(name)
        try:
            observation = instance.reset(**self.reset_row(dict(state["input"])))
            if inspect.isawaitable(observation):
                observation = await observation
        except BaseException:  # the failed rollout's state is made anew (rollouts.py): nothing would release it
            self.pool.release(key)
            raise
        state[KEY] = key
        if self.pool.named:
            state["tool_defs"] = self.tool_defs_of[name]
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
        if instance is None or tool_name not in {m for ms in self.pool.methods.values() for m in ms}:
            return await super().call_tool(tool_name, tool_args, tool_call_id, **kwargs)
        result = await run_tool(getattr(instance, tool_name), tool_args)
        content = result if is_valid_tool_content_parts(result) else str(result)
        return ToolMessage(role="tool", content=content, tool_call_id=tool_call_id)
