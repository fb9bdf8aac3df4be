"""TRL's GRPOConfig names that RLConfig has no field for, and what sets each here: `RLConfig(num_generations=8)` and
a config's `[trainer.args] num_generations` are one line naming `rollouts_per_example`, not "unexpected keyword
argument". Every field TRL 1.16's GRPOConfig adds to TrainingArguments is either an RLConfig field or a key here
(tests/test_config.py)."""

TRL_NAMES = {
    "num_generations": "rollouts_per_example", "max_completion_length": "max_tokens",
    "max_prompt_length": "max_prompt_len", "generation_batch_size": "batch_size (rollouts per optimizer step)",
    "loss_type": "loss (loss = 'dapo', or a table with that loss's keys: {type = 'dapo', epsilon_high = 0.28})",
    "epsilon": "the loss table's epsilon_low (loss = {type = 'grpo', epsilon_low = 0.2})",
    "epsilon_high": "the loss table's epsilon_high (loss = {type = 'dapo', epsilon_high = 0.28})",
    "importance_sampling_level": "the loss table's key (loss = {type = 'grpo', importance_sampling_level = ...})",
    "use_vllm": "inference_backend = 'vllm' (vllm_server_urls for a running server)",
    "vllm_mode": "inference_backend = 'vllm'; where the server runs is planned (docs/vllm.md)",
    "num_iterations": "nothing: each batch of rollouts is one optimizer step",
    "steps_per_generation": "nothing: each batch of rollouts is one optimizer step",
    "log_completions": "sample_log_interval", "reward_weights": "the environment rubric's weights (with TRL's reward_funcs: RLTrainer(..., "
    "reward_weights=[...]))",
    "num_generations_eval": "eval_rollouts_per_example", "vllm_server_base_url": "vllm_server_urls",
    "generation_kwargs": "temperature, top_p, top_k, min_p (every request states them: docs/vllm.md)",
    "vllm_max_model_length": "max_seq_len", "vllm_gpu_memory_utilization": "[inference] gpu_memory_utilization",
    **{f"vllm_{k}": f"[inference.args] {k} (a script: VLLMServerConfig args)" for k in
       ("tensor_parallel_size", "model_impl")},
    "vllm_importance_sampling_correction": "the loss table's importance_sampling_mode (loss = {type = 'grpo', "
                                           "importance_sampling_mode = ...}; 'none': off)",
    **{name: "nothing: not supported here (docs/training.md#choosing-a-loss)"
       for name in ("top_entropy_quantile", "off_policy_mask_threshold", "entropy_coef")},
    # TRL's names of a loss table's keys (trainer/losses/trl_types.py)
    **{trl: f"the loss table's {key} (loss = {{type = '{loss}', {key} = ...}})" for trl, loss, key in (
        ("delta", "grpo", "delta"), ("vllm_importance_sampling_mode", "grpo", "importance_sampling_mode"),
        ("vllm_importance_sampling_cap", "grpo", "importance_sampling_clip_max"),
        ("vllm_importance_sampling_clip_min", "grpo", "importance_sampling_clip_min"),
        ("vllm_importance_sampling_clip_max", "grpo", "importance_sampling_clip_max"),
        ("sapo_temperature_pos", "sapo", "temperature_pos"), ("sapo_temperature_neg", "sapo", "temperature_neg"),
        ("use_bias_correction_kl", "grpo", "use_bias_correction_kl"),
        *((f"vespo_{k}", "vespo", k) for k in ("k_pos", "k_neg", "lambda_pos", "lambda_neg")))},
    # the rest of TRL 1.16's GRPOConfig fields
    "model_init_kwargs": "RLTrainer(model=...) given a model you loaded (from_pretrained's kwargs), or bf16",
    "trust_remote_code": "RLTrainer(model=...) given a model you loaded with trust_remote_code=True",
    **{name: "sample_log_interval (the rollouts printed and logged every N steps)"
       for name in ("num_completions_to_print", "log_unique_prompts", "log_completions_hub_repo", "log_multimodal")},
    **{name: "nothing: the reference model of beta is the starting policy, never synced"
       for name in ("sync_ref_model", "ref_model_sync_steps", "ref_model_mixup_alpha")},
    "max_tool_calling_iterations": "the environment's max_turns (vf.ToolEnv(tools=..., max_turns=10))",
    "multi_objective_aggregation": "the environment rubric's weights (its reward is one weighted sum)",
    **{name: "nothing: the local engine batches, caches and pads itself (inference_backend = 'local')"
       for name in ("use_transformers_paged", "use_transformers_continuous_batching",
                    "transformers_continuous_batching_config", "cache_implementation", "pad_to_multiple_of",
                    "ds3_gather_for_generation")},
    **{name: "nothing: the vLLM server is planned and started as docs/vllm.md says ([inference.args] for its flags)"
       for name in ("vllm_enable_sleep_mode", "vllm_group_port", "vllm_structured_outputs_regex")},
    **{name: "nothing: not supported here (docs/training.md#choosing-a-loss)"
       for name in ("use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta",
                    "entropy_target", "router_aux_loss_coef", "cast_lm_head_to_fp32")},
}
