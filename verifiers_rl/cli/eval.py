"""vf-eval (also vfrl-eval): evaluate a model on an environment, through a server or the local engine."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from verifiers_rl.cli.common import fail, note_offline_hub, program_name, quiet_library_bars, take_debug_flag
from verifiers_rl.cli.eval_flags import add_verifiers_flags, apply_verifiers_flags


def build_parser(prog: str = "vf-eval") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Evaluate a model on an environment.")
    p.add_argument("env_id", nargs="?", help="environment id, e.g. reverse-text or owner/reverse-text; or a config "
                   "file: configs/eval/x.toml ([[eval]] tables, as `prime eval run` reads them) or @ x.toml (a "
                   "verifiers v1 eval config); flags given here win over the file")
    p.add_argument("-m", "--model", help="(required) model dir, hub id or PEFT adapter dir (local engine), a "
                   "server's model name with --base-url, or an endpoint name from configs/endpoints.py")
    p.add_argument("-n", "--num-examples", type=int, default=5,
                   help="examples to evaluate (-1 or 0: all, as in verifiers)")
    p.add_argument("-r", "--rollouts-per-example", type=int, default=3)
    p.add_argument("-a", "--env-args", default="{}", help="JSON object passed to load_environment (a verifiers v1 "
                   "environment: its env config, e.g. '{\"taskset\": {...}, \"agent\": {\"harness\": {\"id\": "
                   "\"null\"}}}')")
    p.add_argument("--api", choices=("auto", "classic", "v1"), default="auto",
                   help="the environment's verifiers API (auto: v1 when verifiers 0.4 is installed and the module "
                        "exports a v1 Taskset/Env, else classic)")
    p.add_argument("--env-path", "--env-dir-path", dest="env_path", default=None,
                   help="a directory put first on sys.path, holding the environment")
    p.add_argument("-b", "--base-url", "--api-base-url", dest="base_url", default=None,
                   help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("-k", "--api-key-var", default=None, help="environment variable holding the API key")
    p.add_argument("-t", "--max-tokens", type=int, default=None)
    p.add_argument("-T", "--temperature", type=float, default=None)
    p.add_argument("-S", "--sampling-args", default="{}",
                   help="JSON object of sampling parameters; its keys override -t/-T, e.g. '{\"min_tokens\": 1, "
                        "\"top_p\": 0.9}' (vLLM's extra parameters are accepted here too)")
    p.add_argument("-c", "--max-concurrent", type=int, default=32, help="rollouts in flight (-1: no limit)")
    p.add_argument("-o", "--output", "--output-dir", dest="output", default=None,
                   help="write one JSON object per rollout to this .jsonl file (with -s: the directory to save "
                        "under, as verifiers' --output-dir)")
    p.add_argument("-s", "--save-results", action="store_true",
                   help="save results.jsonl and metadata.json as verifiers' vf-eval does, under "
                        "<-o, else ./environments/<env>/outputs if it exists, else ./outputs>/evals/<env>--<model>/"
                        "<id>/")
    p.add_argument("-C", "--state-columns", default=None,
                   help="comma-separated state keys to save beside each rollout's row, e.g. 'timing,info'")
    p.add_argument("--seed", type=int, default=None, help="shuffle the eval split with this seed")
    p.add_argument("--shuffle", action="store_true", help="shuffle the eval split (seed: --shuffle-seed, else 0)")
    p.add_argument("--shuffle-seed", type=int, default=None, help="the seed of --shuffle (verifiers' name)")
    p.add_argument("-v", "--verbose", action="store_true", help="keep the libraries' progress bars (VF_VERBOSE=1)")
    p.add_argument("--debug", action="store_true", help="print the traceback of a failure (also: VF_DEBUG=1)")
    add_verifiers_flags(p)  # verifiers' other flags: a note, or one line saying what to do instead
    return p


def _json_object(text: str, flag: str, example: str) -> dict:
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError("not an object")
    except ValueError as e:
        fail(f"{flag} must be a JSON object, e.g. '{example}' ({e})")
    return value


def _check_ranges(args: argparse.Namespace) -> None:
    for flag, value, low in (("-r/--rollouts-per-example", args.rollouts_per_example, 1),
                             ("-t/--max-tokens", args.max_tokens, 1), ("-T/--temperature", args.temperature, 0)):
        if value is not None and value < low:
            fail(f"{flag} must be >= {low} (got {value})")


def _check_output(args: argparse.Namespace) -> None:
    """-o names a file that can be written: found before the rollouts, not after them."""
    if not args.output:
        return
    out = Path(args.output)
    if args.save_results:  # verifiers' meaning: the directory the results go under
        if out.exists() and not out.is_dir():
            fail(f"-o/--output: {args.output} is a file; with -s it names the directory to save under")
    elif out.is_dir():  # verifiers' -o is a directory
        fail(f"-o/--output: {args.output} is a directory; give the .jsonl file to write, e.g. "
             f"{out / 'results.jsonl'}, or add -s to save results.jsonl and metadata.json under it as verifiers does")
    # the nearest existing folder the path goes through: -s writes under `out` itself, a .jsonl beside it
    parent = next((p for p in ((out, *out.parents) if args.save_results else out.parents) if p.exists()), None)
    if parent is not None and not parent.is_dir():
        fail(f"-o/--output: {parent} is a file, not a directory; give another path for {args.output}")


def main(argv: list[str] | None = None) -> int:
    from verifiers_rl.cli.eval_config import EvalConfigError, eval_runs

    parser = build_parser(program_name("vf-eval"))
    try:
        runs = eval_runs(list(sys.argv[1:] if argv is None else argv), parser)
    except EvalConfigError as e:
        fail(str(e))
    codes = []
    for args in runs:
        if len(runs) > 1 and args.output and not args.save_results:  # one file per evaluation
            stem, dot, ext = args.output.rpartition(".")
            name = getattr(args, "name", None) or args.env_id
            args.output = f"{stem}-{name.replace('/', '-')}{dot}{ext}" if dot else f"{args.output}-{name}"
        codes.append(evaluate(args))
    return max(codes)


def evaluate(args: argparse.Namespace) -> int:
    """One evaluation: vf-eval's arguments → its summary (exit code 0, or 1 when nothing was measured)."""
    if not args.env_id or not args.model:
        fail("an environment id (or a config file) and -m/--model are required: vf-eval reverse-text -m MODEL")
    notes, refused = apply_verifiers_flags(args)
    if refused:
        fail(refused)
    for line in notes:
        print(line, file=sys.stderr, flush=True)
    _check_ranges(args)
    _check_output(args)
    env_args = _json_object(args.env_args, "--env-args", '{"num_train_examples": 100}')
    extra_sampling = _json_object(args.sampling_args, "--sampling-args", '{"min_tokens": 1}')

    if args.debug:
        take_debug_flag(["--debug"])
    from rich.console import Console

    from verifiers_rl.startup_gc import paused_gc

    console = Console(stderr=True)
    with paused_gc():  # imports, the environment and the model: no collection over them until they are loaded
        env, client, model_name = _load(args, env_args, console)
    sampling = {k: v for k, v in (("max_tokens", args.max_tokens), ("temperature", args.temperature)) if v is not None}
    sampling.update(extra_sampling)
    started = time.time()
    try:
        states = asyncio.run(_run(env, client, model_name, args, sampling, console))
    finally:
        from verifiers_rl.launching.pipeline import close_v1_envs

        close_v1_envs([env])

    from verifiers_rl.evaluation import all_errored, completion_length, errors_line, summarize, write_jsonl

    summary = summarize(states)
    columns = [c.strip() for c in (args.state_columns or "").split(",") if c.strip()]
    _print_summary(console, getattr(args, "name", None) or args.env_id, model_name, summary)
    if args.save_results:
        from verifiers_rl.evaluation import save_results

        meta = {"env_id": args.env_id, "name": getattr(args, "name", None) or args.env_id, "env_args": env_args,
                "model": model_name, "base_url": args.base_url or "local", "num_examples": args.num_examples,
                "rollouts_per_example": args.rollouts_per_example, "sampling_args": sampling,
                "time": time.time() - started}
        path = save_results(states, summary, meta, _results_dir(args, model_name), columns)
        console.print(f"saved {len(states)} rollouts to {path}")
    elif args.output:
        path = write_jsonl(states, args.output, columns)
        console.print(f"wrote {len(states)} rollouts to {path}")
    errors = errors_line(states)
    if errors:
        console.print(errors, markup=False, highlight=False, soft_wrap=True)
    if all_errored(states):  # an evaluation that measured nothing is a failure
        console.print("error: every rollout errored: nothing was measured", markup=False, highlight=False)
        return 1
    # verifiers' flag: the context was full before the model could reply
    full = sum(1 for s in states if s.get("prompt_too_long") and not completion_length(s))
    if full:
        console.print(f"{'error: ' if full == len(states) else ''}{full} of {len(states)} rollouts had no room for a "
                      "reply (the prompt fills the model's context): use a model with a longer context, or shorter "
                      "prompts", markup=False, highlight=False, soft_wrap=True)
    return 1 if states and full == len(states) else 0


def _results_dir(args: argparse.Namespace, model: str) -> Path:
    """verifiers' place for -s: <base>/evals/<env>--<model>/<8 hex>, base = -o, else the environment's own folder's
    outputs/ when ./environments/<module> exists, else ./outputs."""
    import uuid

    from verifiers_rl.envs.loading import module_name_for

    name = getattr(args, "name", None) or args.env_id
    local = Path(args.env_path or "environments") / module_name_for(args.env_id)
    base = Path(args.output) if args.output else local / "outputs" if local.is_dir() else Path("outputs")
    return base / "evals" / f"{name.replace('/', '--')}--{model.replace('/', '--')}" / uuid.uuid4().hex[:8]


def _load(args: argparse.Namespace, env_args: dict, console: object) -> tuple:
    """The environment, and the client and model name it is evaluated with (the local engine loaded here)."""
    note_offline_hub()
    from verifiers_rl import network
    from verifiers_rl.envs.loading import EnvironmentArgsError, EnvironmentLoadError, EnvironmentNotFound
    from verifiers_rl.errors import NetworkError
    from verifiers_rl.inference.clients import load_endpoints, resolve_model

    endpoints = {} if args.base_url else load_endpoints()
    if not args.base_url and args.model not in endpoints:
        _check_local_model(args.model)
    try:
        from verifiers_rl.v1.entry import load_env_entry

        env = load_env_entry(args.env_id, env_args, api=args.api, path=args.env_path)
    except NetworkError as e:  # a dataset the hub could not give
        fail(str(e), code=1)
    except (EnvironmentNotFound, EnvironmentArgsError, EnvironmentLoadError) as e:
        fail(str(e))

    quiet_library_bars()
    try:
        client, model_name, engine = resolve_model(args.model, args.base_url, args.api_key_var, endpoints=endpoints)
    except Exception as e:
        from verifiers_rl.errors import ConfigError, ModelNotFoundError

        if network.is_hub_failure(e):
            fail(network.model_hub_message(args.model), code=1)
        if isinstance(e, ConfigError):  # configs/endpoints.py: an entry without a URL
            fail(str(e))
        if not isinstance(e, OSError):
            raise
        fail(str(e) if isinstance(e, ModelNotFoundError) else
             f"could not load model {args.model!r}: {str(e).splitlines()[0]}")
    if engine is None:  # a server: one request with a deadline before the rollouts, not a hang per rollout
        problem = network.check_server(str(client.base_url))
        if problem:
            fail(problem, code=1)
    else:  # what the policy's tokenizer cannot do for this environment: one line, before any rollout errors
        from verifiers_rl.errors import ConfigError
        from verifiers_rl.trainer.setup import tokenizer_check

        try:
            tokenizer_check(engine.tokenizer, [env], local=True)
        except ConfigError as e:
            fail(str(e))
    _check_judges(env, args.env_id, client, model_name, engine, console)
    return env, client, model_name


def _check_local_model(model: str) -> None:
    """The model the local engine would load exists (dir, hub or cache), checked before the dataset and torch load."""
    from verifiers_rl import network
    from verifiers_rl.errors import ModelNotFoundError, NetworkError

    try:
        network.check_model_reachable(model)
    except ModelNotFoundError as e:
        fail(str(e))
    except NetworkError as e:
        fail(str(e), code=1)


def _check_judges(env, env_id: str, client, model_name: str, engine, console) -> None:
    """One line per judge; one that OPENAI_BASE_URL sends to the evaluated model itself, or none, stops here."""
    from verifiers_rl.rubrics.judge_endpoint import check_judges
    from verifiers_rl.rubrics.rubric import RubricSetupError

    policy = [(str(client.base_url), model_name)] if engine is None else []  # another model there is no conflict
    try:
        check_judges([(env_id, env)], policy,
                     lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
    except RubricSetupError as e:
        fail(str(e))


async def _run(env, client, model_name, args, sampling, console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from verifiers_rl.envs.rollouts import generate_states
    from verifiers_rl.errors import ModelServerError
    from verifiers_rl.rubrics.rubric import RubricSetupError

    ds = env.get_eval_dataset(n=args.num_examples, seed=args.seed)
    total = len(ds) * args.rollouts_per_example
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task(f"{args.env_id} rollouts", total=total)
        try:
            return await generate_states(env, ds, client, model_name, sampling, args.rollouts_per_example,
                                         args.max_concurrent,
                                         on_group_done=lambda g: progress.advance(task, len(g)))
        except (ModelServerError, RubricSetupError) as e:  # a dead server; a judge that cannot run
            fail(str(e))


def _print_summary(console, env_id: str, model: str, summary: dict) -> None:
    from rich.table import Table

    table = Table(title=f"{env_id} · {model}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("reward", f"{summary['reward/mean']:.4f} ± {summary['reward/std']:.4f}")
    for k, v in summary.items():
        if k.startswith("metrics/"):
            table.add_row(k.removeprefix("metrics/"), f"{v:.4f}")
    for k in ("errors/rollouts", "errors/reward_funcs", "is_truncated/mean", "num_turns/mean",
              "seq_len/completion_mean", "num_rollouts"):
        table.add_row(k, f"{summary[k]:.4g}")
    console.print(table)


if __name__ == "__main__":
    sys.exit(main())
