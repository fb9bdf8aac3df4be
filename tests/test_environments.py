"""The six example environments under environments/, checked without a model.

Datasets are the offline ones (generated in code or shipped in the package). Rewards are checked on
completions written here; multi-turn envs' `env_response` is called directly; full rollouts go through
`env.generate` with `ScriptedClient` (tests/scripted_client.py), an AsyncOpenAI-like client that scripts
the model's replies so the harness logic (turn loop, tool calls, stop conditions, scoring) can be
checked without a model.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import sys
import uuid
from pathlib import Path

import pytest

import verifiers_rl as vf
from verifiers_rl.utils.data_utils import resolve_dataset_source

from processes import poll_until
from scripted_client import ScriptedClient, completion
from verifiers_rl.envs.rollouts import generate_states

ENV_ROOT = Path(__file__).resolve().parents[1] / "environments"
ENV_NAMES = ["reverse_text", "alphabet_sort", "gsm8k", "math_python", "wiki_search", "wordle"]
for _name in ENV_NAMES:  # import the modules directly too, to reach their helpers
    if str(ENV_ROOT / _name) not in sys.path:
        sys.path.insert(0, str(ENV_ROOT / _name))

import alphabet_sort  # noqa: E402
import gsm8k  # noqa: E402
import math_python  # noqa: E402
import reverse_text  # noqa: E402
import wiki_search  # noqa: E402
import wordle  # noqa: E402

COLUMNS = {"prompt", "answer", "info", "task", "example_id"}


def run(coro):
    return asyncio.run(coro)


def load(env_id: str, **kwargs):
    return vf.load_environment(env_id, dataset_source="offline", **kwargs)


def new_state(env, prompt, answer="", task="default", info=None, example_id=0):
    """A fresh rollout state for a row, as the environment's rollout starts it."""
    row = {"prompt": prompt, "answer": answer, "task": task, "info": info or {}, "example_id": example_id}
    return run(env.init_state(row, ScriptedClient(lambda **kw: completion("x")), "m"))


def score(env, row: dict, completion_msgs: list[dict]) -> dict:
    """Score one hand-written completion for a dataset row with the env's rubric."""
    state = new_state(env, row["prompt"], row["answer"], row["task"], row["info"], row.get("example_id", 0))
    state["completion"] = completion_msgs
    run(env.rubric.score_group([state]))
    assert 0.0 <= state["reward"] <= 1.0, state["reward"]
    return state


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def user_text(messages: list[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


# --- shared: packaging, sources, determinism ------------------------------------------------------------
@pytest.mark.parametrize("name", ENV_NAMES)
def test_each_env_is_a_package_with_readme(name):
    d = ENV_ROOT / name
    py = (d / "pyproject.toml").read_text()
    assert f'name = "{name.replace("_", "-")}"' in py and "verifiers-rl" in py and f"{name}.py" in py
    assert "hatchling" in py
    readme = (d / "README.md").read_text()
    assert "dataset_source" in readme and "Reward" in readme


def test_default_source_follows_hf_hub_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    env = vf.load_environment("gsm8k", num_train_examples=5, num_eval_examples=5)  # no hub access needed
    assert env.dataset[0]["info"]["source"] == "offline"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    # every env resolves its source with the shared helper (its own tests: tests/test_data_utils.py)
    assert resolve_dataset_source(None) == "hub"
    for mod in (reverse_text, alphabet_sort, gsm8k, math_python, wiki_search, wordle):
        assert mod.resolve_dataset_source is resolve_dataset_source
        with pytest.raises(ValueError, match="dataset_source must be 'hub' or 'offline'"):
            mod.load_environment(dataset_source="local")


def test_unknown_env_arg_is_a_clear_error():
    from verifiers_rl.envs.loading import EnvironmentArgsError

    with pytest.raises(EnvironmentArgsError, match="did you mean 'num_train_examples'"):
        vf.load_environment("reverse-text", dataset_source="offline", num_train_exampels=3)


@pytest.mark.parametrize("env_id,kwargs", [
    ("reverse-text", dict(num_train_examples=50, num_eval_examples=20)),
    ("alphabet-sort", dict(num_train_examples=30, num_eval_examples=10)),
    ("gsm8k", dict(num_train_examples=40, num_eval_examples=10)),
    ("math-python", dict(num_train_examples=40, num_eval_examples=10)),
    ("wiki-search", dict(num_eval_examples=10)),
    ("wordle", dict(num_train_examples=30, num_eval_examples=10)),
])
def test_offline_data_is_deterministic_with_disjoint_splits(env_id, kwargs):
    a, b = load(env_id, seed=3, **kwargs), load(env_id, seed=3, **kwargs)
    c = load(env_id, seed=4, **kwargs)
    assert COLUMNS <= set(a.dataset.column_names) and COLUMNS <= set(a.eval_dataset.column_names)
    assert a.dataset.to_list() == b.dataset.to_list() and a.eval_dataset.to_list() == b.eval_dataset.to_list()
    assert a.dataset.to_list() != c.dataset.to_list() or a.eval_dataset.to_list() != c.eval_dataset.to_list()
    assert len(a.eval_dataset) == kwargs["num_eval_examples"]
    if "num_train_examples" in kwargs:
        assert len(a.dataset) == kwargs["num_train_examples"]
    train_q = {(json.dumps(r["prompt"]), r["answer"]) for r in a.dataset}
    eval_q = {(json.dumps(r["prompt"]), r["answer"]) for r in a.eval_dataset}
    assert not train_q & eval_q
    for row in a.dataset.select(range(3)):
        assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"


# --- reverse-text ---------------------------------------------------------------------------------------
def test_reverse_text_offline_defaults():
    env = load("reverse-text")
    assert len(env.dataset) == 20000 and len(env.eval_dataset) == 512
    row = env.dataset[0]
    assert row["prompt"][0] == {"role": "system", "content": "Reverse the text."}
    words = lambda ds: {r["prompt"][-1]["content"] for r in ds}  # noqa: E731
    train_words, eval_words = words(env.dataset), words(env.eval_dataset)
    assert all(3 <= len(w) <= 8 and w.isalpha() and " " not in w for w in train_words | eval_words)
    assert not train_words & eval_words, "eval words must not appear in training"
    assert all(r["answer"] == r["prompt"][-1]["content"][::-1] for r in env.eval_dataset)
    assert len(reverse_text.WORD_LIST) >= 300


def test_reverse_text_options():
    env = load("reverse-text", num_train_examples=20, num_eval_examples=5, min_words=2, max_words=4,
               system_prompt="Flip it. Use <reversed_text> tags.")
    for row in env.dataset:
        n = len(row["prompt"][-1]["content"].split())
        assert 2 <= n <= 4 and row["answer"] == row["prompt"][-1]["content"][::-1]
    assert env.dataset[0]["prompt"][0]["content"] == "Flip it. Use <reversed_text> tags."
    with pytest.raises(ValueError, match="min_words"):
        load("reverse-text", min_words=3, max_words=1)


def test_reverse_text_reward():
    env = load("reverse-text", num_train_examples=5, num_eval_examples=5)
    row = {"prompt": [{"role": "user", "content": "garden"}], "answer": "nedrag", "task": "t", "info": {}}
    assert score(env, row, [assistant("<reversed_text>nedrag</reversed_text>")])["reward"] == pytest.approx(1.0)
    partial = score(env, row, [assistant("<reversed_text>nedarg</reversed_text>")])["reward"]
    assert 0.5 < partial < 1.0
    assert score(env, row, [assistant("<reversed_text>garden</reversed_text>")])["reward"] < partial
    assert score(env, row, [assistant("nedrag")])["reward"] == 0.0  # no tag, no answer
    assert score(env, row, [])["reward"] == 0.0


def test_reverse_text_generate_end_to_end():
    env = load("reverse-text", num_train_examples=5, num_eval_examples=4)

    def reply(messages, **kwargs):
        text = user_text(messages)
        return completion(f"<reversed_text>{text[::-1]}</reversed_text>")

    client = ScriptedClient(reply)
    states = run(generate_states(env, env.eval_dataset, client, "m", rollouts_per_example=2))
    assert len(states) == 8 and len(client.requests) == 8
    assert all(s["reward"] == pytest.approx(1.0) for s in states)
    assert client.requests[0]["messages"][0]["content"] == "Reverse the text."
    wrong = run(generate_states(env, env.eval_dataset, ScriptedClient(lambda **kw: completion("no idea")), "m",
                             rollouts_per_example=2))
    assert all(s["reward"] == 0.0 for s in wrong)


# --- alphabet-sort --------------------------------------------------------------------------------------
def _alpha_env(**kw):
    return load("alphabet-sort", num_train_examples=kw.pop("n", 40), num_eval_examples=10, **kw)


def test_alphabet_sort_data():
    env = _alpha_env()
    names = lambda ds: {n for r in ds for t in r["info"]["turn_names"] for n in t}  # noqa: E731
    assert not names(env.dataset) & names(env.eval_dataset)
    for row in env.dataset:
        info = row["info"]
        assert 1 <= len(info["turn_names"]) <= 3 and all(1 <= len(t) <= 5 for t in info["turn_names"])
        assert info["sort_by"] in ("first", "last")
        seen = [n for t in info["turn_names"] for n in t]
        assert info["expected"][-1] == alphabet_sort.sorted_names(seen, info["sort_by"])
        assert row["answer"] == "\n".join(info["expected"][-1])
        assert info["sort_by"].upper() in row["prompt"][-1]["content"]
        assert all(n in row["prompt"][-1]["content"] for n in info["turn_names"][0])
    by_last = alphabet_sort.sorted_names(["Zoe Adams", "Amy Young", "Bob Brown"], "last")
    assert by_last == ["Zoe Adams", "Bob Brown", "Amy Young"]
    assert alphabet_sort.sorted_names(["Zoe Adams", "Amy Young", "Bob Brown"], "first")[0] == "Amy Young"


def _multi_turn_row(env):
    return next(r for r in env.dataset if len(r["info"]["turn_names"]) == 3)


def test_alphabet_sort_env_response_and_stop():
    env = _alpha_env()
    row = _multi_turn_row(env)
    info = row["info"]
    state = new_state(env, row["prompt"], row["answer"], row["task"], info)
    run(env.setup_state(state))
    state["completion"] = []
    for k in range(3):
        assert not run(env.all_turns_answered(state))
        state["completion"].append(assistant("<alphabetical_sorted>\nx\n</alphabetical_sorted>"))
        state["trajectory"].append({"is_truncated": False})
        if k < 2:
            reply = run(env.env_response(state["prompt"] + state["completion"], state))
            assert len(reply) == 1 and reply[0]["role"] == "user"
            total = sum(len(t) for t in info["turn_names"][: k + 2])
            assert f"ALL {total} names" in reply[0]["content"]
            assert info["sort_by"].upper() in reply[0]["content"]
            assert all(n in reply[0]["content"] for n in info["turn_names"][k + 1])
            assert not any(n in reply[0]["content"] for n in info["turn_names"][0])  # only new names
            state["completion"] += reply
    assert run(env.all_turns_answered(state))


def test_alphabet_sort_reward():
    env = _alpha_env()
    row = _multi_turn_row(env)
    expected = row["info"]["expected"]

    def convo(lists):
        msgs = []
        for k, names in enumerate(lists):
            msgs.append(assistant("<alphabetical_sorted>\n" + "\n".join(names) + "\n</alphabetical_sorted>"))
            msgs.append({"role": "user", "content": "more"})
        return msgs[:-1]

    perfect = score(env, row, convo(expected))
    assert perfect["reward"] == pytest.approx(1.0) and perfect["metrics"]["final_list_exact"] == 1.0
    marked = score(env, row, convo([[f"{i + 1}. {n}" for i, n in enumerate(e)] for e in expected]))
    assert marked["reward"] == pytest.approx(1.0)  # list markers are ignored
    shuffled = [list(reversed(e)) for e in expected]
    rev = score(env, row, convo(shuffled))
    assert rev["reward"] < 0.9
    # the power: one turn's ratio r contributes r**4 / 3
    from difflib import SequenceMatcher
    r = SequenceMatcher(None, "\n".join(shuffled[-1]), "\n".join(expected[-1])).ratio()
    short = score(env, row, convo([expected[0], expected[1], shuffled[-1]]))
    assert short["reward"] == pytest.approx((1 + 1 + r ** 4) / 3)
    assert score(env, row, convo(expected[:1]))["reward"] == pytest.approx(1 / 3)  # unreached turns score 0
    assert score(env, row, [assistant("Aaron, Bella")])["reward"] == 0.0


def _alpha_player(correct: bool):
    """Reads the names and the sort order from the conversation and answers (or lists only the new names)."""

    def reply(messages, **kwargs):
        users = [m["content"] for m in messages if m["role"] == "user"]
        sort_by = "first" if "by FIRST name" in users[0] else "last"
        batches = [m.split(":\n", 1)[1].split("\n\n", 1)[0].split("\n") for m in users]
        names = [n for b in batches for n in b] if correct else batches[-1]
        listing = "\n".join(alphabet_sort.sorted_names(names, sort_by))
        return completion(f"<alphabetical_sorted>\n{listing}\n</alphabetical_sorted>")

    return reply


def test_alphabet_sort_generate_end_to_end():
    env = _alpha_env()
    rows = env.dataset.select(range(6))
    client = ScriptedClient(_alpha_player(correct=True))
    states = run(generate_states(env, rows, client, "m", rollouts_per_example=2))
    assert len(states) == 12
    for s in states:
        assert s["reward"] == pytest.approx(1.0), s["completion"]
        assert len(s["trajectory"]) == len(s["info"]["turn_names"])
        assert s["stop_condition"] == "all_turns_answered"
    lazy = run(generate_states(env, rows, ScriptedClient(_alpha_player(correct=False)), "m", rollouts_per_example=2))
    multi = [s for s in lazy if len(s["info"]["turn_names"]) > 1]
    assert multi and all(s["reward"] < 1.0 for s in multi)


# --- gsm8k ----------------------------------------------------------------------------------------------
def test_gsm8k_offline_data():
    env = load("gsm8k")
    assert len(env.dataset) == 2000 and len(env.eval_dataset) == 200
    assert all(re.fullmatch(r"\d+", r["answer"]) for r in env.dataset)
    assert isinstance(env.parser, vf.Parser) and not isinstance(env.parser, vf.ThinkParser)
    assert "\\boxed" in env.dataset[0]["prompt"][0]["content"]


def test_gsm8k_reward_and_think():
    env = load("gsm8k", num_train_examples=5, num_eval_examples=5)
    row = {"prompt": [{"role": "user", "content": "q"}], "answer": "1234", "task": "t", "info": {}}
    assert score(env, row, [assistant("So the total is \\boxed{1,234}.")])["reward"] == 1.0
    assert score(env, row, [assistant("\\boxed{1235}")])["reward"] == 0.0
    assert score(env, row, [assistant("1234")])["reward"] == 0.0
    think = load("gsm8k", num_train_examples=5, num_eval_examples=5, use_think=True)
    assert isinstance(think.parser, vf.ThinkParser)
    s = score(think, row, [assistant("<think>maybe \\boxed{1}</think>\nAnswer: \\boxed{1234}")])
    assert s["reward"] == 1.0
    assert score(think, row, [assistant("<think>\\boxed{1234}</think> \\boxed{7}")])["reward"] == 0.0


def test_gsm8k_offline_answers_are_right_for_a_known_template():
    import random
    q, a = gsm8k._t_groups(random.Random(1))
    nums = [int(x) for x in re.findall(r"\d+", q)]
    assert a == nums[0] * nums[1] + nums[2]


# --- math-python ----------------------------------------------------------------------------------------
def test_math_python_tool_schema_and_data():
    env = load("math-python", num_train_examples=20, num_eval_examples=5)
    assert isinstance(env, vf.ToolEnv) and env.max_turns == 5
    fn = env.tool_defs[0]
    assert fn["name"] == "python" and fn["description"]
    assert fn["parameters"]["properties"]["code"]["type"] == "string"
    assert fn["parameters"]["properties"]["code"]["description"]
    assert fn["parameters"]["required"] == ["code"]
    assert all(re.fullmatch(r"\d+", r["answer"]) for r in env.dataset)


@pytest.mark.integration  # spawns a process
def test_sandbox_runs_code_and_reports_errors():
    assert math_python.run_python("print(sum(range(10)))") == "45"
    err = math_python.run_python("print('before')\n1/0")
    assert err.startswith("before") and "ZeroDivisionError" in err
    assert "no output" in math_python.run_python("x = 1")
    long = math_python.run_python("print('y' * 50000)", max_output_chars=1000)
    assert len(long) < 1200 and "truncated" in long


@pytest.mark.integration  # spawns a process
def test_sandbox_timeout_kills_infinite_loop():
    # returning at all means the endless loop was killed; the message says it was the limit (5 s: the jail and
    # Python must start within it on loaded cores)
    out = math_python.run_python("print('started', flush=True)\nwhile True:\n    pass", timeout=5)
    assert "started" in out and "ran longer than 5 s" in out


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended while we looked
        return b""


@pytest.mark.integration  # spawns a process
def test_sandbox_timeout_kills_child_processes():
    # the snippet's child is named by a marker: a PID printed inside the jail is its own namespace's, not the host's
    marker = f"vf-child-{uuid.uuid4().hex}"
    out = math_python.run_python(
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])\n"
        "print(p.pid, flush=True)\n"
        "p.wait()", timeout=5)
    assert "ran longer than 5 s" in out

    def still() -> list:
        return [c for c in Path("/proc").glob("[0-9]*/cmdline") if marker.encode() in _read(c)]

    # the jail's init ends with its parent (--die-with-parent), a moment after run_python returns
    assert poll_until(lambda: not still(), 10, 0.05), "the snippet's child process is still running"


@pytest.mark.integration  # spawns a process
def test_sandbox_memory_cap():
    out = math_python.run_python("x = bytearray(2 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert "MemoryError" in out and "allocated" not in out
    out = math_python.run_python("a = []\nwhile True:\n    a.append(' ' * 10**7)", memory_mb=256, timeout=20)
    assert "MemoryError" in out


@pytest.mark.integration  # spawns a process
def test_sandbox_is_isolated_from_caller_cwd_and_env(tmp_path, monkeypatch):
    (tmp_path / "secret.txt").write_text("TOP-SECRET-VALUE")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_API_KEY", "sk-should-not-leak")
    out = math_python.run_python("print(open('secret.txt').read())")
    assert "FileNotFoundError" in out and "TOP-SECRET-VALUE" not in out
    out = math_python.run_python("import os\nprint(os.getcwd())\nprint(dict(os.environ))")
    workdir = out.splitlines()[0]
    assert workdir != str(tmp_path) and "sk-should-not-leak" not in out and "MY_API_KEY" not in out
    assert not Path(workdir).exists(), "the throw-away working directory must be deleted"
    assert "MY_API_KEY" not in math_python.run_python("import os; print(sorted(os.environ))")


def test_math_python_answer_matching():
    assert math_python.answers_match("1,000", "1000") and math_python.answers_match("\\dfrac{1}{2}", "0.5")
    assert math_python.answers_match("\\frac{\\pi}{2}", "\\frac{\\pi}{2}")
    assert math_python.answers_match("\\left(1, 2\\right)", "(1,2)")
    assert not math_python.answers_match("\\frac{\\pi}{3}", "\\frac{\\pi}{2}")
    assert not math_python.answers_match(None, "3")


@pytest.mark.integration  # spawns a process
def test_math_python_generate_end_to_end():
    env = load("math-python", num_train_examples=5, num_eval_examples=5, timeout=5)

    def reply(messages, **kwargs):
        last = messages[-1]
        if last["role"] == "tool":
            return completion(f"The program printed {last['content']}, so the answer is \\boxed{{{last['content']}}}.")
        if "6 times 7" in last["content"]:
            return completion(None, tool_calls=[("python", {"code": "print(6 * 7)"})])
        return completion(None, tool_calls=[("python", {"code": "print(0)"})])

    rows = [{"prompt": [{"role": "user", "content": "What is 6 times 7?"}], "answer": "42", "task": "math-python",
             "info": {}, "example_id": 0},
            dict(env.eval_dataset[0], example_id=1)]
    client = ScriptedClient(reply)
    states = run(generate_states(env, rows, client, "m", rollouts_per_example=2))
    assert len(states) == 4
    for s in states[:2]:
        tool_msgs = [m for m in s["completion"] if m["role"] == "tool"]
        assert [m["content"] for m in tool_msgs] == ["42"]
        assert s["reward"] == 1.0 and s["metrics"]["used_python"] == 1.0
        assert s["stop_condition"] == "no_tools_called" and len(s["trajectory"]) == 2
    assert all(s["reward"] == 0.0 for s in states[2:])  # printed 0, the gold answer is not 0
    assert client.requests[0]["tools"][0]["function"]["name"] == "python"


# --- wiki-search ----------------------------------------------------------------------------------------
def test_wiki_corpus_answers_are_in_the_corpus():
    pages, questions = wiki_search.load_offline()
    assert 20 <= len(pages) <= 40 and len(questions) >= 60
    text = {p["page_id"]: " ".join(s["text"] for s in p["sections"]) for p in pages}
    for q in questions:
        assert q["page_ids"] and any(wiki_search.answer_match(text[pid], q["answer"]) for pid in q["page_ids"]), q
    env = load("wiki-search")
    assert len(env.eval_dataset) == 20 and len(env.dataset) == len(questions) - 20
    assert env.max_turns == 10 and COLUMNS <= set(env.dataset.column_names)


def test_wiki_tools():
    env = load("wiki-search")
    tools = {t.__name__: t for t in env.tools}
    assert set(tools) == {"search_pages", "view_sections", "read_section"}
    hits = tools["search_pages"]("Who founded Brindlemoor?")
    assert hits[0] == {"page_id": "brindlemoor", "title": "Brindlemoor"} and len(hits) <= 5
    assert tools["search_pages"]("Tamberlin river length")[0]["page_id"] == "tamberlin_river"
    assert tools["search_pages"]("zzzz qqqq") == []
    sections = tools["view_sections"]("brindlemoor")
    assert {"section_id": "brindlemoor:history", "title": "History"} in sections
    text = tools["read_section"]("brindlemoor:history")
    assert "founded in 1614 by Odile Varnham" in text
    with pytest.raises(ValueError, match="no page"):
        tools["view_sections"]("atlantis")
    with pytest.raises(ValueError, match="no section"):
        tools["read_section"]("brindlemoor:nope")
    # through the tool loop, a bad id comes back to the model as text
    state = new_state(env, [{"role": "user", "content": "q"}], "a")
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "view_sections", "arguments": '{"page_id": "atlantis"}'}},
        {"id": "c2", "type": "function", "function": {"name": "search_pages", "arguments": '{"query": "Karsk"}'}}]}
    replies = run(env.env_response([call], state))
    assert replies[0]["tool_call_id"] == "c1" and "no page" in replies[0]["content"]
    # verifiers' ToolEnv sends a non-string result as str(result) (a Python repr, not JSON)
    assert ast.literal_eval(replies[1]["content"])[0]["page_id"] == "karsk"


def test_wiki_answer_match_fallback():
    m = wiki_search.answer_match
    assert m("It was founded in 1614.", "1614") == 1.0
    assert m("The Tamberlin River.", "Tamberlin") == 1.0
    assert m("about 18240 people", "18,240") == 1.0
    assert m("It was 16140.", "1614") == 0.0  # whole words only
    assert m("Lake Venn", "the Lake Venn") == 1.0
    assert m("", "1614") == 0.0 and m(None, "x") == 0.0
    env = load("wiki-search")
    row = env.eval_dataset[0]
    assert score(env, row, [assistant(f"The answer is {row['answer']}.")])["reward"] == 1.0
    assert score(env, row, [assistant("I could not find it.")])["reward"] == 0.0


def test_wiki_judge_reward(monkeypatch):
    import openai

    verdicts = []

    class FakeJudge:  # scripts the judge model's yes/no
        def __init__(self, **kwargs):
            self.kwargs = kwargs
            verdicts.append(kwargs)
            self.chat = ScriptedClient(self._reply).chat

        def _reply(self, messages, **kwargs):
            prompt = messages[0]["content"]
            response = prompt.split("Response:", 1)[1]
            return completion("yes" if "Saltreach" in response else "no")

    monkeypatch.setattr(openai, "AsyncOpenAI", FakeJudge)
    monkeypatch.setenv("JUDGE_KEY", "k-123")
    env = load("wiki-search", judge_model="judge-1", judge_base_url="http://judge.invalid/v1",
               judge_api_key_var="JUDGE_KEY")
    assert env.rubric.get_reward_func_names()[:2] == ["judge_correct", "answer_found"]
    row = {"prompt": [{"role": "user", "content": "In which town was Odile Varnham born?"}], "answer": "Saltreach",
           "task": "t", "info": {}}
    good = score(env, row, [assistant("She was born in Saltreach.")])
    assert good["reward"] == 1.0 and good["metrics"]["answer_found"] == 1.0
    assert score(env, row, [assistant("Karsk")])["reward"] == 0.0
    assert verdicts[0]["base_url"] == "http://judge.invalid/v1" and verdicts[0]["api_key"] == "k-123"


def test_wiki_search_generate_end_to_end():
    env = load("wiki-search")
    row = next(r for r in env.dataset if r["prompt"][-1]["content"].startswith("Who founded the town of"))
    town = row["prompt"][-1]["content"].removeprefix("Who founded the town of ").rstrip("?")

    def reply(messages, **kwargs):  # search -> sections -> read -> answer
        last = messages[-1]
        if last["role"] == "user":
            return completion(None, tool_calls=[("search_pages", {"query": town})])
        result = ast.literal_eval(last["content"]) if last["content"].startswith("[") else last["content"]
        if isinstance(result, list) and "page_id" in result[0]:
            return completion(None, tool_calls=[("view_sections", {"page_id": result[0]["page_id"]})])
        if isinstance(result, list):
            sid = next(s["section_id"] for s in result if s["title"] == "History")
            return completion(None, tool_calls=[("read_section", {"section_id": sid})])
        founder = re.search(r"founded in \d+ by ([A-Z]\w+ [A-Z]\w+)", result).group(1)
        return completion(f"{town} was founded by {founder}.")

    states = run(generate_states(env, [row], ScriptedClient(reply), "m", rollouts_per_example=2))
    for s in states:
        assert len(s["trajectory"]) == 4 and s["reward"] == 1.0, s["completion"]
        assert s["metrics"]["used_search"] == 1.0


# --- wordle ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("guess,secret,expected", [
    ("crane", "crane", "GGGGG"),
    ("speed", "abide", "XXYXY"),   # two e's guessed, one in the secret: only the first is marked
    ("geese", "these", "XXGGG"),   # the green e's use up the secret's e's: the first e is X
    ("allee", "apple", "GYXXG"),   # one l in the secret: the second l is X
    ("llama", "hello", "YYXXX"),   # two l's guessed, two in the secret, both misplaced
    ("eerie", "there", "YXYXG"),
    ("sassy", "brass", "YYXGX"),
])
def test_wordle_feedback_repeated_letters(guess, secret, expected):
    assert wordle.score_guess(guess, secret) == expected


def test_wordle_data_and_word_list():
    assert len(wordle.WORD_LIST) >= 300 and len(set(wordle.WORD_LIST)) == len(wordle.WORD_LIST)
    assert all(len(w) == 5 and w.isalpha() and w.islower() for w in wordle.WORD_LIST)
    env = load("wordle", num_train_examples=300, num_eval_examples=40)
    train, evals = {r["answer"] for r in env.dataset}, {r["answer"] for r in env.eval_dataset}
    assert len(evals) == 40 and not train & evals
    assert env.max_turns == 6 and "<guess>" in env.dataset[0]["prompt"][0]["content"]


def _wordle_state(env, secret="crane"):
    state = new_state(env, [{"role": "user", "content": "play"}], secret)
    run(env.setup_state(state))
    return state


def _turn(env, state, text):
    """One model turn by hand, as the rollout loop records it: a trajectory step, then the env's reply."""
    state["completion"] = state["completion"] or []
    state["completion"].append(assistant(text))
    state["trajectory"].append({"prompt": state["prompt"], "completion": [assistant(text)], "is_truncated": False})
    if run(env.solved(state)):
        return None
    reply = run(env.env_response(state["prompt"] + state["completion"], state))
    state["completion"] += reply
    return reply[0]["content"]


def test_wordle_env_response_feedback_invalid_and_stop():
    env = load("wordle", num_train_examples=5, num_eval_examples=5)
    state = _wordle_state(env, "crane")
    assert _turn(env, state, "<guess>slate</guess>") == "SLATE\nX X G X G\nYou have 5 guesses left."
    assert _turn(env, state, "<guess>cr</guess>").startswith("Invalid guess: 'cr' is not a 5-letter word. This counts")
    assert _turn(env, state, "<guess>qzxvw</guess>") == ("Invalid guess: 'qzxvw' is not in the word list. This "
                                                         "counts as a turn. You have 3 guesses left.")
    assert "no <guess>" in _turn(env, state, "I think it is crane")
    assert "You have 1 guess left." in _turn(env, state, "<guess> TRACE </guess>")
    assert _turn(env, state, "<guess>crane</guess>") is None  # solved: the game stops
    assert run(env.is_completed(state)) and state["stop_condition"] == "solved"
    loose = load("wordle", num_train_examples=5, num_eval_examples=5, strict_word_list=False)
    s2 = _wordle_state(loose, "crane")
    assert _turn(loose, s2, "<guess>qzxvw</guess>").startswith("QZXVW\nX X X X X")


def test_wordle_rewards():
    env = load("wordle", num_train_examples=5, num_eval_examples=5)
    row = {"prompt": [{"role": "user", "content": "play"}], "answer": "crane", "task": "wordle", "info": {}}

    def game(*guesses):
        msgs = []
        for g in guesses:
            msgs += [assistant(g if g.startswith("<") or " " in g else f"<guess>{g}</guess>"),
                     {"role": "user", "content": "feedback"}]
        return msgs[:-1]

    assert score(env, row, game("crane"))["reward"] == pytest.approx(1.0)
    third = score(env, row, game("slate", "trace", "crane"))
    assert third["reward"] == pytest.approx(0.7 * (0.5 + 0.5 * 3 / 5) + 0.2 + 0.1)
    sixth = score(env, row, game("slate", "trace", "brake", "grace", "drape", "crane"))
    assert sixth["reward"] == pytest.approx(0.7 * 0.5 + 0.2 + 0.1)
    late = score(env, row, game("slate", "trace", "brake", "grace", "drape", "spade", "crane"))
    assert late["metrics"]["solved_reward"] == 0.0  # a 7th guess is past the game's end
    lost = score(env, row, game("slate", "trace", "qzxvw"))  # last VALID guess TRACE: X G G Y G
    assert lost["metrics"]["solved_reward"] == 0.0
    assert lost["metrics"]["partial_credit"] == pytest.approx((2 * 3 + 1) / 10)
    assert lost["reward"] == pytest.approx(0.2 * 0.7 + 0.1)
    sloppy = score(env, row, game("crane is my guess", "slate"))  # first turn has no tag
    # verifiers XMLParser format score: untagged turn 0.2, well-formed turn 1.0
    assert sloppy["metrics"]["format_reward_func"] == pytest.approx(0.6)
    assert score(env, row, [])["reward"] == 0.0
    assert sum(env.rubric.get_reward_weights()) == pytest.approx(1.0)


def _wordle_solver(first_guess="zzzzz"):
    """A scripted player: an invalid first guess, then any word consistent with all feedback so far."""

    def reply(messages, **kwargs):
        history = [m["content"] for m in messages if m["role"] == "user"][1:]
        if not history:
            return completion(f"<guess>{first_guess}</guess>")
        constraints = []
        for text in history:
            lines = text.split("\n")
            if len(lines) == 3 and lines[0].isalpha():
                constraints.append((lines[0].lower(), lines[1].replace(" ", "")))
        for w in wordle.WORD_LIST:
            if all(wordle.score_guess(g, w) == fb for g, fb in constraints):
                return completion(f"Thinking... <guess>{w}</guess>")
        return completion("<guess>xxxxx</guess>")

    return reply


def test_wordle_generate_end_to_end():
    env = load("wordle", num_train_examples=5, num_eval_examples=8)
    states = run(generate_states(env, env.eval_dataset, ScriptedClient(_wordle_solver()), "m", rollouts_per_example=2))
    assert len(states) == 16
    solved = 0
    for s in states:
        guesses = [env.guess_of(m) for m in s["completion"] if m["role"] == "assistant"]
        assert guesses[0] == "zzzzz" and 2 <= len(guesses) <= 6
        assert "Invalid guess" in s["completion"][1]["content"]
        assert 0.0 <= s["reward"] <= 1.0
        if guesses[-1] == s["answer"]:
            solved += 1
            assert s["stop_condition"] == "solved" and s["metrics"]["solved_reward"] >= 0.5
        else:
            assert len(guesses) == 6 and s["stop_condition"] == "max_turns_reached"
            assert s["metrics"]["solved_reward"] == 0.0
    assert solved >= len(states) // 2


# --- all envs: rewards stay in [0, 1] -------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["reverse-text", "alphabet-sort", "gsm8k", "math-python", "wiki-search",
                                    "wordle"])
def test_rewards_stay_in_unit_interval(env_id):
    env = load(env_id, num_eval_examples=3) if env_id == "wiki-search" else \
        load(env_id, num_train_examples=3, num_eval_examples=3)
    junk = ["", "<reversed_text></reversed_text>", "\\boxed{}", "<guess>crane</guess>" * 3,
            "<alphabetical_sorted>\n</alphabetical_sorted>", "\x00\ufffd" * 50, "\\boxed{" * 10]
    for row in env.eval_dataset:
        for text in junk:
            s = score(env, row, [assistant(text)] * 4)
            assert all(0.0 <= v <= 1.0 for v in s["metrics"].values()), s["metrics"]
        s = score(env, row, [assistant(row["answer"]), assistant(f"\\boxed{{{row['answer']}}}")])
        assert 0.0 <= s["reward"] <= 1.0
