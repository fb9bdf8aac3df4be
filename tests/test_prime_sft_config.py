"""prime-rl's SFT config (its `configs/basic/reverse-text/sft.toml` shape, prime-rl-configs 559b447) through vf-sft:
translated with prime-rl's defaults (config/prime_sft.py), what vf-sft cannot honour one line naming the prime-rl key,
and vf-rl pointing it to vf-sft. The hub dataset of prime-rl's file is stood in by a local .jsonl here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from verifiers_rl.config.loading import ConfigError, parse_args
from verifiers_rl.config.schema import resolve_run
from verifiers_rl.sft.config import validate_sft_config

PRIME_SFT = """
max_steps = 100

[deployment]
num_train_gpus = 1
num_infer_gpus = 1

[ckpt] # Checkpoint at the end of training

[model]
name = "PrimeIntellect/Qwen3-0.6B"

[data]
name = "willcb/R1-reverse-wikipedia-paragraphs-v1-1000"
seq_len = 4096
batch_size = 32

[optim]
lr = 2e-5

[eval]
interval = 25
num_examples = 32

[[eval.source]]
name = "reverse-text"

[eval.source.env.taskset]
id = "reverse-text"
"""


def load(tmp_path, text: str, *override: str) -> dict:
    path = tmp_path / "sft.toml"
    path.write_text(text)
    return parse_args(["@", str(path), *override])[1]


def test_prime_rls_sft_config_translates_with_its_defaults(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # vf-sft checks that a local data file exists, relative to here
    (tmp_path / "v.jsonl").write_text('{"prompt": "p", "completion": "c"}\n')
    cfg = validate_sft_config(load(tmp_path, PRIME_SFT, "--trainer.output-dir", "o"))
    assert cfg.model == "PrimeIntellect/Qwen3-0.6B"
    assert (cfg.data.path, cfg.data.split) == ("willcb/R1-reverse-wikipedia-paragraphs-v1-1000", "train")
    t = cfg.trainer
    assert (t.max_steps, t.max_length, t.batch_size, t.learning_rate, t.packing) == (100, 4096, 32, 2e-5, True)
    assert t.micro_batch_size == 1  # prime-rl's default: one row per forward, gradient accumulation up to batch_size
    assert t.resume_from_checkpoint is None
    (tmp_path / "o" / "checkpoint-20").mkdir(parents=True)
    for name in ("trainer_state.json", "scheduler.pt"):  # complete, and more than the weights: resumable
        (tmp_path / "o" / "checkpoint-20" / name).write_text("{}")
    for table, resume in (("[resume]\n", "auto"), ("[resume]\nstep = 20\n", 20)):  # the latest, or a step's
        again = validate_sft_config(load(tmp_path, PRIME_SFT + table, "--trainer.output-dir", "o")).trainer
        assert again.resume_from_checkpoint == resume
    # prime-rl's optimizer and schedule defaults, and [ckpt] without an interval: at the end only
    assert (t.weight_decay, t.max_grad_norm, t.lr_scheduler_type, t.save_steps) == (0.01, 1.0, "constant", 100)
    assert t.output_dir == "o" and not t.use_lora  # the command line's vf-sft keys apply on top
    short = validate_sft_config(load(tmp_path, PRIME_SFT, "--trainer.max-steps", "3")).trainer
    assert (short.max_steps, short.save_steps) == (3, 3)  # the end of the run the command line sized
    err = capsys.readouterr().err
    assert "prime-rl SFT config: translated for vf-sft; set aside (they size or place the hosted run): " \
           "deployment, eval" in err
    lora = PRIME_SFT.replace("[optim]", "[model.lora]\nalpha = 64\n\n[model.ac]\n\n[scheduler]\ntype = 'cosine'\n"
                             "warmup_steps = 5\n\n[val]\ninterval = 10\n[val.data]\nname = 'v.jsonl'\n\n[optim]")
    t2 = validate_sft_config(load(tmp_path, lora))
    assert (t2.trainer.use_lora, t2.trainer.lora_rank, t2.trainer.lora_alpha) == (True, 16, 64)
    assert (t2.trainer.gradient_checkpointing, t2.trainer.lr_scheduler_type, t2.trainer.warmup_steps) == \
        (True, "cosine", 5)
    assert (t2.val.path, t2.val.interval) == ("v.jsonl", 10)


@pytest.mark.parametrize("edit, expected", [
    (("[optim]", "[optim]\ntype = 'lion'"), "optim.type: 'lion' is not adamw, muon, sign_sgd or sgd"),
    (("seq_len = 4096", "seq_len = 4096\nsubsets = ['a']"), "data.subsets: not supported yet by vf-sft"),
    (("[optim]", "[scheduler]\nmin_lr = 1e-7\n[optim]"), "scheduler.min_lr: not supported yet by vf-sft"),
    (("max_steps = 100", "max_steps = 100\nbench = true"), "bench: not supported yet by vf-sft"),
    (("seq_len = 4096", "seq_len = 4096\nshuffle = false"), "data.shuffle: false is not supported yet by vf-sft"),
])
def test_what_vf_sft_cannot_honour_is_one_line_naming_the_prime_rl_key(edit, expected, tmp_path):
    with pytest.raises(ConfigError) as e:
        validate_sft_config(load(tmp_path, PRIME_SFT.replace(*edit)))
    assert str(e.value).startswith(expected), str(e.value)


def test_vf_rl_points_a_prime_rl_sft_config_to_vf_sft(tmp_path):
    with pytest.raises(ConfigError, match=r"^model: a table, without \[orchestrator\]: this is prime-rl's SFT "
                                          r"config, which vf-sft trains \(vf-sft @ the same file\)"):
        resolve_run(load(tmp_path, PRIME_SFT), {"output_dir": str(tmp_path / "out")}, check_environments=False)


@pytest.mark.integration  # spawns vf-sft, which trains two steps
def test_a_prime_rl_sft_config_trains_through_vf_sft(tiny_model_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"prompt": [{"role": "user", "content": w}], "completion": w[::-1]})
                              for w in ["apple", "river", "stone", "cloud", "lamp", "tree", "bird", "sand"]))
    text = (PRIME_SFT.replace("max_steps = 100", "max_steps = 2").replace("PrimeIntellect/Qwen3-0.6B",
            str(tiny_model_dir)).replace("willcb/R1-reverse-wikipedia-paragraphs-v1-1000", str(rows))
            .replace("seq_len = 4096", "seq_len = 64").replace("batch_size = 32", "batch_size = 4")
            .replace("[optim]", "[scheduler]\ntype = 'linear'\nwarmup_steps = 1\ndecay_steps = 1\n[optim]"))
    (tmp_path / "sft.toml").write_text(text)  # prime-rl's linear schedule: transformers' warmup_stable_decay
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.sft", "@", "sft.toml", "--trainer.output-dir", "sft"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "SFT: 2 steps on 8 rows" in r.stdout and (tmp_path / "sft" / "model.safetensors").exists()


def test_prime_rls_linear_and_cosine_schedules_keep_their_meaning_in_vf_sft(tmp_path):
    # Before: `linear` became transformers' linear (a decay from the warm-up on, where prime-rl holds the peak until
    # its last decay_steps), warm-up defaulted to 0 (prime-rl: 10) and min_lr was refused.
    linear = validate_sft_config(load(tmp_path, PRIME_SFT.replace("[optim]", "[scheduler]\ntype = 'linear'\n"
                                                                  "decay_steps = 20\nmin_lr = 1e-6\n[optim]"))).trainer
    assert (linear.lr_scheduler_type, linear.warmup_steps) == ("warmup_stable_decay", 10)
    assert linear.lr_scheduler_kwargs == {"num_decay_steps": 20, "decay_type": "linear",
                                          "min_lr_ratio": pytest.approx(0.05)}
    cosine = validate_sft_config(load(tmp_path, PRIME_SFT.replace("[optim]", "[scheduler]\ntype = 'cosine'\n"
                                                                  "min_lr = 1e-6\n[optim]"))).trainer
    assert (cosine.lr_scheduler_type, cosine.warmup_steps, cosine.lr_scheduler_kwargs) == \
        ("cosine_with_min_lr", 10, {"min_lr": 1e-6})
