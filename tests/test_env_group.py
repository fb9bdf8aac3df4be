"""EnvGroup: stacked datasets, routing by `task`, the group rubric, and this project's extras (ratios,
summed error counts, members whose columns differ)."""

import asyncio

import pytest

import verifiers_rl as vf
from verifiers_rl.envs.env_group import EnvGroupRubric
from verifiers_rl.envs.rollouts import generate_states
from verifiers_rl.trainer.data_order import DataOrder

from scripted_client import ScriptedClient, completion


def run(coro):
    return asyncio.run(coro)


def client():
    return ScriptedClient(lambda **kw: completion("x"))


def two_envs():
    def hit(answer):
        return 1.0 if answer == "A" else 0.0

    def boom():
        raise RuntimeError("no")

    a = vf.SingleTurnEnv(dataset=[{"question": "qa", "answer": "A"}] * 3, rubric=vf.Rubric(funcs=[hit]))
    b = vf.SingleTurnEnv(dataset=[{"question": "qb", "answer": "B"}], rubric=vf.Rubric(funcs=[boom]))
    return a, b


def test_ratios_are_validated_and_order_batches_by_member():
    a, b = two_envs()
    with pytest.raises(ValueError, match="ratios"):
        vf.EnvGroup([a, b], ratios=[1.0])
    with pytest.raises(ValueError, match="ratios"):
        vf.EnvGroup([a, b], ratios=[1.0, 0.0])
    g = vf.EnvGroup([a, b], env_names=["a", "b"], ratios=[3, 1])
    assert g.ratios == [3.0, 1.0] and g.dataset["example_id"] == [0, 1, 2, 3]
    order = DataOrder.for_env(g, g.dataset, seed=0)
    assert order.env_rows == [[0, 1, 2], [3]] and order.weights == [0.75, 0.25]


def test_group_rubric_pads_metrics_and_sums_error_counts():
    a, b = two_envs()
    g = vf.EnvGroup([a, b], env_names=["a", "b"])
    assert g.rubric.get_reward_func_names() == ["boom", "hit", "num_turns"]
    states = run(generate_states(g, g.dataset, client(), "m", rollouts_per_example=2))
    assert [s["task"] for s in states] == ["a"] * 6 + ["b"] * 2
    assert states[0]["reward"] == 1.0 and states[0]["metrics"] == {"boom": 0.0, "hit": 1.0, "num_turns": 1.0}
    assert states[-1]["reward"] == 0.0 and set(states[-1]["metrics"]) == {"boom", "hit", "num_turns"}
    assert g.rubric.error_counts == {"boom": 2}


def test_unknown_task_scores_zero_and_routes_rollout_to_first_member():
    a, b = two_envs()
    g = vf.EnvGroup([a, b], env_names=["a", "b"])
    assert g.get_env_for_task("nope") is a
    state = {"task": "nope", "metrics": None, "timing": {"scoring_ms": 0.0, "total_ms": 0.0}}
    run(g.rubric.score_group([state]))
    assert state["reward"] == 0.0 and state["metrics"] == {"boom": 0.0, "hit": 0.0, "num_turns": 0.0}
    # a row without a task goes to the first member, and the group's rubric finds that member again
    row = {k: v for k, v in g.dataset[0].items() if k != "task"}
    states = run(generate_states(g, [row], client(), "m"))
    assert states[0]["task"] == "a" and states[0]["reward"] == 1.0


def test_members_with_different_columns_and_info_shapes():
    seen = []

    def record(info):
        seen.append(info)
        return 0.0

    a = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "A", "info": {"x": 1}}], rubric=vf.Rubric(funcs=[record]))
    b = vf.SingleTurnEnv(dataset=[{"question": "q", "info": {"y": "s", "z": [1]}}], rubric=vf.Rubric(funcs=[record]))
    c = vf.SingleTurnEnv(dataset=lambda: [{"question": "q", "extra": 5}], rubric=vf.Rubric(funcs=[record]))
    g = vf.EnvGroup([a, b, c], env_names=["a", "b", "c"])
    assert g.dataset["task"] == ["a", "b", "c"] and g.dataset["extra"] == [None, None, 5]
    states = run(generate_states(g, g.dataset, client(), "m"))
    assert seen == [{"x": 1}, {"y": "s", "z": [1]}, {}]  # exactly each member's own info (none for c)
    assert "answer" not in states[1]["input"] and states[0]["answer"] == "A"


def test_settings_propagate_and_generate_uses_the_member():
    a, b = two_envs()
    g = vf.EnvGroup([a, b], env_names=["a", "b"], max_seq_len=64)
    assert a.max_seq_len == b.max_seq_len == 64
    g.set_kwargs(max_seq_len=32, score_rollouts=False)
    assert (a.max_seq_len, b.max_seq_len, a.score_rollouts, b.score_rollouts) == (32, 32, False, False)
    g.set_score_rollouts(True)
    out = run(g.generate(g.dataset, client(), "m"))
    # generate runs each group through its member (verifiers' way): the member's own metrics only
    assert [o["task"] for o in out["outputs"]] == ["a", "a", "a", "b"]
    assert out["outputs"][0]["reward"] == 1.0 and "boom" not in out["outputs"][0]["metrics"]


def test_eval_datasets_and_errors():
    with pytest.raises(ValueError, match="at least one environment"):
        vf.EnvGroup([])
    a = vf.SingleTurnEnv(eval_dataset=[{"question": "e1"}])
    b = vf.SingleTurnEnv(dataset=[{"question": "t"}], eval_dataset=[{"question": "e2"}])
    with pytest.raises(ValueError, match="Number of env_names"):
        vf.EnvGroup([a, b], env_names=["x"])
    g = vf.EnvGroup([a, b])
    assert g.dataset["task"] == ["env_1"] and g.eval_dataset["task"] == ["env_0", "env_1"]
    assert g.get_eval_dataset()["example_id"] == [0, 1]
    assert isinstance(g.rubric, EnvGroupRubric)


class _Again(vf.MultiTurnEnv):
    async def env_response(self, messages, state):
        return [{"role": "user", "content": "again"}]


def test_a_trainers_context_limit_is_passed_per_call_and_an_envs_own_limit_wins():
    """generate_states(max_seq_len=...) is how a trainer gives its limit: members without one of their own stop when
    prompt + completion fill it (3 prompt ids + 1 completion id here), nothing is written into the env objects."""
    free, own = _Again(dataset=[{"question": "q"}], max_turns=3), _Again(dataset=[{"question": "q"}], max_turns=3,
                                                                          max_seq_len=1000)
    g = vf.EnvGroup([free, own], env_names=["free", "own"])
    limited = run(generate_states(g, g.dataset, client(), "m", max_seq_len=4))
    assert [len(s["trajectory"]) for s in limited] == [1, 3]
    assert limited[0]["prompt_too_long"] and not limited[1].get("prompt_too_long")
    assert (g.max_seq_len, free.max_seq_len, own.max_seq_len) == (None, None, 1000)
    unlimited = run(generate_states(g, g.dataset, client(), "m"))
    assert [len(s["trajectory"]) for s in unlimited] == [3, 3]
