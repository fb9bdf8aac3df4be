"""SFT, several environments, the difficulty buffer, token export and plots: real tiny-model runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

import verifiers_rl as vf
from verifiers_rl.sft.data import tokenize_row
from verifiers_rl.trainer.buffer import BufferConfig, DifficultyBuffer, is_constant
from verifiers_rl.trainer.data_order import DataOrder

from test_trainer import make_config, make_env, read_metrics


def _masked_text(tok, row):
    out = tokenize_row(row, tok, 512)
    return tok.decode([i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m])


def test_sft_loss_mask_covers_only_completion_or_assistant_turns(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert _masked_text(tok, {"prompt": [{"role": "user", "content": "hi"}], "completion": "hello"}) \
        == "hello<|im_end|>\n"
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"},
                {"role": "assistant", "content": "ab"}]
    assert _masked_text(tok, {"messages": messages}) == "yo<|im_end|>\nab<|im_end|>\n"


@pytest.mark.integration  # spawns a process
def test_vf_sft_output_starts_an_rl_run(tiny_model_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"prompt": [{"role": "user", "content": w}],
                                          "completion": [{"role": "assistant", "content": w[::-1]}]})
                              for w in ["apple", "river", "stone", "cloud"]))
    cfg = tmp_path / "sft.toml"
    cfg.write_text(f'model = "{tiny_model_dir}"\n[data]\npath = "{rows}"\n'
                   f'[trainer]\noutput_dir = "{tmp_path / "sft"}"\nmax_steps = 2\nbatch_size = 2\nuse_lora = true\n')
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.sft", "@", str(cfg)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    sft_dir = tmp_path / "sft"
    assert (sft_dir / "adapter_model.safetensors").exists() and list(sft_dir.glob("checkpoint-*"))
    from safetensors.torch import load_file

    saved = load_file(sft_dir / "adapter_model.safetensors")
    trainer = vf.RLTrainer(str(sft_dir), make_env(), make_config(tmp_path / "rl", max_steps=1))
    loaded = {k: v for k, v in trainer.model.state_dict().items() if "lora_B" in k}
    assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # SFT moved the adapter
    # the RL policy starts from exactly the SFT adapter
    for k, v in saved.items():
        if "lora_B" in k:
            match = [t for name, t in loaded.items() if name.replace(".default", "").endswith(k.split("base_model.model.")[-1])]
            assert match and torch.equal(match[0], v), k
    trainer.train()
    assert (tmp_path / "rl" / "checkpoint-1" / "adapter_model.safetensors").exists()


@pytest.mark.integration  # spawns a process
def test_vf_sft_bad_key_is_one_line(tmp_path):
    cfg = tmp_path / "sft.toml"
    cfg.write_text('model = "m"\n[data]\npath = "x.jsonl"\n[trainer]\nmax_stepz = 2\n')
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.sft", "@", str(cfg)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == \
        "error: trainer.max_stepz: unknown key (did you mean trainer.max_steps?)"


@pytest.mark.parametrize("edit, expected", [
    ({"data": "missing.jsonl"}, "error: data.path: no file 'missing.jsonl' (relative paths are from the current "
                                "directory, "),
    ({"val": "held_out.csv"}, "error: val.path: no file 'held_out.csv' "),
    ({"report_to": "tensorbord"}, "error: trainer.report_to: 'tensorbord' is not an integration transformers "
                                  "reports to (did you mean 'tensorboard'?)"),
])
def test_vf_sft_refuses_a_missing_data_file_and_an_unknown_report_to_in_one_line(edit, expected, tiny_model_dir,
                                                                                  tmp_path, monkeypatch, capsys):
    # Before: datasets' FileNotFoundError and transformers' "tensorbord is not supported" ended vf-sft with a
    # traceback (the latter after the model had loaded).
    from verifiers_rl.cli.sft import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": [{"role": "user", "content": "ab"}],
                                                     "completion": [{"role": "assistant", "content": "ba"}]}) + "\n")
    val = f'[val]\npath = "{edit["val"]}"\n' if "val" in edit else ""
    cfg = tmp_path / "sft.toml"
    cfg.write_text(f'model = "{tiny_model_dir}"\n[data]\npath = "{edit.get("data", "rows.jsonl")}"\n{val}'
                   f'[trainer]\noutput_dir = "out"\nmax_steps = 1\nreport_to = "{edit.get("report_to", "none")}"\n')
    with pytest.raises(SystemExit) as e:
        main(["@", str(cfg)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(expected), err
    assert not (tmp_path / "out").exists()


def test_env_ratios_3_to_1_give_batches_in_that_proportion():
    order = DataOrder([range(0, 100), range(100, 200)], [3, 1], seed=0)
    for groups_per_step in (4, 6, 8):
        for step in range(10):
            envs = [order.env_of(p) for p in range(step * groups_per_step, (step + 1) * groups_per_step)]
            assert abs(envs.count(0) - 0.75 * groups_per_step) <= 1
    # each env's rows come from its own range, without repeats inside an epoch
    rows = [order.at(p) for p in range(400)]
    env0 = [r for r in rows if r < 100]
    assert len(env0) == 300 and sorted(env0[:100]) == list(range(100))


def test_env_group_training_reports_per_env_reward(tmp_path):
    a, b = make_env(), make_env()
    group = vf.EnvGroup([a, b], env_names=["first", "second"], ratios=[3, 1])
    trainer = vf.RLTrainer(str(_tiny(tmp_path)), group, make_config(tmp_path / "out", batch_size=16, micro_batch_size=8))
    seen = []
    orig = trainer.orchestrator.get_batch
    trainer.orchestrator.get_batch = lambda step, m: (lambda res: (seen.append(res[0].states), res)[1])(orig(step, m))
    trainer.train()
    for states in seen:
        tasks = [s["task"] for s in states[::4]]  # one per group
        assert tasks.count("first") == 3 and tasks.count("second") == 1
    rec = [r for r in read_metrics(tmp_path / "out") if "reward/all/mean" in r]
    assert all("reward/first/mean" in r and "reward/second/mean" in r for r in rec)


def _tiny(tmp_path):
    from verifiers_rl.models.tiny import build_tiny_model

    path = tmp_path / "tiny"
    if not path.exists():
        build_tiny_model(path)
    return path


def test_buffer_filters_constant_groups_and_refills():
    order = DataOrder([range(10)], None, seed=0, shuffle=False)
    buf = DifficultyBuffer(order, BufferConfig(online_difficulty_filtering=True, oversampling_factor=1.5), seed=0)

    async def generate(indices):
        # example 0 and 1 always score the same for every rollout: no signal
        return [[{"reward": 0.5 if i in (0, 1) else float(j)} for j in range(4)] for i in indices]

    import asyncio

    groups, metrics = asyncio.run(buf.fill(0, 4, generate))
    assert len(groups) == 4 and not any(is_constant(g) for g in groups)
    assert metrics["buffer/filtered_groups"] == 2
    assert buf.state.cursor == 6  # 6 drawn (4 × 1.5), 2 dropped, 4 kept


@pytest.mark.integration  # trains for many seconds in-process
def test_buffer_pools_survive_resume(tmp_path, tiny_model_dir):
    # Rewards that are constant within a group for some prompts: the buffer drops those groups and moves
    # easy examples (group mean >= 0.99) out of rotation; its state must come back after resume.
    def by_word(answer):
        return 1.0 if answer in ("elppa", "revir") else 0.3

    def jitter(completion):
        return 0.0

    env = make_env()
    env.rubric = vf.Rubric(funcs=[by_word, jitter])
    cfg = dict(max_steps=2, save_steps=1, online_difficulty_filtering=True, oversampling_factor=2.0,
               easy_threshold=0.99)
    trainer = vf.RLTrainer(str(tiny_model_dir), env, make_config(tmp_path / "out", **cfg))
    trainer.train()
    state = json.loads((tmp_path / "out" / "checkpoint-1" / "rl_state.json").read_text())
    assert "buffer" in state
    rec = [r for r in read_metrics(tmp_path / "out") if "buffer/filtered_groups" in r]
    assert rec and sum(r["buffer/filtered_groups"] for r in rec) > 0
    # resume from checkpoint-1: the restored buffer is checkpoint-1's
    (tmp_path / "out" / "checkpoint-2").rename(tmp_path / "out" / "moved-2")
    resumed = vf.RLTrainer(str(tiny_model_dir), env, make_config(tmp_path / "out", **cfg))
    from verifiers_rl.trainer.checkpoints import load_rl_state

    load_rl_state(resumed, True)
    assert resumed.orchestrator.buffer.state_dict() == state["buffer"]
    resumed.train(resume_from_checkpoint=True)
    final = json.loads((tmp_path / "out" / "checkpoint-2" / "rl_state.json").read_text())
    assert final["buffer"]["cursor"] >= state["buffer"]["cursor"]


@pytest.mark.integration  # trains for many seconds in-process
def test_token_export_fields_line_up_per_token(tmp_path, tiny_model_dir):
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(),
                           make_config(tmp_path / "out", max_steps=1, enable_token_export=True))
    trainer.train()
    path = tmp_path / "out" / "token_exports" / "step_0" / "rank_0.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 8
    for rec in records:
        n = len(rec["token_ids"])
        for key in ("loss_mask", "env_mask", "trainer_logprobs", "sampling_logprobs", "importance_ratio",
                    "ratio_masked", "entropy"):
            assert len(rec[key]) == n, key
        assert sum(rec["loss_mask"]) > 0 and rec["loss_mask"][0] == 0
        for m, t, s, r in zip(rec["loss_mask"], rec["trainer_logprobs"], rec["sampling_logprobs"],
                              rec["importance_ratio"]):
            if m:  # on-policy local engine: trainer and sampler agree on every model token
                assert abs(t - s) < 1e-3 and abs(r - 1) < 1e-3
        assert isinstance(rec["advantage"], float) and isinstance(rec["reward"], float)


@pytest.mark.integration  # spawns a process
def test_plot_writes_a_png(tmp_path, tiny_model_dir):
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(),
                           make_config(tmp_path / "out", max_steps=2, eval_steps=1))
    trainer.train()
    trainer.wait_for_plot()  # drawn in the background once train() returns
    png = tmp_path / "out" / "metrics.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    from verifiers_rl.plots import plot_run

    other = plot_run(tmp_path / "out", tmp_path / "again.png")
    assert other.stat().st_size > 5000
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.rl", "plot", str(tmp_path / "out"), "--output",
                        str(tmp_path / "cli.png")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cli.png").read_bytes()[:4] == b"\x89PNG"


def test_local_async_generates_ahead_on_a_synced_copy(tmp_path, tiny_model_dir):
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(),
                           make_config(tmp_path / "out", max_steps=3, local_async=True, max_async_level=1))
    served = trainer.inference.engine.model
    assert served is not trainer.model
    trainer.train()
    # after the last optimizer step the served copy (the LoRA policy merged: inference/lora_merge.py) computes what
    # the trained policy computes
    ids = torch.randint(3, 250, (2, 9))
    trainer.model.eval()
    with torch.no_grad():
        assert torch.allclose(served(input_ids=ids).logits, trainer.model(input_ids=ids).logits, atol=1e-5)
    rec = [r for r in read_metrics(tmp_path / "out") if "policy/staleness" in r]
    assert [r["policy/staleness"] for r in rec] == [0.0, 1.0, 1.0]  # step k+1 was sampled by policy k
    assert all(0.5 < r["importance_ratio/mean"] < 2 for r in rec)


def test_local_async_is_local_only(tmp_path):
    with pytest.raises(ValueError, match="local_async=True applies to the local engine only"):
        make_config(tmp_path, local_async=True, inference_backend="vllm")


FULL_HOSTED_LOCAL = '''
name = "full-example"
model = "{model}"
max_steps = 2
batch_size = 8
rollouts_per_example = 4
trajectory_strategy = "interleaved"
learning_rate = 1e-4
lora_alpha = 16
oversampling_factor = 2.0
max_async_level = 1
env_file = ["secrets.env"]

[sampling]
max_tokens = 16
temperature = 0.7

[[env]]
id = "reverse-text"
args = {{ dataset_source = "offline", num_train_examples = 50, num_eval_examples = 4 }}

[[env]]
id = "alphabet-sort"
args = {{ dataset_source = "offline", num_train_examples = 50, num_eval_examples = 4, max_turns = 2 }}

[wandb]
project = "my-project"
name = "my-run-name"

[eval]
interval = 100
num_examples = 2
rollouts_per_example = 1
eval_base_model = true

[[eval.env]]
id = "wordle"
args = {{ dataset_source = "offline" }}
num_examples = 2
rollouts_per_example = 1

[val]
num_examples = 2
rollouts_per_example = 1
interval = 1

[buffer]
online_difficulty_filtering = true
easy_threshold = 0.95
hard_threshold = 0.0
env_ratios = [3.0, 1.0]
'''


@pytest.mark.integration  # spawns a process
def test_full_hosted_example_runs_locally(tmp_path, tiny_model_dir):
    """The hosted docs' full example (several [[env]], [buffer], [val], [eval], [wandb], env_file), pointed at
    local envs and the tiny model, resolves and runs; W&B runs offline without a key."""
    (tmp_path / "secrets.env").write_text("MY_SECRET_TOKEN=s3cr3t-value-123\n")
    cfg = tmp_path / "full.toml"
    cfg.write_text(FULL_HOSTED_LOCAL.format(model=tiny_model_dir))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    env.update(WANDB_MODE="offline", WANDB_DIR=str(tmp_path), HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.rl", "@", str(cfg), "--output-dir", str(out)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (out / "checkpoint-2" / "adapter_model.safetensors").exists()
    rec = [x for x in read_metrics(out) if "reward/all/mean" in x]
    logged = {k for x in rec for k in x}
    # per-env rewards and the buffer's metrics (groups with no signal, e.g. all-zero alphabet-sort, are filtered)
    assert "reward/reverse-text/mean" in logged and "buffer/filtered_groups" in logged
    assert "eval before RL (wordle)" in r.stdout  # [eval] eval_base_model: the [[eval.env]] before training
    assert any(k.startswith("val/") for x in read_metrics(out) for k in x)  # [val]: every step here
    assert list(tmp_path.glob("wandb/offline-run-*"))
    text = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix in
                   (".json", ".jsonl", ".toml", ".log"))
    assert "s3cr3t-value-123" not in text


def test_max_prompt_len_takes_long_prompts_out_of_the_loss():
    from verifiers_rl.trainer.batching import build_samples

    def state(n_prompt):
        return {"trajectory": [{"tokens": {"prompt_ids": list(range(n_prompt)), "completion_ids": [7, 8],
                                           "completion_logprobs": [-0.1, -0.2], "completion_mask": [1, 1]}}],
                "tokens": None, "reward": 1.0}

    samples = build_samples([state(3), state(10)], [0.5, -0.5], max_seq_len=64, max_prompt_len=5)
    assert samples[0].loss_mask == [0, 0, 0, 1, 1]
    assert sum(samples[1].loss_mask) == 0 and len(samples[1].input_ids) == 12
