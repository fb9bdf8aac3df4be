"""With W&B on (report_to wandb): the step's rollouts as a table (prompt, completion, reward, advantage) and the
reward / advantage distributions as histograms, every logging_steps x sample_log_interval steps (the console
prints its own sample table at the same cadence)."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from verifiers_rl.envs.trl_compat import LOGGED_COLUMNS, logged_columns
from verifiers_rl.rewards import reward_of, training_reward


def _text(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    return "\n".join(str(m.get("content") or m.get("tool_calls") or "") for m in messages or [])


class WandbSamplesCallback(TrainerCallback):
    def __init__(self, trainer: Any):
        self.trainer = trainer

    def on_log(self, args, state, control, logs=None, **kwargs):
        every = int(args.logging_steps * args.sample_log_interval)
        if (not state.is_world_process_zero or not logs or "loss/mean" not in logs or every <= 0
                or state.global_step % every):
            return
        import wandb

        states, advantages = self.trainer.last_states, self.trainer.last_advantages
        if wandb.run is None or not states or advantages is None:
            return
        rewards = [training_reward(s, args.zero_truncated_completions) for s in states]  # what trained
        extra = logged_columns(states)  # TRL's log_extra columns
        table = wandb.Table(columns=["step", "prompt", "completion", "reward", "advantage", *extra])
        for s, a in zip(states, advantages.tolist()):
            prompt = s.get("prompt") or []
            table.add_data(state.global_step, _text(prompt[-1:] if isinstance(prompt, list) else prompt),
                           _text(s.get("completion")), reward_of(s), a,
                           *(s.get(LOGGED_COLUMNS, {}).get(c) for c in extra))
        # its own W&B step on HF's x-axis (transformers' WandbCallback logs train/global_step)
        wandb.log({"samples": table, "distributions/reward": wandb.Histogram(rewards),
                   "distributions/advantage": wandb.Histogram(advantages.tolist()),
                   "train/global_step": state.global_step})
