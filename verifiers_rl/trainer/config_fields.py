"""RLConfig's own fields (the batch, lengths, sampling, LoRA, loss, mode, inference, ...) with their defaults, help
and rules, without transformers: `RLFields`. `RLConfig` (trainer/config.py) is `RLFields` on top of transformers'
`TrainingArguments`; vf-rl's own process checks a config with `RLFields` and transformers' fields read from its source
(config/trainer_args.py) before it launches the trainer, which builds the RLConfig."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from verifiers_rl.errors import SettingError
from verifiers_rl.plan.inference import INFERENCE_BACKENDS
from verifiers_rl.plan.sampling import training_problem
from verifiers_rl.trainer.buffer import BufferConfig, BufferSettings
from verifiers_rl.trainer.checkpoints import CheckpointSettings
from verifiers_rl.trainer.modes import mode_problem
from verifiers_rl.trainer.optim_settings import optimizer_problem
from verifiers_rl.trainer.typed_table import DEPRECATED_KEYS, check_advantage, check_loss, learns_alone, resolve_loss
from verifiers_rl.trainer.run_settings import resolve_run_settings, wandb_problem

DEFAULT_LORA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DEFAULT_MAX_PROMPT_LEN = 512  # when neither max_prompt_len nor max_tokens is set (and max_seq_len allows it)
# LoRA options: changing one from its default while use_lora=False is a mistake worth a clear error.
_LORA_OPTIONS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save")



def _deprecated(name: str) -> Any:
    """RLConfig's field for a deprecated spelling of ``<section>.<name>`` (``typed_table.DEPRECATED_KEYS``): None
    (unset); set, it fills that key with one warning (``typed_table.build_config``)."""
    section = DEPRECATED_KEYS[name]
    return field(default=None, metadata={"help": f"Deprecated: set {section}.{name} instead (this spelling keeps "
                                                 "working for one release, with a warning)."})


def field_default(f: Any) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _fail(key: str, msg: str) -> None:
    raise SettingError(key, msg)


@dataclass
class RLFields(CheckpointSettings, BufferSettings):
    """RLConfig's own fields and rules (RLConfig's docstring says what they mean together); the checkpoint and
    difficulty-buffer fields are declared by the base classes."""

    # --- Batch shape -------------------------------------------------------------------------------------------------
    micro_batch_size: int = field(
        default=8,
        metadata={"help": "Rollouts per forward/backward pass on each device (sets per_device_train_batch_size)."},
    )
    rollouts_per_example: int = field(
        default=16,
        metadata={"help": "Rollouts sampled per prompt; the group over which advantages are centred (>= 2)."},
    )
    batch_size: int = field(
        default=512,
        metadata={"help": "Rollouts per optimizer step, across all devices; a multiple of rollouts_per_example and of "
                  "micro_batch_size x world_size."},
    )
    max_steps: int = field(default=500, metadata={"help": "Optimizer steps to train for."})

    # --- Sequence lengths --------------------------------------------------------------------------------------------
    max_tokens: int | None = field(
        default=None,
        metadata={"help": "Max new tokens per model turn. None: up to max_seq_len minus the prompt length."},
    )
    max_seq_len: int = field(
        default=2048, metadata={"help": "Max tokens of prompt + completion in one training sample."}
    )
    max_prompt_len: int | None = field(
        default=None,
        metadata={"help": "Max prompt tokens; a rollout with a longer prompt carries no loss (metric prompt_too_long). "
                  "None: max_seq_len - max_tokens, or min(512, max_seq_len // 2) when max_tokens is None."},
    )

    # --- Optimizer ---------------------------------------------------------------------------------------------------
    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate."})
    lr_scheduler_type: str = field(
        default="constant", metadata={"help": "transformers scheduler name (constant, linear, cosine, ...)."}
    )
    warmup_steps: float = field(
        default=0, metadata={"help": "Linear warm-up steps (an int), or a fraction of max_steps if < 1."}
    )

    # --- LoRA --------------------------------------------------------------------------------------------------------
    use_lora: bool = field(default=True, metadata={"help": "Train a LoRA adapter (True) or all weights (False)."})
    lora_rank: int = field(default=8, metadata={"help": "LoRA rank r."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling alpha (effective scale alpha / r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: list[str] | str = field(
        default_factory=lambda: list(DEFAULT_LORA_TARGET_MODULES),
        metadata={"help": "Module names that get LoRA layers, or 'all-linear'."},
    )
    lora_modules_to_save: list[str] | None = field(
        default=None,
        metadata={"help": "Modules trained in full and saved with the adapter (e.g. ['lm_head'])."},
    )

    disable_dropout: bool = field(default=True, metadata={
        "help": "Dropout off in the policy's own layers (TRL's name; its default is False): the trainer's log-probs "
                "are compared with the sampler's, which has none. lora_dropout is kept."})

    # --- Sampling ----------------------------------------------------------------------------------------------------
    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature (>= 0); the trainer divides logits by it too. 0: greedy "
                                       "sampling, the trainer's log-probs at temperature 1 (a group's greedy rollouts "
                                       "are alike: rl learns little; opd/sft can)"}
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling threshold in (0, 1]; below 1 the trainer "
                                                        "scores over the same nucleus."})
    top_k: int | None = field(default=None, metadata={"help": "Top-k sampling; None or -1 disables it. The trainer "
                                                              "scores over the same top k (docs/vllm.md)."})
    min_p: float = field(default=0.0, metadata={"help": "Min-p sampling threshold; 0 disables it. The trainer scores "
                                                        "over the same support."})
    repetition_penalty: float = field(
        default=1.0, metadata={"help": "Repetition penalty; only 1.0 (off) trains: the trainer's log-probs cannot "
                                       "re-apply it."})

    chat_template_kwargs: dict[str, Any] | None = field(default=None, metadata={
        "help": "Arguments for the policy's chat template when a prompt is rendered for generation (training and "
                "eval requests), e.g. {enable_thinking = false} (Qwen3) or {reasoning_effort = 'low'} (gpt-oss); "
                "sent as the request's chat_template_kwargs, as TRL's GRPOConfig does."})

    # --- Rollouts ----------------------------------------------------------------------------------------------------
    max_concurrent: int = field(default=1024, metadata={"help": "Max rollouts in flight at once."})
    max_async_level: int = field(
        default=1,
        metadata={"help": "How many steps generation may run ahead of training (0: generate each batch with the "
                  "current weights)."},
    )
    mask_env_responses: bool = field(
        default=True, metadata={"help": "Exclude environment/tool messages from the loss in multi-turn rollouts."}
    )
    mask_truncated_completions: bool = field(
        default=False, metadata={"help": "Exclude completions cut off by max_tokens/max_seq_len from the loss."}
    )
    keep_empty_replies: bool = field(
        default=False, metadata={"help": "Train on replies with no text (the model ended at once). Off, as in "
                                 "verifiers: such a rollout records EmptyModelResponseError (scored, no loss)."}
    )

    # --- Loss --------------------------------------------------------------------------------------------------------
    # deprecated spellings of loss.<key> and advantage.scale_rewards, kept for one release (trainer/typed_table.py)
    mask_ratio_low: float | None = _deprecated("mask_ratio_low")
    mask_ratio_high: float | None = _deprecated("mask_ratio_high")
    kl_tau: float | None = _deprecated("kl_tau")
    beta: float | None = _deprecated("beta")
    loss: dict[str, Any] | str | None = field(default=None, metadata={
        "help": "The loss: a table with 'type' (default, dapo, and TRL's grpo, bnpo, dr_grpo, cispo, sapo, luspo, "
                "vespo; opd and sft for those modes; None: the mode's own) and that loss's keys, e.g. {type = "
                "'dapo', epsilon_high = 0.28} (or 'dapo' alone), {kl_tau = 0.001, beta = 0.04} (the default loss's "
                "mask_ratio_low, mask_ratio_high, kl_tau, beta). docs/training.md#choosing-a-loss"})
    scale_rewards: str | bool | None = _deprecated("scale_rewards")  # TRL: true / false = group / none
    advantage: dict[str, Any] | str | None = field(default=None, metadata={
        "help": "The advantage estimator: a table with 'type' (grpo, rloo, max_rl, rae; None: grpo) and its keys, "
                "e.g. {type = 'rloo'} (or 'rloo' alone), {scale_rewards = 'group'} (grpo: none, group or batch), "
                "{type = 'grpo', length_penalty = {}}, {type = 'rae', decay = 0.95} (per-agent moving baselines: "
                "self-play). docs/training.md#choosing-an-advantage-estimator"})

    # --- Training mode (rl | opd | sft) and the teacher: their rules in trainer/modes.py -----------------------------
    training_mode: str = field(default="rl", metadata={
        "help": "'rl' (rewards → policy gradient), 'opd' (on-policy distillation: the policy samples, the loss lowers "
                "its KL to the teacher's log-probs on the sampled tokens) or 'sft' (the teacher generates the "
                "rollouts through the environment; the policy trains on them with cross-entropy). docs/training-modes.md"})
    teacher_model: str | None = field(default=None, metadata={
        "help": "opd/sft: the teacher, a model dir or hub id loaded in-process (sft: the local engine generates "
                "with it)."})
    teacher_url: str | None = field(default=None, metadata={
        "help": "opd/sft: base URL (…/v1) of a server with the teacher: vLLM for opd (it scores with "
                "prompt_logprobs), any OpenAI-compatible endpoint for sft."})
    teacher_model_name: str | None = field(default=None, metadata={
        "help": "The model name sent to teacher_url (None: the first one its /v1/models lists)."})
    teacher_api_key_var: str | None = field(default=None, metadata={
        "help": "Environment variable holding teacher_url's API key (None: no key)."})
    sft_min_reward: float | None = field(default=None, metadata={
        "help": "sft: train only on teacher rollouts whose reward is >= this (None: all)."})

    # --- Precision / memory ------------------------------------------------------------------------------------------
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations to save memory."})
    bf16: bool | None = field(default=None, metadata={
        "help": "Train in bf16 (LoRA: a bf16 base under an fp32 adapter; full fine-tuning: fp32 weights, bf16 "
                "autocast). None: on a CUDA GPU with bf16, off on the CPU (verifiers_rl/plan/precision.py)."})
    use_cpu: bool | None = field(
        default=None, metadata={"help": "Train on CPU. None: True exactly when CUDA is absent."}
    )

    # --- Logging -----------------------------------------------------------------------------------------------------
    report_to: str | list[str] | None = field(
        default="none", metadata={"help": "Integrations to log to ('wandb', 'tensorboard', ...) or 'none'."}
    )
    wandb: dict[str, str] | None = field(
        default=None,
        metadata={"help": "W&B settings {project, entity, name}; when set, W&B logging is turned on."},
    )
    run_name: str | None = field(
        default=None,
        metadata={"help": "Run name. None: wandb.name, else the output_dir's folder name, else 'vf-rl-<timestamp>'."},
    )
    logging_steps: float = field(default=1, metadata={"help": "Log metrics every N steps."})
    sample_log_interval: int = field(
        default=10, metadata={"help": "Log a table of sample rollouts every logging_steps x N steps (0 disables it)."}
    )
    enable_token_export: bool = field(
        default=False, metadata={"help": "Also write each step's rollout token ids, logprobs and masks to output_dir."}
    )

    # --- Checkpoints -------------------------------------------------------------------------------------------------
    output_dir: str | None = field(default=None, metadata={"help": "Where checkpoints go. None: outputs/<run_name>."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N steps."})
    save_total_limit: int | None = field(default=None, metadata={"help": "Keep at most N checkpoints (None: all)."})

    # --- Evaluation (run by RLTrainer itself, not by transformers' eval loop) -----------------------------------------
    eval_steps: int | None = field(
        default=None, metadata={"help": "Evaluate every N steps (None: never during training)."}
    )
    eval_num_examples: int = field(default=64, metadata={"help": "Eval prompts per evaluation."})
    eval_rollouts_per_example: int = field(default=1, metadata={"help": "Rollouts per eval prompt."})
    eval_on_start: bool = field(default=False, metadata={"help": "Evaluate once before the first step."})
    eval_temperature: float | None = field(
        default=None, metadata={"help": "Eval sampling temperature (0: greedy). None: the training temperature."}
    )

    # --- Data --------------------------------------------------------------------------------------------------------
    seed: int = field(default=42, metadata={"help": "Random seed (model init, data order unless data_seed is set, "
                                                    "sampling)."})
    shuffle_dataset: bool = field(default=True, metadata={"help": "Shuffle the environment's dataset before training."})

    local_async: bool = field(
        default=False,
        metadata={"help": "Local engine only: generate the next step's rollouts on a copy of the policy while this "
                          "step trains (one step off-policy, importance-ratio corrected). Faster on multi-core "
                          "machines; keeps a second copy of the model. Default: on-policy, between steps."})

    # --- Inference ---------------------------------------------------------------------------------------------------
    inference_backend: str = field(
        default="auto",
        metadata={"help": "'local' (the in-process local engine), 'vllm' (OpenAI-compatible vLLM server), or 'auto' "
                  "(vllm when a server is configured, else local)."},
    )
    vllm_server_host: str = field(default="127.0.0.1", metadata={"help": "Host of the vLLM server."})
    vllm_server_port: int | None = field(default=None, metadata={"help": "Port of the vLLM server (None: not set)."})
    vllm_server_urls: list[str] | None = field(
        default=None, metadata={"help": "Base URLs of one or more vLLM servers; overrides host/port."}
    )
    vllm_server_timeout: float = field(
        default=300.0, metadata={"help": "Seconds to wait for the vLLM server to be up."}
    )
    vllm_weight_transfer: str = field(
        default="auto",
        metadata={"help": "How full fine-tuning weights reach vLLM after each step: 'nccl' (vLLM's native weight "
                  "transfer, GPU to GPU; needs vllm in the trainer's Python), 'gloo' (the same protocol over TCP, "
                  "for CPU servers), 'ipc' (CUDA IPC handles, for a server on the trainer's own GPU; vLLM 0.32+), "
                  "'disk' (safetensors + reload), or 'auto' (ipc when the server shares the trainer's GPU, nccl "
                  "when the trainer has CUDA and vllm and the servers can reach it, else disk). LoRA always "
                  "hot-swaps the adapter."},
    )
    vllm_weight_transfer_host: str | None = field(
        default=None, metadata={"help": "The trainer's address as the vLLM servers reach it, for nccl/gloo with "
                                "servers on other machines (None: 127.0.0.1)."})
    generation_timeout: float = field(default=600.0, metadata={"help": "Seconds one batch's generation may take."})

    # --- transformers.Trainer plumbing (RLTrainer owns data, accumulation and eval) -----------------------------------
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Set from micro_batch_size."})
    gradient_accumulation_steps: int = field(
        default=1, metadata={"help": "Must stay 1: RLTrainer accumulates micro-batches into batch_size itself."}
    )
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep all dataset columns."})
    save_strategy: str = field(default="steps", metadata={"help": "Checkpoint every save_steps."})
    logging_strategy: str = field(default="steps", metadata={"help": "Log every logging_steps."})
    eval_strategy: str = field(
        default="no", metadata={"help": "Must stay 'no': RLTrainer runs its own eval (eval_steps)."}
    )

    def _resolve_rl_fields(self) -> None:
        """The rules of RLConfig's own fields and what follows from them, before transformers' own checks."""
        self._derive_lengths()
        self._validate_rl_fields()
        if isinstance(self.vllm_server_urls, str):
            self.vllm_server_urls = [self.vllm_server_urls]
        self.per_device_train_batch_size = self.micro_batch_size
        resolve_run_settings(self)  # run_name, output_dir, report_to; W&B's env variables: at train start

    def _derive_lengths(self) -> None:
        """An unset max_prompt_len follows what the user did set (None is "unset": a dataclass can't tell a default
        from an explicit value), so RLConfig(max_seq_len=128) works; an explicit conflict still fails below."""
        if self.max_prompt_len is not None:
            return
        seq, new = self.max_seq_len, self.max_tokens
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            return  # _validate_batch_shape names max_seq_len
        if seq < 2:
            _fail("max_seq_len", f"max_seq_len={seq} leaves no room for a prompt and a completion; raise max_seq_len")
        if isinstance(new, int) and not isinstance(new, bool) and 1 <= new < seq:
            self.max_prompt_len = seq - new
        else:  # max_tokens None (what the prompt leaves) or invalid (its own check fails first)
            self.max_prompt_len = min(DEFAULT_MAX_PROMPT_LEN, seq // 2)

    def _validate_rl_fields(self) -> None:
        self._validate_batch_shape()
        self._validate_sampling_and_lengths()
        self._validate_lora_and_choices()
        self._validate_inference()
        self._validate_loss_eval_and_wandb()
        for problem in (mode_problem(self), optimizer_problem(self)):  # trainer/modes.py, trainer/optim_settings.py
            if problem:
                _fail(*problem)
        check_loss(self)  # loss.type and its keys; the loss's config checks its values (trainer/losses/)
        check_advantage(self)  # advantage.type, its keys and scale_rewards (trainer/advantage_types/)

    def _validate_batch_shape(self) -> None:
        """Batch shape: positive sizes, groups of >= 2, whole groups per batch."""
        for name in ("micro_batch_size", "batch_size", "max_seq_len", "max_prompt_len", "max_concurrent"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _fail(name, f"{name}={value!r} must be a positive integer")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
            _fail("max_steps",
                  f"max_steps={self.max_steps!r} must be a positive integer: RL runs that many steps, cycling "
                  "through the dataset (transformers' -1, num_train_epochs instead, does not apply)")
        if not self.learning_rate >= 0:
            _fail("learning_rate", f"learning_rate={self.learning_rate} must be >= 0")
        if self.rollouts_per_example < (2 if self.training_mode == "rl" and not learns_alone(self) else 1):  # opd/sft
            _fail(
                "rollouts_per_example",
                f"rollouts_per_example={self.rollouts_per_example} must be >= 2: advantages are reward minus the group "
                "mean, so a group of 1 never learns; set it to 2 or more (e.g. 8), or advantage={'type': 'rae'} (a "
                "moving baseline per agent, which learns from groups of one)"
            )
        if self.batch_size % self.rollouts_per_example != 0:
            _fail(
                "batch_size",
                f"batch_size={self.batch_size} must be a multiple of rollouts_per_example={self.rollouts_per_example}; "
                f"e.g. batch_size={max(1, self.batch_size // self.rollouts_per_example) * self.rollouts_per_example}"
            )

    def _validate_sampling_and_lengths(self) -> None:
        """Sampling settings and sequence lengths."""
        if not self.temperature >= 0:
            _fail("temperature", f"temperature={self.temperature} must be >= 0 (0: greedy sampling)")
        if self.eval_temperature is not None and self.eval_temperature < 0:
            _fail("eval_temperature", f"eval_temperature={self.eval_temperature} must be >= 0 (0 is greedy) or None")
        if not 0 < self.top_p <= 1:
            _fail("top_p", f"top_p={self.top_p} must be in (0, 1]")
        if not 0 <= self.min_p <= 1:
            _fail("min_p", f"min_p={self.min_p} must be in [0, 1] (0: off)")
        problem = training_problem(self.repetition_penalty)
        if problem:
            _fail("repetition_penalty", problem)
        if self.max_tokens is not None and (self.max_tokens < 1 or self.max_tokens >= self.max_seq_len):
            _fail(
                "max_tokens",
                f"max_tokens={self.max_tokens} must be in [1, max_seq_len={self.max_seq_len}); raise max_seq_len or "
                "lower max_tokens (None: whatever the prompt leaves)"
            )
        if self.max_prompt_len >= self.max_seq_len:
            _fail(
                "max_prompt_len",
                f"max_prompt_len={self.max_prompt_len} must be < max_seq_len={self.max_seq_len} to leave room for the "
                "completion; raise max_seq_len or lower max_prompt_len"
            )

    def _validate_lora_and_choices(self) -> None:
        """LoRA options, the choice fields and the difficulty buffer."""
        if not self.use_lora:
            for name in self.lora_options_set():
                _fail(name, f"{name} is set but use_lora=False; set use_lora=True or remove {name}")
        for name, ok, rule in (("lora_rank", isinstance(self.lora_rank, int) and self.lora_rank >= 1, ">= 1"),
                               ("lora_alpha", self.lora_alpha > 0, "> 0"),
                               ("lora_dropout", 0 <= self.lora_dropout < 1, "in [0, 1)")):
            if self.use_lora and not ok:
                _fail(name, f"{name}={getattr(self, name)!r} must be {rule}")
        targets = self.lora_target_modules
        if not (isinstance(targets, str) or (isinstance(targets, list) and all(isinstance(m, str) for m in targets))):
            _fail("lora_target_modules",
                  f"lora_target_modules={self.lora_target_modules!r} must be a list of module names or 'all-linear'")
        if self.inference_backend not in INFERENCE_BACKENDS:
            _fail("inference_backend",
                  f"inference_backend={self.inference_backend!r} is not one of {', '.join(INFERENCE_BACKENDS)}")
        if self.oversampling_factor < 1:
            _fail(
                "oversampling_factor",
                f"oversampling_factor={self.oversampling_factor} must be >= 1 (1: generate exactly what a step needs)"
            )
        if self.oversampling_factor > 1 and not self.online_difficulty_filtering:
            _fail("oversampling_factor",
                  f"oversampling_factor={self.oversampling_factor}: the extra groups only refill batches after "
                  "online_difficulty_filtering drops constant ones; set online_difficulty_filtering=True or remove it")
        for name in ("easy_fraction", "hard_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                _fail(name, f"{name}={getattr(self, name)} must be in [0, 1]")
        if (self.easy_threshold is not None and self.hard_threshold is not None
                and self.hard_threshold >= self.easy_threshold):
            _fail("hard_threshold",
                  f"hard_threshold={self.hard_threshold} must be < easy_threshold={self.easy_threshold}")

    def _validate_inference(self) -> None:
        """Weight transfer and async generation."""
        from verifiers_rl.plan.transfer import TRANSFERS, check_transfer

        if self.vllm_weight_transfer not in TRANSFERS:
            _fail("vllm_weight_transfer",
                  f"vllm_weight_transfer={self.vllm_weight_transfer!r} is not one of {', '.join(TRANSFERS)}")
        problem = check_transfer(self.vllm_weight_transfer, use_lora=self.use_lora)  # CUDA, vllm: when planned
        if problem:
            _fail("vllm_weight_transfer", problem)
        if self.local_async and self.inference_backend == "vllm":
            _fail("local_async",
                  "local_async=True applies to the local engine only; remove it or set inference_backend='local'")
        if self.max_async_level < 0:
            _fail("max_async_level",
                  f"max_async_level={self.max_async_level} must be >= 0 (0: on-policy, 1: one step ahead)")

    def _validate_loss_eval_and_wandb(self) -> None:
        """What RLTrainer does itself, eval and wandb."""
        if self.gradient_accumulation_steps != 1:
            _fail(
                "gradient_accumulation_steps",
                f"gradient_accumulation_steps={self.gradient_accumulation_steps} must be 1: RLTrainer accumulates "
                "micro-batches itself; set batch_size and micro_batch_size instead"
            )
        defaults = type(self).__dataclass_fields__  # type: ignore[attr-defined]
        if self.per_device_train_batch_size not in (defaults["per_device_train_batch_size"].default,
                                                    self.micro_batch_size):
            _fail("per_device_train_batch_size",
                  f"per_device_train_batch_size={self.per_device_train_batch_size} is set from micro_batch_size "
                  "(rollouts per forward/backward on each device); set micro_batch_size instead")
        if "num_train_epochs" in defaults and self.num_train_epochs != defaults["num_train_epochs"].default:
            _fail("num_train_epochs", f"num_train_epochs={self.num_train_epochs} does not apply: RL runs max_steps "
                  "optimizer steps, cycling through the dataset; set max_steps")
        if str(getattr(self.eval_strategy, "value", self.eval_strategy)) != "no":
            _fail("eval_strategy",
                  f"eval_strategy={self.eval_strategy!r} must be 'no': RLTrainer runs its own eval; set eval_steps")
        if str(getattr(self.save_strategy, "value", self.save_strategy)) == "best":  # HF's eval loop picks "best"
            _fail("save_strategy", "save_strategy='best' saves when transformers' own evaluation finds a new best "
                  "metric, and RLTrainer's eval (eval_steps) is not that loop: nothing would be saved but the last "
                  "step; set save_strategy='steps' with save_steps (save_total_limit, save_keep_interval)")
        for key in ("load_best_model_at_end", "metric_for_best_model"):  # (EarlyStoppingCallback needs both)
            if getattr(self, key):
                _fail(key, f"{key} is not supported yet: transformers picks the best checkpoint by its own evaluation, "
                      "and RLTrainer's eval (eval_steps) is not that loop; the eval/* records of metrics.jsonl show "
                      "the best step, and save_steps keeps its checkpoint")
        if self.eval_steps is not None and self.eval_steps <= 0:
            _fail("eval_steps", f"eval_steps={self.eval_steps} must be a positive number of steps or None")
        problem = wandb_problem(self.wandb)
        if problem:
            _fail("wandb", problem)

    # ------------------------------------------------------------------------------------------------------------------

    def loss_config(self) -> Any:
        """The chosen loss's config as this run sets it (``LossConfig`` for the default loss)."""
        return resolve_loss(self)[1]

    def lora_options_set(self) -> list[str]:
        """The LoRA options changed from their defaults (an error without LoRA, or beside a `peft_config`)."""
        return [n for n in _LORA_OPTIONS if getattr(self, n) != field_default(RLFields.__dataclass_fields__[n])]

    def data_order_seed(self) -> int:
        """The seed of the data order and the difficulty buffer's draws: transformers' `data_seed` (its data
        sampler's seed) when set, else `seed`."""
        data_seed = getattr(self, "data_seed", None)  # a TrainingArguments field: absent in vf-rl's pre-launch check
        return self.seed if data_seed is None else data_seed

    def buffer_config(self) -> BufferConfig:
        """The difficulty buffer's settings (``BufferConfig``) as this run sets them."""
        return BufferConfig(**{f.name: getattr(self, f.name) for f in fields(BufferSettings)})

    def sampling_args(self, *, for_eval: bool = False, prompt_len: int | None = None) -> dict[str, Any]:
        """Sampling parameters for an OpenAI-compatible chat-completions request (``trainer/sampling.py``):
        ``for_eval`` uses ``eval_temperature``; ``prompt_len`` caps ``max_tokens`` to fit ``max_seq_len``."""
        from verifiers_rl.trainer.sampling import sampling_args

        return sampling_args(self, for_eval=for_eval, prompt_len=prompt_len)
