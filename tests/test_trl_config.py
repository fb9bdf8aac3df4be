"""TRL's GRPOConfig as RLTrainer's args: a TRL script with GRPOTrainer renamed
RLTrainer trains with the settings its config means, TRL's defaults included; what has no counterpart is one line."""

from __future__ import annotations

import pytest
from transformers import TrainingArguments
from trl import GRPOConfig

import verifiers_rl as vf
from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.config_from_trl import rl_config_from

PROMPTS = [{"prompt": [{"role": "user", "content": f"Say {i}."}], "level": i} for i in range(8)]


def grpo(tmp_path, **kw) -> GRPOConfig:
    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                max_completion_length=6, max_steps=2, bf16=False, use_cpu=True, report_to="none", seed=0,
                logging_steps=1)
    return GRPOConfig(**{**base, **kw})


def lengths(completions, **kw):
    return [len(c[0]["content"]) / 10 for c in completions]


def test_a_grpoconfig_trains_with_the_settings_it_means(tiny_model_dir, tmp_path, capsys):
    args = grpo(tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=4, epsilon=0.1,
                reward_weights=[0.5], temperature=0.9)
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=lengths, args=args, train_dataset=PROMPTS)
    assert "note: args is GRPOConfig, read as RLConfig(batch_size=8, micro_batch_size=4, max_steps=2" in (
        capsys.readouterr().out)
    rl = trainer.args
    assert isinstance(rl, vf.RLConfig) and (rl.batch_size, rl.micro_batch_size, rl.rollouts_per_example) == (8, 4, 4)
    assert (rl.max_tokens, rl.learning_rate, rl.temperature, rl.use_lora) == (6, 1e-6, 0.9, False)  # TRL's lr
    assert rl.gradient_accumulation_steps == 1 and rl.logging_steps == 1
    # transformers' defaults that RLConfig's differ from, as TRL runs them: a linear decay, a save every 500 steps
    assert (str(getattr(rl.lr_scheduler_type, "value", rl.lr_scheduler_type)), rl.save_steps) == ("linear", 500)
    assert rl.loss == {"type": "dapo", "beta": 0.0, "epsilon_low": 0.1, "epsilon_high": 0.1, "delta": None,
                       "importance_sampling_level": "token", "use_bias_correction_kl": True}
    assert rl.advantage == {"type": "grpo", "scale_rewards": "group"}  # TRL's default scaling
    assert rl.keep_empty_replies  # TRL trains a reply that is only its end token, with its reward
    trainer.train()
    assert trainer.state.global_step == 2
    for s in trainer.last_states:  # GRPOConfig's reward_weights weigh TRL's reward_funcs
        text = (s["completion"] or [{}])[-1].get("content") or ""
        assert s["reward"] == pytest.approx(0.5 * len(text) / 10)


def test_without_args_the_trl_way_in_takes_grpotrainers_default_config(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=lengths, train_dataset=PROMPTS)
    rl = trainer.args  # GRPOConfig("<model>-GRPO"): 8 rollouts of 8 prompts' worth, 3 epochs, lr 1e-6
    assert (rl.rollouts_per_example, rl.batch_size, rl.max_steps, rl.learning_rate) == (8, 8, 24, 1e-6)
    assert rl.output_dir == f"{tiny_model_dir.name}-GRPO" and rl.loss["type"] == "dapo"


def test_epochs_size_the_run_over_the_prompts_each_rollouts_per_example_times(tiny_model_dir, tmp_path):
    from verifiers_rl.envs.trl_compat import trl_environment

    env = trl_environment(PROMPTS, lengths)
    args = grpo(tmp_path, max_steps=-1, num_train_epochs=3)  # 8 prompts x 4 rollouts x 3 epochs / 8 a step
    assert rl_config_from(args, env).max_steps == 12
    with pytest.raises(SettingError, match=r"^args sizes the run by num_train_epochs=3, and the environment's "
                                           r"dataset has no length here .* set max_steps$"):
        rl_config_from(args, object())


def test_trls_eval_cadence_is_eval_steps_over_its_whole_eval_dataset(tiny_model_dir, tmp_path):
    from verifiers_rl.envs.trl_compat import trl_environment

    env = trl_environment(PROMPTS, lengths)  # 8 prompts x 4 rollouts = 4 steps of 8 an epoch
    rl = rl_config_from(grpo(tmp_path, eval_strategy="epoch", max_steps=-1, num_train_epochs=2), env)
    assert (rl.max_steps, rl.eval_steps, rl.eval_num_examples, rl.eval_rollouts_per_example) == (8, 4, -1, 4)
    assert rl_config_from(grpo(tmp_path, eval_strategy="steps", logging_steps=3), env).eval_steps == 3  # HF's rule
    assert rl_config_from(grpo(tmp_path, eval_strategy="no"), env).eval_steps is None
    held_out = [{"prompt": [{"role": "user", "content": f"held out {i}"}]} for i in range(3)]
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=lengths, train_dataset=PROMPTS, eval_dataset=held_out,
                           args=grpo(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1,
                                     num_generations_eval=2))
    trainer.train()
    assert trainer.state.log_history and trainer.last_eval["val/eval/num_rollouts"] == 3 * 2  # all of it, 2 each


@pytest.mark.parametrize("kw, key, says", [
    (dict(top_entropy_quantile=0.2), "top_entropy_quantile", "args: GRPOConfig's top_entropy_quantile=0.2 has no "
                                                             "counterpart here; what sets it: nothing"),
    (dict(num_iterations=2), "num_iterations", "args: GRPOConfig's num_iterations=2 has no counterpart "
                                             "here; what sets it: nothing: each batch"),
    (dict(steps_per_generation=2), "steps_per_generation", "args: GRPOConfig's steps_per_generation / "
                                                           "generation_batch_size reuse one generation"),
    (dict(sync_ref_model=True), "sync_ref_model", "args: GRPOConfig's sync_ref_model=True has no counterpart here"),
])
def test_what_a_grpoconfig_sets_with_no_counterpart_is_one_line(tmp_path, kw, key, says):
    with pytest.raises(SettingError) as e:
        rl_config_from(grpo(tmp_path, **kw), None)
    assert e.value.key == key and str(e.value).startswith(says) and "\n" not in str(e.value)


def test_trls_vllm_server_and_its_sampler_correction_carry_over(tmp_path):
    args = grpo(tmp_path, use_vllm=True, vllm_mode="server", vllm_server_base_url="http://gpu-node:8000",
                loss_type="grpo", importance_sampling_level="sequence", top_k=20, scale_rewards="batch")
    rl = rl_config_from(args, None)
    assert rl.inference_backend == "vllm" and rl.vllm_server_urls == ["http://gpu-node:8000"] and rl.top_k == 20
    assert rl.loss["importance_sampling_mode"] == "sequence_mask" and rl.loss["importance_sampling_clip_max"] == 3.0
    assert rl.loss["importance_sampling_level"] == "sequence" and rl.advantage["scale_rewards"] == "batch"


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"])
def test_the_kls_bias_correction_and_the_ratio_level_reach_every_trl_loss_type(tmp_path, loss_type):
    """TRL's use_bias_correction_kl (default true; before, false was refused) and importance_sampling_level (before,
    dropped in silence for dapo, bnpo, dr_grpo, cispo and vespo's KL; luspo's always 'sequence') as TRL reads them."""
    rl = rl_config_from(grpo(tmp_path, loss_type=loss_type, beta=0.04, importance_sampling_level="sequence",
                             use_bias_correction_kl=False), None)
    assert (rl.loss["use_bias_correction_kl"], rl.loss["importance_sampling_level"]) == (False, "sequence")
    config = rl.loss_config()
    assert (config.use_bias_correction_kl, config.importance_sampling_level) == (False, "sequence")
    default = rl_config_from(grpo(tmp_path, loss_type=loss_type), None).loss_config()
    assert (default.use_bias_correction_kl, default.importance_sampling_level) == (True, "token")  # luspo's too


def test_a_reply_that_is_only_its_end_token_trains_as_in_trl(tmp_path):
    """TRL trains an empty reply's end token with its reward; verifiers' default records EmptyModelResponseError
    and trains nothing there (before: so did a GRPOConfig). keep_empty_replies' tokens: test_classic_names.py."""
    assert rl_config_from(grpo(tmp_path), None).keep_empty_replies
    assert not vf.RLConfig(output_dir=str(tmp_path / "rl")).keep_empty_replies  # an RLConfig keeps verifiers' way


def test_args_of_another_kind_and_grpoconfigs_reward_weights_beside_an_environment_are_one_line(tiny_model_dir,
                                                                                                 tmp_path):
    plain = TrainingArguments(output_dir=str(tmp_path / "o"), use_cpu=True)
    with pytest.raises(TypeError, match="^args must be an RLConfig .or TRL's GRPOConfig., not TrainingArguments; "
                                        "vf.RLConfig takes TrainingArguments' fields too$"):
        vf.RLTrainer(str(tiny_model_dir), reward_funcs=lengths, args=plain, train_dataset=PROMPTS)
    with pytest.raises(SettingError, match="^args: GRPOConfig's reward_weights: the environment rubric's weights"):
        vf.RLTrainer(str(tiny_model_dir), vf.load_environment("reverse-text"), args=grpo(tmp_path, reward_weights=[1]))


def _peft_model(model_dir, adapter_dir=None):
    """A LoRA PeftModel of the tiny model: a fresh adapter, or (adapter_dir) that one saved and loaded back as
    PeftModel.from_pretrained loads it by default, frozen."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            task_type="CAUSAL_LM"))
    if adapter_dir is None:
        return model
    model.save_pretrained(str(adapter_dir))
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(model_dir)), str(adapter_dir))


def test_a_peftmodel_given_without_peft_config_trains_its_adapter(tiny_model_dir, tmp_path):
    """As TRL's GRPOTrainer: the adapter of a PeftModel passed as `model` is what trains (before: the adapter was
    merged into the base and every weight trained, in silence); the KL's reference is the base with the adapter
    off, and the local engine serves the trained adapter."""
    import torch

    model = _peft_model(tiny_model_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = vf.RLTrainer(model, reward_funcs=lengths, args=grpo(tmp_path, learning_rate=1e-2, beta=0.04),
                           train_dataset=PROMPTS)
    assert trainer.args.use_lora and trainer.model is model and trainer.ref_model is None
    trainer.train()
    assert trainer.state.global_step == 2
    kl = [h["ref_kl/mean"] for h in trainer.state.log_history if "ref_kl/mean" in h]  # to the adapter-off base
    assert kl[0] == pytest.approx(0, abs=1e-6) and kl[-1] > 0
    after = dict(trainer.model.named_parameters())
    assert after.keys() == before.keys()
    changed = {n for n, p in after.items() if not torch.equal(p.detach(), before[n])}
    assert changed and all("lora_" in n for n in changed), sorted(changed)[:4]
    assert all(torch.equal(after[n].detach(), before[n]) for n in before if "lora_" not in n)  # the base: as it was
    ids = torch.randint(3, 250, (2, 9))
    with torch.no_grad():
        served, policy = trainer.inference.engine.model.eval()(ids).logits, trainer.model.eval()(ids).logits
    assert torch.allclose(served, policy, atol=1e-5)
    trainer.close()


def test_a_frozen_peftmodel_adapter_is_one_line_and_use_lora_false_says_it_merges(tiny_model_dir, tmp_path, capsys):
    """PeftModel.from_pretrained's default (is_trainable=False) leaves nothing to train: TRL runs steps that change
    nothing, here it is one line. An RLConfig's use_lora=False merges the adapter and trains every weight, said."""
    frozen = _peft_model(tiny_model_dir, tmp_path / "adapter")
    with pytest.raises(ValueError, match=r"^the model's PEFT adapter is frozen .*is_trainable=True$"):
        vf.RLTrainer(frozen, reward_funcs=lengths, args=grpo(tmp_path), train_dataset=PROMPTS)
    args = vf.RLConfig(output_dir=str(tmp_path / "full"), use_lora=False, max_steps=1, batch_size=8,
                       rollouts_per_example=4, max_tokens=6, report_to="none")
    trainer = vf.RLTrainer(_peft_model(tiny_model_dir), reward_funcs=lengths, args=args, train_dataset=PROMPTS)
    assert "note: use_lora=False: the model's PEFT adapter is merged into its base" in capsys.readouterr().out
    assert not hasattr(trainer.model, "peft_config") and all(p.requires_grad for p in trainer.model.parameters())
    trainer.close()


def test_generation_kwargs_set_the_sampling_settings_they_name(tmp_path):
    """TRL's generation_kwargs override its sampling settings; here the keys with a counterpart set it, over the
    config's own fields (before: any key was refused), and any other key is one line naming it."""
    rl = rl_config_from(grpo(tmp_path, top_k=0, generation_kwargs={"max_new_tokens": 5, "top_k": 3, "min_p": 0.1}),
                        None)
    assert (rl.max_tokens, rl.top_k, rl.min_p) == (5, 3, 0.1)
    with pytest.raises(SettingError, match=r"generation_kwargs key 'num_beams' has no counterpart here; the keys it "
                                           r"takes: temperature, top_p"):
        rl_config_from(grpo(tmp_path, generation_kwargs={"num_beams": 2}), None)
