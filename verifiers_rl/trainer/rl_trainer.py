"""RLTrainer: a thin `transformers.Trainer` subclass that turns rollouts into policy updates.

One `training_step` = one optimizer step on exactly `batch_size` rollouts: fetch the step's batch
from the orchestrator, compute group advantages, split into micro-batches, and backpropagate the
token-level loss normalized over the whole step. HF Trainer keeps doing what it does well:
optimizer, scheduler, grad clipping, checkpoints, resume, `report_to`.
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any

import torch
from transformers import SchedulerType, Trainer, TrainerCallback, get_scheduler
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from verifiers_rl.trainer.advantages import compute_advantages
from verifiers_rl.rewards import reward_of, training_reward
from verifiers_rl.trainer.batching import collate, drop_reason, split_micro_batches
from verifiers_rl.trainer.callbacks import ConsoleCallback, MetricsFileCallback, RLControlCallback
from verifiers_rl.trainer.checkpoints import STAGING_DIR, RLCheckpoints  # noqa: F401  (STAGING_DIR: old home)
from verifiers_rl.trainer.config import RLConfig
from verifiers_rl.trainer import distributed, judges
from verifiers_rl.trainer.logprobs import policy_token_logprobs
from verifiers_rl.trainer.loss import masked_mean
from verifiers_rl.trainer.metrics import TokenWeightedMetrics
from verifiers_rl.trainer.model_loading import load_policy
from verifiers_rl.trainer.orchestrator import Orchestrator
from verifiers_rl.trainer.run_settings import export_wandb_env
from verifiers_rl.trainer.sharding import FSDPCheckpoints
from verifiers_rl.trainer.token_export import sequence_records, write_records


class _Steps(torch.utils.data.Dataset):
    """The dataloader only paces the HF loop: the orchestrator owns the data."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def _first(items: list[int]) -> dict[str, Any]:
    return {"step_index": torch.tensor(items[0])}


class _ResumeSync(TrainerCallback):
    def __init__(self, trainer: "RLTrainer"):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step > 0:
            self.trainer._resync_after_resume(int(state.global_step))
        return control


class RLTrainer(RLCheckpoints, FSDPCheckpoints, Trainer):
    def __init__(self, model: Any, env: Any, args: RLConfig | None = None, processing_class: Any = None,
                 peft_config: Any = None, callbacks: list | None = None, eval_envs: Any = None,
                 vllm_server: Any = None, plan: Any = None, **kwargs: Any):
        args = args or RLConfig()
        if not isinstance(args, RLConfig):
            raise TypeError("args must be an RLConfig")
        # Seed before building the policy: the LoRA init (get_peft_model) draws from the global RNG, and
        # transformers.Trainer only seeds in its own __init__, after the model exists. Without this the
        # adapter's init depends on whatever ran before, so `seed` did not make runs repeatable.
        from transformers.trainer_utils import enable_full_determinism, set_seed

        enable_full_determinism(args.seed) if args.full_determinism else set_seed(args.seed)
        model, tokenizer = load_policy(model, args, processing_class, peft_config)
        self.env = env
        if eval_envs is None:
            eval_envs = {getattr(env, "env_id", "env"): env}
        elif not isinstance(eval_envs, dict):
            eval_envs = {getattr(e, "env_id", f"env{i}"): e for i, e in enumerate(eval_envs)}
        self.eval_envs = eval_envs
        self.loss_config = args.loss_config()
        super().__init__(model=model, args=args, train_dataset=_Steps(args.max_steps), processing_class=tokenizer,
                         data_collator=_first, callbacks=callbacks, **kwargs)
        for cb in (PrinterCallback, ProgressCallback):
            self.remove_callback(cb)
        self.add_callback(MetricsFileCallback())
        self.add_callback(ConsoleCallback())
        self.add_callback(RLControlCallback(self))
        if "wandb" in (args.report_to or []):  # sample tables + distributions (trainer/wandb_extras.py)
            from verifiers_rl.trainer.wandb_extras import WandbSamplesCallback

            self.add_callback(WandbSamplesCallback(self))
        self._pending: list[dict[str, float]] = []
        self._packing_checked: bool | None = None  # prompt packing verified on this model (None: not yet)
        self._ref_model = None
        if args.beta > 0 and not args.use_lora:
            import copy

            self._ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        from verifiers_rl.trainer.sharding import shard_policy

        distributed.check_supported(args)
        from verifiers_rl.trainer.modes import build_mode

        self.mode = build_mode(self)  # rl | opd | sft: the rollouts' source and the loss (opd/sft: the teacher)
        self.sharded = shard_policy(self)  # FSDP2 when args.fsdp asks: None otherwise
        if args.world_size > 1 and self.is_world_process_zero():
            from verifiers_rl.trainer.sharding import describe

            print(describe(self.sharded, args.world_size), flush=True)
        self._setup_inference(plan, vllm_server)

    # --- inference ----------------------------------------------------------------------------------------
    def _setup_inference(self, plan: Any, server_config: Any) -> None:
        """One `Inference` object, built from the plan (vf-rl's, or made here from the RLConfig): the local engine
        or vLLM servers (`server_config`: a VLLMServerConfig or dict for the one the trainer starts)."""
        from verifiers_rl.inference.factory import build_inference
        from verifiers_rl.plan.inference import inference_plan_for_model

        args = self.args
        self.plan = plan = plan or inference_plan_for_model(args, self.model, server_config)
        judges.check(self, plan)  # a line per judge; one that would reach the policy: refused before it starts
        # with several ranks: one server (started by rank 0), brought to the policy before any rank generates
        self.inference = distributed.build_inference_on_every_rank(plan, lambda p: build_inference(
            p, model=self._served_model(), tokenizer=self.processing_class, args=args, server_config=server_config,
            is_main=self.is_world_process_zero()), args.world_size)
        self.add_callback(_ResumeSync(self))
        inline = self.inference.inline
        seed = args.seed

        def before_generate(step: int) -> None:
            # Sampling from the shared policy is seeded per step, so a resumed run replays it exactly.
            torch.manual_seed(seed * 100_003 + step)

        from verifiers_rl.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

        self.policy_client = OpenAIChatCompletionsClient(self.inference.client, allow_empty=args.keep_empty_replies)
        client, model_name = self.mode.generation(self.policy_client, self.inference.model_name)  # sft: the teacher's
        self.orchestrator = Orchestrator(
            self.env, client, model_name, args.sampling_args(),
            batch_size=args.batch_size, rollouts_per_example=args.rollouts_per_example,
            max_concurrent=args.max_concurrent, seed=args.seed, shuffle=args.shuffle_dataset,
            max_async_level=args.max_async_level, inline=inline, generation_timeout=args.generation_timeout,
            before_generate=before_generate if inline else None,
            buffer=args.buffer_config(), rank=args.process_index, world=args.world_size,
            max_seq_len=args.max_seq_len)  # multi-turn rollouts stop when the context is full (an env's own limit wins)

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None):
        # RLConfig documents warmup_steps as a linear warm-up; transformers' "constant" schedule ignores it.
        warmup = self.args.get_warmup_steps(num_training_steps)
        if self.lr_scheduler is None and warmup > 0 and SchedulerType(self.args.lr_scheduler_type) == "constant":
            self.lr_scheduler = get_scheduler("constant_with_warmup", optimizer or self.optimizer,
                                              num_warmup_steps=warmup, num_training_steps=num_training_steps)
            self._created_lr_scheduler = True
        return super().create_scheduler(num_training_steps, optimizer)

    def get_train_dataloader(self):
        return torch.utils.data.DataLoader(_Steps(self.args.max_steps), batch_size=1, shuffle=False,
                                           collate_fn=_first)

    # --- one optimizer step ---------------------------------------------------------------------------
    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
                      ) -> torch.Tensor:
        args = self.args
        step = self.state.global_step
        t_step = time.perf_counter()
        batch, wait_s = self.orchestrator.get_batch(step, self.state.max_steps)
        # This rank generated its own groups; every rank sees the whole step for advantages and metrics.
        states, offset = distributed.gather_states(batch.states, args.world_size)
        if len(states) != args.batch_size:
            raise RuntimeError(f"step {step}: got {len(states)} rollouts, expected batch_size={args.batch_size}")

        rewards = torch.tensor([training_reward(s, args.zero_truncated_completions) for s in states])  # as the buffer
        advantages = compute_advantages(rewards, args.rollouts_per_example, args.scale_rewards)
        mine = slice(offset, offset + len(batch.states))
        samples = self.mode.samples(batch.states, advantages[mine].tolist())  # opd by URL: the teacher scores here
        t_train = time.perf_counter()
        total_loss, loss_metrics = self._train_on(model, samples, step)
        loss_metrics = self.mode.finish(loss_metrics)
        metrics = {
            **self._rollout_metrics(states, advantages),
            **loss_metrics,
            "time/generate": batch.generate_s,
            "time/wait_for_batch": wait_s,
            "time/train": time.perf_counter() - t_train,
            "policy/staleness": float(step - batch.policy_version),
            "prompt_too_long": float(sum(drop_reason(s, args.max_prompt_len) == "prompt_too_long" for s in states)),
            **batch.metrics,
        }
        self._step_start = t_step
        self._pending.append(metrics)
        self._last_states = states
        return total_loss

    def _train_on(self, model: torch.nn.Module, samples: list[Any], step: int
                  ) -> tuple[torch.Tensor, dict[str, float]]:
        """Backpropagate this rank's share of the step's samples, micro-batch by micro-batch; returns the summed
        loss (detached) and the loss metrics, token-weighted over the micro-batches."""
        args = self.args
        world, rank = args.world_size, args.process_index
        # `samples` are this rank's own groups; the loss is normalized by the loss tokens of the whole step, and
        # every rank runs as many micro-batches as the busiest one (zero-weight padding: FSDP/DDP collectives).
        micro = split_micro_batches(samples, args.micro_batch_size)
        tokens, n_micro = distributed.step_totals(sum(sum(s.loss_mask) for s in samples), len(micro), world)
        total_tokens = torch.tensor(float(tokens), device=args.device)
        padded = distributed.pad_micro_batches(micro, n_micro, self._filler_sample())
        model.train()
        acc = TokenWeightedMetrics(when_empty=self.mode.loss_spec.when_empty)  # what the loss reports for no tokens
        total_loss = torch.zeros((), device=args.device)
        exports: list[dict[str, Any]] = []
        want_entropy = args.enable_token_export or self._logs_step(step)
        for i, (mb_samples, padding) in enumerate(padded):
            mb = collate(mb_samples, self.processing_class.pad_token_id, args.device)
            # Gradients sync across ranks once per step, on the last micro-batch.
            ctx = self.accelerator.no_sync(model) if i < len(padded) - 1 else contextlib.nullcontext()
            with ctx, self.compute_loss_context_manager():
                # Log-probs only where they are used (all positions for the token export), entropy only when
                # this step is logged; the output head runs in chunks (no [B, T, V] logits).
                # (a micro-batch without loss tokens runs the head everywhere: every parameter takes part)
                where = mb.attention_mask.bool() if args.enable_token_export or not any(
                    any(x.loss_mask) for x in mb_samples) else mb.loss_mask
                lp, ent = policy_token_logprobs(model, mb.input_ids, mb.attention_mask, self.mode.temperature,
                                                mask=where, with_entropy=want_entropy, **self._packing(model, mb))
                # Environment tokens trained with mask_env_responses=False have no sampling logprob: ratio 1.
                sampling = torch.where(mb.env_mask & mb.loss_mask, lp.detach(), mb.sampling_logprobs)
                out = self.mode.loss(model, mb, lp, sampling, total_tokens)  # rl: compute_loss; opd/sft: distill_loss
                self.accelerator.backward(out.loss * world)  # DDP averages gradients over ranks
            if padding:
                continue
            if args.enable_token_export:
                exports += sequence_records(mb, lp, sampling, ent, args.mask_ratio_low, args.mask_ratio_high, step)
            total_loss += out.loss.detach()
            acc.add({**out.metrics, **({"entropy/mean": masked_mean(ent, mb.loss_mask)} if ent is not None else {})})
        if exports:
            write_records(args.output_dir, step, rank, exports)
        # HF logs the mean of the ranks' losses: each rank's share times world sums to the step's loss
        return total_loss * world, distributed.merge_metrics(distributed.all_gather(acc.result(), world))

    def _packing(self, model: torch.nn.Module, mb: Any) -> dict[str, Any]:
        """Arguments that let rollouts sharing a prompt run as one packed row. The first time, the packed and the
        padded forward are compared on this micro-batch (no grad): a model that reads positions or masks its own
        way keeps the padded path, with one line saying so."""
        kwargs = {"prompt_lens": [s.prompt_len for s in mb.samples], "pad_id": self.processing_class.pad_token_id}
        if self._packing_checked is None:
            from verifiers_rl.trainer.logprobs import packing_matches

            dtype = torch.bfloat16 if self.args.bf16 else torch.float16 if self.args.fp16 else None
            ok = packing_matches(model, mb.input_ids, mb.attention_mask, self.mode.temperature, dtype=dtype, **kwargs)
            if ok is not None:
                self._packing_checked = ok
                if not ok:
                    print("prompt packing off: this model's packed log-probs differ from its padded ones",
                          flush=True)
        return kwargs if self._packing_checked else {}

    def _filler_sample(self) -> Any:
        from verifiers_rl.trainer.batching import Sample

        pad = int(self.processing_class.pad_token_id or 0)
        return Sample([pad, pad], [0, 0], [0.0, 0.0], 0.0, 0.0, -1, [0, 0])

    def _served_model(self) -> Any:
        """The model generation and the weight sync read: the unsharded copy under FSDP, else the policy."""
        return self.sharded.full if self.sharded is not None else self.model

    def _refresh_served(self) -> Any:
        if self.sharded is not None:
            self.sharded.refresh(self.model)  # every rank: gathers the shards
        return self._served_model()

    def _logs_step(self, step: int) -> bool:
        """Whether HF's step-based logging will log this step (metrics only needed then, e.g. the entropy)."""
        a = self.args
        if a.logging_strategy != "steps":
            return True
        every = max(1, int(self.state.logging_steps or 1))
        return (step + 1) % every == 0 or (step == 0 and a.logging_first_step) or step + 1 >= self.state.max_steps

    def _rollout_metrics(self, states: list[dict[str, Any]], advantages: torch.Tensor) -> dict[str, float]:
        from verifiers_rl.trainer.rollout_metrics import rollout_metrics

        return rollout_metrics(states, advantages, self.env)

    def _after_optimizer_step(self) -> None:
        t0 = time.perf_counter()
        self._sync_inference(self.state.global_step)
        if self._pending:
            self._pending[-1]["time/weight_sync"] = time.perf_counter() - t0
            self._pending[-1].update(self.inference.metrics())
            self._pending[-1]["time/step"] = time.perf_counter() - self._step_start

    # --- logging --------------------------------------------------------------------------------------
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._pending:
            renamed = {"loss": "loss/mean", "grad_norm": "optim/grad_norm", "learning_rate": "optim/lr"}
            logs = {renamed.get(k, k): v for k, v in logs.items()}
            keys = {k for m in self._pending for k in m}
            for k in keys:
                vals = [m[k] for m in self._pending if k in m]
                logs[k] = sum(vals) / len(vals)
            self._maybe_log_samples()
            self._pending = []
        super().log(logs, start_time)

    def _maybe_log_samples(self) -> None:
        # RLConfig documents sample_log_interval=0 as "disabled"; max(1, 0) below made it log every step.
        if self.args.sample_log_interval <= 0:
            return
        interval = max(1, self.args.logging_steps * self.args.sample_log_interval)
        states = getattr(self, "_last_states", None)
        if not states or self.state.global_step % interval != 0 or not self.is_world_process_zero():
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"samples at step {self.state.global_step}", show_lines=True)
        for col in ("prompt", "completion", "reward"):
            table.add_column(col, overflow="fold")
        for s in states[:: max(1, len(states) // 3)][:3]:
            prompt = s["prompt"][-1].get("content", "") if s.get("prompt") else ""
            completion = "\n".join(str(m.get("content") or m.get("tool_calls") or "") for m in s["completion"])
            table.add_row(str(prompt)[:200], completion[:300], f"{reward_of(s):.3f}")
        Console().print(table)

    # --- eval -------------------------------------------------------------------------------------------
    def eval_states(self, env: Any, num_examples: int, rollouts_per_example: int,
                    sampling_args: dict[str, Any] | None = None, on_group_done: Any = None) -> list[dict[str, Any]]:
        """Scored rollouts of the current policy on `env`'s eval split (the first `num_examples` rows);
        `on_group_done(states)` after each example's group (a progress bar)."""
        args = self.args
        sampling = sampling_args if sampling_args is not None else args.sampling_args(for_eval=True)
        ds = env.get_eval_dataset(n=num_examples)
        if self.plan.backend == "local":
            torch.manual_seed(args.seed)  # the same draws for every eval of a run: paired comparisons
        was_training = self.model.training
        try:
            from verifiers_rl.envs.rollouts import generate_states

            # The training env (and its members) evaluates with the run's context limit, other eval envs with theirs.
            training_env = env is self.env or any(env is e for e in getattr(self.env, "envs", []))
            return self.orchestrator.run(generate_states(
                env, ds, self.policy_client, self.inference.model_name(), sampling,
                rollouts_per_example=rollouts_per_example, max_concurrent=args.max_concurrent,
                on_group_done=on_group_done, max_seq_len=args.max_seq_len if training_env else None))
        finally:
            self.model.train(was_training)

    def run_eval(self, evals: list[tuple[str, Any, int, int]] | None = None,
                 sampling_args: dict[str, Any] | None = None, prefix: str | None = None) -> dict[str, float]:
        """Evaluate the current policy on each eval env's eval split and log `val/<env>/...` (default: `eval_envs`
        with the RLConfig's eval sizes) or, for `evals` given as (name, env, num_examples, rollouts_per_example),
        `eval/<name>/...`; `prefix` names it outright. With `avg@k` and `pass@k` (trainer/eval_metrics.py)."""
        from verifiers_rl.evaluation import summarize
        from verifiers_rl.trainer.eval_metrics import eval_scores, pass_threshold

        args = self.args
        prefix = prefix or ("val" if evals is None else "eval")  # two cadences, two series
        if evals is None:
            evals = [(name, env, args.eval_num_examples, args.eval_rollouts_per_example)
                     for name, env in self.eval_envs.items()]
        metrics: dict[str, float] = {}
        t0 = time.perf_counter()
        for name, env, n, r in evals:
            states = self.eval_states(env, n, r, sampling_args)
            scores = {**summarize(states), **eval_scores(states, r, pass_threshold(env))}
            metrics.update({f"{prefix}/{name}/{k}": v for k, v in scores.items()})
        metrics[f"time/{prefix}"] = time.perf_counter() - t0
        # HF's CallbackHandler.on_log clears control.should_log. run_eval runs from on_step_end, after
        # DefaultFlowCallback set should_log for this step; without restoring it, the step's training metrics
        # were never logged (eval_steps=1: no training records at all; otherwise they were merged into the next
        # logged step's averages).
        should_log = self.control.should_log
        self.log(metrics)
        self.control.should_log = should_log
        self.last_eval = metrics
        return metrics

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any):
        export_wandb_env(self.args)  # the process environment changes when training starts, not with the RLConfig
        self._clean_staging()
        eval_on_start = self.args.eval_on_start
        resume_from_checkpoint = self._resolve_resume(resume_from_checkpoint)  # True / a step → its path
        if eval_on_start and not resume_from_checkpoint:
            self.run_eval()
        if resume_from_checkpoint:
            self._load_rl_state(resume_from_checkpoint)
        # HF Trainer reads the same field to run its own (dataset-based) evaluate: ours replaces it.
        self.args.eval_on_start = False
        # HF's loop starts with a full gc.collect() (to hand garbage tensors' accelerator memory back): ~0.3 s
        # over a process that imported torch, transformers and an environment. On CPU refcounting already
        # frees those tensors, so the objects that exist now are left out of that collection.
        frozen = self.args.device.type == "cpu"
        if frozen:
            gc.freeze()
        try:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        finally:
            if frozen:
                gc.unfreeze()
            self.args.eval_on_start = eval_on_start
            self.orchestrator.close()

    def close(self) -> None:
        """Stop what this trainer started: the orchestrator's thread and, with the vLLM backend, the server it
        launched (servers given by URL are left running). Also done at interpreter exit and on SIGTERM."""
        self.wait_for_plot()
        self.orchestrator.close()
        self.mode.close()
        self.inference.close()  # its weight sync, then any servers it started

    def wait_for_plot(self) -> None:
        """Wait until metrics.png, drawn in the background when train() ends, is written."""
        thread = getattr(self, "_plot_thread", None)
        if thread is not None:
            thread.join()

    def _resync_after_resume(self, step: int) -> None:
        """HF Trainer loads a checkpoint's weights after inference was first synced: sync them again before the
        first batch is generated, and label rollouts with the resumed policy version."""
        self._sync_inference(step)

    def _sync_inference(self, version: int) -> None:
        """Serve the policy's weights as `version`: rank 0 syncs (the gathered copy under FSDP), and every rank waits
        for it, so no rank generates for `version` with the previous weights."""
        self.inference.sync(self._refresh_served(), version)
        distributed.barrier(self.args.world_size)
        self.orchestrator.set_policy_version(version)
