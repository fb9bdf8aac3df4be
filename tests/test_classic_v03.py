"""verifiers 0.3's classic-API behaviours beside 0.1.11's, where this runtime keeps both: what verifiers' own
suites (tests/test_peer_suite.py) cannot show because each tests one era. The model's replies are scripted
(tests/scripted_client.py): these tests are about the harness, not generation."""

import asyncio
import json

import verifiers_rl as vf
from verifiers_rl.envs.rollouts import generate_states

from scripted_client import ScriptedClient, completion


def run(coro):
    return asyncio.run(coro)


def client():
    return ScriptedClient(lambda **kw: completion("x"))


class Recorder(vf.MultiTurnEnv):
    """A 0.1.11-style positional cleanup handler and a 0.3-style named one, side by side."""

    def __init__(self, **kwargs):
        super().__init__(max_turns=2, **kwargs)
        self.seen = []

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "again"}]

    @vf.cleanup
    async def old_style(self, s):  # 0.1.11 called handlers with the state, whatever its name
        self.seen.append(("old", len(s["completion"])))

    @vf.cleanup(priority=-1)
    async def new_style(self, env, state):
        self.seen.append(("new", env is self))


class CleanRubric(vf.Rubric):
    def __init__(self, **kwargs):
        super().__init__(funcs=[lambda completion: 1.0], **kwargs)
        self.cleaned = []

    @vf.cleanup
    async def after_scoring(self, state, answer):
        self.cleaned.append((answer, state["reward"]))


def test_cleanups_of_both_eras_run_once_after_the_completion_is_rendered():
    env = Recorder(dataset=[{"question": "q", "answer": "A"}])
    state = run(env.rollout({"prompt": [{"role": "user", "content": "q"}], "example_id": 0, "answer": "A"},
                            client(), "m"))
    # render_state ran first: the handlers saw the finished completion (2 turns + 1 env reply)
    assert env.seen == [("old", 3), ("new", True)] and state["stop_condition"] == "max_turns_reached"


def test_timing_has_the_spans_and_the_milliseconds_and_trainer_runs_rubric_cleanup():
    rubric = CleanRubric()
    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "A"}] * 2, rubric=rubric)
    states = run(generate_states(env, env.dataset, client(), "m", rollouts_per_example=2))
    timing = states[0]["timing"]
    assert timing.generation.end >= timing.generation.start > 0 and len(timing.model.spans) == 1
    assert timing["generation_ms"] > 0 and "scoring_ms" in timing and timing["total_ms"] >= timing["generation_ms"]
    assert rubric.cleaned == [("A", 1.0)] * 4  # the training path runs the rubric's cleanup too
    out = run(env.generate(env.dataset, client(), "m"))
    assert out["outputs"][0]["timing"]["scoring"]["duration"] >= 0 and out["metadata"]["time"] > 0
    assert out["metadata"]["time_ms"] == out["metadata"]["time"] * 1000


def test_env_group_routes_by_task_or_by_info_env_id_and_members_see_their_own_rows():
    seen = []

    def record(info, task):
        seen.append((task, info))
        return 1.0

    a = vf.SingleTurnEnv(dataset=[{"question": "qa", "info": {"k": 1}}], rubric=vf.Rubric(funcs=[record]))
    b = vf.SingleTurnEnv(dataset=[{"question": "qb"}], rubric=vf.Rubric(funcs=[record]))
    g = vf.EnvGroup([a, b], env_names=["a", "b"])
    infos = [json.loads(i) for i in g.dataset["info"]]  # JSON text: the members' info shapes differ
    assert g.dataset["task"] == ["a", "b"] and [i["env_id"] for i in infos] == ["a", "b"]
    assert g.get_env_for_name("b") is b
    rows = [{**g.dataset[1], "task": "default"}, {k: v for k, v in g.dataset[0].items() if k != "task"}]
    run(generate_states(g, rows, client(), "m"))
    # routed by info["env_id"] (0.3 rows); each member got its row without the env_id it never had
    assert sorted(seen, key=str) == [("a", {"k": 1}), ("b", {})]


def test_math_rubric_verifies_any_length_unless_asked_and_tears_down():
    long = "1" * 60_000
    state = vf.State(input={"prompt": [], "answer": long, "example_id": 0, "task": "t"})
    state["completion"], state["trajectory"] = [{"role": "assistant", "content": f"\\boxed{{{long}}}"}], []
    unlimited, limited = vf.MathRubric(), vf.MathRubric(max_verify_chars=50_000)
    run(unlimited.score_rollout(state))
    assert state["reward"] == 1.0  # 0.1.11 verified answers of any length
    run(limited.score_rollout(state))
    assert state["reward"] == 0.0
    for rubric in (unlimited, limited):
        run(rubric.teardown())


class FlakySandbox(vf.MultiTurnEnv):
    """Its first env reply fails with an infrastructure error (verifiers' InfraError family), later ones work."""

    def __init__(self, **kwargs):
        super().__init__(max_turns=2, **kwargs)
        self.failures_left = 1

    async def env_response(self, messages, state, **kwargs):
        if self.failures_left:
            self.failures_left -= 1
            raise vf.SandboxError("sandbox died")
        return [{"role": "user", "content": "again"}]


def test_an_output_error_is_verifiers_error_data_and_retrying_run_rollout_reruns_it():
    from verifiers_rl.utils.async_utils import maybe_retry
    from verifiers_rl.utils.error_utils import validate_error_data

    env = FlakySandbox(dataset=[{"question": "q", "answer": "A"}], rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
    row = env.get_dataset().to_list()[0]
    failed = run(env.run_rollout(row, client(), "m", {}))
    # verifiers 0.3's ErrorData, and 0.1.11's error_chain (the errors' reprs) / long_error_chain (their types)
    assert validate_error_data(failed["error"]) == {
        "error": "SandboxError", "message": "sandbox died", "error_chain_repr": "SandboxError('sandbox died')",
        "error_chain_str": "SandboxError"}
    assert (failed["error_chain"], failed["long_error_chain"]) == ("SandboxError('sandbox died')", "SandboxError")
    env.failures_left = 1
    # verifiers' own pattern (maybe_retry over run_rollout): the serialized InfraError is recognised and retried
    retried = run(maybe_retry(env.run_rollout, max_retries=1, initial=0.0)(row, client(), "m", {}))
    assert retried["error"] is None and retried["stop_condition"] == "max_turns_reached"


class ColumnRubric(vf.Rubric):
    """Reward functions and a cleanup handler that read the row's own columns by name (verifiers 0.3)."""

    def __init__(self):
        def by_difficulty(completion, difficulty):
            return difficulty / 10

        def tag_count(**kwargs):
            return float(len(kwargs["tags"]))

        def answer_wins(answer, info):  # a column never shadows the named fields
            return float(answer == "A" and info == {"k": 1})

        super().__init__(funcs=[by_difficulty, tag_count, answer_wins])
        self.cleaned = []

    @vf.cleanup
    async def note(self, state, difficulty):
        self.cleaned.append(difficulty)


def test_reward_functions_and_rubric_cleanup_get_the_rows_other_columns_by_name():
    rows = [{"question": "q", "answer": "A", "info": {"k": 1}, "difficulty": 3, "tags": ["x", "y"]}]
    rubric = ColumnRubric()
    env = vf.SingleTurnEnv(dataset=rows, rubric=rubric)
    out = run(env.generate(env.dataset, client(), "m"))["outputs"][0]
    assert out["metrics"] == {"by_difficulty": 0.3, "tag_count": 2.0, "answer_wins": 1.0, "num_turns": 1.0}
    states = run(generate_states(env, env.dataset, client(), "m"))  # the training path: the same scores
    assert states[0]["metrics"] == out["metrics"] and not states[0].get("reward_errors")
    assert rubric.cleaned == [3, 3]
