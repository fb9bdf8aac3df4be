"""A v1 taskset against its classic twin, timed in one run: seconds per RL step, the step's phases, and the time per
episode of verifiers' own `run_slot` beside ours.

The v1 side is `v1_letters` (benchmarks/v1_tasksets/v1_letters.py: one turn, reward = the share of lowercase
letters) through the adapter (null harness, subprocess runtime) with harness programs started warm (the default,
`v1/warm_programs.py`) and cold (`warm_programs=False`: a fresh interpreter per episode, as verifiers runs them);
the classic twin is a `SingleTurnEnv` of the same prompts, system prompt and reward. Same tiny model, batch,
max_tokens, learning rate and seed; the three trainers step in turn (classic, v1 warm, v1 cold), each its own
RLTrainer, and each step's seconds come from its metrics (`time/step`, `time/generation`, ...). Then verifiers'
own driver (`env.serving()` + `run_slot`, one slot per task, cold as verifiers runs it) and ours generate the same
episodes against the same local engine: seconds per episode, one at a time and a step's worth at once.

    UV_PROJECT_ENVIRONMENT=.venv-verifiers-v1 uv run --frozen --extra verifiers-v1 python benchmarks/v1_speed.py \\
        [--steps 6] [--model DIR] [--batch-size 16] [--group 4] [--max-tokens 16] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

TASKSETS = Path(__file__).resolve().parent / "v1_tasksets"
PHASES = ("time/generate", "time/wait_for_batch", "time/train", "time/weight_sync")


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6, help="RL steps per trainer (the first is left out as warm-up)")
    p.add_argument("--model", help="model dir (default: build the offline random-init tiny model)")
    p.add_argument("--batch-size", type=int, default=16, help="rollouts per step (default 16 = 4 prompts x 4)")
    p.add_argument("--group", type=int, default=4, help="rollouts per prompt")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--episodes", type=int, default=8, help="episodes per driver in the run_slot comparison")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def _classic_twin(n: int):
    import verifiers_rl as vf
    from v1_letters import LOWER, THINGS

    rows = [{"question": f"Describe the {THINGS[i % len(THINGS)]} number {i} in lowercase words.", "answer": ""}
            for i in range(n)]

    def letters(completion) -> float:
        reply = completion[-1]["content"] if completion else ""
        return sum(ch in LOWER for ch in reply) / max(len(reply), 1)

    return vf.SingleTurnEnv(dataset=rows, system_prompt="Answer in lowercase letters only.",
                            rubric=vf.Rubric(funcs=[letters]), env_id="letters-classic")


def _trainer(model: str, env, a: argparse.Namespace, out: Path):
    import verifiers_rl as vf

    args = vf.RLConfig(output_dir=str(out), max_steps=a.steps, batch_size=a.batch_size,
                       rollouts_per_example=a.group, micro_batch_size=a.batch_size, max_tokens=a.max_tokens,
                       max_seq_len=512, learning_rate=5e-3, use_lora=False, save_steps=10_000, logging_steps=1,
                       sample_log_interval=0, disable_tqdm=True, temperature=1.0, seed=a.seed, eval_num_examples=0,
                       report_to="none")
    return vf.RLTrainer(model, env, args)


def _phases(trainer) -> list[dict[str, float]]:
    rows = [h for h in trainer.state.log_history if "time/step" in h]
    return rows[1:] or rows  # the first step pays start-ups (a fork server, the engine's first batch)


def train_side_by_side(model: str, a: argparse.Namespace, tmp: Path) -> dict[str, list[dict[str, float]]]:
    from verifiers_rl.v1 import load_v1_environment

    n = a.steps * a.batch_size // a.group + 8
    envs = {"classic": _classic_twin(n),
            "v1 warm": load_v1_environment("v1_letters", {"n": n}, path=TASKSETS),
            "v1 cold": load_v1_environment("v1_letters", {"n": n}, path=TASKSETS, warm_programs=False)}
    out = {}
    for name, env in envs.items():  # one trainer at a time: two cores, and the engine is in-process
        trainer = _trainer(model, env, a, tmp / name.replace(" ", "-"))
        try:
            trainer.train()
        finally:
            trainer.close()
            if hasattr(env, "close"):
                env.close()
        out[name] = _phases(trainer)
    return out


def _row(name: str, rows: list[dict[str, float]], base: float) -> str:
    step = statistics.median(r["time/step"] for r in rows)
    parts = ", ".join(f"{k.split('/')[1]} {statistics.median(r.get(k, 0.0) for r in rows):.2f}" for k in PHASES)
    return f"  {name:8s} {step:6.2f} s/step ({step / base:5.1f}x classic): {parts}"


async def _ours(env, engine, n: int, concurrent: int) -> float:
    from verifiers_rl.envs.rollouts import generate_states

    rows = env.get_dataset().to_list()[:n]
    t0 = time.perf_counter()
    await generate_states(env, rows, engine.client, "local", {"temperature": 1.0, "max_tokens": 16},
                          rollouts_per_example=1, max_concurrent=concurrent, max_seq_len=512)
    return (time.perf_counter() - t0) / n


async def _theirs(model: str, endpoint: str, n: int, concurrent: int) -> float:
    import verifiers.v1 as vf

    env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": "v1_letters", "n": n}, "agent": {
        "harness": {"id": "null"}, "runtime": {"type": "subprocess"}}}))
    ctx = vf.ModelContext(model="local", client=vf.TrainClientConfig(
        base_url=endpoint, api_key_var="VF_RL_LOCAL_KEY", renderer_model_name=model),
        sampling=vf.SamplingConfig(temperature=1.0, max_tokens=16))
    sem = asyncio.Semaphore(concurrent)

    async def one(task):
        async with sem:
            return await env.run_slot(env.slots(task, 1)[0], ctx)

    async with env.serving():
        t0 = time.perf_counter()
        await asyncio.gather(*(one(t) for t in itertools.islice(env.taskset, n)))
        return (time.perf_counter() - t0) / n


def episodes_side_by_side(model: str, a: argparse.Namespace) -> list[str]:
    """verifiers' run_slot (cold, as verifiers runs it) and ours (warm, then cold) on the same episodes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verifiers_rl.inference.local_engine import LocalEngine
    from verifiers_rl.inference.local_http import serve_local_engine
    from verifiers_rl.v1 import load_v1_environment
    from verifiers_rl.v1 import warm_programs as warm

    engine = LocalEngine(AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval(),
                         AutoTokenizer.from_pretrained(model), model_name="local", max_model_len=512)
    srv = serve_local_engine(engine)
    lines = []
    try:
        for concurrent in (1, a.batch_size):
            env = load_v1_environment("v1_letters", {"n": a.episodes}, path=TASKSETS)
            asyncio.run(_ours(env, engine, 1, 1))  # untimed: the fork server's start
            ours_warm = asyncio.run(_ours(env, engine, a.episodes, concurrent))
            env.close()
            warm.disable()  # verifiers' own driver and our cold one run programs as verifiers does
            cold = load_v1_environment("v1_letters", {"n": a.episodes}, path=TASKSETS, warm_programs=False)
            ours_cold = asyncio.run(_ours(cold, engine, a.episodes, concurrent))
            cold.close()
            theirs = asyncio.run(_theirs(model, srv.base_url, a.episodes, concurrent))
            lines.append(f"  {a.episodes} episodes, {concurrent} at a time: ours warm {ours_warm:.2f} s/episode, "
                         f"ours cold {ours_cold:.2f}, verifiers' run_slot {theirs:.2f}")
    finally:
        srv.stop()
    return lines


def main() -> int:
    a = _args()
    sys.path.insert(0, str(TASKSETS))
    from verifiers_rl.v1 import v1_available

    if v1_available() is None:
        print("needs verifiers 0.4: UV_PROJECT_ENVIRONMENT=.venv-verifiers-v1 uv run --frozen --extra verifiers-v1 "
              "python benchmarks/v1_speed.py", file=sys.stderr)
        return 2
    import torch

    torch.manual_seed(a.seed)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = a.model
        if model is None:
            from verifiers_rl.models.tiny import build_tiny_model

            model = str(build_tiny_model(f"{tmp}/tiny"))
        results = train_side_by_side(model, a, tmp)
        base = statistics.median(r["time/step"] for r in results["classic"])
        print(f"seconds per RL step ({a.batch_size} rollouts, {a.group} per prompt, max_tokens {a.max_tokens}, "
              f"median of steps 2..{a.steps}; phases in seconds):")
        for name, rows in results.items():
            print(_row(name, rows, base))
        print("per episode, verifiers' own driver beside ours (the local engine behind the v1 generate route):")
        for line in episodes_side_by_side(model, a):
            print(line)
    print("command: " + " ".join(["python", *sys.argv]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
