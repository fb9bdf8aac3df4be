import dataclasses
import os
import re
import typing
import warnings
from pathlib import Path

import pytest
import torch

from verifiers_rl.trainer.advantage_types.grpo import GRPOAdvantageConfig
from verifiers_rl.trainer.typed_table import resolve_advantage
from verifiers_rl.trainer.buffer import BufferConfig
from verifiers_rl.trainer.config import DEFAULT_LORA_TARGET_MODULES, RLConfig
from verifiers_rl.trainer.loss import LossConfig

# Small, valid base: 32 rollouts = 4 prompts x 8, micro-batches of 8 on one process.
BASE = dict(batch_size=32, micro_batch_size=8, rollouts_per_example=8)


def make(tmp_path, **kwargs):
    return RLConfig(output_dir=str(tmp_path / "run"), **{**BASE, **kwargs})


def test_defaults(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # e.g. transformers' gradient_checkpointing deprecation
        cfg = RLConfig(output_dir=str(tmp_path / "my-run"))
    assert (cfg.micro_batch_size, cfg.rollouts_per_example, cfg.batch_size, cfg.max_steps) == (8, 16, 512, 500)
    assert (cfg.max_tokens, cfg.max_seq_len, cfg.max_prompt_len) == (None, 2048, 512)
    assert cfg.learning_rate == 1e-5 and str(cfg.lr_scheduler_type.value) == "constant" and cfg.warmup_steps == 0
    assert cfg.use_lora and (cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout) == (8, 32, 0.0)
    assert cfg.lora_target_modules == DEFAULT_LORA_TARGET_MODULES and cfg.lora_modules_to_save is None
    assert (cfg.temperature, cfg.top_p, cfg.top_k, cfg.min_p, cfg.repetition_penalty) == (1.0, 1.0, None, 0.0, 1.0)
    assert (cfg.max_concurrent, cfg.max_async_level) == (1024, 1)
    assert cfg.mask_env_responses and not cfg.mask_truncated_completions and not cfg.zero_truncated_completions
    assert cfg.loss_config() == LossConfig(mask_ratio_low=0.125, mask_ratio_high=8.0, kl_tau=0.0, beta=0.0)
    assert resolve_advantage(cfg)[1] == GRPOAdvantageConfig(scale_rewards="none")
    assert not cfg.gradient_checkpointing and not cfg.bf16
    assert cfg.report_to == [] and cfg.wandb is None
    assert cfg.run_name == "my-run"  # derived from output_dir
    assert (cfg.save_steps, cfg.save_total_limit, cfg.logging_steps, cfg.seed) == (50, None, 1, 42)
    assert (cfg.eval_steps, cfg.eval_num_examples, cfg.eval_rollouts_per_example) == (None, 64, 1)
    assert not cfg.eval_on_start and cfg.eval_temperature is None
    assert cfg.inference_backend == "auto" and cfg.vllm_server_host == "127.0.0.1" and cfg.vllm_server_port is None
    assert cfg.vllm_server_urls is None and cfg.vllm_server_timeout == 300.0 and cfg.generation_timeout == 600.0
    assert not cfg.enable_token_export and cfg.shuffle_dataset and cfg.sample_log_interval == 10
    # transformers plumbing
    assert cfg.per_device_train_batch_size == 8 and cfg.gradient_accumulation_steps == 1
    assert not cfg.remove_unused_columns
    assert cfg.eval_strategy.value == "no" and cfg.save_strategy.value == "steps"
    assert cfg.logging_strategy.value == "steps"
    assert cfg.use_cpu == (not torch.cuda.is_available())


def test_run_name_and_output_dir_defaults():
    cfg = RLConfig(**BASE)
    assert re.fullmatch(r"vf-rl-\d{8}-\d{6}", cfg.run_name)
    assert cfg.output_dir == os.path.join("outputs", cfg.run_name)
    named = RLConfig(run_name="exp1", **BASE)
    assert named.output_dir == os.path.join("outputs", "exp1")


def test_micro_batch_size_sets_per_device_batch(tmp_path):
    assert make(tmp_path, micro_batch_size=4).per_device_train_batch_size == 4


def test_gradient_checkpointing_maps_without_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        cfg = make(tmp_path, gradient_checkpointing=True)
    assert cfg.gradient_checkpointing
    if hasattr(cfg, "activation_checkpointing"):
        assert cfg.activation_checkpointing


def test_wandb_table_turns_on_reporting(tmp_path, monkeypatch):
    from verifiers_rl.trainer.run_settings import export_wandb_env

    monkeypatch.setenv("WANDB_PROJECT", "old")  # monkeypatch restores both afterwards
    monkeypatch.setenv("WANDB_ENTITY", "old")
    cfg = RLConfig(**BASE, wandb={"project": "vf", "entity": "team", "name": "reverse-1"})
    assert cfg.report_to == ["wandb"]
    assert os.environ["WANDB_PROJECT"] == "old"  # building the config leaves the environment alone
    export_wandb_env(cfg)  # RLTrainer.train does this when training starts
    assert os.environ["WANDB_PROJECT"] == "vf" and os.environ["WANDB_ENTITY"] == "team"
    assert cfg.run_name == "reverse-1"
    assert cfg.output_dir == os.path.join("outputs", "reverse-1")


def test_wandb_table_keeps_other_integrations(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "keep")
    cfg = make(tmp_path, report_to="tensorboard", wandb={"name": "x"}, run_name="explicit")
    assert cfg.report_to == ["tensorboard", "wandb"]
    assert cfg.run_name == "explicit"  # an explicit run_name wins over wandb.name
    from verifiers_rl.trainer.run_settings import export_wandb_env

    export_wandb_env(cfg)
    assert os.environ["WANDB_PROJECT"] == "keep"  # no project key: environment untouched


def test_sampling_args(tmp_path):
    cfg = make(tmp_path)
    # every knob named, at its neutral value when off: no server fills one from the checkpoint's generation config
    assert cfg.sampling_args() == {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0,
                                   "frequency_penalty": 0.0,
                                   "extra_body": {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}}
    # max_tokens None: whatever the prompt leaves of max_seq_len, 2048 - 100 = 1948
    assert cfg.sampling_args(prompt_len=100)["max_tokens"] == 1948
    cfg = make(
        tmp_path, temperature=0.7, top_p=0.9, max_tokens=128, max_seq_len=200, max_prompt_len=100,
        top_k=20, min_p=0.05, eval_temperature=0.0,
    )
    assert cfg.sampling_args() == {
        "temperature": 0.7,
        "top_p": 0.9,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 128,
        "extra_body": {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.0},
    }
    # capped so prompt + completion fit: min(128, 200 - 90) = 110
    assert cfg.sampling_args(prompt_len=90)["max_tokens"] == 110
    assert cfg.sampling_args(for_eval=True)["temperature"] == 0.0
    assert make(tmp_path, top_k=-1).sampling_args()["extra_body"]["top_k"] == -1
    # an sft teacher (any OpenAI-compatible API) is sent only the knobs that are on
    from verifiers_rl.plan.sampling import without_neutral

    assert without_neutral(make(tmp_path).sampling_args()) == {"temperature": 1.0, "top_p": 1.0}
    assert without_neutral(cfg.sampling_args())["extra_body"] == {"top_k": 20, "min_p": 0.05}
    # a penalty the trainer cannot re-apply is one line before anything runs
    with pytest.raises(ValueError, match="repetition_penalty=1.1: .*set repetition_penalty = 1.0") as err:
        make(tmp_path, repetition_penalty=1.1)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="max_seq_len"):
        cfg.sampling_args(prompt_len=200)


def test_vllm_server_urls_accepts_a_string(tmp_path):
    assert make(tmp_path, vllm_server_urls="http://h:8000/v1").vllm_server_urls == ["http://h:8000/v1"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(batch_size=48, micro_batch_size=32, rollouts_per_example=16),
            r"batch_size=48 .*micro_batch_size x world_size = 32 x 1",
        ),
        (dict(batch_size=36), r"batch_size=36 must be a multiple of rollouts_per_example=8"),
        (dict(rollouts_per_example=1, batch_size=32), r"rollouts_per_example=1 must be >= 2"),
        (dict(micro_batch_size=0), r"micro_batch_size=0 must be a positive integer"),
        (dict(max_steps=-1), r"max_steps=-1 must be a positive integer: RL runs that many steps"),
        (dict(learning_rate=-1e-3), r"learning_rate=-0.001 must be >= 0"),
        (dict(use_lora=True, lora_rank=0), r"lora_rank=0 must be >= 1"),
        (dict(use_lora=True, lora_alpha=0), r"lora_alpha=0 must be > 0"),
        (dict(use_lora=True, lora_dropout=1.0), r"lora_dropout=1.0 must be in \[0, 1\)"),
        (dict(loss={"beta": -0.1}), r"loss.beta=-0.1 must be >= 0"),
        (dict(temperature=-1.0), r"temperature=-1.0 must be >= 0 \(0: greedy sampling\)"),
        (dict(eval_temperature=-0.5), r"eval_temperature"),
        (dict(top_p=0.0), r"top_p"),
        (dict(max_tokens=2048), r"max_tokens=2048 must be in \[1, max_seq_len=2048\)"),
        (dict(max_tokens=4096, max_seq_len=1024), r"max_tokens=4096"),
        (dict(max_prompt_len=2048), r"max_prompt_len=2048 must be < max_seq_len"),
        (dict(use_lora=False, lora_rank=16), r"lora_rank is set but use_lora=False"),
        (dict(use_lora=False, lora_alpha=64), r"lora_alpha is set but use_lora=False"),
        (dict(use_lora=False, lora_dropout=0.1), r"lora_dropout is set but use_lora=False"),
        (dict(use_lora=False, lora_target_modules="all-linear"), r"lora_target_modules is set but use_lora=False"),
        (dict(use_lora=False, lora_modules_to_save=["lm_head"]), r"lora_modules_to_save is set but use_lora=False"),
        (dict(lora_target_modules=3), r"lora_target_modules=3 must be"),
        (dict(advantage={"scale_rewards": "std"}), r"advantage.scale_rewards='std' is not one of none, group, batch"),
        (dict(inference_backend="sglang"), r"inference_backend='sglang' is not one of auto, local, vllm"),
        (dict(max_async_level=-1), r"max_async_level=-1 must be >= 0"),
        (dict(loss={"mask_ratio_low": 1.5}), r"loss.mask_ratio_low=1.5 and loss.mask_ratio_high=8.0 must satisfy"),
        (dict(loss={"mask_ratio_high": 0.9}), r"loss.mask_ratio_high=0.9 must satisfy"),
        (dict(loss={"mask_ratio_low": -0.1}), r"loss.mask_ratio_low=-0.1"),
        (dict(gradient_accumulation_steps=4), r"gradient_accumulation_steps=4 must be 1"),
        (dict(per_device_train_batch_size=2), r"per_device_train_batch_size=2 is set from micro_batch_size"),
        (dict(num_train_epochs=2), r"num_train_epochs=2 does not apply: RL runs max_steps optimizer steps"),
        (dict(eval_strategy="steps"), r"eval_strategy='steps' must be 'no'"),
        (dict(eval_steps=0), r"eval_steps=0"),
        (dict(wandb={"project": "p", "team": "t"}), r"wandb has unknown key\(s\) team"),
        (dict(wandb="proj"), r"wandb must be a table"),
    ],
)
def test_validators_raise_one_clear_line(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match) as err:
        make(tmp_path, **kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key, value, hint", [("num_generations", 8, "rollouts_per_example"),
                                             ("max_completion_length", 64, "max_tokens"),
                                             ("loss_type", "dapo", "loss (loss = 'dapo'"),
                                             ("delta", 2.0, "the loss table's delta (loss = {type = 'grpo'"),
                                             ("vllm_importance_sampling_mode", "token_truncate",
                                              "the loss table's importance_sampling_mode"),
                                             ("vespo_k_pos", 2.0, "the loss table's k_pos (loss = {type = 'vespo'"),
                                             ("num_generations_eval", 4, "eval_rollouts_per_example"),
                                             ("steps_per_generation", 2, "nothing: each batch of rollouts"),
                                             # TRL's vLLM settings: 'unexpected keyword' / vf-rl's 'did you mean
                                             # generation_timeout?' before
                                             ("generation_kwargs", {"top_k": 20}, "temperature, top_p, top_k"),
                                             ("vllm_gpu_memory_utilization", 0.5,
                                              "[inference] gpu_memory_utilization"),
                                             ("vllm_max_model_length", 1024, "max_seq_len")])
def test_a_trl_name_says_what_sets_it_here(tmp_path, key, value, hint):
    with pytest.raises(TypeError) as err:
        make(tmp_path, **{key: value})
    assert str(err.value).startswith(f"RLConfig has no {key} (TRL's GRPOConfig name): set {hint}")


def test_every_field_trls_grpo_config_adds_is_ours_or_says_what_sets_it(tmp_path):
    # Before: 28 of them (model_init_kwargs, sync_ref_model, use_transformers_paged, ...) were Python's bare
    # "unexpected keyword argument" (TRL is installed beside us: its GRPOConfig, read here, is the reference).
    from transformers import TrainingArguments
    from trl import GRPOConfig

    from verifiers_rl.trainer.trl_names import TRL_NAMES

    ours = {f.name for f in dataclasses.fields(RLConfig)}
    theirs = {f.name for f in dataclasses.fields(GRPOConfig)} - {f.name for f in dataclasses.fields(TrainingArguments)}
    assert sorted(theirs - ours - TRL_NAMES.keys()) == []
    for key in ("model_init_kwargs", "sync_ref_model", "use_transformers_paged", "max_tool_calling_iterations"):
        with pytest.raises(TypeError, match=f"^RLConfig has no {key} \\(TRL's GRPOConfig name\\): set "):
            make(tmp_path, **{key: 1})


def test_lora_options_at_default_values_are_fine_without_lora(tmp_path):
    cfg = make(tmp_path, use_lora=False, lora_rank=8, lora_target_modules=list(DEFAULT_LORA_TARGET_MODULES))
    assert not cfg.use_lora
    assert make(tmp_path, lora_target_modules="all-linear").lora_target_modules == "all-linear"


def test_bf16_constructs_on_cpu(tmp_path):
    cfg = make(tmp_path, bf16=True, use_cpu=True)
    assert cfg.bf16 and cfg.use_cpu


def test_buffer_settings_are_rl_config_fields(tmp_path):
    """BufferSettings declares them once: each is an RLConfig field with the same type, default and help, and
    `buffer_config()` carries a run's values over."""
    rl_fields, rl_hints = {f.name: f for f in dataclasses.fields(RLConfig)}, typing.get_type_hints(RLConfig)
    hints = typing.get_type_hints(BufferConfig)
    for f in dataclasses.fields(BufferConfig):
        rl = rl_fields[f.name]
        assert (rl.default, rl_hints[f.name]) == (f.default, hints[f.name]), f.name
        assert rl.metadata["help"] == f.metadata["help"] and f.metadata["help"], f.name
    assert make(tmp_path).buffer_config() == BufferConfig()
    cfg = make(tmp_path, online_difficulty_filtering=True, oversampling_factor=2.0, easy_threshold=0.9,
               hard_fraction=0.5)
    assert cfg.buffer_config() == BufferConfig(online_difficulty_filtering=True, oversampling_factor=2.0,
                                               easy_threshold=0.9, hard_fraction=0.5)


DEPRECATED = [("mask_ratio_low", "loss", 0.2), ("mask_ratio_high", "loss", 4.0), ("kl_tau", "loss", 0.01),
              ("beta", "loss", 0.1), ("scale_rewards", "advantage", "group")]


@pytest.mark.parametrize("key, section, value", DEPRECATED, ids=[d[0] for d in DEPRECATED])
def test_a_deprecated_top_level_loss_key_warns_once_and_builds_what_the_table_builds(tmp_path, monkeypatch, key,
                                                                                      section, value):
    """One spelling per knob: `loss.<key>` / `advantage.scale_rewards`. The top-level spelling still works for one
    release: one FutureWarning per process naming the new spelling, pointing at the caller's line, and the same
    config as the table's."""
    from verifiers_rl.trainer import typed_table

    monkeypatch.setattr(typed_table, "_WARNED", set())
    new = make(tmp_path, **{section: {key: value}})
    with pytest.warns(FutureWarning) as caught:
        old = make(tmp_path, **{key: value})
        make(tmp_path, **{key: value})  # a second RLConfig in the same process: no second warning
    assert len(caught) == 1 and caught[0].filename == __file__, [str(w.message) for w in caught]
    assert f"RLConfig's {key} is deprecated: set {section}.{key} instead" in str(caught[0].message)
    built = (lambda c: c.loss_config()) if section == "loss" else (lambda c: resolve_advantage(c)[1])
    assert built(old) == built(new) and getattr(built(new), key) == value
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        make(tmp_path, **{section: {key: value}})  # the table's spelling: no warning


def test_the_weight_transfer_help_names_every_valid_value():
    from verifiers_rl.plan.transfer import TRANSFERS

    help_text = {f.name: f for f in dataclasses.fields(RLConfig)}["vllm_weight_transfer"].metadata["help"]
    assert [t for t in TRANSFERS if f"'{t}'" not in help_text] == []
    docs = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `vllm_weight_transfer` |"))
    assert [t for t in TRANSFERS if f"'{t}'" not in row] == []
