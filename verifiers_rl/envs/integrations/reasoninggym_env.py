"""ReasoningGymEnv: reasoning-gym's procedurally generated tasks as a single-turn environment (verifiers 0.1.11).

`gym` names one dataset or several mixed into a composite. A row's answer is its entry's index; the reward is
reasoning-gym's own `score_answer` of the parsed `<answer>`. `reasoning_gym` is imported at the first construction.
"""

from __future__ import annotations

from typing import Any

from verifiers_rl.envs.dataset_format import rows_dataset
from verifiers_rl.envs.singleturn_env import SingleTurnEnv
from verifiers_rl.parsers.parser import Parser
from verifiers_rl.parsers.xml_parser import XMLParser
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages

__all__ = ["ReasoningGymEnv"]  # and DEFAULT_SYSTEM_PROMPT, read lazily (module __getattr__)


class _DefaultPrompt(str):
    """Stands for reasoning-gym's default system prompt until reasoning_gym is imported."""


_RG_DEFAULT = _DefaultPrompt("<reasoning_gym.utils.SYSTEM_PROMPTS['default']>")


def import_reasoning_gym() -> Any:
    try:
        import reasoning_gym
        import reasoning_gym.composite
        import reasoning_gym.utils
    except ImportError as e:
        raise ImportError("ReasoningGymEnv requires reasoning-gym. Install with: uv add 'verifiers[rg]' "
                          "(or pip install reasoning-gym)") from e
    return reasoning_gym


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_SYSTEM_PROMPT":  # reasoning-gym's prompt, read when asked for
        return import_reasoning_gym().utils.SYSTEM_PROMPTS["default"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ReasoningGymEnv(SingleTurnEnv):
    def __init__(self, gym: str | list[str | dict], num_train_examples: int = 1000, num_eval_examples: int = 100,
                 system_prompt: str = _RG_DEFAULT, parser: Parser | None = None, seed: int = 0):
        rg = import_reasoning_gym()
        if isinstance(system_prompt, _DefaultPrompt):
            system_prompt = rg.utils.SYSTEM_PROMPTS["default"]
        self.gym = gym
        self.num_train_examples, self.num_eval_examples = num_train_examples, num_eval_examples
        self.seed = seed
        self.rg_dataset = self.build_rg_dataset(gym, num_train_examples + num_eval_examples, seed=seed)
        dataset, eval_dataset = self.rg_to_hf(self.rg_dataset)
        parser = parser or XMLParser(fields=["answer"])
        rubric = Rubric(parser=parser)

        async def check_answer_reward_func(completion: Messages, answer: str, **kwargs: Any) -> float:
            entry = self.rg_dataset[int(answer)]  # the row's answer is the entry's index
            response = str(parser.parse_answer(completion)).strip()
            return self.rg_dataset.score_answer(answer=response, entry=entry)

        rubric.add_reward_func(check_answer_reward_func)
        rubric.add_reward_func(parser.get_format_reward_func(), weight=0.0)
        super().__init__(dataset=dataset, eval_dataset=eval_dataset, system_prompt=system_prompt, parser=parser,
                         rubric=rubric, message_type="chat")
        # as in verifiers: the task rubric alone (the multi-turn monitor's num_turns metric is dropped)
        self.parser, self.rubric = parser, rubric

    def build_rg_dataset(self, gym: str | list[str | dict], total_examples: int = 1000, seed: int = 0) -> Any:
        """A reasoning-gym ProceduralDataset: one named dataset, or a composite of several."""
        rg = import_reasoning_gym()
        if isinstance(gym, str):
            return rg.create_dataset(gym, size=total_examples, seed=seed)
        specs = []
        for item in gym:
            if isinstance(item, str):
                specs.append(rg.composite.DatasetSpec(name=item, weight=1.0, config={}))
            elif isinstance(item, dict):
                specs.append(rg.composite.DatasetSpec(**item))
            else:
                raise ValueError(f"Invalid dataset config: {item}")
        return rg.create_dataset("composite", datasets=specs, size=total_examples, seed=seed)

    def rg_to_hf(self, rg_dataset: Any) -> tuple[Any, Any]:
        """(train, eval) datasets of question, answer (= entry index) and task (= the entry's source dataset)."""
        rows = [{"question": entry["question"], "answer": str(i), "task": entry["metadata"]["source_dataset"]}
                for i, entry in enumerate(rg_dataset)]
        columns = ("question", "answer", "task")  # an empty split keeps them (verifiers' empty eval set)
        return (rows_dataset(rows[:self.num_train_examples], columns),
                rows_dataset(rows[self.num_train_examples:], columns))
