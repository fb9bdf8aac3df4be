"""One optimizer step of RLTrainer: batch, group advantages, micro-batches, the token-level loss normalized over the
whole step, backward, metrics; after the optimizer step, the weight sync. `RLTrainer.training_step` calls
`StepRunner.run`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from verifiers_rl.rewards import is_dropped, reward_of, training_reward
from verifiers_rl.trainer import distributed
from verifiers_rl.trainer.advantage_types.length_penalty import rollout_lengths
from verifiers_rl.trainer.advantage_types.rae import agent_of
from verifiers_rl.trainer.advantages import advantages_for
from verifiers_rl.trainer.batching import Sample, collate, drop_reason, split_micro_batches
from verifiers_rl.trainer.logprobs import packing_matches, policy_token_logprobs
from verifiers_rl.trainer.loss import StepTotals, masked_mean, sampler_mismatch_line
from verifiers_rl.trainer.metrics import TokenWeightedMetrics
from verifiers_rl.trainer.token_export import sequence_records, write_records
from verifiers_rl.trainer.typed_table import resolve_advantage


def filler_sample(pad_token_id: int | None) -> Any:
    """A two-token sample with no loss tokens: the micro-batch a rank runs so that every rank runs as many."""
    pad = int(pad_token_id or 0)
    return Sample([pad, pad], [0, 0], [0.0, 0.0], 0.0, 0.0, -1, [0, 0])


def logs_step(args: Any, state: Any, step: int) -> bool:
    """Whether HF's step-based logging will log this step (metrics only needed then, e.g. the entropy)."""
    if args.logging_strategy != "steps":
        return True
    every = max(1, int(state.logging_steps or 1))
    return (step + 1) % every == 0 or (step == 0 and args.logging_first_step) or step + 1 >= state.max_steps


class StepRunner:
    """The step of one RLTrainer (`trainer`: its args, state, orchestrator, mode, accelerator, pending metrics)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.packing_checked: bool | None = None  # prompt packing verified on this model (None: not yet)
        self.started = 0.0  # perf_counter at the start of the current step (time/step)
        self.estimator = resolve_advantage(trainer.args)  # built when the RLConfig was made; every step uses it
        self.baselines: dict[str, float] = {}  # rae's per-agent moving baselines (advantage_types/rae.py)
        self.mismatch_checked = False  # the run's first on-policy step compared sampler and trainer log-probs

    def run(self, model: torch.nn.Module) -> torch.Tensor:
        """One training step; its metrics join `trainer.pending_metrics`, its rollouts and their advantages are
        `trainer.last_states` and `trainer.last_advantages`."""
        tr = self.trainer
        args, step = tr.args, tr.state.global_step
        t_step = time.perf_counter()
        batch, wait_s = tr.orchestrator.get_batch(step, tr.state.max_steps)
        # This rank generated its own groups; every rank sees the whole step for advantages and metrics.
        states, offset = distributed.gather_states(batch.states, args.world_size)
        if len(states) != args.batch_size:
            raise RuntimeError(f"step {step}: got {len(states)} rollouts, expected batch_size={args.batch_size}")

        rewards = torch.tensor([training_reward(s, args.zero_truncated_completions) for s in states])  # as the buffer
        kept = [not is_dropped(s) for s in states]
        agents = [agent_of(s) for s in states] if self.estimator[0].uses_agents else None
        advantages = advantages_for(rewards, args.rollouts_per_example, self.estimator, kept, rollout_lengths(states),
                                    agents, self.baselines)
        mine = slice(offset, offset + len(batch.states))
        samples = tr.mode.samples(batch.states, advantages[mine].tolist())  # opd by URL: the teacher scores here
        t_train = time.perf_counter()
        total_loss, loss_metrics = self.train_on(model, samples, step)
        from verifiers_rl.trainer.rollout_metrics import rollout_metrics

        metrics = {
            **rollout_metrics(states, advantages, tr.env),
            **loss_metrics,
            "time/generate": batch.generate_s,
            "time/wait_for_batch": wait_s,
            "time/train": time.perf_counter() - t_train,
            "policy/staleness": float(step - batch.policy_version),
            "prompt_too_long": float(sum(drop_reason(s, args.max_prompt_len) == "prompt_too_long" for s in states)),
            **batch.metrics,
        }
        self.started = t_step
        if not self.mismatch_checked and step == batch.policy_version:  # sampled by the weights it trains
            self.mismatch_checked = True
            line = sampler_mismatch_line(metrics, step)
            if line and tr.is_world_process_zero():
                print(line, flush=True)
        tr.pending_metrics.append(metrics)
        tr.last_states, tr.last_advantages = states, advantages
        return total_loss

    def train_on(self, model: torch.nn.Module, samples: list[Any], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """Backpropagate this rank's share of the step's samples, micro-batch by micro-batch; returns the summed
        loss (detached) and the loss metrics, token-weighted over the micro-batches."""
        tr = self.trainer
        args = tr.args
        world, rank = args.world_size, args.process_index
        # every rank runs as many micro-batches as the busiest one (zero-weight padding: FSDP/DDP collectives)
        micro = split_micro_batches(samples, args.micro_batch_size)
        tokens, sequences, n_micro = distributed.step_totals(sum(sum(s.loss_mask) for s in samples), len(samples),
                                                             len(micro), world)
        totals = StepTotals(torch.tensor(float(tokens), device=args.device), sequences, n_micro * world)
        padded = distributed.pad_micro_batches(micro, n_micro, filler_sample(tr.processing_class.pad_token_id))
        model.train()
        acc = TokenWeightedMetrics(when_empty=tr.mode.loss_spec.when_empty)  # what the loss reports for no tokens
        total_loss = torch.zeros((), device=args.device)
        exports: list[dict[str, Any]] = []
        want_entropy = args.enable_token_export or logs_step(args, tr.state, step)
        for i, (mb_samples, padding) in enumerate(padded):
            mb = collate(mb_samples, tr.processing_class.pad_token_id, args.device)
            # Gradients sync across ranks once per step, on the last micro-batch.
            ctx = tr.accelerator.no_sync(model) if i < len(padded) - 1 else contextlib.nullcontext()
            with ctx, tr.compute_loss_context_manager():
                # log-probs only where used (everywhere for the token export, or with no loss tokens: every
                # parameter must take part in the backward)
                where = mb.attention_mask.bool() if args.enable_token_export or not any(
                    any(x.loss_mask) for x in mb_samples) else mb.loss_mask
                lp, ent = policy_token_logprobs(model, mb.input_ids, mb.attention_mask, tr.mode.temperature,
                                                mask=where, with_entropy=want_entropy, truncation=tr.mode.truncation,
                                                **self.packing(model, mb))
                # Environment tokens trained with mask_env_responses=False have no sampling logprob: ratio 1.
                sampling = torch.where(mb.env_mask & mb.loss_mask, lp.detach(), mb.sampling_logprobs)
                out = tr.mode.loss(model, mb, lp, sampling, totals)  # rl: compute_loss; opd/sft: distill_loss
                tr.accelerator.backward(out.loss * world)  # DDP averages gradients over ranks
            if padding:
                continue
            if args.enable_token_export:
                exports += sequence_records(mb, lp, sampling, ent, out.no_gradient, step)
            total_loss += out.loss.detach()
            acc.add({**out.metrics, **({"entropy/mean": masked_mean(ent, mb.loss_mask)} if ent is not None else {})})
        if exports:
            write_records(args.output_dir, step, rank, exports)
        # HF logs the mean of the ranks' losses: each rank's share times world sums to the step's loss
        return total_loss * world, distributed.merge_metrics(distributed.all_gather(acc.result(), world))

    def packing(self, model: torch.nn.Module, mb: Any) -> dict[str, Any]:
        """Arguments that let rollouts sharing a prompt run as one packed row, once a first comparison with the
        padded forward (`packing_matches`) found them equal on this model."""
        tr = self.trainer
        kwargs = {"prompt_lens": [s.prompt_len for s in mb.samples], "pad_id": tr.processing_class.pad_token_id}
        if self.packing_checked is None:
            dtype = torch.bfloat16 if tr.args.bf16 else torch.float16 if tr.args.fp16 else None
            ok = packing_matches(model, mb.input_ids, mb.attention_mask, tr.mode.temperature, dtype=dtype, **kwargs)
            if ok is not None:
                self.packing_checked = ok
                if not ok:
                    print("prompt packing off: this model's packed log-probs differ from its padded ones",
                          flush=True)
        return kwargs if self.packing_checked else {}

    def after_optimizer_step(self) -> None:
        """Serve the new weights, and complete the step's timing and perf metrics."""

        from verifiers_rl.trainer.rollout_metrics import perf_metrics

        tr = self.trainer
        t0 = time.perf_counter()
        tr.sync_inference(tr.state.global_step)
        tr.state.epoch = tr.orchestrator.epochs_done(tr.state.global_step)
        if tr.pending_metrics:
            last = tr.pending_metrics[-1]
            last["time/weight_sync"] = time.perf_counter() - t0
            last.update(tr.inference.metrics())
            last["time/step"] = time.perf_counter() - self.started
            if tr.last_states:
                last.update(perf_metrics(tr.last_states, last["time/step"], tr.args.world_size, tr.args.device,
                                         model=tr.model))


# HF's own keys, which it logs and callbacks read, under this trainer's names too (console, plots, dashboards)
OUR_NAMES = {"loss": "loss/mean", "grad_norm": "optim/grad_norm", "learning_rate": "optim/lr"}
# TRL's GRPOTrainer names for the same figures, logged too when the run came TRL's way (reward_funcs=)
TRL_NAMES = {"reward/all/mean": "reward", "reward/all/std": "reward_std", "entropy/mean": "entropy",
             "seq_len/completion_mean": "completions/mean_length"}


def merge_pending(logs: dict[str, float], pending: list[dict[str, float]],
                  reward_names: list[str] | None = None) -> dict[str, float]:
    """HF's log record, its keys also under our names (loss/mean, optim/*), and the mean of each metric over the
    steps since the last logged one. `reward_names` (TRL's reward functions): TRL's names too (`reward`,
    `rewards/<name>/mean`, ...)."""
    logs = {**logs, **{ours: logs[hf] for hf, ours in OUR_NAMES.items() if hf in logs}}
    for k in {k for m in pending for k in m}:
        vals = [m[k] for m in pending if k in m]
        logs[k] = sum(vals) / len(vals)
    if reward_names is not None:
        logs.update({trl: logs[ours] for ours, trl in TRL_NAMES.items() if ours in logs})
        logs.update({f"rewards/{n}/mean": logs[f"metrics/{n}/mean"] for n in reward_names
                     if f"metrics/{n}/mean" in logs})
    return logs


def print_samples(trainer: Any) -> None:
    """Three of the last step's rollouts as a table, every logging_steps x sample_log_interval steps (0: never)."""
    args, step = trainer.args, trainer.state.global_step
    if args.sample_log_interval <= 0:
        return
    interval = max(1, args.logging_steps * args.sample_log_interval)
    states = trainer.last_states
    if not states or step % interval != 0 or not trainer.is_world_process_zero():
        return
    from rich.console import Console
    from rich.table import Table

    from verifiers_rl.envs.trl_compat import LOGGED_COLUMNS, logged_columns

    table = Table(title=f"samples at step {step}", show_lines=True)
    shown = states[:: max(1, len(states) // 3)][:3]
    extra = logged_columns(shown)
    for col in ("prompt", "completion", "reward", *extra):
        table.add_column(col, overflow="fold")
    for s in shown:
        prompt = s["prompt"][-1].get("content", "") if s.get("prompt") else ""
        completion = "\n".join(str(m.get("content") or m.get("tool_calls") or "") for m in s["completion"])
        table.add_row(str(prompt)[:200], completion[:300], f"{reward_of(s):.3f}",
                      *(str(s.get(LOGGED_COLUMNS, {}).get(c))[:100] for c in extra))
    Console().print(table)
