"""RLTrainer's construction, in the order it needs: on the built transformers.Trainer, its callbacks, the reference
model, the training mode and sharding, and the inference (one `Inference` object) with the orchestrator that
generates through it."""

from __future__ import annotations

from typing import Any

from verifiers_rl.trainer import distributed, judges


# transformers.Trainer / TRL arguments that have no meaning here → what does it (one line each, not a TypeError
# from deep inside transformers or an argument taken and never used)
TRL_WAY = {"reward_funcs", "environment_factory"}  # either starts TRL's way in (RLTrainer without env)
_NOT_HERE = {
    "eval_dataset": "eval runs on eval_envs (RLTrainer(..., eval_envs=[...]), run_eval())",
    "compute_metrics": "eval metrics come from the eval envs' rubrics (run_eval())",
    "tokenizer": "pass it as processing_class",
    "quantization_config": "load the model with it yourself and pass the model",
    "rollout_func": "a rollout of your own is a verifiers environment (vf.MultiTurnEnv: docs/environments.md)",
}


def environment(env: Any, kwargs: dict[str, Any]) -> Any:
    """The training environment (an env id is loaded with its default arguments; TRL's `reward_funcs` +
    `train_dataset`, or its `environment_factory`, make one: envs/trl_compat.py); a transformers / TRL argument
    RLTrainer does not take is refused in one line."""
    names = ["reward_funcs", "train_dataset", "reward_weights", "tools", "reward_processing_classes",
             "environment_factory"]
    if TRL_WAY.intersection(kwargs):  # TRL's eval_dataset: scored by its reward_funcs too
        names.append("eval_dataset")
    trl = {k: kwargs.pop(k) for k in names if k in kwargs}
    for key in kwargs.keys() & _NOT_HERE.keys():
        raise TypeError(f"RLTrainer does not take {key}: {_NOT_HERE[key]}")
    if env is None or trl:
        factory = trl.get("environment_factory")
        if env is not None or not ({"reward_funcs", "train_dataset"} <= trl.keys() or factory is not None):
            raise TypeError("RLTrainer takes an environment (env), or TRL's reward_funcs and train_dataset "
                            "(reward_weights, tools, reward_processing_classes, environment_factory and eval_dataset "
                            "too) in its place; give one or the other")
        from verifiers_rl.envs.trl_compat import trl_environment
        from verifiers_rl.envs.trl_environments import InstancePool
        from verifiers_rl.envs.trl_reward_models import reward_funcs_of

        funcs = trl.get("reward_funcs")
        funcs = reward_funcs_of(funcs, trl.get("reward_processing_classes")) if funcs is not None else None  # once
        pool = InstancePool(factory) if factory is not None else None  # train and eval rollouts share it
        scoring = dict(reward_funcs=funcs, reward_weights=trl.get("reward_weights"), tools=trl.get("tools"), pool=pool)
        env = trl_environment(trl.get("train_dataset"), **scoring)
        if trl.get("eval_dataset") is not None:  # eval_envs' default: {"eval": it} (RLTrainer)
            env.trl_eval_env = trl_environment(trl["eval_dataset"], **scoring, trainer=env.trl_trainer, eval_only=True)
        if env.trl_string_prompts:
            print("note: train_dataset's prompts are strings: each is sent as one user message through the chat "
                  "template (TRL sends the raw text); give chat messages to choose", flush=True)
        return env
    if isinstance(env, str):
        from verifiers_rl.v1.entry import load_env_entry

        return load_env_entry(env)
    return env


def eval_env_map(env: Any, eval_envs: Any) -> dict[str, Any]:
    """`eval_envs` as {name: env}: None → the training env (one TRL's eval_dataset made: {"eval": it}); a list → named
    by env_id or env_<i> (a repeat: +_<i>)."""

    if eval_envs is None and getattr(env, "trl_eval_env", None) is not None:
        return {"eval": env.trl_eval_env}
    if isinstance(eval_envs, dict):
        return eval_envs
    envs = [env] if eval_envs is None else list(eval_envs)
    named: dict[str, Any] = {}
    for i, e in enumerate(envs):
        name = getattr(e, "env_id", None) or ("env" if eval_envs is None else f"env_{i}")
        named[f"{name}_{i}" if name in named else name] = e
    return named


def wire_callbacks(trainer: Any) -> None:
    """Our console line, metrics.jsonl and the RL control flow in place of HF's printer and progress bar."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from verifiers_rl.trainer.callbacks import ConsoleCallback, MetricsFileCallback, RLControlCallback

    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)
    for cb in (MetricsFileCallback(), ConsoleCallback(), RLControlCallback(trainer)):
        trainer.add_callback(cb)
    if "wandb" in (trainer.args.report_to or []):  # sample tables + distributions (trainer/wandb_extras.py)
        from verifiers_rl.trainer.wandb_extras import WandbSamplesCallback

        trainer.add_callback(WandbSamplesCallback(trainer))


def reference_model(trainer: Any) -> Any:
    """A frozen copy of the initial policy for the KL to the reference (beta > 0); None with LoRA (the base under
    the adapter is the reference) or without beta."""
    from verifiers_rl.trainer.typed_table import reference_beta

    args = trainer.args
    if reference_beta(args) > 0 and not args.use_lora:
        import copy

        return copy.deepcopy(trainer.model).eval().requires_grad_(False)
    return None


def setup_training(trainer: Any) -> None:
    """The training mode (rl | opd | sft: the rollouts' source and the loss; opd/sft: the teacher) and, when
    args.fsdp asks, FSDP2 sharding; one line with several processes."""
    from verifiers_rl.trainer.hf_hooks import keep_fsdp_out_of_ddp
    from verifiers_rl.trainer.modes import build_mode
    from verifiers_rl.trainer.sharding import describe, shard_policy

    args = trainer.args
    distributed.check_supported(args)
    trainer.mode = build_mode(trainer)
    trainer.sharded = shard_policy(trainer)  # None without FSDP
    if trainer.sharded is not None and trainer.sharded.applied:
        keep_fsdp_out_of_ddp(trainer.accelerator)
    if args.world_size > 1 and trainer.is_world_process_zero():
        print(describe(trainer.sharded, args.world_size), flush=True)


def tokenizer_check(tokenizer: Any, envs: list[Any], local: bool) -> None:
    """What the policy's tokenizer cannot do for these environments, refused before anything runs: chat messages
    without a chat template on the local engine; a v1 environment's renderer made for another model family."""
    from verifiers_rl.errors import ConfigError
    from verifiers_rl.inference.local_openai import template_problem

    members = [m for e in envs for m in (getattr(e, "envs", None) or [e])]
    problems = [template_problem(tokenizer, members)] if local else []
    problems += [e.renderer_problem(tokenizer) for e in members if hasattr(e, "renderer_problem")]
    if problem := next((p for p in problems if p), None):
        raise ConfigError(problem)


def setup_inference(trainer: Any, plan: Any, server_config: Any) -> None:
    """`trainer.plan` (vf-rl's, or made from the RLConfig), `.inference` built from it, `.policy_client` and
    `.orchestrator`."""

    import torch

    from verifiers_rl.clients.openai_chat_completions_client import OpenAIChatCompletionsClient
    from verifiers_rl.inference.factory import build_inference
    from verifiers_rl.plan.inference import inference_plan_for_model
    from verifiers_rl.trainer.orchestrator import Orchestrator

    args = trainer.args
    trainer.plan = plan = plan or inference_plan_for_model(args, trainer.model, server_config)
    judges.check(trainer, plan)  # a line per judge; one that would reach the policy: refused before it starts
    tokenizer_check(trainer.processing_class, [trainer.env, *trainer.eval_envs.values()], plan.backend == "local")
    # with several ranks: one server (started by rank 0), brought to the policy before any rank generates
    trainer.inference = distributed.build_inference_on_every_rank(plan, lambda p: build_inference(
        p, model=trainer.served_model(), tokenizer=trainer.processing_class, args=args, server_config=server_config,
        is_main=trainer.is_world_process_zero()), args.world_size)
    inline = trainer.inference.inline
    seed, rank = args.seed, args.process_index

    def before_generate(step: int) -> None:
        # Sampling from the shared policy is seeded per step, so a resumed run replays it exactly; and per rank, as
        # TRL seeds each device: with one seed, ranks drew the same samples (a prompt on two ranks, the same replies).
        torch.manual_seed(seed * 100_003 + step + rank * 1_000_000_007)

    trainer.policy_client = OpenAIChatCompletionsClient(trainer.inference.client, allow_empty=args.keep_empty_replies)
    client, model_name = trainer.mode.generation(trainer.policy_client, trainer.inference.model_name)  # sft: teacher's
    trainer.orchestrator = Orchestrator(
        trainer.env, client, model_name, trainer.mode.sampling_args(),
        batch_size=args.batch_size, rollouts_per_example=args.rollouts_per_example,
        max_concurrent=args.max_concurrent, seed=args.data_order_seed(), shuffle=args.shuffle_dataset,
        max_async_level=args.max_async_level, inline=inline, generation_timeout=args.generation_timeout,
        before_generate=before_generate if inline else None,
        buffer=args.buffer_config(), rank=args.process_index, world=args.world_size,
        max_seq_len=args.max_seq_len)  # multi-turn rollouts stop when the context is full (an env's own limit wins)
