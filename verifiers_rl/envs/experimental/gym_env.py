"""GymEnv: any gym-style environment (`reset(seed=...)`, `step(action)`) as a multi-turn verifiers environment (0.1.11).

One row per episode (`question`: the observation after `reset(seed=seed + i)`, `answer`: that seed); each turn steps
with `action_parser(<parsed reply>)` until done/truncated or `max_episode_steps`. `EpisodicSumRubric` sums rewards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

from verifiers_rl.decorators import cleanup, stop
from verifiers_rl.envs.dataset_format import rows_dataset
from verifiers_rl.envs.multiturn_env import MultiTurnEnv
from verifiers_rl.parsers.parser import Parser
from verifiers_rl.rewards import reward_of
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages, State

__all__ = ["StepResetEnv", "ResetOut", "StepOut", "normalize_reset", "normalize_step", "sum_step_rewards",
           "EpisodicSumRubric", "GymEnv"]


class StepResetEnv(Protocol):
    """What GymEnv needs of an environment: `reset(seed=int)` -> obs or `(obs, info)`; `step(action)` -> old gym's
    4-tuple or the 5-tuple; an optional `close()`, called when an episode's environment is dropped."""

    reset: Callable[..., Any]
    step: Callable[..., Any]


ResetOut: TypeAlias = Any
StepOut: TypeAlias = tuple


def normalize_reset(out: ResetOut) -> tuple[Any, dict[str, Any]]:
    """`(observation, info)` from what `reset` returned (a bare observation gets an empty info)."""
    if isinstance(out, tuple) and len(out) == 2:
        return out[0], out[1]
    return out, {}


def normalize_step(out: StepOut) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """The 5-tuple form of what `step` returned; a 4-tuple is read as never truncated."""
    size = len(out) if isinstance(out, (tuple, list)) else None
    if size not in (4, 5):
        raise AssertionError(f"env.step() returned {type(out)} of length {size if size is not None else 'N/A'}, "
                             "expected tuple of length 4 or 5")
    if size == 5:
        return tuple(out)  # type: ignore[return-value]
    obs, reward, done, info = out
    return obs, float(reward), bool(done), False, info


def sum_step_rewards(state: State) -> float:
    """The episode's return: the sum of the trajectory steps' rewards (unset ones count 0)."""
    return float(sum(reward_of(step) for step in state.get("trajectory", [])))


class EpisodicSumRubric(Rubric):
    """Reward = `weight` x the sum of the per-step rewards GymEnv recorded."""

    def __init__(self, weight: float = 1.0, **kwargs: Any):
        super().__init__(funcs=[sum_step_rewards], weights=[weight], **kwargs)


class GymEnv(MultiTurnEnv):
    """A multi-turn environment driven by a gym-style `env_cls(**env_kwargs)`."""

    def __init__(self, env_cls: type[StepResetEnv], env_kwargs: dict[str, Any] | None = None,
                 action_parser: Callable[[str], Any] | None = None, obs_to_text: Callable[[Any], str] | None = None,
                 num_train_episodes: int = 1000, num_eval_episodes: int = 20, max_episode_steps: int | None = None,
                 seed: int = 0, system_prompt: str | None = None, few_shot: list[dict[str, Any]] | None = None,
                 parser: Parser | None = None, rubric: Rubric | None = None, message_type: Any = "chat"):
        self.env_cls = env_cls
        self.env_kwargs = dict(env_kwargs or {})
        self.action_parser = action_parser or (lambda text: text)
        self.obs_to_text_fn = obs_to_text
        self.num_train_episodes, self.num_eval_episodes = num_train_episodes, num_eval_episodes
        self.seed = seed
        self.message_type = message_type
        dataset, eval_dataset = self.gym_to_hf()
        super().__init__(dataset=dataset, eval_dataset=eval_dataset, rubric=rubric or EpisodicSumRubric(),
                         message_type=message_type, max_turns=max_episode_steps or 1000,
                         system_prompt=system_prompt, few_shot=few_shot, parser=parser)

    # --- dataset --------------------------------------------------------------------------------------------
    def gym_to_hf(self) -> tuple[Any, Any]:
        """(train, eval or None) datasets: one row per seed, the question being the reset observation's text."""
        rows = []
        env = self.env_cls(**self.env_kwargs)
        try:
            for i in range(self.num_train_episodes + self.num_eval_episodes):
                obs, _ = normalize_reset(env.reset(seed=self.seed + i))
                rows.append({"question": self.obs_to_text(obs), "answer": str(self.seed + i)})
        finally:
            _close(env)
        train, held_out = rows[:self.num_train_episodes], rows[self.num_train_episodes:]
        return rows_dataset(train, ("question", "answer")), (rows_dataset(held_out, ("question", "answer"))
                                                              if held_out else None)

    def obs_to_text(self, obs: Any) -> str:
        """An observation as prompt text (`obs_to_text` if given, else `str`); subclasses may override."""
        return self.obs_to_text_fn(obs) if self.obs_to_text_fn else str(obs)

    def wrap_response(self, text: str) -> Messages | str:
        """The environment's reply as messages: one user message."""
        return [{"role": "user", "content": text}]  # type: ignore[list-item]

    # --- the episode ----------------------------------------------------------------------------------------
    def _episode_env(self, state: State) -> Any:
        """This rollout's environment, made and reset with the row's seed on first use."""
        env = state.get("gym_env")
        if env is None:
            env = self.env_cls(**self.env_kwargs)
            env.reset(seed=int(state["answer"]))
            state["gym_env"], state["gym_done"] = env, False
        return env

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages | str:
        env = self._episode_env(state)
        step = state["trajectory"][-1]
        text = self.parser.parse_answer(messages)
        if text is None:  # the parser found nothing: act on the raw reply
            last = step["completion"]
            text = str(last[-1].get("content", "")) if isinstance(last, list) and last else str(last)
        try:
            action = self.action_parser(text)
        except Exception as e:  # an unparseable action ends the episode with reward 0
            state["gym_done"] = True
            step["reward"] = 0.0
            return self.wrap_response(f"Action Parsing Error: {e}")
        obs, reward, terminated, truncated, info = normalize_step(env.step(action))
        step["reward"] = reward
        step["extras"]["gym_info"] = info
        state["gym_done"] = bool(terminated or truncated)
        obs_text = self.obs_to_text(obs)
        if state["gym_done"]:
            obs_text += "\nEpisode already ended."
        return self.wrap_response(obs_text)

    @stop
    async def is_done(self, state: State) -> bool:
        return state.get("gym_done", False)

    @cleanup
    async def cleanup_env(self, state: State) -> None:
        env = state.pop("gym_env", None)
        if env is not None:
            _close(env)


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if close is not None:
        close()
