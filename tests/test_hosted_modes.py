"""The hosted format's `training_mode` / `[teacher]`, and temperature 0 (greedy) where the hosted reference allows
`sampling.temperature >= 0`: accepted by the config, greedy in the local engine, the trainer's log-probs at
temperature 1 (what the sampler reports for greedy tokens). vLLM's side: tests/test_training_modes.py (vllm)."""

from __future__ import annotations

import pytest

import verifiers_rl as vf
from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.schema import resolve_run

HOSTED = {"model": "m", "max_steps": 5, "batch_size": 8, "rollouts_per_example": 2,
          "env": [{"id": "verifiers-rl/reverse-text", "args": {"dataset_source": "offline"}}]}


def resolve(tmp_path, **extra):
    return resolve_run({**HOSTED, **extra}, {"output_dir": str(tmp_path)})


def test_hosted_training_mode_and_teacher_reach_rlconfig(tmp_path):
    r = resolve(tmp_path, training_mode="sft", teacher={"url": "http://h/v1", "name": "big", "api_key_var": "K",
                                                        "min_reward": 0.5})
    assert r.hosted and r.cfg.training_mode == "sft"
    a = r.args
    assert (a.training_mode, a.teacher_url, a.teacher_model_name, a.teacher_api_key_var, a.sft_min_reward) == (
        "sft", "http://h/v1", "big", "K", 0.5)
    assert resolve(tmp_path, training_mode="opd", teacher={"model": "t"}).args.teacher_model == "t"


@pytest.mark.parametrize("extra, message", [
    (dict(training_mode="opd"), ("training_mode='opd' needs a teacher: set teacher.model (a model dir, "
                                     "loaded in-process) or teacher.url")),
    (dict(training_mode="sft", teacher={"modle": "t"}), "teacher.modle: unknown key (did you mean teacher.model?)"),
    (dict(training_mode="distill", teacher={"model": "t"}), "training_mode: 'distill' is not one of"),
    (dict(teacher={"model": "t"}), ("teacher.model is set but training_mode='rl'; set training_mode='opd' or "
                                    "'sft', or remove teacher.model")),
    (dict(sampling={"temperature": -0.5}), "sampling.temperature: temperature=-0.5 must be >= 0"),
])
def test_hosted_mode_mistakes_are_one_line_naming_the_hosted_key(tmp_path, extra, message):
    with pytest.raises(ConfigError) as e:
        resolve(tmp_path, **extra)
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_hosted_temperature_0_is_greedy_sampling(tmp_path):
    r = resolve(tmp_path, sampling={"temperature": 0})
    assert r.args.temperature == 0.0 and r.args.sampling_args()["temperature"] == 0.0
    assert r.origin["trainer.args.temperature"] == "sampling.temperature"


def test_temperature_0_samples_greedily_and_the_trainer_scores_at_temperature_1(tiny_model_dir, tmp_path):
    """A real opd step at temperature 0, the policy its own teacher: the local engine picks the argmax (a prompt's
    rollouts are identical), its log-probs are the raw distribution's, which the trainer reproduces (no mismatch, no
    KL), where dividing the logits by 0 would give NaN."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model gains nothing from more; on busy cores they spin-wait
    parser = vf.Parser()
    env = vf.SingleTurnEnv(dataset=[{"question": w, "answer": w[::-1]} for w in ("apple", "river")],
                           parser=parser, rubric=vf.Rubric(funcs=[lambda completion: 1.0], parser=parser))
    args = vf.RLConfig(output_dir=str(tmp_path), training_mode="opd", teacher_model=str(tiny_model_dir),
                       temperature=0.0, max_steps=1, batch_size=4, rollouts_per_example=2, micro_batch_size=4,
                       max_tokens=8, max_seq_len=96, max_prompt_len=64, use_lora=False, save_steps=100, seed=0,
                       logging_steps=1, sample_log_interval=0, disable_tqdm=True, report_to="none")
    trainer = vf.RLTrainer(str(tiny_model_dir), env, args)
    try:
        trainer.train()
        states = trainer.eval_states(env, 2, 2)  # eval at the training temperature: 0
    finally:
        trainer.close()
        torch.set_num_threads(threads)
    completions = [s["tokens"]["input_ids"] for s in states]
    assert len(completions) == 4 and completions[0] == completions[1] and completions[2] == completions[3]
    [log] = [h for h in trainer.state.log_history if "teacher_kl/mean" in h]
    assert abs(log["mismatch_kl/mean"]) < 1e-5 and abs(log["teacher_kl/mean"]) < 1e-5, log
    assert log["importance_ratio/mean"] == pytest.approx(1.0, abs=1e-4)
