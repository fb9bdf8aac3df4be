"""The trainer process's work (`python -m verifiers_rl.launch worker ...`): tiny model → SFT warm-up → held-out eval
→ RL → held-out eval. torch / transformers are imported inside the functions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from verifiers_rl.config.schema import RunConfig
from verifiers_rl.launching.stats import mean_reward, paired_gain

EvalSpec = tuple[str, Any, int, int]  # (name, environment, num_examples, rollouts_per_example)


def _env_name(env_id: str, name: str | None) -> str:
    return name or env_id.split("/")[-1]


def _periodic_eval_callback(trainer: Any, evals: list[EvalSpec], interval: int,
                            sampling: dict[str, Any] | None) -> Any:
    from transformers import TrainerCallback

    class PeriodicEval(TrainerCallback):
        """[eval] interval: evaluate each [[eval.env]] with its own num_examples / rollouts_per_example, logged as
        `eval/<env>/...` (the training env's own periodic validation, [val] / eval_steps, logs `val/<env>/...`)."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.global_step % interval == 0:
                trainer.run_eval(evals, sampling, prefix="eval")
            return control

    return PeriodicEval()


def _tiny_model(cfg: RunConfig, console: Any) -> str | None:
    """[tiny_model]: build it unless its directory has one; the model to train (cfg.model wins)."""
    tm = cfg.tiny_model
    if tm is None:
        return cfg.model
    path = Path(tm.path)
    if (path / "config.json").exists():
        console.print(f"tiny model: using {path}")
    else:
        from verifiers_rl.models.tiny import build_tiny_model

        build_tiny_model(path, num_layers=tm.layers, hidden_size=tm.hidden, num_heads=tm.heads,
                         num_kv_heads=tm.kv_heads, intermediate_size=tm.intermediate,
                         tie_word_embeddings=tm.tie_embeddings, seed=tm.seed)
        console.print(f"tiny model: built in {path}")
    return cfg.model or str(path)


def _tasks_drawn(cfg: RunConfig) -> int:
    """How many examples the run's steps draw: max_steps x (batch_size / rollouts_per_example), RLConfig's defaults
    where trainer.args is silent."""
    import dataclasses

    from verifiers_rl.trainer.config_fields import RLFields, field_default

    default = {f.name: field_default(f) for f in dataclasses.fields(RLFields)}
    get = lambda k: cfg.trainer.args.get(k) or default[k]  # noqa: E731
    return max(1, int(get("max_steps")) * max(1, int(get("batch_size")) // max(1, int(get("rollouts_per_example")))))


def _training_envs(cfg: RunConfig, load_environment: Any, say: Any = None) -> tuple[Any, list[Any]]:
    """(the environment to train on, the [[env]] environments it is made of); `say` gets each one's note."""
    from verifiers_rl.envs.dataset_format import without_training_rows
    from verifiers_rl.errors import ConfigError

    sub_envs = []
    drawn = _tasks_drawn(cfg)
    for i, e in enumerate(cfg.envs):
        sub = load_environment(e.id, e.args, api=e.api, path=e.path, endless_tasks=drawn)
        if without_training_rows(sub):  # before the warm-up, not after it
            key = f"env.{i}" if isinstance(cfg.env, list) else "env"
            raise ConfigError(f"{key}.id: {e.id!r} has no training dataset (its load_environment() gave "
                              "an eval_dataset only, or a dataset of no rows); give it a dataset, or evaluate it "
                              "with [[eval.env]]")
        sub.env_id = _env_name(e.id, e.name)
        if say is not None and getattr(sub, "endless_note", None):
            say(sub.endless_note)
        sub_envs.append(sub)
    if len(sub_envs) == 1:
        env = sub_envs[0]
    else:  # several [[env]]: one batch stream, groups in proportion to their ratios
        from verifiers_rl.envs.env_group import EnvGroup
        from verifiers_rl.v1.env_group import V1EnvGroup
        from verifiers_rl.v1.environment import V1Environment

        names, ratios = [e.env_id for e in sub_envs], [e.ratio or 1.0 for e in cfg.envs]
        v1 = all(isinstance(e, V1Environment) for e in sub_envs)
        env = V1EnvGroup(sub_envs, names, ratios) if v1 else EnvGroup(sub_envs, env_names=names, ratios=ratios)
        env.env_id = "+".join(names)
    return env, sub_envs


def first_model(cfg: RunConfig) -> str | None:
    """The model the run loads first: the warm-up's base when there is a warm-up ([warmup] model, else the tiny
    model, else `model`), else the model RL trains (`model`, else the tiny model)."""
    tiny = cfg.tiny_model.path if cfg.tiny_model is not None else None
    if cfg.warmup is not None:
        return cfg.warmup.model or tiny or cfg.model
    return cfg.model or tiny


def _warmup(cfg: RunConfig, env: Any, model: Any, console: Any) -> Any:
    """[warmup]: SFT the base model first; the model RL starts from."""
    if cfg.warmup is None:
        return model
    from verifiers_rl.sft.warmup import run_warmup

    w = cfg.warmup
    return str(run_warmup(first_model(cfg), env, w.output_dir, completion_format=w.completion_format,
                          max_steps=w.max_steps, learning_rate=w.learning_rate, batch_size=w.batch_size,
                          lr_scheduler_type=w.lr_scheduler_type, num_examples=w.num_examples,
                          seed=w.seed, max_length=w.max_length, micro_batch_size=w.micro_batch_size,
                          console=console))


def _trainer(plan: Any, model: Any, env: Any, args: Any) -> Any:
    """The RLTrainer, on the launch's plan; the vLLM servers it started go into run.json (vf-rl stop / Ctrl-C also
    end them)."""
    from verifiers_rl.trainer.rl_trainer import RLTrainer

    kwargs = {"plan": plan.inference, "vllm_server": plan.server} if plan is not None else {}
    trainer = RLTrainer(model, env, args, **kwargs)
    servers = trainer.inference.server_pids()
    if servers and trainer.is_world_process_zero():
        from verifiers_rl.runs import read_run, update_run

        if read_run(args.output_dir) is not None:  # launched by vf-rl: vf-rl stop / Ctrl-C also end the servers
            update_run(args.output_dir, servers=servers)
    return trainer


def _held_out(cfg: RunConfig, trainer: Any, args: Any, sub_envs: list[Any],
              load_environment: Any) -> tuple[list[EvalSpec], Any]:
    """([eval]'s environments with their sizes, its sampling args); adds the periodic eval when [eval] interval."""
    from verifiers_rl.trainer.judges import check_judges, plan_policy

    ev = cfg.eval
    sampling = None
    evals: list[EvalSpec] = []
    if ev is not None:
        sampling = args.sampling_args(for_eval=True)
        if ev.temperature is not None:
            sampling["temperature"] = ev.temperature
        if ev.max_tokens is not None:
            sampling["max_tokens"] = ev.max_tokens
        if ev.env:
            for e in ev.env:
                n = e.num_examples if e.num_examples is not None else ev.num_examples
                # an endless v1 taskset: the examples the eval draws, as training takes what its steps draw
                eval_env = load_environment(e.id, e.args, api=e.api, path=e.path, endless_tasks=n if n > 0 else None)
                check_judges([(_env_name(e.id, e.name), eval_env)], plan_policy(trainer.plan),
                             print if trainer.is_world_process_zero() else None)
                r = e.rollouts_per_example if e.rollouts_per_example is not None else ev.rollouts_per_example
                evals.append((_env_name(e.id, e.name), eval_env, n, r))
        else:  # each training env's own eval split
            evals += [(e.env_id, e, ev.num_examples, ev.rollouts_per_example) for e in sub_envs]
        if ev.interval:
            trainer.add_callback(_periodic_eval_callback(trainer, evals, ev.interval, sampling))
    return evals, sampling


def _eval_with_bar(trainer: Any, console: Any, label: str, env: Any, n: int, r: int, sampling: Any) -> Any:
    """trainer.eval_states with a rollout bar (gone when done: the result line follows)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not console.is_terminal:  # a log file: the result line is enough
        return trainer.eval_states(env, n, r, sampling)
    total = len(env.get_eval_dataset(n=n)) * r
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        return trainer.eval_states(env, n, r, sampling, on_group_done=lambda g: bar.advance(task, len(g)))


def _errors(states: list[dict[str, Any]]) -> str:
    """'; N of M rollouts errored (first: ...)' for a result line, escaped for rich; '' when none errored."""
    from rich.markup import escape

    from verifiers_rl.evaluation import errors_line

    line = errors_line(states)
    return f"; {escape(line)}" if line else ""


def _eval_before(trainer: Any, evals: list[EvalSpec], sampling: Any, console: Any,
                 result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    before: dict[str, list[dict[str, Any]]] = {}
    for name, e, n, r in evals:
        states = _eval_with_bar(trainer, console, f"held-out eval before RL ({name})", e, n, r, sampling)
        before[name] = states
        mean = mean_reward(states)
        console.print(f"[bold]held-out eval before RL[/] ({name}): reward {mean:.4f} on {len(states)} rollouts"
                      + _errors(states), highlight=False)
        _record_eval(trainer, name, mean, "before")
        result.setdefault("eval_before", mean)
    return before


def _eval_after(trainer: Any, evals: list[EvalSpec], sampling: Any, console: Any, result: dict[str, Any],
                before: dict[str, list[dict[str, Any]]]) -> None:
    # [eval] interval dividing the last step has just evaluated the trained policy with these same settings
    prefix, step, states = getattr(trainer, "last_eval_states", (None, None, {}))
    reuse = states if prefix == "eval" and step == trainer.state.global_step else {}
    for name, e, n, r in evals:
        after = reuse.get(name) or _eval_with_bar(trainer, console, f"held-out eval after RL ({name})", e, n, r,
                                                  sampling)
        note = f" (the step-{step} eval's rollouts)" if reuse.get(name) else ""
        if name in before and len(before[name]) == len(after) and after:
            b, a, gain, se = paired_gain(before[name], after)
            console.print(f"[bold]held-out eval after RL[/] ({name}): reward {a:.4f} (before {b:.4f}, "
                          f"gain {gain:+.4f} ± {se:.4f} paired s.e.){note}" + _errors(after), highlight=False)
            if "eval_after" not in result:
                result.update(eval_after=a, gain=gain, gain_se=se)
        else:
            a = mean_reward(after)
            console.print(f"[bold]held-out eval after RL[/] ({name}): reward {a:.4f}{note}" + _errors(after),
                          highlight=False)
            result.setdefault("eval_after", a)
        _record_eval(trainer, name, a, "after")


def close_v1_envs(envs: list[Any]) -> None:
    """v1 environments hold their `env.serving()` (harness processes) and an HTTP endpoint open: end them."""
    from verifiers_rl.v1.environment import V1Environment

    for e in {id(e): e for e in envs}.values():
        if isinstance(e, V1Environment):
            e.close()


def _replot(output_dir: str, trainer: Any) -> None:
    """metrics.png again, now with the after-RL eval point (the trainer drew it when training ended)."""
    if not trainer.is_world_process_zero() or not (Path(output_dir) / "metrics.jsonl").exists():
        return
    trainer.wait_for_plot()  # the trainer's own background plot writes the same file
    from verifiers_rl.plots import plot_run_safely

    plot_run_safely(output_dir)


def _record_eval(trainer: Any, name: str, mean: float, when: str) -> None:
    """The before / after eval in metrics.jsonl under the periodic eval's key, so the plot's eval panel shows
    before → every interval → after as one line."""
    import json

    if not trainer.is_world_process_zero():
        return
    path = Path(trainer.args.output_dir) / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"step": trainer.state.global_step, "time": time.time(), "eval/when": when,
                            f"eval/{name}/reward/mean": mean}) + "\n")


def prepare_main() -> int:
    """The tiny model and the warm-up alone, for the RunConfig (JSON) on stdin: local rank 0's child when vf-rl
    runs several training processes (launching/ranks.py)."""
    import sys

    from rich.console import Console

    cfg = RunConfig.model_validate_json(sys.stdin.read())
    console = Console()
    model = _tiny_model(cfg, console)
    from verifiers_rl.v1.entry import load_env_entry

    env, _ = _training_envs(cfg, load_env_entry)
    _warmup(cfg, env, model, console)
    return 0


def run(cfg: RunConfig, rl_kwargs: dict[str, Any], console: Any, plan: Any = None, args: Any = None
        ) -> dict[str, Any]:
    """Tiny model and SFT warm-up when asked, then RL with held-out eval before and after, on the launch's plan (None:
    the trainer plans from its RLConfig). `args`: the worker's RLConfig, used unless the plan changes its precision."""
    from verifiers_rl.config.schema import build_rl_config
    from verifiers_rl.startup_gc import paused_gc
    from verifiers_rl.verbosity import quiet_library_bars

    quiet_library_bars()
    from verifiers_rl.v1.entry import load_env_entry as load_environment
    t_start = time.perf_counter()
    from verifiers_rl.launching.ranks import prepare_once

    prepare_once(cfg)  # several training processes: the tiny model and the warm-up are built once, by rank 0
    say = lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    with paused_gc():  # what is imported and loaded before any training
        model = _tiny_model(cfg, console)
        env, sub_envs = _training_envs(cfg, load_environment, say)
        from verifiers_rl.trainer.judges import check_judges, plan_policy

        check_judges([env], plan_policy(plan.inference if plan is not None else None), say)  # before the warm-up
    model = _warmup(cfg, env, model, console)
    if plan is not None and plan.precision and rl_kwargs.get("bf16") is None:
        rl_kwargs = {**rl_kwargs, "bf16": plan.precision["train"] == "bf16"}  # decided once, by the plan
    with paused_gc():
        if args is None or args.bf16 != rl_kwargs.get("bf16", args.bf16):
            args = build_rl_config(rl_kwargs)
        trainer = _trainer(plan, model, env, args)
        from verifiers_rl.launching.ranks import clear_marker

        clear_marker()  # every rank is past prepare_once: the trainer's process group is up
        evals, sampling = _held_out(cfg, trainer, args, sub_envs, load_environment)
    result: dict[str, Any] = {"model": model, "output_dir": args.output_dir}
    ev = cfg.eval
    before: dict[str, list[dict[str, Any]]] = {}
    from verifiers_rl.trainer.checkpoints import resolve_resume

    if ev is not None and ev.before and resolve_resume(args.output_dir, args.resume_from_checkpoint):
        console.print("held-out eval before RL: not run again on resume (the first run's is in metrics.jsonl)")
    elif ev is not None and ev.before:
        before = _eval_before(trainer, evals, sampling, console, result)
    t_rl = time.perf_counter()
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    result["rl_seconds"] = time.perf_counter() - t_rl
    if ev is not None and ev.after:
        _eval_after(trainer, evals, sampling, console, result, before)
        _replot(args.output_dir, trainer)
    trainer.close()  # the orchestrator, and any server it started
    close_v1_envs([*sub_envs, *(e for _, e, _, _ in evals)])
    result["total_seconds"] = time.perf_counter() - t_start
    console.print(f"done in {result['total_seconds']:.0f} s (RL {result['rl_seconds']:.0f} s); "
                  f"checkpoints in {args.output_dir}")
    return result
