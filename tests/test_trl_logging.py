"""What a TRL user reads back from RLTrainer: HF's and TRL's metric names in log_history (their callbacks and
dashboards key on them), and one line naming the argument for a dataset shape TRL takes and this trainer does not."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig

import verifiers_rl as vf

PROMPTS = [{"prompt": [{"role": "user", "content": f"Say {i}."}]} for i in range(8)]


def lengths(completions, **kw):
    return [len(c[0]["content"]) / 10 for c in completions]


def grpo(tmp_path, **kw) -> GRPOConfig:
    return GRPOConfig(**{**dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                                max_completion_length=6, max_steps=2, use_cpu=True, report_to="none", seed=0,
                                logging_steps=1), **kw})


class Seen(TrainerCallback):
    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kw):
        self.logs.append(dict(logs or {}))


def test_a_trl_way_run_logs_hfs_and_trls_names_beside_its_own(tiny_model_dir, tmp_path):
    """Before: HF's loss / grad_norm / learning_rate were renamed (a callback reading logs["loss"] failed) and none
    of TRL's names (reward, rewards/<f>/mean, ...) were logged."""
    seen = Seen()
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=lengths, args=grpo(tmp_path), train_dataset=PROMPTS,
                           callbacks=[seen])
    trainer.train()
    steps = [log for log in seen.logs if "reward/all/mean" in log]  # what callbacks see; log_history adds "step"
    history = [h for h in trainer.state.log_history if "reward/all/mean" in h]
    assert len(steps) == 2 and [{k: v for k, v in h.items() if k != "step"} for h in history] == steps
    for log in steps:
        pairs = {"loss": "loss/mean", "grad_norm": "optim/grad_norm", "learning_rate": "optim/lr",
                 "reward": "reward/all/mean", "reward_std": "reward/all/std", "entropy": "entropy/mean",
                 "completions/mean_length": "seq_len/completion_mean", "rewards/lengths/mean": "metrics/lengths/mean"}
        assert {hf: log[hf] for hf in pairs} == {hf: log[ours] for hf, ours in pairs.items()}, sorted(log)
    trainer.close()


def test_native_runs_keep_hfs_names_and_add_no_trl_ones(tiny_model_dir, tmp_path):
    env = vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": f"Say {i}.", "answer": ""} for i in range(8)]),
                           rubric=vf.Rubric(funcs=[lambda completion, **kw: 1.0]))
    args = vf.RLConfig(output_dir=str(tmp_path / "o"), max_steps=1, batch_size=8, rollouts_per_example=4,
                       micro_batch_size=8, max_tokens=4, max_seq_len=64, max_prompt_len=48, report_to="none",
                       save_strategy="no", logging_steps=1)
    trainer = vf.RLTrainer(str(tiny_model_dir), env, args)
    trainer.train()
    log = next(h for h in trainer.state.log_history if "reward/all/mean" in h)
    assert log["loss"] == log["loss/mean"] and log["learning_rate"] == log["optim/lr"]
    assert "reward" not in log and not any(k.startswith("rewards/") for k in log)
    trainer.close()


@pytest.mark.parametrize("where, rows, expected", [
    ("train_dataset", Dataset.from_list(PROMPTS).to_iterable_dataset(),
     "train_dataset: a streamed IterableDataset is not supported yet; pass a Dataset"),
    ("eval_dataset", {"easy": PROMPTS[:4], "hard": PROMPTS[4:]},
     "eval_dataset: a dict of datasets is not supported yet; pass one Dataset"),
])
def test_a_dataset_shape_trl_takes_and_this_trainer_does_not_is_one_line(where, rows, expected, tiny_model_dir,
                                                                          tmp_path):
    """Before: a TypeError from len() for the stream, and "train_dataset needs a 'prompt' column" for a dict of
    eval datasets."""
    data = {"train_dataset": PROMPTS, where: rows}
    with pytest.raises(ValueError) as e:
        vf.RLTrainer(str(tiny_model_dir), reward_funcs=lengths, args=grpo(tmp_path), **data)
    assert str(e.value).startswith(expected) and "\n" not in str(e.value)


def test_grpoconfigs_default_bf16_on_fp32_weights_keeps_the_fast_paths(tiny_model_dir, tmp_path, caplog):
    """GRPOConfig's default bf16=True on a fp32 checkpoint: accelerate autocasts the forward, so the checks of the
    fast paths (log-probs from the output head in chunks with prompt packing, the local engine's decode step) compare
    in bf16's precision (before: each found bf16 rounding, called the model unlike its head, and fell back)."""
    import logging

    from verifiers_rl.models.precision import forward_dtype

    seen = {}
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=lengths, args=grpo(tmp_path, max_steps=1),
                           train_dataset=PROMPTS)
    with caplog.at_level(logging.WARNING, logger="verifiers_rl"):
        trainer.train()
        seen["dtype"] = forward_dtype(trainer.model)
    assert trainer.args.bf16 and next(trainer.model.parameters()).dtype == torch.float32
    assert seen["dtype"] == torch.bfloat16  # accelerate's autocast around the forward
    fallbacks = [r.getMessage() for r in caplog.records if "differs from its own forward" in r.getMessage()
                 or "not its output head" in r.getMessage()]
    assert fallbacks == []
    trainer.close()


def every_other(completions, **kw):  # TRL's "not my kind of row": None
    return [len(c[0]["content"]) / 10 if i % 2 == 0 else None for i, c in enumerate(completions)]


def constant(completions, **kw):
    return [0.5] * len(completions)


def test_a_rollout_every_reward_function_gave_none_is_unscorable_as_trls(tiny_model_dir, tmp_path):
    """TRL 1.16: a completion for which every reward function returned None is left out of its group's baseline and
    of the logged reward, with advantage 0 (before: None counted 0, a reward the rest of the group was judged by)."""
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=every_other, args=grpo(tmp_path, max_steps=1),
                           train_dataset=PROMPTS)
    trainer.train()
    states = trainer.last_states
    assert [bool(s.get("dropped")) for s in states] == [False, True] * 4
    log = next(h for h in trainer.state.log_history if "reward/all/mean" in h)
    kept = [s["reward"] for s in states if not s.get("dropped")]
    assert log["dropped/rollouts"] == 4 and log["reward"] == pytest.approx(sum(kept) / len(kept))
    trainer.close()
    # beside a function that scores every row, a None is one function's 0 (TRL's nansum): nothing is dropped
    both = vf.RLTrainer(str(tiny_model_dir), reward_funcs=[every_other, constant],
                        args=grpo(tmp_path / "b", max_steps=1), train_dataset=PROMPTS)
    both.train()
    assert not any(s.get("dropped") for s in both.last_states)
    both.close()
