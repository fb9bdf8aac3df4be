"""FSDP2 (trainer/sharding.py) and devices: the shards and the unsharded copy that generation and the weight sync read
live on the rank's device (`args.device`), and one training process under torchrun (a mesh of 1, as a user with one
GPU runs `torchrun --nproc_per_node 1`) gets DTensor parameters and the same update as no sharding.

This machine has no GPU: the launches run on the CPU with gloo (real RLTrainer, the tiny model, a fixed batch of
made-up rollouts from tests/fixtures/multiprocess_worker.py); CUDA placement is checked by benchmarks/gpu_check.py.
This file is also the torchrun worker (`__main__` below).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LAUNCH_TIMEOUT = 280  # hang guards: a launch takes ~30-60 s on 2 idle cores, minutes on loaded ones
TEST_TIMEOUT = 300


def _placement(trainer) -> dict:
    """Where this rank's sharded parameters and its unsharded copy live, against `args.device`."""
    import torch
    from torch.distributed.tensor import DTensor

    from verifiers_rl.trainer.sharding import shard_fraction

    def where(d) -> str:  # torchrun's CPU ranks get args.device cpu:0; CPU tensors say cpu
        d = torch.device(d)
        return d.type if d.type == "cpu" else str(d)

    sharded = list(trainer.model.named_parameters())
    full = list(trainer.served_model().named_parameters())
    return {"device": where(trainer.args.device),
            "sharded_dtensor": all(isinstance(p, DTensor) for _, p in sharded),
            "sharded_devices": sorted({where(p.device) for _, p in sharded}),
            "local_devices": sorted({where(p.to_local().device) for _, p in sharded if isinstance(p, DTensor)}),
            "full_dtensor": any(isinstance(p, DTensor) for _, p in full),
            "full_devices": sorted({where(p.device) for _, p in full}),
            "full_is_copy": trainer.served_model() is not trainer.model,
            "shard_fraction": shard_fraction(trainer.model)}


def worker(model: str, out: Path) -> None:
    """One step on the fixed batch, FSDP2 and (one process only) unsharded; rank r writes placement-rank{r}.json."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(HERE / "fixtures"))
    import multiprocess_worker as mw

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    groups = mw.fixed_groups(3, errored={1})
    result: dict = {"world": world}
    weights = {}
    for fsdp in ((True, False) if world == 1 else (True,)):
        t = mw.vf.RLTrainer(model, mw.make_env(), mw.config(out / f"fsdp-{fsdp}", batch_size=12, use_lora=False,
                                                            optim="sgd", learning_rate=0.1, **mw.sharding(fsdp)))
        mw.feed(t, groups)
        if fsdp:
            result["group"] = dist.is_initialized()  # by accelerate, from torchrun's environment
            result["before"] = _placement(t)
            before = mw.trained(t, lora=False)
        t.train()
        weights[fsdp] = mw.trained(t, lora=False)
        if fsdp:
            result["after"] = _placement(t)
            result["step"] = t.state.global_step
            result["moved"] = max(float((weights[True][k] - before[k]).abs().max()) for k in before)
        t.close()
    if world == 1:
        result["max_diff_vs_unsharded"] = max(float((weights[True][k] - weights[False][k]).abs().max())
                                              for k in weights[False])
    (out / f"placement-rank{rank}.json").write_text(json.dumps(result))
    torch.distributed.barrier()


def launch(model: Path, out: Path, nproc: int) -> list[dict]:
    from verifiers_rl.plan.launch import torchrun_command

    out.mkdir(parents=True, exist_ok=True)
    logs = str(out.parent / f"{out.name}-torchrun")  # torchrun's folders: here, not in /tmp
    cmd = [*torchrun_command(nproc), "--log-dir", logs, str(Path(__file__).resolve()), str(model), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, cwd=out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return [json.loads((out / f"placement-rank{k}.json").read_text()) for k in range(nproc)]


def check_placement(p: dict) -> None:
    """Shards: DTensors on args.device; the copy generation and the weight sync read: plain tensors there too."""
    assert p["sharded_dtensor"], p
    assert p["sharded_devices"] == p["local_devices"] == [p["device"]], p
    assert p["full_is_copy"] and not p["full_dtensor"], p
    assert p["full_devices"] == [p["device"]], p


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_one_process_under_torchrun_shards_on_a_mesh_of_one(tiny_model_dir, tmp_path):
    """`torchrun --nproc_per_node 1` with fsdp: a process group of 1, DTensor parameters holding the whole model,
    and the step's update equals the unsharded one's on the same batch."""
    (got,) = launch(tiny_model_dir, tmp_path / "one", 1)
    assert got["world"] == 1 and got["group"] and got["step"] == 1 and got["moved"] > 1e-6
    for when in ("before", "after"):
        check_placement(got[when])
        assert got[when]["shard_fraction"] == 1.0
    assert got["max_diff_vs_unsharded"] <= 1e-6


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_two_processes_keep_shards_and_copy_on_the_rank_device(tiny_model_dir, tmp_path):
    got = launch(tiny_model_dir, tmp_path / "two", 2)
    for rank in got:
        assert rank["world"] == 2 and rank["step"] == 1 and rank["moved"] > 1e-6
        for when in ("before", "after"):
            check_placement(rank[when])
            assert rank[when]["shard_fraction"] == pytest.approx(0.5, abs=0.02)


def test_fsdp_without_a_process_group_is_one_line(tmp_path):
    """No torchrun, no process group: the one-line ConfigError. (transformers' Trainer refuses fsdp outside
    distributed training before RLTrainer gets here, so this calls shard_policy with a real RLConfig directly.)"""
    from types import SimpleNamespace

    import torch.distributed as dist

    import verifiers_rl as vf
    from verifiers_rl.errors import ConfigError
    from verifiers_rl.trainer.sharding import shard_policy

    assert not dist.is_initialized()
    args = vf.RLConfig(output_dir=str(tmp_path), fsdp=True, fsdp_config={"version": 2}, report_to=[])
    with pytest.raises(ConfigError) as e:
        shard_policy(SimpleNamespace(args=args, model=None))
    assert "\n" not in str(e.value) and "torchrun" in str(e.value)



def test_a_model_already_on_the_rank_device_does_not_move():
    """torchrun's CPU ranks name their device cpu:0 while CPU tensors say cpu: the same device, nothing moves."""
    import torch

    from verifiers_rl.trainer.sharding import move_to_device

    layer = torch.nn.Linear(2, 2)
    weight = layer.weight
    assert not move_to_device(layer, torch.device("cpu:0")) and not move_to_device(layer, torch.device("cpu"))
    assert layer.weight is weight

if __name__ == "__main__":
    worker(sys.argv[1], Path(sys.argv[2]))
