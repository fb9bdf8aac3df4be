"""TextArenaEnv: a single-player TextArena game (Wordle by default) as a multi-turn environment (verifiers 0.1.11).

A row's answer is a seeded secret word; each turn's parsed `<guess>` gets the game's feedback as a user message.
`textarena` and `nltk` are imported when the first environment is built.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from copy import deepcopy
from typing import Any

from verifiers_rl.decorators import cleanup
from verifiers_rl.envs.dataset_format import rows_dataset
from verifiers_rl.envs.multiturn_env import MultiTurnEnv
from verifiers_rl.parsers.xml_parser import XMLParser
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages, State, UserMessage

__all__ = ["TextArenaEnv"]


def _quiet(download: Callable[..., Any]) -> Callable[..., Any]:
    def quiet_download(*args: Any, **kwargs: Any) -> Any:
        return download(*args, **{**kwargs, "quiet": True})

    quiet_download._vf_quiet = True  # type: ignore[attr-defined]
    return quiet_download


def import_textarena() -> tuple[Any, Any]:
    """(nltk, textarena), with `nltk.download` made quiet before textarena (which downloads at import) loads."""
    try:
        import nltk
    except ImportError as e:
        raise ImportError("TextArenaEnv requires nltk. Install with: uv add 'verifiers[ta]' "
                          "(or pip install nltk textarena)") from e
    if not getattr(nltk.download, "_vf_quiet", False):
        nltk.download = _quiet(nltk.download)
    try:
        import textarena
    except ImportError as e:
        raise ImportError("TextArenaEnv requires textarena. Install with: uv add 'verifiers[ta]' "
                          "(or pip install textarena)") from e
    return nltk, textarena


class TextArenaEnv(MultiTurnEnv):
    """A TextArena game played by the model, one guess per turn."""

    def __init__(self, game: str = "Wordle-v0", num_train_examples: int = 1000, num_eval_examples: int = 0,
                 system_prompt: str | None = None, parser: XMLParser | None = None, rubric: Rubric | None = None,
                 feedback_fn: Callable[[str], str] = lambda x: x, seed: int = 0, **kwargs: Any):
        nltk, ta = import_textarena()
        parser = parser or XMLParser(fields=["think", "guess"], answer_field="guess")
        self.game = game
        self.ta_env = ta.make(env_id=game)
        self.ta_env.reset(num_players=1)
        self.shared_memo = self.build_shared_memo(self.ta_env)
        self.num_train_examples, self.num_eval_examples = num_train_examples, num_eval_examples
        self.seed = seed
        self.feedback_fn = feedback_fn
        nltk.download("words", quiet=True)
        nltk.download("averaged_perceptron_tagger_eng", quiet=True)
        dataset, eval_dataset = self.ta_to_hf()
        super().__init__(dataset=dataset, eval_dataset=eval_dataset, system_prompt=system_prompt, parser=parser,
                         rubric=rubric, message_type="chat", **kwargs)

    @staticmethod
    def build_shared_memo(ta_env: Any) -> dict:
        """A `deepcopy` memo that makes per-rollout copies share the game's read-only data (its dictionary,
        tens of MB of word sets, and its word list) instead of copying it each time."""
        inner = ta_env
        while hasattr(inner, "env"):  # unwrap TextArena's wrappers
            inner = inner.env
        memo: dict = {}
        for name in ("dictionary", "word_list"):
            shared = getattr(inner, name, None)
            if shared is not None:
                memo[id(shared)] = shared
        return memo

    def ta_to_hf(self) -> tuple[Any, Any]:
        """(train, eval or None): rows of the opening observation and a secret word drawn with `seed`."""
        _, opening = self.ta_env.get_observation()
        words = self.ta_env.word_list
        rng = random.Random(self.seed)  # the draws `random.seed(seed); random.choice(...)` would give
        rows = [{"question": opening, "answer": rng.choice(words)}
                for _ in range(self.num_train_examples + self.num_eval_examples)]
        train, held_out = rows[:self.num_train_examples], rows[self.num_train_examples:]
        return (rows_dataset(train, ("question", "answer")),
                rows_dataset(held_out, ("question", "answer")) if self.num_eval_examples > 0 else None)

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        game = await asyncio.to_thread(deepcopy, self.ta_env, self.shared_memo.copy())
        game.state.game_state["secret_word"] = state["answer"]
        state["ta_env"] = game
        return state

    @cleanup
    async def cleanup_ta_env(self, state: State) -> None:
        state.pop("ta_env", None)

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        game = state["ta_env"]
        guess = self.parser.parse_answer(messages)
        self.logger.debug("parsed guess=%r", guess)
        await asyncio.to_thread(game.step, str(guess))
        if game.state.done:
            reply = UserMessage(content=game.state.game_info[0]["reason"])
            state["final_env_response"] = [reply]
            return [reply]
        _, observation = await asyncio.to_thread(game.get_observation)
        return [UserMessage(content=str(self.feedback_fn(observation)))]
