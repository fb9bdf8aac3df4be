"""Two training processes on this CPU machine (torchrun, gloo, the tiny model), as a notebook user runs them
(`torchrun --nproc_per_node 2 script.py`: tests/fixtures/multiprocess_worker.py) and as vf-rl starts them
(`[trainer] processes = 2`). Nothing is mocked; the update tests feed a fixed batch of made-up rollouts (token ids
and sampling logprobs) so that 1 and 2 processes train on exactly the same step.

Launch and wait limits are hang guards sized for shared, loaded cores (a launch takes ~30-60 s on 2 idle cores);
the pytest limit counts the test body only, not the module fixtures' launches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from processes import alive, wait_for

from verifiers_rl.plan.launch import torchrun_command

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fixtures" / "multiprocess_worker.py"
REPO = HERE.parent
# hang guards, not speed checks (a launch takes ~30-60 s on 2 idle cores, minutes on shared ones)
LAUNCH_TIMEOUT = 280  # each launch's own limit; every test's pytest timeout is 300 s
TEST_TIMEOUT = 300
STEP_WAIT = 240  # a hang guard for the first step of a launch: ~30-60 s on 2 idle cores
FAULT_S = 30


def torchrun(model: Path, out: Path, *phases: str, timeout: float = LAUNCH_TIMEOUT) -> None:
    logs = str(out.parent / f"{out.name}-torchrun")  # torchrun's folders: here, not torchelastic_* in /tmp
    cmd = [*torchrun_command(2), "--log-dir", logs, str(WORKER), str(model), str(out), *phases]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=out.parent)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]


def start(model: Path, out: Path, phase: str) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    logs = str(out.parent / f"{out.name}-torchrun")
    return subprocess.Popen([*torchrun_command(2), "--log-dir", logs, str(WORKER), str(model), str(out), phase],
                            cwd=out.parent,
                            stdout=(out / "torchrun.log").open("w"), stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tmp_path_factory) -> Path:
    """One 2-process launch: the fixed-batch updates (LoRA / full x DDP / FSDP2), the uneven-drop run and the
    one-prompt run."""
    out = tmp_path_factory.mktemp("mp") / "two"
    torchrun(tiny_model_dir, out, "update", "drop-all", "one-prompt")
    return out


@pytest.fixture(scope="module")
def one_rank(tiny_model_dir, tmp_path_factory) -> Path:
    """The same fixed-batch updates in this process: one training process, no process group."""
    sys.path.insert(0, str(WORKER.parent))
    import multiprocess_worker

    out = tmp_path_factory.mktemp("mp") / "one"
    out.mkdir()
    multiprocess_worker.phase_update(str(tiny_model_dir), out)
    return out


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
@pytest.mark.parametrize("name", ["lora-ddp", "full-ddp", "lora-fsdp", "full-fsdp"])
def test_two_processes_make_the_same_update_as_one(two_ranks, one_rank, name):
    """3 groups over 2 ranks (2 + 1, the middle one all errored: rank 1 trains no token): the weights after one
    step equal one process's on the same rollouts. Under FSDP2 the compared weights are the gathered ones the
    weight sync sends."""
    ref = torch.load(one_rank / f"update-{name.split('-')[0]}-ddp-world1.pt")
    got = torch.load(two_ranks / f"update-{name}-world2.pt")
    assert got.keys() == ref.keys() and ref
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], atol=2e-6, rtol=1e-5, msg=lambda m, k=k: f"{name} {k}: {m}")
    info = json.loads((two_ranks / "update-world2.json").read_text())[name]
    assert info["moved"] > 1e-6  # the step changed the weights: the comparison is not of two untouched models
    calls = info["forward_calls"]
    assert calls[0] == calls[1] > 0, f"forward calls per rank {calls}: ranks must make the same collectives"
    # FSDP2 really shards: each rank holds half of the parameter elements (DTensor shards)
    assert info["shard_fraction"] == (pytest.approx(0.5, abs=0.02) if name.endswith("fsdp") else 1.0)


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_uneven_drops_keep_training(two_ranks):
    """Rank 1's rollouts are all dropped on every step (FSDP2, full fine-tuning): it pads with zero-weight
    micro-batches and the run reaches its last step."""
    assert json.loads((two_ranks / "drop-all.json").read_text())["step"] == 3


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_ranks_sample_different_replies_to_the_same_prompt(two_ranks):
    """The local engine's sampling is seeded per step and per rank (as TRL seeds each device): one prompt's two
    groups, one on each rank, get different replies, as one process's two groups of it do."""
    replies = [(two_ranks / f"one-prompt-rank{r}.txt").read_text().splitlines() for r in (0, 1)]
    assert len(replies[0]) == len(replies[1]) == 4
    assert replies[0] != replies[1], f"both ranks sampled the same replies: {replies[0]}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def counted_and_resumed(tiny_model_dir, tmp_path_factory) -> Path:
    """Two "machines" on 127.0.0.1: `torchrun --nnodes 2` (one process each), c10d rendezvous, as docs/multi-node.md
    says to start them; generation counted, then checkpoint / resume."""
    out = tmp_path_factory.mktemp("mp") / "count"
    out.mkdir()
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(k), "--nproc_per_node",
         "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "vf-test", "--max_restarts", "0",
         "--log-dir", str(out.parent / f"{out.name}-torchrun{k}"),
         str(WORKER), str(tiny_model_dir), str(out), "count", "resume"],
        cwd=out.parent, stdout=(out / f"node{k}.log").open("w"), stderr=subprocess.STDOUT) for k in (0, 1)]
    try:
        for k, p in enumerate(nodes):
            assert p.wait(timeout=LAUNCH_TIMEOUT) == 0, (out / f"node{k}.log").read_text()[-6000:]
    finally:
        for p in nodes:
            p.kill()
    return out


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_each_rollout_is_generated_once(counted_and_resumed):
    """2 steps x 2 groups of 4 with the local engine: every group is generated (and scored) by one rank only."""
    lines = {r: (counted_and_resumed / f"count-rank{r}.txt").read_text().split() for r in (0, 1)}
    assert len(lines[0]) == len(lines[1]) == 8  # each rank: its group of each step
    assert not set(lines[0]) & set(lines[1])
    for answers in lines.values():
        assert all(answers.count(a) == 4 for a in answers)  # whole groups


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
@pytest.mark.parametrize("name", ["lora-ddp", "full-fsdp"])
def test_checkpoint_at_2_resumed_to_4_equals_straight_4(counted_and_resumed, name):
    got = json.loads((counted_and_resumed / f"resume-{name}.json").read_text())
    assert got["step"] == 4 and got["n"] > 0
    assert got["max_abs_diff"] <= 1e-6


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_an_fsdp2_checkpoint_resumed_by_one_process_is_refused_in_one_line(counted_and_resumed, tiny_model_dir,
                                                                           tmp_path):
    """The 2-process FSDP2 run's checkpoint (one optimizer shard per rank) resumed by one process without FSDP2:
    one line naming what it needs, before a step (it resumed with a fresh optimizer, in silence)."""
    import shutil

    sys.path.insert(0, str(WORKER.parent))
    import multiprocess_worker

    import verifiers_rl as vf
    from verifiers_rl.errors import ConfigError

    shutil.copytree(counted_and_resumed / "full-fsdp-resumed" / "checkpoint-2", tmp_path / "checkpoint-2")
    t = vf.RLTrainer(str(tiny_model_dir), multiprocess_worker.make_env(),
                     multiprocess_worker.config(tmp_path, max_steps=4, save_steps=2, use_lora=False))
    try:
        with pytest.raises(ConfigError, match=r"sharded over 2 FSDP2 processes .*this run: 1 process, no FSDP2"):
            t.train(resume_from_checkpoint=True)
        assert t.state.global_step == 0
    finally:
        t.close()


def _ranks(out: Path) -> dict[int, int]:
    return {r: int((out / f"pid-{r}").read_text()) for r in (0, 1) if (out / f"pid-{r}").exists()}


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_a_killed_rank_ends_the_run(tiny_model_dir, tmp_path):
    out = tmp_path / "killed"
    p = start(tiny_model_dir, out, "idle")
    try:
        wait_for(lambda: (out / "step-1").exists() and len(_ranks(out)) == 2, STEP_WAIT, "the ranks' first exchange")
        pids = _ranks(out)
        os.kill(pids[1], signal.SIGKILL)
        p.wait(timeout=FAULT_S)  # TimeoutExpired past FAULT_S
        assert p.returncode != 0
        wait_for(lambda: not alive(pids[0]), 5, "rank 0 to end")
    finally:
        p.kill()


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_sigint_ends_every_rank(tiny_model_dir, tmp_path):
    """Ctrl-C in a terminal reaches torchrun (its ranks run in sessions of their own): every rank ends."""
    out = tmp_path / "sigint"
    p = start(tiny_model_dir, out, "idle")
    try:
        wait_for(lambda: (out / "step-1").exists() and len(_ranks(out)) == 2, STEP_WAIT, "the ranks' first exchange")
        pids = _ranks(out)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=FAULT_S)
        wait_for(lambda: not any(alive(q) for q in pids.values()), 5, "every rank to end")
    finally:
        p.kill()


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_ranks_die_with_a_killed_launcher(tiny_model_dir, tmp_path):
    """torchrun killed outright (SIGKILL, no chance to stop its ranks): the ranks end too (PR_SET_PDEATHSIG)."""
    out = tmp_path / "launcher"
    p = start(tiny_model_dir, out, "idle")
    try:
        wait_for(lambda: (out / "step-1").exists() and len(_ranks(out)) == 2, STEP_WAIT, "the ranks' first exchange")
        pids = _ranks(out)
        p.kill()
        p.wait(timeout=5)
        wait_for(lambda: not any(alive(q) for q in pids.values()), FAULT_S, "every rank to end")
    finally:
        p.kill()


QUICKSTART = REPO / "configs" / "vf-rl" / "quickstart.toml"


@pytest.mark.slow  # a whole vf-rl run under torchrun (about a minute here)
@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_vf_rl_runs_the_quickstart_rl_phase_with_two_processes(tmp_path):
    """`[trainer] processes = 2`: torchrun starts two workers; rank 0 builds the tiny model and the warm-up once."""
    vf_rl = Path(sys.executable).with_name("vf-rl")
    cmd = [str(vf_rl), "@", str(QUICKSTART), "--tiny_model.path", str(tmp_path / "tiny"),
           "--warmup.output-dir", str(tmp_path / "warmup"), "--warmup.max-steps", "2", "--warmup.num-examples", "32",
           "--trainer.args.max-steps", "2", "--trainer.args.batch-size", "16", "--trainer.args.micro-batch-size",
           "8", "--trainer.processes", "2", "--no-eval", "--output-dir", "outputs/two"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-5000:]
    assert "training: 2 processes (torchrun)" in text  # the plan's line
    assert "training: 2 processes, data parallel (DDP" in text  # the trainer's: which sharding
    assert text.count("warm-up: SFT on") == 1  # built once, by rank 0
    plan = json.loads((tmp_path / "outputs" / "two" / "configs" / "plan.json").read_text())
    assert plan["world_size"] == 2 and "torch.distributed.run" in plan["launcher"]
    metrics = [json.loads(x) for x in (tmp_path / "outputs" / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss/mean" in m] == [1, 2]
    assert (tmp_path / "outputs" / "two" / "checkpoint-2").is_dir()
    # rank 0 on the console and in trainer.log; rank 1 in files of its own (torchrun's --log-dir / --redirects)
    logs = tmp_path / "outputs" / "two" / "logs"
    [rank1] = list((logs / "trainer" / "torchrun").glob("*/attempt_0/1"))
    assert (rank1 / "stdout.log").is_file() and (rank1 / "stderr.log").is_file()
    assert "[rank1]" not in text and "[rank1]" not in (logs / "trainer.log").read_text()  # torch's rank-1 warnings
    assert (logs / "env.log").is_file() and (logs / "env.rank1.log").is_file()  # each rank's environment output
