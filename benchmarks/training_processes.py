"""1 vs 2 training processes on this machine: rollouts/s and step time (tiny model, local engine, CPU, gloo).

    uv run python benchmarks/training_processes.py [--steps 6] [--batch 32]

Both runs train the same config for the same steps; 2 processes each generate half of every step's groups
(torchrun --nproc_per_node 2, as vf-rl's `[trainer] processes = 2` starts them). Printed figures are means over the
steps after the first (warm-up), measured in this one run; on a 2-core machine expect little gain: the two ranks
share the cores that one process already uses.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ["apple", "river", "stone", "cloud", "green", "house", "light", "table", "music", "water", "chair", "plant"]


def train(model: str, out: str, steps: int, batch: int) -> None:
    """One run (under torchrun or alone): RLTrainer with the local engine; metrics.jsonl in `out`."""
    import verifiers_rl as vf

    parser = vf.Parser()
    env = vf.SingleTurnEnv(dataset=[{"question": w, "answer": w[::-1]} for w in WORDS * 4],
                           system_prompt="Reverse the word.", parser=parser,
                           rubric=vf.Rubric(funcs=[lambda completion, answer: float(
                               (parser.parse_answer(completion) or "") == answer)], parser=parser))
    args = vf.RLConfig(output_dir=out, max_steps=steps, batch_size=batch, rollouts_per_example=8,
                       micro_batch_size=8, max_tokens=24, max_seq_len=128, max_prompt_len=96, learning_rate=1e-3,
                       save_strategy="no", logging_steps=1, sample_log_interval=0, disable_tqdm=True, seed=0,
                       report_to=[])
    vf.RLTrainer(model, env, args).train()


def measure(out: Path) -> dict[str, float]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time/step" in r][1:]  # the first step warms up
    mean = lambda k: sum(r[k] for r in steps) / len(steps)  # noqa: E731
    return {"step_s": mean("time/step"), "generate_s": mean("time/generate"), "train_s": mean("time/train")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    from verifiers_rl.models.tiny import build_tiny_model
    from verifiers_rl.plan.launch import torchrun_command

    tmp = Path(tempfile.mkdtemp(prefix="vf-bench-mp-"))
    model = str(build_tiny_model(tmp / "model"))
    results = {}
    for n in (1, 2):
        out = tmp / f"p{n}"
        cmd = ([sys.executable] if n == 1 else torchrun_command(n)) + [
            __file__, "run", model, str(out), str(a.steps), str(a.batch)]
        t0 = time.perf_counter()
        # one thread per process in both runs: torchrun sets OMP_NUM_THREADS=1 for its ranks, and a single process
        # with the default threads on a busy 2-core machine measured 10x slower here (oversubscription)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        results[n] = {**measure(out), "wall_s": time.perf_counter() - t0}
    for n, r in results.items():
        print(f"{n} process{'es' if n > 1 else ''}: {a.batch / r['step_s']:.1f} rollouts/s, step {r['step_s']:.2f} s "
              f"(generate {r['generate_s']:.2f} s, train {r['train_s']:.2f} s), wall {r['wall_s']:.0f} s")
    one, two = results[1], results[2]
    print(f"2 vs 1 processes: step time x{two['step_s'] / one['step_s']:.2f}, generation time "
          f"x{two['generate_s'] / one['generate_s']:.2f}, rollouts/s x{one['step_s'] / two['step_s']:.2f} "
          f"(batch {a.batch}, {a.steps} steps, tiny model, CPU)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
