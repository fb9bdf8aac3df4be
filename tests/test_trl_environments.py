"""TRL's environment_factory: one instance per rollout, reset with the row (its text joins the prompt), its methods
the model's tools (answered by that rollout's instance), get_reward an extra reward, the instances handed to reward
functions, pooled. The harness is driven by a scripted client (tool calls a tiny random model would not make); the
last test trains the real tiny model through RLTrainer."""

from __future__ import annotations

import asyncio

import pytest

import verifiers_rl as vf
from scripted_client import ScriptedClient, completion
from test_trainer import make_config
from verifiers_rl.envs.rollouts import generate_states
from verifiers_rl.envs.trl_compat import trl_environment
from verifiers_rl.envs.trl_environments import InstancePool


class Counter:
    made = 0

    def __init__(self):
        Counter.made += 1
        self.value, self.target = 0, None

    def reset(self, prompt, target=None, **kwargs):
        self.value, self.target = 0, target
        return f" Reach {target}."

    def increment(self, by: int) -> str:
        """Add to the counter.

        Args:
            by: how much to add
        """
        self.value += by
        return str(self.value)

    def get_reward(self) -> float:
        return float(self.value == self.target)


def bumps(**kw):
    """Call increment(2) until the tool says 4 (or has been called twice), then answer."""
    tool_turns = [m for m in kw["messages"] if m.get("role") == "tool"]
    if len(tool_turns) < 2:
        return completion(None, tool_calls=[("increment", {"by": 2})], finish_reason="tool_calls")
    return completion("done")


def test_each_rollout_uses_its_own_instance_for_tools_reset_and_reward():
    Counter.made = 0
    seen = []

    def checks(completions, environments, prompts, **kw):
        seen.append(([e.value for e in environments], [p[-1]["content"] for p in prompts]))
        return [0.5] * len(completions)

    rows = [{"prompt": [{"role": "user", "content": "Count."}], "target": t} for t in (4, 5)]
    env = trl_environment(rows, checks, pool=InstancePool(Counter))
    assert [t["name"] for t in env.tool_defs] == ["increment"]
    client = ScriptedClient(bumps)
    states = asyncio.run(generate_states(env, env.get_dataset(), client, "m", rollouts_per_example=2))
    # the tools were offered, and each rollout's calls reached its own counter (two calls of +2 each: 4)
    assert "increment" in str(client.requests[0].get("tools"))
    assert [s["prompt"][-1]["content"] for s in states] == ["Count. Reach 4."] * 2 + ["Count. Reach 5."] * 2
    assert sorted(seen) == [([4, 4], ["Count. Reach 4."] * 2), ([4, 4], ["Count. Reach 5."] * 2)]
    # get_reward (weight 1, named by the class) beside the function: 4 == target for the first row only
    assert [s["reward"] for s in states] == [1.5, 1.5, 0.5, 0.5]
    assert {"checks", "Counter"} <= set(states[0]["metrics"])
    assert Counter.made <= 4 and len(env.pool.live) == 0  # released when scored, then reused


def test_what_environment_factory_cannot_take_is_one_line():
    class NoReset:
        def act(self) -> str:
            """Act."""
            return ""

    for factory, line in ((NoReset, "environment_factory: NoReset has no reset method"),
                          ({"a": Counter, "b": NoReset}, "environment_factory: NoReset has no reset method"),
                          ({}, "environment_factory: an empty dict of environments")):
        with pytest.raises(ValueError, match=f"^{line}"):
            InstancePool(factory)
    with pytest.raises(ValueError, match="^environment_factory: a dict of environments needs a train_dataset"):
        trl_environment(None, None, pool=InstancePool({"counter": Counter}))
    with pytest.raises(ValueError, match="^reward_funcs: none given, and no environment_factory whose environment "
                                         "has get_reward"):
        trl_environment([{"prompt": "p"}], None)


def test_an_environment_factory_without_a_dataset_trains_through_rltrainer(tiny_model_dir, tmp_path):
    """TRL's own shape: no train_dataset (reset writes the prompt into empty placeholder rows), the reward from
    get_reward alone."""
    class Echo:
        def reset(self, prompt, **kwargs):
            self.word = "sun"
            return f"Say {self.word}."

        def hint(self) -> str:
            """The word to say."""
            return self.word

        def get_reward(self) -> float:
            return 0.25

    trainer = vf.RLTrainer(str(tiny_model_dir), environment_factory=Echo,
                           args=make_config(tmp_path, max_steps=1, max_seq_len=1024, max_prompt_len=900))
    trainer.train()
    assert trainer.state.global_step == 1
    assert all(s["prompt"][-1]["content"] == "Say sun." and s["reward"] == 0.25 for s in trainer.last_states)


def test_a_reset_that_raises_is_one_failed_rollout_and_its_instance_goes_back():
    class Flaky:
        starts = 0

        def reset(self, prompt, **kwargs):
            Flaky.starts += 1
            if Flaky.starts % 2 == 0:
                raise RuntimeError("reset failed")

        def get_reward(self) -> float:
            return 1.0

    env = trl_environment([{"prompt": "p"}], None, pool=InstancePool(Flaky))
    client = ScriptedClient(lambda **kw: completion("ok"))
    states = asyncio.run(generate_states(env, env.get_dataset(), client, "m", rollouts_per_example=4))
    # the others keep their reward (the group's reward function did not fail for them), and nothing is held
    assert sorted((str(s.get("error") or ""), s["reward"]) for s in states) == [("", 1.0)] * 2 + [
        ("reset failed", 0.0)] * 2
    assert not env.pool.live and all(s.get("reward_errors") in (None, {}) for s in states)


def test_named_environments_each_row_its_own_class_tools_and_reward():
    """TRL's {name: factory}: a row's `environment` picks the class; only its tools are offered; each class's
    get_reward scores its own rollouts (0 for the other's); reset gets the row without `environment`."""
    class Letters:
        def reset(self, prompt, **kwargs):
            self.kwargs = kwargs

        def spell(self, word: str) -> str:
            """Spell a word.

            Args:
                word: the word
            """
            return " ".join(word)

        def get_reward(self) -> float:
            return 0.25

    rows = [{"prompt": [{"role": "user", "content": "Count."}], "target": 4, "environment": "counter"},
            {"prompt": [{"role": "user", "content": "Spell."}], "target": 0, "environment": "letters"}]
    env = trl_environment(rows, None, pool=InstancePool({"counter": Counter, "letters": Letters}))
    client = ScriptedClient(lambda **kw: completion("done"))
    states = asyncio.run(generate_states(env, env.get_dataset(), client, "m", rollouts_per_example=2))
    offered = sorted({(r["messages"][-1]["content"], str(sorted(t["function"]["name"] for t in r.get("tools") or [])))
                      for r in client.requests})
    assert offered == [("Count. Reach 4.", "['increment']"), ("Spell.", "['spell']")]
    assert [s["reward"] for s in states] == [0.0, 0.0, 0.25, 0.25]  # Counter's target 4 not reached; Letters' 0.25
    assert {"Counter", "Letters"} <= set(states[0]["metrics"]) and not env.pool.live
    assert all("environment" not in i.kwargs and i.kwargs["target"] == 0 for i in env.pool.spare["letters"])
    with pytest.raises(ValueError, match="^environment='chess': not one of environment_factory's"):
        env.pool.name_of({"environment": "chess"})


def test_a_reward_model_beside_an_environment_factory_scores_the_prompt_reset_left(tiny_model_dir, monkeypatch):
    """TRL hands every reward source the same prompts, reset's text included: a reward model's too."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from verifiers_rl.envs.trl_reward_models import RewardModel

    scored = []
    monkeypatch.setattr(RewardModel, "score", lambda self, prompts, completions, *a, **k: scored.extend(prompts)
                        or [0.0] * len(prompts))
    torch.manual_seed(0)
    rm = AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=1)
    rows = [{"prompt": [{"role": "user", "content": "Count."}], "target": 4}]
    env = trl_environment(rows, [rm], pool=InstancePool(Counter))
    asyncio.run(generate_states(env, env.get_dataset(), ScriptedClient(lambda **kw: completion("ok")), "m",
                                rollouts_per_example=2))
    assert [p[-1]["content"] for p in scored] == ["Count. Reach 4."] * 2
