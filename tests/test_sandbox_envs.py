"""vf.SandboxEnv, vf.PythonEnv and MCPEnv: verifiers' classic behaviour (the bash / python tools, the sandbox state
and its metrics, teardown) on the local jail, and MCP tools served by a real stdio MCP server (tests/fixtures/
mcp_calc_server.py). The model's replies are scripted (tests/scripted_client.py) because these tests check the
harness: which tool calls reach the jail and what comes back; the jails and the MCP server are real."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from datasets import Dataset

import verifiers_rl as vf
from scripted_client import ScriptedClient, completion
from test_sandbox_escapes import _running
from verifiers_rl.envs.rollouts import generate_states
from verifiers_rl.sandbox import SandboxLimits
from verifiers_rl.sandbox.runtimes import probe_bwrap

FIXTURES = Path(__file__).resolve().parent / "fixtures"
needs_jail = pytest.mark.skipif(probe_bwrap() is not None, reason=f"no bwrap jail here: {probe_bwrap()}")


def _rows(n: int = 1) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"task {i}"}], "answer": "42", "task": "t", "info": {},
             "example_id": i} for i in range(n)]


def _dataset() -> Dataset:
    return Dataset.from_dict({"question": ["q"], "answer": ["42"]})


def _script(calls: list[tuple[str, dict]]):
    """The model calls each tool of `calls` in turn, then answers with the last tool output."""

    def reply(messages, **kwargs):
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn < len(calls):
            return completion(None, tool_calls=[calls[turn]])
        return completion(f"done: {messages[-1]['content']}")

    return reply


def _tool_outputs(state) -> list[str]:
    return [m["content"] for m in state["completion"] if m["role"] == "tool"]


@pytest.mark.integration  # spawns a process
@needs_jail
def test_sandbox_env_bash_keeps_files_between_calls_and_is_deleted_after(capsys):
    env = vf.SandboxEnv(dataset=_dataset(), max_turns=6, timeout_per_command_seconds=5,
                        environment_vars={"GREETING": "hello"}, runtime="bwrap")
    assert "docker image 'python:3.11-slim' not used" in capsys.readouterr().err
    assert [t["name"] for t in env.tool_defs] == ["bash"]
    assert set(env.tool_defs[0]["parameters"]["properties"]) == {"command"}
    calls = [("bash", {"command": "echo $GREETING > note.txt; echo tmp > /tmp/t; pwd"}),
             ("bash", {"command": "cat note.txt /tmp/t; echo oops >&2"}),
             ("bash", {"command": "cat /etc/hostname"}),
             ("bash", {"command": "sleep 30"})]
    states = asyncio.run(generate_states(env, _rows(2), ScriptedClient(_script(calls)), "m"))
    assert len(states) == 2
    for state in states:
        out = _tool_outputs(state)
        assert out[0] == "/workspace"
        assert out[1] == "hello\ntmp\nstderr:\noops"
        assert out[2].startswith("stderr:") and "No such file" in out[2]
        assert out[3] == "Error: Command timed out after 5s"
        metrics = state["metrics"]
        assert metrics["sandbox_command_execution_time"] > 0 and "sandbox_ready_wait_time" in metrics
        assert len(state["sandbox_state"]["command_execution_times"]) == 4
    assert states[0]["sandbox_id"] != states[1]["sandbox_id"]
    assert env.active_sandboxes == set() and env.sandbox_client.sandboxes == {}  # deleted at rollout end


@pytest.mark.integration  # spawns a process
@needs_jail
def test_python_env_keeps_variables_and_formats_like_verifiers():
    env = vf.PythonEnv(dataset=_dataset(), max_turns=8, timeout_per_command_seconds=6, runtime="bwrap",
                       pip_install_packages="numpy")  # 6 s: numpy imports within it on loaded cores
    assert [t["name"] for t in env.tool_defs] == ["python"]
    calls = [("python", {"code": "x = 6 * 7\nprint('set')"}),
             ("python", {"code": "x"}),
             ("python", {"code": "import sys\nprint('warn', file=sys.stderr)\n1 / 0"}),
             ("python", {"code": "while True: pass"}),
             ("python", {"code": "print('x' in globals())"}),
             ("python", {"code": "import numpy\nnumpy.arange(4).sum()"})]
    states = asyncio.run(generate_states(env, _rows(1), ScriptedClient(_script(calls)), "m"))
    out = _tool_outputs(states[0])
    assert out[0] == "set" and out[1] == "Out[2]: 42"
    assert out[2].startswith("stderr:\nwarn\nTraceback") and "ZeroDivisionError" in out[2]
    assert out[3] == "Error: Command timed out after 6s"
    assert out[4] == "False"  # the REPL restarted after the timeout: its variables are gone
    assert out[5] == "Out[2]: np.int64(6)"
    assert states[0]["python_state"]["ready"] and states[0]["metrics"]["python_ready_wait_time"] > 0
    assert env.repls == {}


@needs_jail
def test_python_env_names_packages_the_jail_cannot_install(capsys):
    vf.PythonEnv(dataset=_dataset(), runtime="bwrap", pip_install_packages="numpy surely-not-a-package-xyz")
    err = capsys.readouterr().err
    assert "surely-not-a-package-xyz" in err and "numpy" not in err.split("missing")[0].split(":")[-1]


@needs_jail
def test_sandbox_env_teardown_removes_what_is_left():
    env = vf.SandboxEnv(dataset=_dataset(), runtime="bwrap")
    state = {"trajectory": []}
    box = asyncio.run(env.sandbox_client.create(env.get_sandbox_request(state)))
    env.active_sandboxes.add(box.id)
    assert box.root.exists()
    asyncio.run(env.teardown_sandboxes())
    assert not box.root.exists() and env.active_sandboxes == set()


class _AppEnv(vf.SandboxEnv):
    """As prime-environments' gptworld does: its setup makes /app with `bash` and uploads a script there."""

    def __init__(self, script: Path, **kwargs):
        super().__init__(**kwargs)
        self.script = script

    async def setup_state(self, state, **kwargs):
        state = await super().setup_state(state, **kwargs)
        await self.bash("mkdir /app", sandbox_id=state["sandbox_id"], sandbox_state=state["sandbox_state"])
        await self.sandbox_client.upload_file(state["sandbox_id"], "/app/main.py", str(self.script))
        return state


@pytest.mark.integration  # spawns a process
@needs_jail
def test_sandbox_env_writes_outside_workspace_persist_like_a_containers_root(tmp_path):
    script = tmp_path / "main.py"
    script.write_text("import sys\nprint('moves', sys.argv[1])\n")
    env = _AppEnv(script, dataset=_dataset(), max_turns=6, timeout_per_command_seconds=5, runtime="bwrap")
    calls = [("bash", {"command": "cd /app && python3 main.py 3 && mkdir -p /root/utils && echo x > /root/utils/a"}),
             ("bash", {"command": "cat /root/utils/a; touch /usr/evil; ln -s /etc /app/etc; ln -s / /app/up"}),
             ("bash", {"command": "ls /app"})]
    state = asyncio.run(generate_states(env, _rows(1), ScriptedClient(_script(calls)), "m"))[0]
    out = _tool_outputs(state)
    assert out[0] == "moves 3"
    assert out[1].startswith("x\nstderr:") and "Read-only file system" in out[1]
    assert out[2].split() == ["etc", "main.py", "up"]
    assert not Path("/usr/evil").exists()

    async def probe():  # the host side of a live sandbox: symlinks and `..` the commands made are refused
        client = env.sandbox_client
        box = await client.create(env.get_sandbox_request({}))
        await client.execute_command(box.id, "mkdir /app && ln -s / /app/up && ln -s /etc/passwd /workspace/pw")
        refused = []
        for path in ("/app/up/etc/hostname", "/workspace/pw", "/workspace/../../../etc/hostname", "/usr/lib/x"):
            try:
                await client.download_file(box.id, path, str(tmp_path / "got"))
            except vf.SandboxError as e:
                refused.append(str(e))
        await client.upload_file(box.id, "/opt2/ok.py", str(script))  # not a host folder: the sandbox's own
        listing = (await client.execute_command(box.id, "cat /opt2/ok.py")).stdout
        await client.delete(box.id)
        return refused, listing

    refused, listing = asyncio.run(probe())
    assert len(refused) == 4 and not (tmp_path / "got").exists()
    assert "read-only" in refused[3] and all("outside the sandbox" in r for r in refused[:3])
    assert listing == script.read_text()


@pytest.mark.integration  # spawns a process
def test_a_docker_image_without_a_container_engine_is_one_line(capsys):
    from verifiers_rl.sandbox.runtimes import SandboxUnavailable, choose_for_image, probe_container

    if probe_container("docker") is None:
        pytest.skip("a docker daemon answers here")
    with pytest.raises(SandboxUnavailable, match="'docker' asked for"):
        choose_for_image("python:3.11-slim", "docker")


@pytest.mark.integration  # spawns a process
def test_mcp_env_calls_a_local_stdio_servers_tools():
    from verifiers_rl.envs.experimental.mcp_env import MCPEnv

    marker = f"vf-mcp-{uuid.uuid4().hex}"
    env = MCPEnv(mcp_servers=[{"name": "calc", "command": sys.executable,
                               "args": [str(FIXTURES / "mcp_calc_server.py"), marker]}],
                 dataset=_dataset(), max_turns=5)
    assert sorted(t["name"] for t in env.tool_defs) == ["add", "fail", "reverse"]
    calls = [("add", {"a": 2, "b": 40}), ("reverse", {"text": "abc"}), ("fail", {"reason": "x"}),
             ("nope", {})]
    states = asyncio.run(generate_states(env, _rows(1), ScriptedClient(_script(calls)), "m"))
    out = _tool_outputs(states[0])
    assert out[:2] == ["42", "cba"]
    assert "Error executing tool fail" in out[2] and "nope" in out[3]  # the server's isError text, as verifiers
    assert _running(marker)
    asyncio.run(env.teardown_mcp_servers())
    assert not _running(marker)


@pytest.mark.integration  # spawns a process
def test_mcp_env_server_that_does_not_start_is_one_line():
    from verifiers_rl.envs.experimental.mcp_env import MCPEnv, MCPServerError

    with pytest.raises(MCPServerError, match=r"MCP server 'ghost' \(no-such-command-vf -x\) did not start"):
        MCPEnv(mcp_servers=[{"name": "ghost", "command": "no-such-command-vf", "args": ["-x"]}], dataset=_dataset())


def test_service_envs_fail_in_one_line_naming_the_service():
    from verifiers_rl.envs.service_required import ServiceUnavailableError

    for name, service in [("OpenEnvEnv", "Prime sandbox"), ("BrowserEnv", "Browserbase"),
                          ("HarborEnv", "Prime sandbox"), ("CliAgentEnv", "Prime sandbox")]:
        with pytest.raises(ServiceUnavailableError, match=service) as info:
            getattr(vf, name)(dataset=_dataset())
        assert "\n" not in str(info.value)
    from verifiers.types import ChatMessages  # the alias answers it (openenv examples import it)

    assert ChatMessages is vf.types.ChatMessages


@pytest.mark.integration  # spawns a process
def test_where_namespaces_are_refused_the_fallback_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    # A kernel that refuses unprivileged namespaces cannot be had on this machine: the probe's answer is stood in
    from verifiers_rl.sandbox import runtimes, run

    why = f"setting up uid map: Permission denied ({uuid.uuid4().hex[:6]})"
    monkeypatch.setattr(runtimes, "probe_bwrap", lambda: why)
    assert runtimes.choose_runtime() == "process"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0] and "can read the host's files and reach the network" in err[0]
    with pytest.raises(runtimes.SandboxUnavailable, match="'bwrap' asked for"):
        runtimes.choose_runtime("bwrap")
    (tmp_path / "mine.txt").write_text("work\n")
    r = run("cat mine.txt; echo $HOME; sleep 30", workdir=str(tmp_path), env={"K": "v"},
            limits=SandboxLimits(timeout_s=5))
    assert r.runtime == "process" and r.timed_out and r.stdout.split() == ["work", str(tmp_path)]


@pytest.mark.integration  # spawns a process
@needs_jail
def test_math_python_trains_two_steps_with_the_jailed_tool(tiny_model_dir, tmp_path):
    # The random tiny model does not write tool calls, so the steps train on plain replies; the tool the
    # environment offers (and would run) is the jailed one, checked directly first.
    env = vf.load_environment("math-python", dataset_source="offline", num_train_examples=8, num_eval_examples=2,
                              max_turns=2)
    assert env.tool_map["python"](code="import socket, os; print(socket.gethostname(), os.getcwd())") == \
        "sandbox /workspace"
    config = vf.RLConfig(output_dir=str(tmp_path / "run"), max_steps=2, batch_size=4, rollouts_per_example=2,
                         micro_batch_size=4, max_tokens=8, max_seq_len=2048, max_prompt_len=2000,
                         learning_rate=1e-2, save_steps=100, eval_num_examples=0, seed=0, logging_steps=1,
                         sample_log_interval=0, disable_tqdm=True)
    trainer = vf.RLTrainer(str(tiny_model_dir), env, config)
    trainer.train()
    assert trainer.state.global_step == 2
