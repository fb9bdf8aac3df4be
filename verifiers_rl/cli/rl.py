"""vf-rl: one TOML to a running job.

  vf-rl @ config.toml [@ more.toml ...] [--section.key VALUE ...] [--dry-run] [--output-dir DIR] [--allow-cpu]
      [--trainer @ trainer.toml] (a file as one table)  [--wandb | --no-wandb]  [-e VAR[=value]] [--wandb-api-key KEY]
  vf-rl @ config.toml --dry-run --gpus N [--gpu-memory-gb 80]   the plan on N GPUs: processes, their
                                             CUDA_VISIBLE_DEVICES, the vLLM command, weight transfer, memory
  vf-rl run @ config.toml [...] [--detach]   the same; --detach runs it in the background (logs in <output_dir>/logs)
  --clean-output-dir                         clear an earlier run's output dir first (otherwise refused unless
                                             trainer.args.resume_from_checkpoint continues it)
  vf-rl init [PATH | -] [--force]            write a commented template config (default rl.toml; - : stdout)
  vf-rl list [DIR]                           runs under DIR (default outputs/): status, step, last reward
  vf-rl logs RUN [--follow] [--process trainer|inference|launcher] [-n LINES]
  vf-rl stop RUN                             stop a run and every process it started
  vf-rl delete RUN [--force]                 delete a run's output dir (--force: also a running one)
  vf-rl plot RUN [--output FILE.png]         reward, eval reward, loss, entropy and step time over steps

--debug (or VF_DEBUG=1) prints the traceback behind a one-line error; VF_VERBOSE=1 keeps the libraries'
weight-loading bars.
Config files deep-merge left to right (tables merge, lists are replaced); --trainer.args.max-steps 50 overrides
(kebab or snake case), --flag / --no-flag for booleans, JSON for tables and lists, "None" for None.
Hosted-format configs (prime rl: max_steps, [sampling], [[env]], ...) are translated (docs/hosted.md).
RUN is a run name (its dir under outputs/) or an output dir. Every key: docs/configuration.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from verifiers_rl.cli.common import fail, note_offline_hub, take_debug_flag

USAGE = __doc__ or ""
SUBCOMMANDS = ("run", "init", "list", "logs", "stop", "delete", "plot")

TEMPLATE = '''\
# vf-rl run config. Every key: docs/configuration.md; `vf-rl @ rl.toml --dry-run` writes it with all defaults.
#   vf-rl @ rl.toml                                     train (Ctrl-C stops every process it started)
#   vf-rl @ rl.toml --trainer.args.max-steps 20 --output-dir outputs/try-1
#   vf-rl run @ rl.toml --detach; vf-rl list; vf-rl logs my-run --follow; vf-rl stop my-run
# None is written "None" (TOML has no null).

# The policy RL starts from: a local model dir, a hub id, or a PEFT adapter dir.
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"

# .env files (KEY=VALUE lines) loaded into the environment, relative to this file; values are never logged.
# env_file = ["secrets.env"]

[env]
id = "reverse-text"            # environments/<name>/ in this workspace, or an installed environment module
args = {}                      # keyword arguments of its load_environment()

[inference]
backend = "auto"               # auto: a vLLM server when there is a GPU and vLLM, else the local engine
gpus = 1                       # GPUs for the vLLM server (the first ones)
# urls = ["http://127.0.0.1:8000/v1"]   # already-running servers: nothing is started

[inference.args]               # vLLM server flags: key -> --key (true -> bare flag)
# enforce_eager = true

[trainer]
gpus = 1                       # GPUs for training (after the inference ones); > 1 runs torchrun

[trainer.args]                 # any RLConfig field (docs/configuration.md)
run_name = "my-run"            # the run's name; its output dir is outputs/<run_name> unless output_dir is set
micro_batch_size = 8           # rollouts per forward/backward pass on each GPU
rollouts_per_example = 16      # group size: advantages are reward minus the group mean
batch_size = 128               # rollouts per optimizer step (a multiple of both of the above x GPUs)
max_steps = 100
max_tokens = 128               # new tokens per model turn
max_seq_len = 512              # prompt + completion tokens in one training sample
max_prompt_len = 256
learning_rate = 1e-5
temperature = 1.0
use_lora = true
save_steps = 50
# eval_steps = 25              # evaluate the training env's eval split every N steps
# wandb = { project = "my-project", name = "my-run" }   # turns on W&B logging (WANDB_API_KEY from env_file)

# Held-out eval of the starting and the trained policy on the same examples (and every `interval` steps).
# [eval]
# num_examples = 128
# rollouts_per_example = 1
# interval = 50
# [[eval.env]]                 # default: the training env's eval split
# id = "reverse-text"
'''


def _opts(argv: list[str], flags: dict[str, bool]) -> tuple[list[str], dict[str, Any]]:
    """Tiny option parser for the management commands: flags[name] = takes a value."""
    pos: list[str] = []
    got: dict[str, Any] = {}
    args = iter(argv)
    for a in args:
        if a in flags:
            got[a] = next(args, None) if flags[a] else True
            if got[a] is None:
                fail(f"{a} needs a value")
        elif a.startswith("-") and a != "-":
            fail(f"unknown option {a!r}; see vf-rl --help")
        else:
            pos.append(a)
    return pos, got


def _one_run(argv: list[str], flags: dict[str, bool], usage: str) -> tuple[str, dict[str, Any]]:
    """A management command's RUN argument and its options; the usage line when it is not exactly one RUN."""
    pos, opts = _opts(argv, flags)
    if len(pos) != 1:
        fail(f"usage: {usage}")
    return pos[0], opts


def _earlier_run(output_dir: str) -> str | None:
    """'a running run' / 'an earlier run (metrics.jsonl)' when output_dir holds one, whose configs/rl.toml a dry run
    must not overwrite; else None."""
    from verifiers_rl.runs import is_running, read_run
    from verifiers_rl.trainer.checkpoints import used_by

    if is_running(read_run(output_dir)):
        return "a running run"
    used = used_by(output_dir)
    return f"an earlier run ({used})" if used else None


def cmd_run(argv: list[str], *, real_process: bool = False) -> int:
    from verifiers_rl.config.loading import ConfigError, apply_env_vars, redact_argv, split_argv

    try:
        _, _, early = split_argv(argv)
        apply_env_vars(early.get("env_vars", []))  # -e VAR[=value], --wandb-api-key: this run and its children
        if early.get("gpus") is not None and not early.get("dry_run"):
            raise ConfigError("--gpus: a plan for N GPUs is shown by a dry run (add --dry-run); a run uses the GPUs "
                              "it sees (CUDA_VISIBLE_DEVICES)")
        if early.get("gpu_memory_gb") is not None and (early.get("gpus") is None or not early.get("dry_run")):
            raise ConfigError("--gpu-memory-gb sizes the GPUs of a dry run's plan: add --dry-run --gpus N")
        if early.get("dry_run") and real_process and "torch" not in sys.modules:
            from verifiers_rl.launching.preview import PARENT_DEVICES

            os.environ[PARENT_DEVICES] = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a dry run touches no GPU
        if not early.get("dry_run"):
            note_offline_hub()  # HF_HUB_OFFLINE=1 when the hub can't be reached: the trainer inherits it
        from verifiers_rl.config.schema import load_run, write_resolved

        resolved, options = load_run(argv, preview=True)  # transformers' own checks: in the trainer
        options["argv"] = redact_argv(argv)  # run.json records the command, never a secret's value
        if options.get("dry_run"):
            earlier = _earlier_run(resolved.output_dir)
            path = write_resolved(resolved, Path(resolved.output_dir) / "configs",
                                  name="rl.dry-run.toml" if earlier else "rl.toml")
            kind = " (hosted format, translated)" if resolved.hosted else ""
            print(f"resolved config{kind} written to {path}")
            if earlier:
                print(f"{resolved.output_dir} holds {earlier}: its configs/rl.toml, the record of what it ran, is "
                      "kept")
            if options.get("gpus") is not None:
                from verifiers_rl.launching.preview import preview_lines

                for line in preview_lines(resolved, int(options["gpus"]), options.get("gpu_memory_gb")):
                    print(line)
            else:
                print("for the GPU plan (processes, CUDA_VISIBLE_DEVICES, vLLM command, memory): add --gpus N")
            return 0
        from verifiers_rl.launching.output_dir import check_output_dir
        from verifiers_rl.launching.preview import add_memory_line
        from verifiers_rl.plan.hardware import gpu_count
        from verifiers_rl.plan.launch import plan_launch
        from verifiers_rl.runs import is_running, proc_start_ticks, read_run, update_run

        existing = read_run(resolved.output_dir)
        if is_running(existing):
            raise ConfigError(f"output_dir: {resolved.output_dir} belongs to a running run "
                              f"({existing.get('name')}, pid {existing.get('pid')}); stop it or pass --output-dir")
        reused = check_output_dir(resolved.output_dir, resolved.cfg, resume=resolved.args.resume_from_checkpoint,
                                  clean_requested=bool(options.get("clean_output_dir")))
        if reused:
            raise ConfigError(reused)
        plan = plan_launch(resolved.cfg, gpu_count(), allow_cpu=bool(options.get("allow_cpu")),
                           output_dir=resolved.output_dir, args=resolved.args,
                           source=" @ ".join(str(p) for p in resolved.config_files) or None)
        add_memory_line(plan, resolved.cfg)
    except ConfigError as e:
        fail(str(e))
    _check_servers(plan.urls)  # servers given by URL (vf-rl starts none of them)
    _check_teacher(resolved.cfg)
    _check_wandb(resolved)
    _check_push(resolved)
    _check_model(resolved.cfg)
    from verifiers_rl.launch import prepare_launch, start_detached, supervise

    for line in plan.lines:
        print(line, flush=True)
    out = Path(resolved.output_dir)
    detach = bool(options.get("detach"))
    prepare_launch(resolved, plan, options, detached=detach)
    if detach:
        pid = start_detached(out)
        update_run(out, pid=pid, pid_start=proc_start_ticks(pid))
        print(f"run {resolved.run_name} started in the background (pid {pid}) in {out}")
        print(f"  vf-rl logs {out} --follow  |  vf-rl list  |  vf-rl stop {out}")
        return 0
    print(f"run {resolved.run_name}: output dir {out} (logs in {out / 'logs'})", flush=True)
    return supervise(out, echo=True)


def _check_model(cfg: Any) -> None:
    """The model the run starts from exists (dir, hub or cache) before anything starts (not one the run builds)."""
    from verifiers_rl.errors import ModelNotFoundError, NetworkError
    from verifiers_rl.launching.pipeline import first_model
    from verifiers_rl.network import check_model_reachable

    base = first_model(cfg)
    if base and not (cfg.tiny_model is not None and str(base) == str(cfg.tiny_model.path)):
        try:
            check_model_reachable(str(base))
        except (ModelNotFoundError, NetworkError) as e:
            fail(str(e), code=1)


def _check_teacher(cfg: Any) -> None:
    """training_mode opd/sft: the teacher server answers, an opd teacher shares the policy's vocabulary."""
    from verifiers_rl.config.validation import teacher_problem

    problem = teacher_problem(cfg)
    if problem:
        fail(problem, code=1)


def _check_wandb(resolved: Any) -> None:
    """W&B on: a key (WANDB_API_KEY, an env_file, a netrc entry) or offline mode, and its server in reach, else one
    line now, not wandb's own error after the model and the environments have loaded."""
    from verifiers_rl.config.loading import read_env_file
    from verifiers_rl.config.resolution import map_origin
    from verifiers_rl.network import wandb_needs_key, wandb_unreachable
    from verifiers_rl.trainer.run_settings import report_list

    if "wandb" not in report_list(resolved.args.report_to):
        return
    env = dict(os.environ)
    for path in resolved.cfg.env_file:
        env.update(read_env_file(path))
    if wandb_needs_key(env):
        fail(map_origin("trainer.args.wandb: W&B logging is on, but no W&B API key is set here (WANDB_API_KEY, an "
                        "env_file, `wandb login`); pass --wandb-api-key KEY or -e WANDB_API_KEY, log offline with -e "
                        "WANDB_MODE=offline, or turn it off with --no-wandb", resolved.origin), code=1)
    why = wandb_unreachable(env)
    if why:
        fail(map_origin(f"trainer.args.wandb: W&B logging is on, but {why}; log offline with -e WANDB_MODE=offline "
                        "(`wandb sync` later), or turn it off with --no-wandb", resolved.origin), code=1)


def _check_push(resolved: Any) -> None:
    from verifiers_rl.config.resolution import map_origin
    from verifiers_rl.network import push_to_hub_problem

    problem = push_to_hub_problem(bool(resolved.args.push_to_hub))
    if problem:
        fail(map_origin(f"trainer.args.{problem}", resolved.origin), code=1)


def _check_servers(urls: list[str]) -> None:
    """inference.urls: each server answers one request within seconds, or one line and exit 1 before any start."""
    from verifiers_rl.network import check_server

    for url in urls:
        problem = check_server(url)
        if problem:
            fail(f"inference.urls: {problem}", code=1)


def cmd_init(argv: list[str]) -> int:
    pos, opts = _opts(argv, {"--force": False})
    target = pos[0] if pos else "rl.toml"
    if len(pos) > 1:
        fail("vf-rl init takes one PATH (or - for stdout)")
    if target == "-":
        sys.stdout.write(TEMPLATE)
        return 0
    path = Path(target)
    if path.exists() and not opts.get("--force"):
        fail(f"{path} exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEMPLATE)
    print(f"wrote {path}; check it with: vf-rl @ {path} --dry-run")
    return 0


def cmd_list(argv: list[str]) -> int:
    from verifiers_rl.runs import DEFAULT_ROOT, format_rows, run_rows

    pos, _ = _opts(argv, {})
    root = pos[0] if pos else DEFAULT_ROOT
    rows = run_rows(root)
    print(format_rows(rows) if rows else f"no runs under {root}/")
    return 0


def cmd_logs(argv: list[str]) -> int:
    from verifiers_rl.runs import follow, is_running, read_run, resolve_run_dir, tail_lines

    run, opts = _one_run(argv, {"--follow": False, "-f": False, "--process": True, "-n": True},
                         "vf-rl logs RUN [--follow] [--process trainer|inference|launcher] [-n LINES]")
    d = resolve_run_dir(run)
    path = d / "logs" / f"{opts.get('--process', 'trainer')}.log"
    n, following = opts.get("-n"), opts.get("--follow") or opts.get("-f")
    if n is not None and not str(n).isdigit():
        fail(f"-n: expected a number of lines, got {n!r}")
    if not path.exists() and not following:
        have = sorted(p.stem for p in (d / "logs").glob("*.log")) if (d / "logs").is_dir() else []
        fail(f"{path}: no such log" + (f"; logs: {', '.join(have)}" if have else ""))
    if n is not None:
        for line in tail_lines(path, int(n)):
            print(line)
    if following:
        with contextlib.suppress(KeyboardInterrupt):
            follow(path, lambda: is_running(read_run(d)), sys.stdout, from_start=n is None)
    elif n is None:
        sys.stdout.write(path.read_text(errors="replace"))
    return 0


def cmd_stop(argv: list[str]) -> int:
    from verifiers_rl.runs import read_run, resolve_run_dir, stop_run

    d = resolve_run_dir(_one_run(argv, {}, "vf-rl stop RUN")[0])
    name = (read_run(d) or {}).get("name", d.name)
    was_running, status = stop_run(d)
    print(f"stopped run {name} ({d})" if was_running else f"run {name} is not running ({status})")
    return 0


def cmd_delete(argv: list[str]) -> int:
    from verifiers_rl.runs import delete_run, resolve_run_dir

    run, opts = _one_run(argv, {"--force": False}, "vf-rl delete RUN [--force]")
    d = resolve_run_dir(run)
    delete_run(d, force=bool(opts.get("--force")))
    print(f"deleted {d}")
    return 0


def cmd_plot(argv: list[str]) -> int:
    run, opts = _one_run(argv, {"--output": True, "-o": True}, "vf-rl plot RUN [--output FILE.png]")
    # any output dir with metrics works, vf-rl's or a notebook RLTrainer's
    from verifiers_rl.runs import resolve_run_dir

    d = Path(run) if (Path(run) / "metrics.jsonl").exists() else resolve_run_dir(run)
    if not (d / "metrics.jsonl").exists():
        fail(f"{d} has no metrics.jsonl yet: nothing to plot")
    from verifiers_rl.plots import plot_run

    print(f"wrote {plot_run(d, opts.get('--output') or opts.get('-o'))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    real_process = argv is None
    argv = take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    sub = argv[0] if argv else "help"
    if sub in ("-h", "--help", "help") or (sub in SUBCOMMANDS and argv[1:2] in (["-h"], ["--help"])):
        print(USAGE.strip())
        return 0
    if sub == "run":
        return cmd_run(argv[1:], real_process=real_process)
    commands = {"init": cmd_init, "list": cmd_list, "logs": cmd_logs, "stop": cmd_stop, "delete": cmd_delete,
                "plot": cmd_plot}
    if sub in commands:
        from verifiers_rl.runs import RunError

        try:
            return commands[sub](argv[1:])
        except RunError as e:  # an unknown run, a running one deleted without --force
            fail(str(e))
    if sub.startswith(("@", "--", "-e")) or sub.endswith(".toml"):
        return cmd_run(argv, real_process=real_process)
    from verifiers_rl.config.sections import close_match

    close = close_match(sub, list(SUBCOMMANDS))
    fail(f"unknown command {sub!r}" + (f" (did you mean {close}?)" if close else "") + "; see vf-rl --help")


if __name__ == "__main__":
    sys.exit(main())
