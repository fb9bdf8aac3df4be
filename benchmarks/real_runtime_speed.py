"""Rollouts per second through verifiers' own runtime (the real package) vs verifiers-rl's runtime, on the same
environment file and the same engine: the overhead of driving an environment with the real package.

The environment is tests/fixtures/real_env/real_env.py (written against verifiers 0.3.1's classic API, which our
runtime also runs). Each measurement is a fresh process (a process holds one runtime): the local engine on the
offline tiny model, `--rows` x `--rollouts` rollouts of exactly `--tokens` tokens per turn (min_tokens =
max_tokens, so both runtimes generate the same amount), after one warm-up batch. Runtimes alternate for
`--repeats` rounds; prints each runtime's median rollouts/s and the ratio real / ours.

Needs the extra (`verifiers-rl[verifiers]`):
    UV_PROJECT_ENVIRONMENT=.venv-verifiers uv run --frozen --extra verifiers python benchmarks/real_runtime_speed.py \
        [--kind single|multi|tool] [--rows 16] [--rollouts 4] [--tokens 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real_env"


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(FIXTURE))
    import torch

    import verifiers_rl as vf
    from verifiers_rl.envs.rollouts import generate_states
    from verifiers_rl.inference.local_engine import LocalEngine

    torch.set_num_threads(args.threads)
    env = vf.load_environment("real-env", kind=args.kind)
    engine = LocalEngine.from_pretrained(args.model)
    sampling = {"max_tokens": args.tokens, "temperature": 1.0, "extra_body": {"min_tokens": args.tokens}}
    rows = env.get_eval_dataset(n=args.rows)

    async def run() -> list:
        return await generate_states(env, rows, engine.client, "m", sampling, rollouts_per_example=args.rollouts)

    torch.manual_seed(0)
    asyncio.run(run())  # warm-up: first-call costs (lazy imports, kernels) out of the timing
    torch.manual_seed(1)
    t0 = time.perf_counter()
    states = asyncio.run(run())
    dt = time.perf_counter() - t0
    errors = sum(1 for s in states if s.get("error"))
    print("RESULT " + json.dumps({"rollouts": len(states), "seconds": dt, "errors": errors,
                                  "turns": sum(len(s.get("trajectory") or []) for s in states)}))


def measure(runtime: str, args: argparse.Namespace, model: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--model", model, "--kind", args.kind, "--rows", str(args.rows),
           "--rollouts", str(args.rollouts), "--tokens", str(args.tokens), "--threads", str(args.threads)]
    env = {**os.environ, "VF_VERIFIERS_RUNTIME": runtime, "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        sys.exit(f"{runtime} run failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default=None, help="model dir (default: build the offline tiny model)")
    ap.add_argument("--kind", default="single", choices=["single", "multi", "tool"])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2)))
    args = ap.parse_args()
    if args.child:
        return child(args)
    from verifiers_rl.verifiers_runtime import CLASSIC_RANGE, resolve_runtime

    try:
        real = resolve_runtime("real")
    except ValueError as e:
        sys.exit(f"needs the real verifiers{CLASSIC_RANGE} (the `verifiers` extra): {e}")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from verifiers_rl.models.tiny import build_tiny_model

            model = str(build_tiny_model(Path(tmp) / "tiny"))
        rates: dict[str, list[float]] = {"ours": [], "real": []}
        for _ in range(args.repeats):
            for runtime in ("ours", "real"):
                r = measure(runtime, args, model)
                rates[runtime].append(r["rollouts"] / r["seconds"])
                print(f"  {runtime:4s}: {r['rollouts']} rollouts ({r['turns']} turns, {r['errors']} errors) in "
                      f"{r['seconds']:.2f} s = {r['rollouts'] / r['seconds']:.1f} rollouts/s", flush=True)
    ours, theirs = statistics.median(rates["ours"]), statistics.median(rates["real"])
    print(f"env real-env kind={args.kind}, local engine, {args.rows}x{args.rollouts} rollouts x {args.tokens} tokens"
          f"/turn, verifiers {real.version}, medians of {args.repeats}")
    print(f"rollouts/s: ours {ours:.1f}, real verifiers {theirs:.1f}; real/ours = {theirs / ours:.2f}")


if __name__ == "__main__":
    main()
