"""Does generating step k+1 while step k trains pay on the local engine? `local_async` vs inline, alternating.

Same workload as speed_vs_trl.py's `short` (random-init tiny model learning lowercase letters, full fine-tuning,
32 rollouts = 4 x 8, 24 new tokens); prints `train()` wall time / steps for each mode per pair and the median
ratio async / inline, plus the mean staleness the async mode trained with.

    python benchmarks/local_overlap.py [--pairs 3] [--steps 10] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_vs_trl import WORKLOADS, letters_env  # noqa: E402


def run(model_dir: str, env, steps: int, out: str, local_async: bool, seed: int) -> tuple[float, float]:
    import verifiers_rl as vf

    w = WORKLOADS["short"]
    args = vf.RLConfig(output_dir=out, max_steps=steps, batch_size=w["batch_size"], rollouts_per_example=w["group"],
                       micro_batch_size=w["batch_size"], max_tokens=w["max_tokens"], max_seq_len=256,
                       learning_rate=w["lr"], use_lora=False, save_strategy="no", seed=seed,
                       sample_log_interval=0, report_to="none", local_async=local_async, max_async_level=1)
    trainer = vf.RLTrainer(model_dir, env, args)
    t0 = time.perf_counter()
    trainer.train()
    dt = (time.perf_counter() - t0) / steps
    trainer.close()
    rec = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    stale = [r["policy/staleness"] for r in rec if "policy/staleness" in r]
    return dt, sum(stale) / max(len(stale), 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
        import torch

        torch.set_num_threads(a.threads)
    print("command: python " + " ".join(sys.argv), flush=True)
    from verifiers_rl.models.tiny import build_tiny_model

    env = letters_env()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = str(build_tiny_model(f"{tmp}/tiny"))
        for pair in range(a.pairs):
            modes = [False, True] if pair % 2 == 0 else [True, False]
            got = {m: run(tiny, env, a.steps, f"{tmp}/{pair}-{m}", m, pair) for m in modes}
            (si, _), (sa, stale) = got[False], got[True]
            ratios.append(sa / si)
            print(f"pair {pair}: inline {si:.3f} s/step, local_async {sa:.3f} s/step (staleness {stale:.2f}), "
                  f"ratio {sa / si:.2f}", flush=True)
    print(f"local_async / inline seconds per step, median of {a.pairs} pairs: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
