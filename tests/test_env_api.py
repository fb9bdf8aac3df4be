"""The environment layer: datasets, turn loop, stop conditions, tools, rubric, parsers, loading."""

import asyncio

import pytest
from datasets import Dataset

import verifiers_rl as vf
from verifiers_rl.envs.loading import EnvironmentArgsError, EnvironmentNotFound
from verifiers_rl.utils.tool_schema import tool_schema
from verifiers_rl.utils.tool_utils import convert_func_to_tool_def
from verifiers_rl.envs.rollouts import generate_states
from verifiers_rl.envs.turn_tokens import rollout_tokens

from scripted_client import ScriptedClient, completion


def run(coro):
    return asyncio.run(coro)


def test_dataset_columns_from_question_with_system_prompt_and_few_shot():
    ds = Dataset.from_list([{"question": "2+2?", "answer": "4"}, {"question": "3+3?", "answer": "6"}])
    shot = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
    env = vf.SingleTurnEnv(dataset=ds, system_prompt="Be brief.", few_shot=shot)
    row = env.dataset[1]
    assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "user"]
    assert row["prompt"][-1]["content"] == "3+3?"
    assert row["answer"] == "6" and row["task"] == "default" and row["example_id"] == 1
    assert env.get_eval_dataset(n=1)[0]["answer"] == "4"  # falls back to the train split


def test_prompt_column_keeps_messages_and_prepends_system():
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}], "answer": "x", "info": {"k": 1}}])
    env = vf.SingleTurnEnv(dataset=ds, system_prompt="S")
    assert env.dataset[0]["prompt"][0] == {"role": "system", "content": "S"}
    assert env.dataset[0]["info"] == {"k": 1}


def test_missing_prompt_column_is_a_clear_error():
    with pytest.raises(ValueError, match="'prompt' or 'question'"):
        vf.SingleTurnEnv(dataset=Dataset.from_list([{"text": "a"}]))


def test_an_empty_train_split_loads_and_its_eval_split_runs():
    """An environment that splits its rows as `rows[:-n]` / `rows[-n:]` and is asked for n >= all of them builds an
    empty train Dataset (no columns): verifiers loads it (a map over no rows) and evaluates; so does this runtime,
    and training on it is refused in one line (the orchestrator's check). The model's replies are scripted."""
    from verifiers_rl.envs.dataset_format import without_training_rows

    rows = [{"question": f"Guess {w}.", "answer": w} for w in ("apple", "pear")]
    num_eval = 5
    env = vf.SingleTurnEnv(dataset=Dataset.from_list(rows[:-num_eval]),
                           eval_dataset=Dataset.from_list(rows[-num_eval:]),
                           rubric=vf.Rubric(funcs=[lambda completion, answer: float(answer in str(completion))]))
    assert len(env.dataset) == 0 and without_training_rows(env)
    client = ScriptedClient(lambda messages, **kw: completion(f"it is {messages[-1]['content'].split()[1]}"))
    states = run(generate_states(env, env.get_eval_dataset().to_list(), client, "m"))
    assert [s["reward"] for s in states] == [1.0, 1.0]
    assert not without_training_rows(vf.SingleTurnEnv(dataset=Dataset.from_list(rows)))


def test_rubric_injects_only_declared_kwargs_and_weights():
    seen = {}

    def exact(completion, answer):
        seen["exact"] = (completion, answer)
        return 1.0 if completion[-1]["content"] == answer else 0.0

    async def length(completion, info):
        seen["length_info"] = info
        return len(completion[-1]["content"]) / 10

    def needs_parser(parser, completion):
        return 1.0 if parser.parse_answer(completion) == "abc" else 0.0

    rubric = vf.Rubric(funcs=[exact, length, needs_parser], weights=[0.5, 0.0, 2.0])
    state = {"prompt": [], "completion": [{"role": "assistant", "content": "abc"}], "answer": "abc",
             "info": {"a": 1}, "task": "t"}
    rubric.score_group_sync([state])
    assert state["metrics"] == {"exact": 1.0, "length": 0.3, "needs_parser": 1.0}
    assert state["reward"] == pytest.approx(0.5 * 1.0 + 0.0 * 0.3 + 2.0 * 1.0)
    assert seen["length_info"] == {"a": 1}


def test_raising_reward_function_scores_zero_and_is_counted():
    def boom(completion):
        raise RuntimeError("bad")

    def one():
        return 1.0

    rubric = vf.Rubric(funcs=[boom, one])
    states = [{"completion": []}, {"completion": []}]
    rubric.score_group_sync(states)
    assert [s["reward"] for s in states] == [1.0, 1.0]
    assert rubric.error_counts["boom"] == 2
    assert "RuntimeError: bad" in states[0]["reward_errors"]["boom"]


def test_group_level_reward_function_sees_the_whole_group():
    def rank(completions, answers):
        lens = [len(c[-1]["content"]) for c in completions]
        return [float(l == max(lens)) for l in lens]

    rubric = vf.Rubric(funcs=[rank])
    states = [{"completion": [{"role": "assistant", "content": x}], "answer": ""} for x in ["a", "abc", "ab"]]
    rubric.score_group_sync(states)
    assert [s["reward"] for s in states] == [0.0, 1.0, 0.0]


def test_rubric_group_adds_rewards_and_merges_metrics():
    r1 = vf.Rubric(funcs=[lambda: 0.25], weights=[1.0])
    r2 = vf.Rubric(funcs=[lambda: 0.5], weights=[2.0])
    states = [{"completion": []}]
    vf.RubricGroup([r1, r2]).score_group_sync(states)
    assert states[0]["reward"] == pytest.approx(1.25)
    assert states[0]["metrics"] == {"<lambda>": pytest.approx(0.75)}  # same name in both: summed, as in verifiers


def test_xml_parser_fields_alternatives_and_format_reward():
    p = vf.XMLParser(["think", ("answer", "ans")], answer_field="answer")
    parsed = p.parse("<think>\nhmm\n</think>\n<ans>42</ans>")
    assert parsed.think == "hmm" and parsed.ans == "42" and parsed.answer is None  # one attribute per tag
    completion = [{"role": "assistant", "content": "<answer>7</answer>"},
                  {"role": "user", "content": "more"},
                  {"role": "assistant", "content": "no tags"}]
    assert p.parse_answer(completion) == "7"  # latest assistant message that has it
    fmt = p.get_format_reward_func()
    assert fmt([{"role": "assistant", "content": "<think>a</think><answer>b</answer>"}]) == 1.0
    # 0.4 * 1/2 fields + 0.2 spacing + 0.2 ends with the last field (does not open with <think>)
    assert fmt([{"role": "assistant", "content": "<answer>b</answer>"}]) == pytest.approx(0.6)
    assert p.format(think="x", answer="y") == "<think>\nx\n</think>\n<answer>\ny\n</answer>"


def test_think_parser():
    p = vf.ThinkParser(extract_fn=lambda s: s.upper())
    assert p.parse("<think>abc</think>\n yes") == "YES"
    fmt = p.get_format_reward_func()
    assert fmt([{"role": "assistant", "content": "<think>x</think> ok"}]) == 1.0
    assert fmt([{"role": "assistant", "content": "ok"}]) == 0.0


def test_singleturn_rollout_records_tokens_and_logprobs():
    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "hello"}],
                           rubric=vf.Rubric(funcs=[lambda completion, answer: float(completion[-1]["content"] == answer)]))
    client = ScriptedClient(lambda **kw: completion("hello", prompt_ids=[5, 6], token_ids=[7, 8, 9]))
    states = run(generate_states(env, env.dataset, client, "m", {"temperature": 0.7, "top_k": 5}, rollouts_per_example=3))
    assert len(states) == 3 and all(s["reward"] == 1.0 for s in states)
    turn = states[0]["trajectory"][0]
    assert turn["tokens"]["prompt_ids"] == [5, 6] and turn["tokens"]["completion_ids"] == [7, 8, 9]
    assert turn["tokens"]["completion_logprobs"] == [-0.5] * 3
    assert turn["response"].message.finish_reason == "stop" and not turn["is_truncated"]
    req = client.requests[0]
    assert req["logprobs"] is True and req["extra_body"] == {"top_k": 5, "return_token_ids": True}
    assert req["temperature"] == 0.7
    assert states[0]["tokens"]["model_mask"] == [0, 0, 1, 1, 1]


class Echo(vf.MultiTurnEnv):
    async def setup_state(self, state):
        state["echoes"] = 0
        return state

    async def env_response(self, messages, state):
        state["echoes"] += 1
        return [{"role": "user", "content": f"again {state['echoes']}"}]

    @vf.stop
    async def said_done(self, state):  # verifiers renders state["completion"] at the end: read the trajectory
        return bool(state["trajectory"]) and "done" in state["trajectory"][-1]["completion"][-1].content


def test_multiturn_loop_stop_conditions_and_env_token_marking():
    replies = iter(["a", "b", "done"])
    prompt_lens = iter([3, 7, 11])

    def reply(messages, **kw):
        n = next(prompt_lens)
        # each prompt extends the previous prompt + reply, as a prefix-consistent chat template does
        return completion(next(replies), prompt_ids=list(range(n)), token_ids=[100, 101])

    env = Echo(dataset=[{"question": "q"}], max_turns=10)
    state = run(generate_states(env, env.dataset, ScriptedClient(reply), "m"))[0]
    assert state["stop_condition"] == "said_done" and state["echoes"] == 2
    assert [m["role"] for m in state["completion"]] == ["assistant", "user", "assistant", "user", "assistant"]
    assert len(state["trajectory"]) == 3
    # prompt tokens [0,1,2] + model [100,101]; turn 2's prompt is 7 long but must start with the 5
    # tokens so far: it does not ([0..6] vs [0,1,2,100,101]) → the rollout can't be stitched.
    assert state["tokens"] is None


def test_rollout_tokens_marks_environment_tokens():
    state = {"trajectory": [
        {"tokens": {"prompt_ids": [1, 2], "completion_ids": [3, 4], "completion_logprobs": [-0.1, -0.2],
                    "completion_mask": [1, 1]}},
        {"tokens": {"prompt_ids": [1, 2, 3, 4, 9, 9], "completion_ids": [5], "completion_logprobs": [-0.3],
                    "completion_mask": [1]}},
    ]}
    t = rollout_tokens(state)
    assert t["input_ids"] == [1, 2, 3, 4, 9, 9, 5]
    assert t["model_mask"] == [0, 0, 1, 1, 0, 0, 1]
    assert t["logprobs"] == [0, 0, -0.1, -0.2, 0, 0, -0.3]


def test_max_turns_and_truncation_stop():
    env = Echo(dataset=[{"question": "q"}], max_turns=2)
    s = run(generate_states(env, env.dataset, ScriptedClient(lambda **kw: completion("x")), "m"))[0]
    assert s["stop_condition"] == "max_turns_reached" and len(s["trajectory"]) == 2
    # a reply cut by max_tokens does not end the rollout (verifiers' behaviour); the rollout is marked truncated
    s = run(generate_states(env, env.dataset, ScriptedClient(lambda **kw: completion("x", finish_reason="length")), "m"))[0]
    assert s["stop_condition"] == "max_turns_reached" and len(s["trajectory"]) == 2 and s["is_truncated"]


class LegacyEnv(vf.MultiTurnEnv):
    """verifiers' older API: is_completed(messages, state) and env_response returning (messages, state)."""

    def is_completed(self, messages, state, **kwargs):
        return len(state["trajectory"]) >= 2

    def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "next"}], state


def test_legacy_multiturn_api():
    env = LegacyEnv(dataset=[{"question": "q"}])
    s = run(generate_states(env, env.dataset, ScriptedClient(lambda **kw: completion("x")), "m"))[0]
    assert len(s["trajectory"]) == 2 and s["stop_condition"] == "legacy_is_completed"


def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


async def fail(x: str) -> str:
    """Always fails.

    Args:
        x: ignored
    """
    raise ValueError("nope")


def test_tool_schema_from_signature_and_docstring():
    # verifiers' strict schema: every property required, closed object, pydantic titles, defaults kept
    t = convert_func_to_tool_def(add)
    assert t.name == "add" and t.description == "Add two numbers."
    assert t.parameters == {
        "type": "object", "title": "add_args", "additionalProperties": False, "required": ["a", "b"],
        "properties": {"a": {"type": "integer", "title": "A", "description": "the first number"},
                       "b": {"type": "integer", "title": "B", "description": "the second number", "default": 2}}}
    assert tool_schema(add) == {"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                                                 "parameters": t.parameters}}


def test_tool_env_runs_tools_and_reports_errors_to_the_model():
    script = iter([
        completion(None, tool_calls=[("add", {"a": 1, "b": 5}), ("fail", {"x": "y"}), ("nosuch", {}),
                                     ("add", "{not json")], finish_reason="tool_calls"),
        completion("the answer is 6"),
    ])
    env = vf.ToolEnv(tools=[add, fail], dataset=[{"question": "q", "answer": "6"}], max_turns=5,
                     rubric=vf.Rubric(funcs=[lambda completion, answer: float(answer in completion[-1]["content"])]))
    client = ScriptedClient(lambda **kw: next(script))
    s = run(generate_states(env, env.dataset, client, "m"))[0]
    assert client.requests[0]["tools"][0]["function"]["name"] == "add"
    tool_msgs = [m for m in s["completion"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs][0] == "6"
    # verifiers' default error_formatter is str(e): the tool's message, KeyError's repr of the name, json's message
    assert tool_msgs[1]["content"] == "nope"
    assert tool_msgs[2]["content"] == "'nosuch'"
    assert tool_msgs[3]["content"].startswith("Expecting property name enclosed in double quotes")
    assert s["stop_condition"] == "no_tools_called" and s["reward"] == 1.0 and s["error"] is None
    assert env.tool_errors == 3


def test_a_sync_tool_runs_on_the_event_loops_thread_as_in_verifiers(tmp_path):
    """verifiers calls a sync tool inline (maybe_await): a sqlite connection made when the env loads, and the main
    thread's signal.alarm timeout, work in its tools; on a worker thread sqlite refuses the connection and signal
    refuses the handler, and the tool's answer would be that error."""
    import signal
    import sqlite3

    db = sqlite3.connect(tmp_path / "facts.db")
    db.execute("create table facts (k text, v text)")
    db.execute("insert into facts values ('capital', 'Paris')")

    def lookup(key: str) -> str:
        """Look a fact up.

        Args:
            key: the fact's name
        """
        old = signal.signal(signal.SIGALRM, lambda *a: None)
        signal.signal(signal.SIGALRM, old)
        return db.execute("select v from facts where k = ?", (key,)).fetchone()[0]

    script = iter([completion(None, tool_calls=[("lookup", {"key": "capital"})], finish_reason="tool_calls"),
                   completion("Paris")])
    env = vf.ToolEnv(tools=[lookup], dataset=[{"question": "q", "answer": "Paris"}], max_turns=3)
    s = run(generate_states(env, env.dataset, ScriptedClient(lambda **kw: next(script)), "m"))[0]
    assert [m["content"] for m in s["completion"] if m["role"] == "tool"] == ["Paris"]
    assert env.tool_errors == 0 and s["error"] is None


def test_harness_exception_is_recorded_not_raised():
    class Broken(vf.MultiTurnEnv):
        async def env_response(self, messages, state):
            raise KeyError("env bug")

    env = Broken(dataset=[{"question": "q"}])
    s = run(generate_states(env, env.dataset, ScriptedClient(lambda **kw: completion("x")), "m"))[0]
    assert isinstance(s["error"], KeyError) and s["reward"] == 0.0


def test_max_concurrent_bounds_rollouts_in_flight():
    in_flight, peak = 0, 0

    class Slow(vf.SingleTurnEnv):
        async def get_model_response(self, *a, **kw):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.01)
            in_flight -= 1
            return await super().get_model_response(*a, **kw)

    env = Slow(dataset=[{"question": str(i)} for i in range(6)])
    run(generate_states(env, env.dataset, ScriptedClient(lambda **kw: completion("x")), "m",
                     rollouts_per_example=2, max_concurrent=3))
    assert peak == 3


def test_env_group_tags_rows_and_routes_scoring():
    a = vf.SingleTurnEnv(dataset=[{"question": "qa", "answer": "A"}], rubric=vf.Rubric(funcs=[lambda: 0.1]))
    b = vf.SingleTurnEnv(dataset=[{"question": "qb", "answer": "B", "info": {"x": 1}}],
                         rubric=vf.Rubric(funcs=[lambda: 0.9]))
    g = vf.EnvGroup([a, b], env_names=["alpha", "beta"])
    assert g.dataset["task"] == ["alpha", "beta"]
    states = run(generate_states(g, g.dataset, ScriptedClient(lambda **kw: completion("x")), "m"))
    assert [s["reward"] for s in states] == [0.1, 0.9]


def test_load_environment_errors():
    with pytest.raises(EnvironmentNotFound, match="'owner/no-such-env' not found.*Available:"):
        vf.load_environment("owner/no-such-env")


def test_load_environment_from_workspace_and_bad_args(tmp_path, monkeypatch):
    pkg = tmp_path / "environments" / "my_env"
    pkg.mkdir(parents=True)
    (pkg / "my_env.py").write_text(
        "import verifiers_rl as vf\n"
        "def load_environment(num_examples=2):\n"
        "    return vf.SingleTurnEnv(dataset=[{'question': str(i)} for i in range(num_examples)])\n")
    monkeypatch.chdir(tmp_path)
    env = vf.load_environment("someone/my-env", num_examples=3)
    assert len(env.dataset) == 3 and env.env_id == "my-env"
    with pytest.raises(EnvironmentArgsError, match="did you mean 'num_examples'"):
        vf.load_environment("my-env", num_exampels=3)


def test_marked_handlers_get_the_objects_they_name_every_call_and_made_ones_are_not_kept():
    """`call_marked` reads a handler's parameters once per function (stop conditions run every turn): the
    second call of each shape gets the same objects; a handler made per rollout leaves no entry behind."""
    import asyncio
    import gc
    import weakref

    from verifiers_rl import decorators

    class Env:
        def named(self, state, env):
            return ("named", state["n"], env)

        def old_style(self, st):
            return ("old", st["n"])

        def any_kwargs(self, **kw):
            return ("kw", sorted(kw))

    e = Env()
    for n in (1, 2):
        assert asyncio.run(decorators.call_marked(e.named, {"n": n}, env="E")) == ("named", n, "E")
        assert asyncio.run(decorators.call_marked(e.old_style, {"n": n}, env="E")) == ("old", n)
        assert asyncio.run(decorators.call_marked(e.any_kwargs, {"n": n}, env="E")) == ("kw", ["env", "state"])
    before, refs = len(decorators._SIGNATURES[False]), []
    for n in range(5):
        made = lambda state, k=n: state["n"] + k  # noqa: E731 - a handler made per rollout
        assert asyncio.run(decorators.call_marked(made, {"n": 1})) == 1 + n
        refs.append(weakref.ref(made))
        del made
    gc.collect()
    assert all(r() is None for r in refs) and len(decorators._SIGNATURES[False]) <= before


def test_an_env_without_an_eval_dataset_says_it_falls_back_once(caplog):
    """Every validation asks for the eval split: the fallback to the training rows is said once per environment."""
    import logging

    env = vf.SingleTurnEnv(dataset=[{"question": "a", "answer": "a"}, {"question": "b", "answer": "b"}],
                           rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert len(env.get_eval_dataset(n=2)) == 2
    said = [r for r in caplog.records if "falling back to train dataset" in r.getMessage()]
    assert len(said) == 1


def test_every_rollout_in_flight_asks_a_hosted_api_again_without_the_token_fields_it_refuses():
    """vf-eval against a hosted API (OpenAI's refuses vLLM's return_token_ids): the rollouts sent at once were all
    refused; each asks again without the token fields, not only the one that saw the refusal first. The API is a
    scripted HTTP stand-in (tests/scripted_client.py HostedAPI): the tests reach no hosted service."""
    import openai

    from scripted_client import HostedAPI

    def said_it(completion, answer):
        return float(completion[-1]["content"] == answer)

    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "ok"}], rubric=vf.Rubric(funcs=[said_it]))
    with HostedAPI(text="ok", hold=4) as api:
        client = openai.AsyncOpenAI(base_url=api.base_url, api_key="k", max_retries=0)
        states = run(generate_states(env, env.dataset, client, "m", rollouts_per_example=4))
    assert [(s.get("error"), s["reward"]) for s in states] == [(None, 1.0)] * 4
    refused = [r for r in api.requests if "return_token_ids" in r]
    assert len(refused) == 4 and all("logprobs" not in r for r in api.requests[4:]) and len(api.requests) == 8


def test_max_tokens_reaches_the_server_as_max_completion_tokens_as_verifiers_sends_it():
    """An env's max_tokens is sent as max_completion_tokens (verifiers' client does so; OpenAI's reasoning models
    refuse max_tokens, vLLM and the local engine read either: tests/test_local_engine.py). The API is the scripted
    stand-in of a hosted reasoning model (tests/scripted_client.py HostedAPI)."""
    import openai

    from scripted_client import HostedAPI

    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "ok"}], sampling_args={"max_tokens": 16},
                           rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
    with HostedAPI(text="ok", refuse=("return_token_ids", "max_tokens")) as api:
        client = openai.AsyncOpenAI(base_url=api.base_url, api_key="k", max_retries=0)
        states = run(generate_states(env, env.dataset, client, "o4-mini", rollouts_per_example=2))
    assert [s.get("error") for s in states] == [None, None]
    assert all(r["max_completion_tokens"] == 16 and "max_tokens" not in r for r in api.requests)
