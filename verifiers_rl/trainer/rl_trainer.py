"""RLTrainer: a thin `transformers.Trainer` subclass that turns rollouts into policy updates.

One `training_step` = one optimizer step on exactly `batch_size` rollouts; HF Trainer keeps the optimizer,
scheduler, grad clipping, checkpoints, resume and `report_to`. Its rooms: setup.py (construction), step.py (the
step, the weight sync after it), evaluation.py, checkpoints.py, hf_hooks.py (every private HF hook it overrides).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from transformers import Trainer
from transformers.trainer_utils import enable_full_determinism, set_seed

from verifiers_rl.errors import NetworkError, SettingError
from verifiers_rl.network import push_to_hub_problem
from verifiers_rl.startup_gc import frozen_heap
from verifiers_rl.trainer import checkpoints, distributed, evaluation, setup
from verifiers_rl.trainer.checkpoints import STAGING_DIR  # noqa: F401  (its old home)
from verifiers_rl.trainer.config import RLConfig
from verifiers_rl.trainer.hf_hooks import TrainerHooks, check_hooks
from verifiers_rl.trainer.model_loading import load_policy
from verifiers_rl.trainer.optimizers import ExtraOptimizers
from verifiers_rl.trainer.run_settings import check_wandb_reachable, export_wandb_env
from verifiers_rl.trainer.sharding import check_resume_layout
from verifiers_rl.trainer.step import StepRunner, merge_pending, print_samples
from verifiers_rl.trainer.config_from_trl import is_trl_args, rl_config_from, trl_default_args
from verifiers_rl.trainer.trl_names import TRL_NAMES


def _first(items: list[int]) -> dict[str, Any]:
    return {"step_index": torch.tensor(items[0])}


class RLTrainer(ExtraOptimizers, TrainerHooks, Trainer):
    """Public surface beyond transformers.Trainer's: `env`, `eval_envs`, `mode`, `plan`, `inference`,
    `policy_client`, `orchestrator`, `ref_model`, `sharded`; `pending_metrics` (the steps' metrics not logged yet),
    `last_states` and `last_advantages` (the last step's rollouts and their advantages), `last_eval`,
    `last_eval_states` ((prefix, step, {name: states}) of the last `run_eval`);
    `after_optimizer_step`, `sync_inference`, `served_model`, `eval_states`, `run_eval` (also `evaluate()`),
    `wait_for_plot`, `close`. `env` may be an environment id (loaded with its default arguments), or be left out
    for TRL's `reward_funcs=` and `train_dataset=` (envs/trl_compat.py)."""

    def __init__(self, model: Any, env: Any = None, args: RLConfig | None = None, processing_class: Any = None,
                 peft_config: Any = None, callbacks: list | None = None, eval_envs: Any = None,
                 vllm_server: Any = None, plan: Any = None, **kwargs: Any):
        if args is None and setup.TRL_WAY.intersection(kwargs):  # TRL's way in, TRL's defaults
            args = trl_default_args(model)
        args = args or RLConfig()
        if not isinstance(args, RLConfig) and not is_trl_args(args):
            raise TypeError(f"args must be an RLConfig (or TRL's GRPOConfig), not {type(args).__name__}; "
                            "vf.RLConfig takes TrainingArguments' fields too")
        trl_weights = getattr(args, "reward_weights", None)  # GRPOConfig's, for TRL's reward_funcs
        if trl_weights is not None and setup.TRL_WAY.intersection(kwargs):
            kwargs.setdefault("reward_weights", trl_weights)
        elif trl_weights is not None:
            raise SettingError("reward_weights", f"args: GRPOConfig's reward_weights: {TRL_NAMES['reward_weights']}")
        check_hooks()  # one line when the installed transformers / accelerate moved a hook we override
        problem = push_to_hub_problem(args.push_to_hub)  # before the model loads, not Trainer's bare ConnectError
        if problem:
            raise NetworkError(problem)
        env = setup.environment(env, kwargs)
        if not isinstance(args, RLConfig):
            # TRL's meaning, its defaults included; a PeftModel given without peft_config trains its adapter, as TRL's
            args = rl_config_from(args, env, lora=peft_config is not None or hasattr(model, "peft_config"))
        earlier_run = checkpoints.used_by(args.output_dir)  # before anything of this run is written there
        # seeded before the policy is built: the LoRA init draws from the global RNG, Trainer seeds in its __init__
        enable_full_determinism(args.seed) if args.full_determinism else set_seed(args.seed)
        model, tokenizer = load_policy(model, args, processing_class, peft_config)
        self.env = env
        if hasattr(env, "trl_trainer"):  # TRL's reward functions read trainer_state (envs/trl_compat.py)
            env.trl_trainer["ref"] = weakref.ref(self)
        self.eval_envs = setup.eval_env_map(env, eval_envs)
        super().__init__(model=model, args=args, train_dataset=range(args.max_steps), processing_class=tokenizer,
                         data_collator=_first, callbacks=callbacks, **kwargs)
        setup.wire_callbacks(self)
        self.pending_metrics: list[dict[str, float]] = []
        self.last_states: list[dict[str, Any]] | None = None
        self.last_advantages: torch.Tensor | None = None
        self.plot_thread: Any = None  # metrics.png drawn in the background when train() ends
        self.earlier_run = earlier_run if self.is_world_process_zero() else None
        self.steps = StepRunner(self)
        self.ref_model = setup.reference_model(self)
        setup.setup_training(self)  # the mode (rl | opd | sft) and FSDP2 sharding
        setup.setup_inference(self, plan, vllm_server)

    def get_train_dataloader(self):
        # The dataloader only paces the HF loop (the step indices): the orchestrator owns the data.
        return torch.utils.data.DataLoader(range(self.args.max_steps), batch_size=1, shuffle=False, collate_fn=_first)

    # --- one optimizer step (step.py) -----------------------------------------------------------------
    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
                      ) -> torch.Tensor:
        return self.steps.run(model)

    def after_optimizer_step(self) -> None:
        """Sync the new weights to inference and complete the step's timing metrics (RLControlCallback, each step)."""
        self.steps.after_optimizer_step()

    def sync_inference(self, version: int) -> None:
        """Serve the policy's weights as `version`; every rank waits for rank 0's sync. Also run on resume (HF loads
        a checkpoint's weights after inference was first synced)."""
        if self.sharded is not None:
            self.sharded.refresh(self.model)  # every rank: gathers the shards
        self.inference.sync(self.served_model(), version)
        distributed.barrier(self.args.world_size)
        self.orchestrator.policy_version = version

    def served_model(self) -> Any:
        """The model generation and the weight sync read: the unsharded copy under FSDP, else the policy."""
        return self.sharded.full if self.sharded is not None else self.model

    # --- logging --------------------------------------------------------------------------------------
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.pending_metrics:
            trl_way = hasattr(self.env, "trl_trainer")  # reward_funcs=: TRL's metric names too
            logs = merge_pending(logs, self.pending_metrics,
                                 self.env.rubric.get_reward_func_names() if trl_way else None)
            print_samples(self)
            self.pending_metrics = []
        super().log(logs, start_time)

    # --- eval (evaluation.py) -------------------------------------------------------------------------
    def eval_states(self, env: Any, num_examples: int, rollouts_per_example: int,
                    sampling_args: dict[str, Any] | None = None, on_group_done: Any = None) -> list[dict[str, Any]]:
        """Scored rollouts of the current policy on `env`'s eval split (evaluation.eval_states)."""
        return evaluation.eval_states(self, env, num_examples, rollouts_per_example, sampling_args, on_group_done)

    def run_eval(self, evals: list[tuple[str, Any, int, int]] | None = None,
                 sampling_args: dict[str, Any] | None = None, prefix: str | None = None) -> dict[str, float]:
        """Evaluate the current policy on the eval envs and log their metrics (evaluation.run_eval)."""
        return evaluation.run_eval(self, evals, sampling_args, prefix)

    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval"
                 ) -> dict[str, float]:
        """transformers' `evaluate()` here: `run_eval()` on the eval envs (its `val/<env>/...` metrics)."""
        if eval_dataset is not None:
            raise TypeError("RLTrainer.evaluate takes no eval_dataset: it evaluates eval_envs (RLTrainer(..., "
                            "eval_envs=[...]))")
        return self.run_eval()

    # --- the run ----------------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any):
        export_wandb_env(self.args)  # the process environment changes when training starts, not with the RLConfig
        check_wandb_reachable(self.args.report_to, "report_to")
        self.pending_metrics = []  # an earlier train()'s last save time belongs to no step of this one
        checkpoints.clean_staging(self)
        eval_on_start = self.args.eval_on_start
        if resume_from_checkpoint is None:  # RLConfig's field resumes (transformers' Trainer leaves it to scripts)
            resume_from_checkpoint = self.args.resume_from_checkpoint
        # True / a step → its path
        resume_from_checkpoint = checkpoints.resolve_resume(self.args.output_dir, resume_from_checkpoint,
                                                            say=self.is_world_process_zero())
        if self.earlier_run and not resume_from_checkpoint:  # as transformers does, but not in silence
            from verifiers_rl.trainer.callbacks import warn

            warn(f"output_dir {self.args.output_dir} holds an earlier run ({self.earlier_run}): this run appends to "
                 "its metrics.jsonl and replaces its checkpoints of the same step; resume_from_checkpoint=True "
                 "continues it instead, another output_dir keeps them apart")
            self.earlier_run = None
        if eval_on_start and not resume_from_checkpoint:
            self.run_eval()
        if resume_from_checkpoint:
            check_resume_layout(resume_from_checkpoint, self.sharded is not None and self.sharded.applied,
                                self.args.world_size)
            checkpoints.load_rl_state(self, resume_from_checkpoint)
        # HF Trainer reads the same field to run its own (dataset-based) evaluate: ours replaces it.
        self.args.eval_on_start = False
        try:
            with frozen_heap(self.args.device.type == "cpu"):  # out of HF's first full collection, and later ones
                return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        finally:
            self.args.eval_on_start = eval_on_start
            self.orchestrator.close()

    def close(self) -> None:
        """Stop what this trainer started (orchestrator thread, a vLLM server it launched); also at exit and SIGTERM."""

        self.wait_for_plot()
        self.orchestrator.close()
        self.mode.close()
        self.inference.close()  # its weight sync, then any servers it started

    def wait_for_plot(self) -> None:
        """Wait until metrics.png, drawn in the background when train() ends, is written."""
        if self.plot_thread is not None:
            self.plot_thread.join()
