"""prime-rl's step metrics on hand-made steps: mismatch_kl mean/std/max, the masked fraction split by advantage sign,
per-env rollout metrics with empty and errored rates, and perf/* + time/save_ckpt from a real trainer step."""

from __future__ import annotations

import math

import pytest
import torch

from verifiers_rl.errors import EmptyModelResponseError
from verifiers_rl.trainer import distributed
from verifiers_rl.trainer.loss import LossConfig, compute_loss
from verifiers_rl.trainer.metrics import TokenWeightedMetrics
from verifiers_rl.trainer.rollout_metrics import rollout_metrics


def test_mismatch_kl_std_max_and_masked_split_by_advantage_sign():
    # two sequences of 3 tokens; the last token of row 0 is off the loss mask
    sampling = torch.zeros(2, 3)
    trainer = torch.tensor([[0.0, math.log(2.0), math.log(9.0)], [math.log(0.1), math.log(0.5), 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    adv = torch.tensor([1.0, -1.0])
    out = compute_loss(trainer, sampling, adv, mask, 5, LossConfig(mask_ratio_low=0.125, mask_ratio_high=8.0))
    m = {k: float(v) for k, v in out.metrics.items()}
    # k3 per loss token: r - log r - 1 with r = 1, 2, 0.1, 0.5, 1
    ks = [0.0, 2 - math.log(2) - 1, 0.1 - math.log(0.1) - 1, 0.5 - math.log(0.5) - 1, 0.0]
    mean = sum(ks) / 5
    assert m["mismatch_kl/mean"] == pytest.approx(mean, rel=1e-6)
    assert m["mismatch_kl/max"] == pytest.approx(max(ks), rel=1e-6)
    merged = distributed.merge_metrics([m])
    assert merged["mismatch_kl/std"] == pytest.approx(math.sqrt(sum((k - mean) ** 2 for k in ks) / 5), rel=1e-5)
    assert "mismatch_kl/sq_mean" not in merged
    # r = 0.1 < 0.125 is masked (row 1: negative advantage); r = 9 is off the loss mask: not counted
    assert m["masked_fraction"] == pytest.approx(1 / 5)
    assert m["masked_fraction/negative_advantage"] == pytest.approx(1 / 5)
    assert m["masked_fraction/positive_advantage"] == 0.0


def test_std_over_micro_batches_and_ranks_is_the_std_over_all_tokens():
    cfg = LossConfig()
    acc, ranks = TokenWeightedMetrics(), []
    lps = [torch.tensor([[0.1, -0.2]]), torch.tensor([[0.3, 0.0, -0.4]]), torch.tensor([[0.05]])]
    for lp in lps[:2]:
        acc.add(compute_loss(lp, torch.zeros_like(lp), torch.ones(1), torch.ones_like(lp, dtype=torch.bool), 6,
                             cfg).metrics)
    ranks.append(acc.result())
    other = TokenWeightedMetrics()
    other.add(compute_loss(lps[2], torch.zeros_like(lps[2]), torch.ones(1), torch.ones(1, 1, dtype=torch.bool), 6,
                           cfg).metrics)
    ranks.append(other.result())
    merged = distributed.merge_metrics(ranks)
    r = torch.cat([x.flatten() for x in lps]).double().exp()
    ks = r - r.log() - 1
    assert merged["mismatch_kl/std"] == pytest.approx(float(ks.std(unbiased=False)), rel=1e-5)
    assert merged["mismatch_kl/max"] == pytest.approx(float(ks.max()), rel=1e-5)


def _state(task, reward, error=None, truncated=False, turns=1):
    return {"task": task, "reward": reward, "error": error, "is_truncated": truncated,
            "trajectory": [{}] * turns, "metrics": {}}


def test_rollout_metrics_per_env_with_empty_and_errored_rates():
    states = [_state("a", 1.0), _state("a", 0.0, EmptyModelResponseError("empty")),
              _state("b", 0.5, RuntimeError("tool crashed"), truncated=True, turns=3), _state("b", 0.5)]
    m = rollout_metrics(states, torch.tensor([0.5, -0.5, 0.0, 0.0]))
    assert m["reward/all/mean"] == 0.5 and m["reward/a/mean"] == 0.5 and m["reward/b/mean"] == 0.5
    assert m["empty_rollouts/all/mean"] == 0.25 and m["errored_rollouts/all/mean"] == 0.25
    assert m["empty_rollouts/a/mean"] == 0.5 and m["empty_rollouts/b/mean"] == 0.0
    assert m["errored_rollouts/b/mean"] == 0.5 and m["is_truncated/b/mean"] == 0.5 and m["num_turns/b/mean"] == 2.0
    assert m["errors/rollouts"] == 2  # the count as before
    one_env = rollout_metrics(states[:2], torch.zeros(2))
    assert "reward/a/mean" not in one_env and one_env["empty_rollouts/all/mean"] == 0.5


@pytest.mark.integration  # trains for many seconds in-process
def test_a_trainer_step_logs_perf_and_save_time(tiny_model_dir, tmp_path):
    import verifiers_rl as vf

    from test_trainer import make_config, make_env, read_metrics

    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, max_steps=2, save_steps=1))
    trainer.train()
    steps = [r for r in read_metrics(tmp_path) if "loss/mean" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["perf/throughput"] > 0 and r["perf/peak_memory"] > 0.05  # GiB: this process holds torch at least
        assert r["perf/throughput_per_gpu"] == r["perf/throughput"]
        assert r["mismatch_kl/std"] >= 0 and r["mismatch_kl/max"] >= r["mismatch_kl/mean"]
        assert "seq_len/all/mean" in r and r["empty_rollouts/all/mean"] >= 0
    assert "time/save_ckpt" in steps[1] and "time/save_ckpt" not in steps[0]
    # epoch = passes over the training rows, as HF and TRL log it (not steps / max_steps)
    from test_trainer import BATCH_SIZE, GROUP, WORDS

    assert [r["epoch"] for r in steps] == pytest.approx([s * BATCH_SIZE / GROUP / len(WORDS) for s in (1, 2)])


@pytest.mark.integration  # trains for many seconds in-process
def test_the_last_step_is_logged_between_two_logging_steps(tiny_model_dir, tmp_path):
    """logging_steps=2, max_steps=3: step 2 logs the mean of steps 1-2, and step 3 (not a logging step) is logged
    when training ends, to metrics.jsonl and to callbacks."""
    import verifiers_rl as vf
    from transformers import TrainerCallback

    from test_trainer import make_config, make_env, read_metrics

    class Record(TrainerCallback):
        trainer = None

        def __init__(self):
            self.rewards, self.logged = [], []  # each step's own reward; the steps on_log got a reward for

        def on_step_end(self, args, state, control, **kwargs):
            self.rewards.append(self.trainer.pending_metrics[-1]["reward/all/mean"])

        def on_log(self, args, state, control, logs=None, **kwargs):
            if "reward/all/mean" in (logs or {}):
                self.logged.append(state.global_step)

    rec = Record()
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, max_steps=3, logging_steps=2),
                           callbacks=[rec])
    rec.trainer = trainer
    trainer.train()
    steps = [r for r in read_metrics(tmp_path) if "reward/all/mean" in r]
    assert [r["step"] for r in steps] == [2, 3] and rec.logged == [2, 3]
    assert steps[0]["reward/all/mean"] == pytest.approx((rec.rewards[0] + rec.rewards[1]) / 2)
    assert steps[1]["reward/all/mean"] == pytest.approx(rec.rewards[2])
    assert all(k in steps[1] for k in ("loss/mean", "optim/grad_norm", "entropy/mean", "time/step"))


@pytest.mark.integration  # spawns a process
def test_wandb_gets_sample_tables_and_distributions_offline(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("wandb")  # not a dependency: tested where it is installed
    import verifiers_rl as vf

    from test_trainer import make_config, make_env

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = make_config(tmp_path / "out", max_steps=2, report_to=["wandb"], sample_log_interval=2)
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), cfg)
    trainer.train()
    import wandb

    wandb.finish()
    tables = list(tmp_path.glob("wandb/offline-run-*/files/media/table/samples_*.table.json"))
    assert len(tables) == 1  # step 2 only (logging_steps 1 x sample_log_interval 2)
    import json

    data = json.loads(tables[0].read_text())
    assert data["columns"] == ["step", "prompt", "completion", "reward", "advantage"] and len(data["data"]) == 8
    assert {row[0] for row in data["data"]} == {2}
