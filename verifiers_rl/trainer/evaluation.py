"""RLTrainer's evaluation: scored rollouts of the current policy on an env's eval split, and the logged
`val/<env>/...` or `eval/<name>/...` summary (RLTrainer.eval_states / run_eval are these, with the trainer)."""

from __future__ import annotations

import time
from typing import Any


def eval_states(trainer: Any, env: Any, num_examples: int, rollouts_per_example: int,
                sampling_args: dict[str, Any] | None = None, on_group_done: Any = None) -> list[dict[str, Any]]:
    """Scored rollouts of the current policy on `env`'s eval split (the first `num_examples` rows);
    `on_group_done(states)` after each example's group (a progress bar)."""
    import torch

    from verifiers_rl.envs.rollouts import generate_states

    args = trainer.args
    sampling = sampling_args if sampling_args is not None else args.sampling_args(for_eval=True)
    ds = env.get_eval_dataset(n=num_examples)
    if trainer.plan.backend == "local":
        torch.manual_seed(args.seed)  # the same draws for every eval of a run: paired comparisons
    was_training = trainer.model.training
    try:
        # The training env (and its members) evaluates with the run's context limit, other eval envs with theirs.
        training_env = env is trainer.env or any(env is e for e in getattr(trainer.env, "envs", []))
        return trainer.orchestrator.run(generate_states(
            env, ds, trainer.policy_client, trainer.inference.model_name(), sampling,
            rollouts_per_example=rollouts_per_example, max_concurrent=args.max_concurrent,
            on_group_done=on_group_done, max_seq_len=args.max_seq_len if training_env else None))
    finally:
        trainer.model.train(was_training)


def run_eval(trainer: Any, evals: list[tuple[str, Any, int, int]] | None = None,
             sampling_args: dict[str, Any] | None = None, prefix: str | None = None) -> dict[str, float]:
    """Evaluate the current policy on each of `evals` ((name, env, num_examples, rollouts_per_example); default the
    eval envs) and log `<prefix>/<env>/...`. `prefix` defaults to "val" (periodic validation) without `evals`, else
    "eval" (vf-rl's [eval]), so the two cadences never share a series."""

    from verifiers_rl.evaluation import summarize
    from verifiers_rl.trainer.eval_metrics import eval_scores, pass_threshold

    args = trainer.args
    prefix = prefix or ("val" if evals is None else "eval")
    if evals is None:
        evals = [(name, env, args.eval_num_examples, args.eval_rollouts_per_example)
                 for name, env in trainer.eval_envs.items()]
    metrics: dict[str, float] = {}
    done: dict[str, list[dict[str, Any]]] = {}
    t0 = time.perf_counter()
    for name, env, n, r in evals:
        states = done[name] = trainer.eval_states(env, n, r, sampling_args)
        scores = {**summarize(states), **eval_scores(states, r, pass_threshold(env))}
        metrics.update({f"{prefix}/{name}/{k}": v for k, v in scores.items()})
    metrics[f"time/{prefix}"] = time.perf_counter() - t0
    # HF's CallbackHandler.on_log clears control.should_log; run_eval runs from on_step_end, after
    # DefaultFlowCallback set it for this step: restored, so the step's training metrics are still logged.
    should_log = trainer.control.should_log
    trainer.log(metrics)
    trainer.control.should_log = should_log
    # callbacks' on_evaluate (a copy: transformers' notebook callback pops keys from it)
    trainer.control = trainer.callback_handler.on_evaluate(args, trainer.state, trainer.control, dict(metrics))
    trainer.last_eval = metrics
    trainer.last_eval_states = (prefix, trainer.state.global_step, done)  # vf-rl's after-RL eval reuses them
    return metrics
