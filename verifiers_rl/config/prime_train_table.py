"""The `prime train` translation as data: prime-rl's defaults where they differ from vf-rl's, the keys that size or
place a hosted run (set aside), the renamed ones (one warning each), and the table of what maps where (`RULES`), which
`config/prime_train.py` follows and docs/hosted.md is generated from."""

from __future__ import annotations

from typing import NamedTuple

from verifiers_rl.config.prime_optim import OPTIM_ARGS_NOTE, OPTIM_NOTE, RESUME_NOTE, SCHEDULE_NOTE

DEFAULT_MICRO_BATCH = 8
# prime-rl's defaults where they differ from vf-rl's (prime-rl-configs 559b447).
PRIME_RL_DEFAULTS = {"learning_rate": 1e-6, "weight_decay": 0.01, "max_grad_norm": 1.0, "batch_size": 128,
                     "group_size": 1, "eval_interval": 100, "lora_rank": 16}
ALGO_MODES = {"grpo": "rl", "max_rl": "rl", "rae": "rl", "opd": "opd", "sft": "sft"}
# Renamed or removed keys that still translate, one warning each (the prime CLI warns on the same ones).
DEPRECATED = {
    "orchestrator.trajectory_strategy": "ignored: a rollout's turns train as one sample ('interleaved')",
    "orchestrator.buffer": "the difficulty-filtering buffer left prime-rl: use a source's curriculum gate "
                           "(curriculum.gates.<name> = {type = 'advantage_range'}); translated as before",
    "orchestrator.eval.eval_base_model": "renamed orchestrator.eval.skip_first_step with the opposite meaning",
}
# Keys that size or place the hosted run; the local run sizes itself (vf-rl's [inference] / [trainer] gpus).
IGNORED = ("deployment", "inference", "slurm", "log", "run", "output_dir", "clean", "dry_run", "weight_broadcast",
           "rollout_transport", "env_vars", "tokenizer", "source_ref", "image_tag", "gpu_type", "volume",
           "volume_size", "env_file", "type", "monitors.file", "monitors.prime", "trainer.model", "trainer.data",
           "trainer.log", "trainer.monitors", "trainer.output_dir", "trainer.weight_broadcast",
           "trainer.rollout_transport", "trainer.matmul_precision", "trainer.memory_profiler_path", "trainer.tokenizer",
           "trainer.enable_router_replay", "trainer.ckpt", "trainer.resume", "orchestrator.concurrency",
           "orchestrator.model", "orchestrator.tokenizer", "orchestrator.log", "orchestrator.monitors",
           "orchestrator.heartbeat", "orchestrator.num_train_workers", "orchestrator.pad_to_multiple_of",
           "orchestrator.env_server_base_port", "orchestrator.collect_inference_metrics",
           "orchestrator.inference_metrics_roles", "orchestrator.tasks_per_minute", "orchestrator.output_dir",
           "orchestrator.max_off_policy_steps", "orchestrator.weight_broadcast", "orchestrator.rollout_transport",
           "orchestrator.env_vars", "orchestrator.ckpt", "orchestrator.resume",
           "orchestrator.train.source.*.serve", "orchestrator.eval.source.*.serve")


class Rule(NamedTuple):
    """One translated key (prime-rl's here, the retired format's in hosted.py), docs/hosted.md's rows. `direct`:
    `hosted.translate` copies the value to `target` (a trainer.args key); the others are spelled out in code."""

    key: str
    target: str
    note: str
    direct: bool = False


RULES: list[Rule] = [
    Rule("name", "trainer.args.run_name", "the prime CLI's run name, or run.name"),
    Rule("model.name", "model", "required"),
    Rule("max_steps", "trainer.args.max_steps", "or orchestrator.max_steps / trainer.max_steps"),
    Rule("seq_len", "trainer.args.max_seq_len, max_prompt_len", "orchestrator.seq_len (a sample's length) if set, "
         "else seq_len, else trainer.model.seq_len (default 2048); max_prompt_len: that - 1 (prime-rl has no prompt "
         "budget)"),
    Rule("orchestrator.batch_size", "trainer.args.batch_size", "rollouts per step (default 128); also "
         "micro_batch_size = gcd(batch_size, 8); token_batch_size is not supported yet"),
    Rule("orchestrator.group_size", "trainer.args.rollouts_per_example", "default 1; a source's own group_size "
         "must agree (one group size per run)"),
    Rule("orchestrator.train.sampling.max_completion_tokens", "trainer.args.max_tokens", "per turn; a source's "
         "own sampling must agree"),
    Rule("orchestrator.train.sampling.temperature", "trainer.args.temperature", "default 1.0"),
    Rule("orchestrator.train.sampling.extra_body.chat_template_kwargs", "trainer.args.chat_template_kwargs",
         "as is (e.g. {enable_thinking = false}); other extra_body keys are not supported yet"),
    Rule("[[orchestrator.train.source]]", "[env] (one) / [[env]] (several)", "v1: `env.taskset.id` → `id`, the "
         "rest of `env` (taskset fields, `agent`/seat harness and runtime, an Env package's `id`) → `args`; `name`, "
         "`ratio` as is; several sources train as one stream, each batch holding their groups in proportion to `ratio`"),
    Rule("orchestrator.train.source.N.curriculum.gates.G", "trainer.args.online_difficulty_filtering",
         "`type = 'advantage_range'` with the default reject range [0, 0]: drop groups whose advantages are all "
         "zero; other gates and samplers are not supported yet"),
    Rule("orchestrator.train.filter_zero_advantages", "trainer.args.filter_zero_advantages", "default true, as "
         "prime-rl: a zero-advantage rollout's tokens leave the loss and its token count (rl only)"),
    Rule("orchestrator.renderer", "env.args.renderer", "verifiers' TrainClientConfig.renderer of each v1 env "
         "(e.g. {name = 'prime-qwen3'})"),
    Rule("orchestrator.algo.type", "training_mode, trainer.args.advantage", "grpo → rl, max_rl → rl with "
         "advantage.type 'max_rl', rae → rl with advantage.type 'rae' (its decay as is), opd → opd, sft → sft; a "
         "source's own algo must agree; hierarchical_grpo, echo and opsd are not supported (docs/training.md says "
         "why)"),
    Rule("orchestrator.algo.length_penalty", "trainer.args.advantage.length_penalty", "grpo: its weights as is "
         "(type 'linear')"),
    Rule("orchestrator.algo.teacher", "[teacher]", "opd: `base_url` → url, `name` → name, `api_key_var` as is"),
    Rule("orchestrator.algo.sampling.source", "[teacher]", "sft: a frozen model (`base_url`, `name`) generates "
         "the rollouts; 'policy' (the default) is not a teacher"),
    Rule("trainer.loss", "trainer.args.loss.kl_tau", "type 'default': kl_tau (default 1e-3, prime-rl's; rl and opd) "
         "(dppo_mask_* and adv_tau at their defaults; this trainer masks by importance ratio: mask_ratio_low/high); "
         "ipo and custom not supported yet"),
    Rule("trainer.optim.type", "trainer.args.optim", OPTIM_NOTE),
    Rule("trainer.optim.mu / momentum, nesterov", "trainer.args.optim_args", OPTIM_ARGS_NOTE),
    Rule("trainer.optim.lr", "trainer.args.learning_rate", f"default {PRIME_RL_DEFAULTS['learning_rate']}"),
    Rule("trainer.optim.weight_decay", "trainer.args.weight_decay", f"default {PRIME_RL_DEFAULTS['weight_decay']}"),
    Rule("trainer.optim.max_norm", "trainer.args.max_grad_norm", "default 1.0 (none: 0, no clipping)"),
    Rule("trainer.optim.betas1 / betas2", "trainer.args.adam_beta1 / adam_beta2", "adamw; muon's AdamW part "
         "(beta2 default 0.95)"),
    Rule("trainer.dist_timeout_seconds", "trainer.args.ddp_timeout", "as is (seconds)"),
    Rule("trainer.scheduler", "trainer.args.lr_scheduler_type, warmup_steps, lr_scheduler_kwargs", SCHEDULE_NOTE),
    Rule("trainer.model.lora", "trainer.args.use_lora and lora_*", "rank → lora_rank (prime-rl's default 16), "
         "alpha, dropout, target_modules, modules_to_save as is; no table: full fine-tuning (use_lora = false)"),
    Rule("trainer.model.ac", "trainer.args.gradient_checkpointing", "on, every layer whole, with or without the "
         "table (prime-rl's default; its mode and freq are not applied)"),
    Rule("trainer.model.name / orchestrator.model.name", "model", "the policy when [model] has no name (the "
         "trainer's first; the orchestrator's may name a served variant of it)"),
    Rule("trainer.enable_token_export", "trainer.args.enable_token_export", "as is"),
    Rule("orchestrator.eval", "[eval]", "interval, num_examples, group_size → rollouts_per_example, "
         "skip_first_step → before = not it, sampling.temperature, sampling.max_completion_tokens → max_tokens; "
         "`source` as train sources (their own sampling must agree); after = false"),
    Rule("monitors.wandb", "trainer.args.wandb", "project, entity, name, group, tags, offline as is"),
    Rule("ckpt.interval / keep_last / keep_interval", "trainer.args.save_steps / save_total_limit / "
         "save_keep_interval", "no `[ckpt]`, or no interval: the end of training only"),
    Rule("resume (step / dir)", "trainer.args.resume_from_checkpoint", RESUME_NOTE),
]
