"""TRL's GRPOConfig as RLTrainer's `args`: read into the RLConfig it means, TRL's
own defaults included (learning_rate 1e-6, bf16, the dapo loss, group-scaled advantages, 8 generations of up to 512
tokens), and said in one line. A field with no meaning here, set away from TRL's default, is one line naming what
sets it (trl_names.py); so is a run sized by epochs over an environment whose dataset has no length."""

from __future__ import annotations

import math
import warnings
from dataclasses import fields
from typing import Any

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.config_fields import field_default
from verifiers_rl.trainer.trl_names import TRL_NAMES

RENAMED = {"num_generations": "rollouts_per_example", "max_completion_length": "max_tokens"}
SAME_NAME = ("temperature", "top_p", "repetition_penalty", "chat_template_kwargs", "mask_truncated_completions",
             "disable_dropout", "shuffle_dataset")
VLLM_SERVER = ("vllm_server_host", "vllm_server_port", "vllm_server_timeout")  # read with use_vllm=True
# GRPOConfig field -> the loss table's key (kept where the chosen loss type has that key)
LOSS_KEYS = {"beta": "beta", "epsilon": "epsilon_low", "epsilon_high": "epsilon_high", "delta": "delta",
             "importance_sampling_level": "importance_sampling_level",
             "use_bias_correction_kl": "use_bias_correction_kl",
             "sapo_temperature_pos": "temperature_pos", "sapo_temperature_neg": "temperature_neg",
             **{f"vespo_{k}": k for k in ("k_pos", "k_neg", "lambda_pos", "lambda_neg")}}
VLLM_CORRECTION = ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                   "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max",
                   "vllm_importance_sampling_cap")
# generation_kwargs keys (TRL's: they override the sampling settings) -> the RLConfig field each sets
GENERATION_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                   "repetition_penalty": "repetition_penalty", "max_tokens": "max_tokens",
                   "max_new_tokens": "max_tokens"}
READ = {*RENAMED, *SAME_NAME, *VLLM_SERVER, *LOSS_KEYS, *VLLM_CORRECTION, "loss_type", "scale_rewards", "top_k", "min_p",
        "num_generations_eval", "use_vllm", "vllm_mode", "vllm_server_base_url", "reward_weights", "log_completions",
        "generation_batch_size", "steps_per_generation", "generation_kwargs"}
# TrainingArguments fields set here from others (the batch), or by RLTrainer itself
MANAGED = {"per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
           "output_dir", "eval_strategy", "eval_steps"}


def trl_default_args(model: Any) -> Any:
    """The args GRPOTrainer makes when given none, `GRPOConfig("<model name>-GRPO")`; without CUDA (where that
    config refuses to start: bf16 needs a GPU) on the CPU in fp32."""
    import torch
    from trl import GRPOConfig

    name = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "model")
    cpu = {} if torch.cuda.is_available() else {"use_cpu": True, "bf16": False}
    with warnings.catch_warnings():  # TRL's own defaults' deprecation notes, not the user's doing
        warnings.simplefilter("ignore")
        return GRPOConfig(f"{str(name).rstrip('/').split('/')[-1]}-GRPO", **cpu)


def is_trl_args(args: Any) -> bool:
    """TRL's GRPOConfig or a subclass of it (without importing TRL)."""
    return any(c.__name__ == "GRPOConfig" for c in type(args).__mro__)


def _trainer_fields(args: Any, config_type: type) -> dict[str, Any]:
    """The TrainingArguments fields TRL or the user moved from transformers' defaults (as __post_init__ left them),
    and those whose default RLConfig changes (lr_scheduler_type constant, save_steps 50, ...): TRL's value stated."""
    from transformers import TrainingArguments

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = TrainingArguments(output_dir=args.output_dir, use_cpu=args.use_cpu)
    ours = {f.name: field_default(f) for f in fields(config_type) if f.init}
    return {f.name: getattr(args, f.name) for f in fields(TrainingArguments)
            if f.init and f.name in ours and f.name not in MANAGED
            and (getattr(args, f.name) != getattr(plain, f.name) or ours[f.name] != field_default(f))}


def _unread(args: Any) -> None:
    """One line for a GRPOConfig field this trainer has no way to honour, set away from TRL's default."""
    from transformers import TrainingArguments

    base = {f.name for f in fields(TrainingArguments)}
    try:  # TRL's defaults as its __post_init__ leaves them for this batch
        same = ("output_dir", "use_cpu", "bf16", "fp16", "per_device_train_batch_size", "gradient_accumulation_steps",
                "num_generations", "use_vllm", "vllm_mode")
        with warnings.catch_warnings():  # the user's config warned already
            warnings.simplefilter("ignore")
            plain = type(args)(**{k: getattr(args, k) for k in same})
    except Exception:  # noqa: BLE001 - then the fields' declared defaults
        plain = None
    for f in fields(args):
        if f.name in base or f.name in READ or not f.init:
            continue
        if getattr(args, f.name) != (getattr(plain, f.name) if plain is not None else field_default(f)):
            raise SettingError(f.name, f"args: GRPOConfig's {f.name}={getattr(args, f.name)!r} has no counterpart "
                                       f"here; what sets it: {TRL_NAMES.get(f.name, 'nothing')}")
    per_step = args.per_device_train_batch_size * args.world_size
    if args.steps_per_generation not in (None, args.gradient_accumulation_steps) or (
            args.generation_batch_size not in (None, per_step * args.gradient_accumulation_steps)):
        raise SettingError("steps_per_generation", "args: GRPOConfig's steps_per_generation / generation_batch_size "
                           "reuse one generation for several optimizer steps; here each batch of rollouts is one "
                           "step (batch_size = per_device_train_batch_size x gradient_accumulation_steps x devices): "
                           "leave them unset")


def _loss_and_advantage(args: Any) -> dict[str, Any]:
    from verifiers_rl.trainer.typed_table import get_loss

    kind = args.loss_type
    keys = {f.name for f in fields(get_loss(kind).config)}
    resolved = {**{k: getattr(args, k) for k in LOSS_KEYS},
                "epsilon_high": args.epsilon if args.epsilon_high is None else args.epsilon_high}  # TRL's rule
    loss = {"type": kind, **{LOSS_KEYS[k]: v for k, v in resolved.items() if LOSS_KEYS[k] in keys}}
    if args.use_vllm and args.vllm_importance_sampling_correction:  # TRL corrects only vLLM's samples
        cap = args.vllm_importance_sampling_cap
        loss.update(importance_sampling_mode=args.vllm_importance_sampling_mode,
                    importance_sampling_clip_min=args.vllm_importance_sampling_clip_min,
                    importance_sampling_clip_max=args.vllm_importance_sampling_clip_max if cap is None else cap)
    scale = {True: "group", False: "none"}.get(args.scale_rewards, args.scale_rewards)
    return {"loss": loss, "advantage": {"type": "grpo", "scale_rewards": scale}}


def _grpo_fields(args: Any) -> dict[str, Any]:
    _unread(args)
    kw = {ours: getattr(args, trl) for trl, ours in RENAMED.items()}
    kw.update({k: getattr(args, k) for k in SAME_NAME}, **_loss_and_advantage(args))
    kw["top_k"] = args.top_k or None  # TRL's 0 is off
    kw["min_p"] = args.min_p or 0.0
    for key, value in (args.generation_kwargs or {}).items():  # TRL's: over the settings above
        if key not in GENERATION_KEYS:
            raise SettingError("generation_kwargs", f"args: GRPOConfig's generation_kwargs key {key!r} has no "
                               f"counterpart here; the keys it takes: {', '.join(GENERATION_KEYS)}")
        kw[GENERATION_KEYS[key]] = value
    kw["eval_rollouts_per_example"] = args.num_generations_eval or args.num_generations
    kw["keep_empty_replies"] = True  # TRL trains a reply that is only its end token, with its reward
    if args.log_completions:
        kw["sample_log_interval"] = 1
    if args.use_vllm:
        kw["inference_backend"] = "vllm"
        kw.update({k: getattr(args, k) for k in VLLM_SERVER})
        if args.vllm_mode == "server" and args.vllm_server_base_url:
            kw["vllm_server_urls"] = [args.vllm_server_base_url]
    return kw


def _steps(args: Any, env: Any, batch_size: int, group: int) -> tuple[int, int | None]:
    """(TRL's max_steps, or its num_train_epochs passes over the environment's prompts, each `group` times; the
    steps of one such pass, None for a dataset without a length)."""
    prompts = 0  # TRL's rule when the environment writes the prompts (placeholder rows): no epochs
    if not getattr(env, "trl_placeholder", False):
        try:
            prompts = len(env.get_dataset())
        except Exception:  # noqa: BLE001 - an environment without a sized dataset
            pass
    epoch = max(1, math.ceil(prompts * group / batch_size)) if prompts else None
    if args.max_steps > 0:
        return args.max_steps, epoch
    if epoch is None:
        raise SettingError("max_steps", f"args sizes the run by num_train_epochs={args.num_train_epochs}, and the "
                                        "environment's dataset has no length here (or there is no train_dataset: "
                                        "the environment writes the prompts); set max_steps")
    return max(1, math.ceil(args.num_train_epochs * epoch)), epoch


def _eval_fields(args: Any, max_steps: int, epoch: int | None) -> dict[str, Any]:
    """TRL's evaluation cadence (eval_strategy steps / epoch) as eval_steps, over its whole eval dataset."""
    strategy = str(getattr(args.eval_strategy, "value", args.eval_strategy))
    if strategy == "no":
        return {}
    every = (args.eval_steps or args.logging_steps) if strategy == "steps" else epoch
    if every is None:
        raise SettingError("eval_strategy", "args evaluates every epoch and the environment's dataset has no length "
                                            "here; set eval_strategy='steps' and eval_steps")
    every = math.ceil(every * max_steps) if every < 1 else int(every)  # transformers: < 1 is a share of the run
    return {"eval_steps": max(1, every), "eval_num_examples": -1}


def rl_config_from(args: Any, env: Any, lora: bool = False) -> Any:
    """The RLConfig a GRPOConfig means, and one note line saying so: full fine-tuning
    unless `lora` (RLTrainer was given a peft_config, or a model carrying an adapter), as TRL's."""
    from verifiers_rl.trainer.config import RLConfig

    kw = {**_trainer_fields(args, RLConfig), **_grpo_fields(args)}
    group = kw["rollouts_per_example"]
    kw["use_lora"] = lora
    kw["micro_batch_size"] = args.per_device_train_batch_size
    kw["batch_size"] = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    kw["max_steps"], epoch = _steps(args, env, kw["batch_size"], group)
    kw.update(_eval_fields(args, kw["max_steps"], epoch))
    config = RLConfig(output_dir=args.output_dir, **kw)
    shown = ", ".join(f"{k}={kw[k]!r}" for k in ("batch_size", "micro_batch_size", "max_steps", "rollouts_per_example",
                                                   "max_tokens", "learning_rate", "use_lora", "bf16", "loss",
                                                   "advantage") if k in kw)
    if config.process_index == 0:
        print(f"note: args is {type(args).__name__}, read as RLConfig({shown}, ...): RLTrainer.args is the RLConfig",
              flush=True)
    return config
