"""RLMEnv (local backend): a real bash / Python REPL per rollout, root tools and `llm_batch` called from inside it,
the answer protocol, and no REPL process left behind. The model is the scripted client (the harness logic is
under test, so its replies must be fixed); the REPLs are real subprocesses."""

import asyncio
import json
import os
import subprocess
import uuid

import pytest
from datasets import Dataset

import verifiers_rl as vf
from verifiers_rl.envs.experimental.rlm_env import RLMEnv
from verifiers_rl.envs.rollouts import generate_states

from processes import alive, poll_until
from scripted_client import ScriptedClient, completion
from test_sandbox_escapes import _running


def run(coro):
    return asyncio.run(coro)


def _gone(pid: int, timeout: float = 5.0) -> bool:
    return poll_until(lambda: not alive(pid), timeout, 0.05)


def _tool_texts(state) -> list[str]:
    return [m["content"] for m in state["completion"] if m["role"] == "tool"]


def _script(steps):
    """A reply function: root turns from `steps` in order; sub-LLM requests (system prompt first) answer boxed."""
    root = iter(steps)

    def reply(messages, **kwargs):
        if messages[0]["role"] == "system":  # a sub-LLM call
            return completion("thinking... \\boxed{sub says " + messages[-1]["content"] + "}")
        return next(root)

    return reply


def _bash(code):
    return completion(None, tool_calls=[("call_bash_repl", {"code": code})])


def _env(**kwargs):
    calls = []

    async def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        calls.append(key)
        return f"value-of-{key}"

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "Find the secret."}], "answer": "42",
                             "info": {"context": "the secret is 42"}}])

    def correct(state, answer):
        return 1.0 if state.get("final_answer") == answer else 0.0

    settings = {"sub_llm_stagger_ms": 0, "sub_llm_stagger_jitter_ms": 0, "code_execution_timeout": 20, **kwargs}
    env = RLMEnv(dataset=ds, root_tools=[lookup], rubric=vf.Rubric(funcs=[correct]), **settings)
    return env, calls


@pytest.mark.integration  # spawns a process
def test_bash_rollout_tools_sub_llm_answer_and_no_leftover_process():
    env, calls = _env()
    steps = [
        _bash("cat context.txt; echo; echo started"),
        _bash("lookup alpha"),
        _bash("llm_batch 'what is 6*7?' 'and 2+2?'"),
        _bash("export RLM_CONTENT=42; export RLM_READY=1"),
        completion("never asked"),
    ]
    client = ScriptedClient(_script(steps))
    state = run(generate_states(env, env.get_dataset(), client, "m"))[0]
    out = _tool_texts(state)
    assert state["error"] is None and state["stop_condition"] == "answer_ready"
    assert out[0].startswith("the secret is 42") and "started" in out[0]
    assert out[1] == "value-of-alpha\n" and calls == ["alpha"]
    assert "----- llm_batch[0]" in out[2] and "sub says what is 6*7?" in out[2] and "sub says and 2+2?" in out[2]
    assert "llm_batch: 2 call(s)" in out[2]
    assert state["final_answer"] == "42" and state["reward"] == 1.0
    assert len(state["trajectory"]) == 4  # the answer ended the rollout: no fifth model call
    assert state["prompt"][0]["content"].startswith("<RLM_SCAFFOLDING>")
    assert state["raw_prompt"][0]["content"] == "Find the secret."
    m = state["metrics"]
    assert m["sub_llm_call_count"] == 2 and m["sub_llm_batch_count"] == 1 and m["repl_call_count"] == 4
    assert m["root_tool_call_count"] == 2 and m["lookup_root_calls"] == 1 and m["llm_batch_root_calls"] == 1
    # sub-LLM requests: their own system prompt, the prompt as the user message, no root tools offered
    sub = [r for r in client.requests if r["messages"][0]["role"] == "system"]
    assert len(sub) == 2 and not sub[0].get("tools")
    assert not os.path.exists(state["rlm_rollout_dir"])  # removed with the rollout
    assert env._sessions == {}


@pytest.mark.integration  # spawns a process
def test_shell_and_background_jobs_are_killed_when_the_rollout_ends():
    # The REPL runs in a jail (its own PID namespace): the background job is found on the host by a marker in its
    # command line, not by the PID the jail's shell would print.
    env, _ = _env(retain_filesystem_after_rollout=True)
    marker = f"rlm-bg-{uuid.uuid4().hex}"
    seen: list[bool] = []
    steps = iter([_bash(f"(exec -a {marker} sleep 300) & echo started"), None])

    def reply(messages, **kwargs):
        step = next(steps)
        if step is None:
            seen.append(poll_until(lambda: _running(marker), 10, 0.05))  # the job may not have exec'd yet
            return completion("done, no tool call")
        return step

    state = run(generate_states(env, env.get_dataset(), ScriptedClient(reply), "m"))[0]
    assert state["stop_condition"] == "no_tools_called" and state["final_answer"] == ""
    assert seen == [True]  # the job ran during the rollout ...
    assert poll_until(lambda: not _running(marker), 5, 0.05)  # ... and ended with it
    assert os.path.isdir(state["rlm_fs_root"])  # retained for the rubric
    subprocess.run(["rm", "-rf", state["rlm_rollout_dir"]], check=True)


@pytest.mark.integration  # spawns a process
def test_the_repl_cannot_write_outside_its_folder_nor_see_this_process_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_TEST_SECRET", "s3cret")
    env, _ = _env()
    outside = tmp_path / "escaped.txt"
    steps = [_bash(f"echo x > {outside}; echo rc=$?; echo secret=${{RLM_TEST_SECRET:-none}}"),
             completion("done")]
    state = run(generate_states(env, env.get_dataset(), ScriptedClient(_script(steps)), "m"))[0]
    text = _tool_texts(state)[0]
    assert "rc=0" not in text and "secret=none" in text
    assert not outside.exists()


@pytest.mark.integration  # spawns a process
def test_a_crashing_rollout_and_teardown_leave_no_process():
    env, _ = _env()
    pids = []

    def reply(messages, **kwargs):
        pids.extend(s.process.pid for s in env._sessions.values())
        raise RuntimeError("model server exploded")

    state = run(generate_states(env, env.get_dataset(), ScriptedClient(reply), "m"))[0]
    assert isinstance(state["error"], Exception) and len(pids) == 1 and _gone(pids[0])
    assert env._sessions == {}

    async def set_up_then_teardown():
        st = await env.init_state(env.get_dataset()[0], ScriptedClient(reply), "m")
        st = await env.setup_state(st)
        pid = env._sessions[st["rollout_id"]].process.pid
        await env._teardown()
        return st, pid

    st, pid = run(set_up_then_teardown())
    assert _gone(pid) and not os.path.exists(st["rlm_rollout_dir"])


@pytest.mark.integration  # spawns a process
def test_garbage_commands_and_timeouts_go_back_to_the_model():
    env, _ = _env(code_execution_timeout=2)
    steps = [_bash("echo 'unterminated"), _bash("no_such_command_xyz"), _bash("sleep 30"), _bash("exit 3"),
             _bash("echo still here"), completion(None, tool_calls=[("call_bash_repl", "not json")]),
             completion("bye")]
    state = run(generate_states(env, env.get_dataset(), ScriptedClient(_script(steps)), "m"))[0]
    out = _tool_texts(state)
    assert state["error"] is None and len(out) == 6
    assert "unexpected EOF" in out[0] and "command not found" in out[1]
    assert "timed out after 2 seconds" in out[2] and "restarted" in out[2]
    assert "Bash session exited with code 3" in out[3] and out[4] == "still here\n"


@pytest.mark.integration  # spawns a process
def test_python_repl_answer_protocol_and_root_tools():
    env, calls = _env(repl_language="python")
    steps = [completion(None, tool_calls=[("call_python_repl", {"code": "print(open('context.txt').read())\n1+1"})]),
             completion(None, tool_calls=[("call_python_repl", {"code": "r = llm_batch(['hi'])\nlookup('b'), r"})]),
             completion(None, tool_calls=[("call_python_repl", {"code": "answer['content'] = '42'\n"
                                                                        "answer['ready'] = True"})])]
    state = run(generate_states(env, env.get_dataset(), ScriptedClient(_script(steps)), "m"))[0]
    out = _tool_texts(state)
    assert "the secret is 42" in out[0] and "Out[1]: 2" in out[0] and "[Execution time:" in out[0]
    assert "Out[2]: ('value-of-b', ['sub says hi'])" in out[1] and calls == ["b"]
    assert state["final_answer"] == "42" and state["reward"] == 1.0


@pytest.mark.integration  # spawns a process
def test_sub_llm_tool_loop_with_sub_tools():
    seen = []

    def secret_code(name: str) -> str:
        """The code of a name.

        Args:
            name: The name.
        """
        seen.append(name)
        return f"code-{name}"

    ds = Dataset.from_list([{"question": "q", "answer": "a"}])
    env = RLMEnv(dataset=ds, sub_tools=[secret_code], sub_tool_max_turns=2, sub_llm_stagger_ms=0)
    assert [t.name for t in env.tool_defs] == ["call_bash_repl"]  # root and sub tools live inside the REPL

    def reply(messages, **kwargs):
        if messages[0]["role"] == "system":
            if messages[-1]["role"] == "tool":
                return completion("\\boxed{" + messages[-1]["content"] + "}")
            return completion(None, tool_calls=[("secret_code", {"name": "x"})])
        if len(messages) > 2:
            return completion("done")
        return _bash("llm_batch --json '{\"prompts\": [\"get the code of x\"]}'")

    state = run(generate_states(env, env.get_dataset(), ScriptedClient(reply), "m"))[0]
    assert seen == ["x"] and "code-x" in _tool_texts(state)[0]
    assert state["metrics"]["sub_llm_total_tool_calls"] == 1 and state["metrics"]["sub_llm_total_turns"] == 2


def test_construction_errors_are_one_line():
    ds = Dataset.from_list([{"question": "q", "answer": "a"}])
    with pytest.raises(ValueError, match="Prime Intellect sandboxes"):
        RLMEnv(dataset=ds, execution_backend="sandbox")
    with pytest.raises(ValueError, match="reserved"):
        def llm_batch(prompts: list[str]) -> list[str]:
            return prompts
        RLMEnv(dataset=ds, root_tools=[llm_batch])


@pytest.mark.integration  # spawns a process
def test_import_through_verifiers_alias():
    code = ("import verifiers_rl.verifiers_runtime as r; r.install_alias(); "
            "from verifiers.envs.experimental.rlm_env import RLMEnv; print(RLMEnv.__module__)")
    done = subprocess.run(["python", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "verifiers_rl.envs.experimental.rlm_env", done.stderr
    assert json.dumps  # (json used above in the sub-tool test's payload)
