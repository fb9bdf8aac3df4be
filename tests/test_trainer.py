"""RLTrainer end to end with the offline tiny model and the in-process local engine (CPU, no mocks).

Every run is a few optimizer steps on 8 rollouts of at most 8 tokens, so each takes a second or two.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from difflib import SequenceMatcher
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

import verifiers_rl as vf
from verifiers_rl.trainer import batching as batching_module
from verifiers_rl.trainer import rl_trainer as rl_trainer_module

from processes import wait_for

ENV_ID = "reverse"
WORDS = ["apple", "river", "stone", "cloud", "green", "house", "light", "table"]
EVAL_WORDS = ["music", "water", "chair", "plant"]
BATCH_SIZE, GROUP = 8, 4


# --- helpers --------------------------------------------------------------------------------------------------------
def similarity(completion, answer, parser) -> float:
    return SequenceMatcher(None, parser.parse_answer(completion) or "", answer).ratio()


def length_score(completion) -> float:
    # smooth in the completion's length: a random policy's rollouts of one prompt get different rewards
    return min(1.0, len(completion[-1]["content"]) / 16)


def odd_length_only(completion) -> float:
    if len(completion[-1]["content"]) % 2 == 0:
        raise ValueError("even-length completion")
    return 1.0


def make_env(extra_funcs=()) -> vf.SingleTurnEnv:
    funcs = [similarity, length_score, *extra_funcs]
    weights = [1.0, 0.5] + [0.1] * len(extra_funcs)
    parser = vf.Parser()
    return vf.SingleTurnEnv(
        dataset=[{"question": w, "answer": w[::-1]} for w in WORDS],
        eval_dataset=[{"question": w, "answer": w[::-1]} for w in EVAL_WORDS],
        system_prompt="Reverse the word.", parser=parser,
        rubric=vf.Rubric(funcs=funcs, weights=weights, parser=parser), env_id=ENV_ID)


def make_config(output_dir, **overrides) -> vf.RLConfig:
    kw = dict(output_dir=str(output_dir), max_steps=2, batch_size=BATCH_SIZE, rollouts_per_example=GROUP,
              micro_batch_size=4, max_tokens=8, max_seq_len=128, max_prompt_len=64, learning_rate=1e-2,
              save_steps=100, eval_num_examples=4, seed=0, logging_steps=1, sample_log_interval=0,
              disable_tqdm=True)
    kw.update(overrides)
    return vf.RLConfig(**kw)


def snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def lora_weights(model) -> dict[str, torch.Tensor]:
    return {k: v for k, v in snapshot(model).items() if "lora_A" in k or "lora_B" in k}


def read_metrics(output_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(output_dir) / "metrics.jsonl").read_text().splitlines()]


def record_batches(trainer) -> list[int]:
    """Wrap (not replace) the orchestrator's get_batch to record which steps this trainer generated."""
    steps: list[int] = []
    original = trainer.orchestrator.get_batch

    def get_batch(step, max_steps):
        steps.append(step)
        return original(step, max_steps)

    trainer.orchestrator.get_batch = get_batch
    return steps


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= atol, f"max abs difference {worst:.3g} > {atol}"


class StopAt(TrainerCallback):
    """Ends training after `step` optimizer steps, as an interrupted run would (max_steps is left as is)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


# --- one shared LoRA run: 2 steps, a checkpoint per step, eval at start and every step --------------------------------
@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora-run")
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(),
                           make_config(out, save_steps=1, eval_steps=1, eval_on_start=True))
    before = snapshot(trainer.model)
    trained: list[tuple[list[dict], list[float]]] = []  # (states, advantages) each step trained on
    original_build_samples = batching_module.build_samples  # what the rl mode (trainer/modes.py) calls

    def build_samples(states, advantages, **kw):
        trained.append((list(states), list(advantages)))
        return original_build_samples(states, advantages, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batching_module, "build_samples", build_samples)
        steps = record_batches(trainer)
        trainer.train()
    return SimpleNamespace(trainer=trainer, out=out, before=before, after=snapshot(trainer.model),
                           trained=trained, steps=steps, model_dir=tiny_model_dir)


@pytest.mark.integration  # trains for many seconds in-process
def test_lora_updates_only_adapter_weights(lora_run):
    before, after = lora_run.before, lora_run.after
    assert lora_run.trainer.state.global_step == 2
    lora_keys = [k for k in before if "lora_A" in k or "lora_B" in k]
    assert lora_keys and {k for k in before if "lora_" in k} == set(lora_keys)
    # lora_B starts at 0, so lora_A gets its first gradient at step 2: after 2 Adam steps every factor moved.
    unchanged = [k for k in lora_keys if torch.equal(before[k], after[k])]
    assert not unchanged, f"LoRA weights that did not change: {unchanged[:5]}"
    base_keys = [k for k in before if k not in lora_keys]
    assert base_keys
    for k in base_keys:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0, msg=f"base weight {k} changed")
    trainable = {n for n, p in lora_run.trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


def test_each_step_trains_on_batch_size_rollouts_in_whole_groups(lora_run):
    assert lora_run.steps == [0, 1]
    assert len(lora_run.trained) == 2
    seen_examples = []
    for states, advantages in lora_run.trained:
        assert len(states) == BATCH_SIZE == len(advantages)
        ids = []
        for g in range(0, BATCH_SIZE, GROUP):
            group = states[g:g + GROUP]
            assert len({s["example_id"] for s in group}) == 1
            assert all(s["prompt"] == group[0]["prompt"] and s["answer"] == group[0]["answer"] for s in group)
            assert abs(sum(advantages[g:g + GROUP])) < 1e-5
            for s, a in zip(group, advantages[g:g + GROUP]):  # advantage = reward - group mean
                assert a == pytest.approx(s["reward"] - sum(x["reward"] for x in group) / GROUP, abs=1e-5)
            ids.append(group[0]["example_id"])
        assert len(set(ids)) == BATCH_SIZE // GROUP  # distinct prompts per step
        seen_examples += ids
        assert any(abs(a) > 1e-6 for a in advantages), "rewards did not vary within any group"
    assert len(set(seen_examples)) == len(seen_examples)  # 8 examples, 2 per step: no repeats in 2 steps


def test_eval_and_training_metrics_are_logged(lora_run):
    records = read_metrics(lora_run.out)
    key = f"val/{ENV_ID}/reward/mean"  # eval_steps / eval_on_start: the periodic validation
    assert sorted(r["step"] for r in records if key in r) == [0, 1, 2]
    train = [r for r in records if "reward/all/mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    required = ["reward/all/mean", "loss/mean", "entropy/mean", "importance_ratio/mean", "mismatch_kl/mean",
                "optim/grad_norm", "optim/lr", "time/generate", "time/train", "time/weight_sync"]
    for r in train:
        missing = [k for k in required if k not in r]
        assert not missing, f"step {r['step']} lacks {missing}"
        assert r["optim/lr"] == pytest.approx(1e-2)
        assert r["optim/grad_norm"] > 0
        # on-policy (the local engine samples from the very weights being trained): ratio 1, no mismatch
        assert r["importance_ratio/mean"] == pytest.approx(1.0, abs=1e-4)
        assert abs(r["mismatch_kl/mean"]) < 1e-4


def test_lora_checkpoint_contents_and_peft_load(lora_run):
    from peft import PeftModel, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    assert get_last_checkpoint(str(lora_run.out)) == str(lora_run.out / "checkpoint-2")
    for step in (1, 2):
        ckpt = lora_run.out / f"checkpoint-{step}"
        files = set(os.listdir(ckpt))
        for name in ("adapter_model.safetensors", "adapter_config.json", "trainer_state.json", "optimizer.pt",
                     "scheduler.pt", "rng_state.pth", "rl_state.json"):
            assert name in files, f"{name} missing from {ckpt}: {sorted(files)}"
        assert "model.safetensors" not in files  # a LoRA checkpoint holds the adapter only
        assert json.loads((ckpt / "rl_state.json").read_text())["step"] == step
        assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == step
    assert not (lora_run.out / rl_trainer_module.STAGING_DIR).exists()

    base = AutoModelForCausalLM.from_pretrained(str(lora_run.model_dir))
    loaded = PeftModel.from_pretrained(base, str(lora_run.out / "checkpoint-2"))
    expected = get_peft_model_state_dict(lora_run.trainer.model)
    got = get_peft_model_state_dict(loaded)
    assert expected.keys() == got.keys() and expected
    assert_close(got, expected, atol=0)


@pytest.mark.integration  # trains for many seconds in-process
def test_starting_from_adapter_dir_continues_that_adapter(lora_run, tmp_path):
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    ckpt = lora_run.out / "checkpoint-1"
    saved = load_file(str(ckpt / "adapter_model.safetensors"))
    # a different rank in the config must not replace the saved adapter
    trainer = vf.RLTrainer(str(ckpt), make_env(), make_config(tmp_path / "cont", max_steps=1, lora_rank=4))
    assert trainer.model.peft_config["default"].r == json.loads((ckpt / "adapter_config.json").read_text())["r"]
    loaded = get_peft_model_state_dict(trainer.model)
    assert loaded.keys() == saved.keys()
    assert_close(loaded, saved, atol=0)
    base_before = {k: v for k, v in snapshot(trainer.model).items() if "lora_" not in k}
    trainer.train()
    trained = get_peft_model_state_dict(trainer.model)
    assert any(not torch.equal(trained[k], saved[k]) for k in saved)
    base_after = {k: v for k, v in snapshot(trainer.model).items() if "lora_" not in k}
    assert_close(base_after, base_before, atol=0)


# --- resume ---------------------------------------------------------------------------------------------------------
@pytest.mark.integration  # trains for many seconds in-process
def test_resume_matches_straight_run(tiny_model_dir, tmp_path):
    # A decaying LR with warmup (scheduler restore matters) and LoRA dropout (RNG restore matters).
    cfg = dict(max_steps=4, save_steps=2, lr_scheduler_type="linear", warmup_steps=1, lora_dropout=0.1)
    straight = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path / "straight", **cfg))
    straight.train()
    expected = lora_weights(straight.model)

    out = tmp_path / "resumed"
    first = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(out, **cfg), callbacks=[StopAt(2)])
    first.train()
    assert first.state.global_step == 2 and get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    second = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(out, **cfg))
    steps = record_batches(second)
    second.train(resume_from_checkpoint=True)
    assert steps == [2, 3] and second.state.global_step == 4
    assert_close(lora_weights(second.model), expected, atol=1e-6)

    def per_step(path):
        return {r["step"]: (r["reward/all/mean"], r["optim/lr"]) for r in read_metrics(path) if "loss/mean" in r}

    a, b = per_step(tmp_path / "straight"), per_step(out)
    assert a.keys() == b.keys() == {1, 2, 3, 4}
    for step in a:
        assert a[step] == pytest.approx(b[step], abs=1e-9), f"step {step}: straight {a[step]} vs resumed {b[step]}"


@pytest.mark.integration  # trains for many seconds in-process
def test_failing_reward_function_does_not_stop_training(tiny_model_dir, tmp_path):
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(extra_funcs=[odd_length_only]), make_config(tmp_path))
    trainer.train()
    assert trainer.state.global_step == 2
    train = [r for r in read_metrics(tmp_path) if "reward/all/mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    assert sum(r["errors/reward_funcs"] for r in train) > 0
    assert all(r["errors/rollouts"] == 0 for r in train)


@pytest.mark.integration  # trains for many seconds in-process
def test_a_sampler_serving_other_weights_is_named_at_the_first_step(tiny_model_dir, tmp_path, capsys):
    # a served model other than the policy (as a vLLM server started with another checkpoint would be): the
    # engine's merged copy of the LoRA policy with a sharper output head; the same weights are checked not to warn
    for other in (False, True):
        trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path / str(other), max_steps=2))
        if other:
            served = trainer.inference.engine.model
            assert served is not trainer.model
            with torch.no_grad():
                served.lm_head.weight.mul_(20.0)
        capsys.readouterr()
        trainer.train()
        trainer.close()
        lines = [x for x in capsys.readouterr().out.splitlines() if "the sampler's log-probs differ" in x]
        kl = [r["mismatch_kl/mean"] for r in read_metrics(tmp_path / str(other)) if "mismatch_kl/mean" in r]
        if other:
            assert kl[0] > 0.05 and len(lines) == 1 and lines[0].startswith("warning: step 1: ")
            assert "check its --model" in lines[0]
        else:
            assert kl[0] < 1e-4 and lines == []


@pytest.mark.integration  # trains for many seconds in-process
def test_full_finetune_checkpoint_loads_with_automodel(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, use_lora=False, max_steps=1,
                                                                        learning_rate=1e-3))
    before = snapshot(trainer.model)
    trainer.train()
    ckpt = tmp_path / "checkpoint-1"
    files = set(os.listdir(ckpt))
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                 "trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth", "rl_state.json"):
        assert name in files, f"{name} missing from {ckpt}: {sorted(files)}"
    assert "adapter_config.json" not in files
    loaded = AutoModelForCausalLM.from_pretrained(str(ckpt))
    after = snapshot(trainer.model)
    assert any(not torch.equal(before[k], after[k]) for k in after)
    assert_close(snapshot(loaded), after, atol=0)
    tok = AutoTokenizer.from_pretrained(str(ckpt))
    assert tok.pad_token_id == trainer.processing_class.pad_token_id


@pytest.mark.integration  # trains for many seconds in-process
def test_bf16_lora_trains_on_cpu(tiny_model_dir, tmp_path):
    """bf16 with LoRA: a bf16 base under an fp32 adapter. Accelerate's mixed precision hands back the forward's
    hidden states in fp32; the bf16 output head must still score them (it raised a dtype mismatch)."""
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, bf16=True, learning_rate=1e-3))
    assert trainer.model.get_output_embeddings().weight.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters() if p.requires_grad)
    before = lora_weights(trainer.model)
    trainer.train()
    assert trainer.state.global_step == 2
    after = lora_weights(trainer.model)
    assert before and any(not torch.equal(before[k], after[k]) for k in before)
    train = [r for r in read_metrics(tmp_path) if "loss/mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    assert all(torch.isfinite(torch.tensor(r["loss/mean"])) for r in train)
    # the trainer's bf16 log-probs are the sampler's (same model, same dtype), as in fp32
    assert all(r["mismatch_kl/mean"] < 1e-3 for r in train)


# --- a save that dies half-way ---------------------------------------------------------------------------------------
def _assert_resumes_from_checkpoint_1(model_dir, out) -> None:
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-1")
    trainer = vf.RLTrainer(str(model_dir), make_env(), make_config(out, save_steps=1))
    steps = record_batches(trainer)
    trainer.train(resume_from_checkpoint=True)
    assert steps == [1] and trainer.state.global_step == 2
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    assert (out / "checkpoint-2" / "optimizer.pt").exists()
    assert not (out / rl_trainer_module.STAGING_DIR).exists()


@pytest.mark.integration  # trains for many seconds in-process
def test_crashed_save_leaves_previous_checkpoint(tiny_model_dir, tmp_path):
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, save_steps=1))
    original = trainer._save_optimizer_and_scheduler

    def save_optimizer_and_scheduler(output_dir):
        if trainer.state.global_step == 2:  # the adapter files of checkpoint-2 are already on disk
            raise OSError("disk full (simulated)")
        return original(output_dir)

    trainer._save_optimizer_and_scheduler = save_optimizer_and_scheduler
    with pytest.raises(OSError, match="simulated"):
        trainer.train()
    assert not (tmp_path / "checkpoint-2").exists()
    assert (tmp_path / rl_trainer_module.STAGING_DIR / "checkpoint-2" / "adapter_model.safetensors").exists()
    _assert_resumes_from_checkpoint_1(tiny_model_dir, tmp_path)


KILLED_RUN = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests_dir!r})
import test_trainer as T
import verifiers_rl as vf

out, marker = Path({out!r}), Path({marker!r})

class SlowSave(vf.RLTrainer):
    def _save_rng_state(self, output_dir):
        if self.state.global_step == 2:  # model, optimizer and scheduler of checkpoint-2 are written
            tmp = marker.with_suffix(".tmp")
            tmp.write_text(str(output_dir))
            tmp.rename(marker)  # atomic: the test never reads a half-written marker
            time.sleep(300)
        return super()._save_rng_state(output_dir)

SlowSave({model_dir!r}, T.make_env(), T.make_config(out, save_steps=1)).train()
"""


@pytest.mark.integration  # spawns a process
def test_sigkilled_save_leaves_previous_checkpoint(tiny_model_dir, tmp_path):
    out, marker = tmp_path / "run", tmp_path / "in-save"
    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN.format(tests_dir=str(Path(__file__).parent), out=str(out), marker=str(marker),
                                        model_dir=str(tiny_model_dir)))
    log = tmp_path / "killed_run.log"  # a file, not a pipe: a full pipe would block the child
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=sink, stderr=subprocess.STDOUT)
    try:
        def saved() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"training exited ({proc.returncode}) before reaching the save: "
                            f"{log.read_text(errors='replace')[-3000:]}")
            return marker.exists()

        wait_for(saved, 240, "training to reach the save of step 2")
        staged = Path(marker.read_text())
        assert (staged / "optimizer.pt").exists() and not (staged / "rng_state.pth").exists()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "checkpoint-2").exists()
    _assert_resumes_from_checkpoint_1(tiny_model_dir, out)


def test_warmup_steps_warm_up_the_default_constant_schedule(tiny_model_dir, tmp_path):
    """`warmup_steps` is documented as a linear warm-up: it applies with the default constant schedule too
    (transformers' own "constant" ignores it), and the lr then stays at its peak."""
    args = make_config(tmp_path / "out", max_steps=4, warmup_steps=2, learning_rate=1e-3, save_strategy="no")
    assert args.lr_scheduler_type == "constant"
    vf.RLTrainer(str(tiny_model_dir), make_env(), args).train()
    lrs = [r["optim/lr"] for r in read_metrics(tmp_path / "out") if "optim/lr" in r]
    assert lrs == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])  # transformers: the warm-up starts at 0


def test_filter_zero_advantages_keeps_zero_advantage_rollouts_out_of_the_loss(tiny_model_dir, tmp_path):
    # prime-rl's orchestrator.train.filter_zero_advantages: a rollout whose advantage is 0 (here: the groups of
    # half the words, whose reward is constant) adds no loss and no token to the loss's count; the others train.
    def constant_for_half(completion, answer) -> float:
        return 1.0 if WORDS.index(answer[::-1]) % 2 else float(len(str(completion)) % 3)

    seen: list[tuple[list[float], list[int]]] = []
    original = batching_module.build_samples

    def build_samples(states, advantages, **kw):
        samples = original(states, advantages, **kw)
        seen.append((list(advantages), [sum(s.loss_mask) for s in samples], kw["filter_zero_advantages"]))
        return samples

    env = vf.SingleTurnEnv(dataset=[{"question": w, "answer": w[::-1]} for w in WORDS],
                           rubric=vf.Rubric(funcs=[constant_for_half]))
    for on in (True, False):
        trainer = vf.RLTrainer(str(tiny_model_dir), env, make_config(tmp_path / str(on), max_steps=1, batch_size=16,
                                                                      filter_zero_advantages=on, save_strategy="no"))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(batching_module, "build_samples", build_samples)
            trainer.train()
        trainer.close()
    (adv_on, tokens_on, flag_on), (adv_off, tokens_off, flag_off) = seen
    assert flag_on and not flag_off
    assert any(a == 0.0 for a in adv_on) and any(a != 0.0 for a in adv_on)
    assert all((t == 0) == (a == 0.0) for a, t in zip(adv_on, tokens_on)), (adv_on, tokens_on)
    assert all(t > 0 for t in tokens_off)  # without it, zero-advantage rollouts keep their loss tokens
