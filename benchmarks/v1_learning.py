"""Learning on a verifiers **v1** environment: RLTrainer + the local engine on a small v1 taskset of ours, held-out
reward before and after.

The taskset is `v1_letters` (benchmarks/v1_tasksets/v1_letters.py): one-turn tasks whose reward is the share of
lowercase letters in the reply (partial credit), which the random-init tiny model climbs in a few dozen steps.
It is loaded through the v1 adapter (`verifiers_rl.v1.load_v1_environment`: null harness, subprocess runtime),
split "train" for RL and split "eval" (items never trained on) for the held-out eval at temperature 1, the same
sampling seed before and after (paired). Prints before -> after, the gain with its paired s.e. (over held-out
tasks), the seconds, and the command. About 12 s per step of 16 rollouts on 2 CPU cores (each v1 episode
runs on the subprocess runtime), ~7 minutes with the defaults. Needs verifiers 0.4 (`uv sync --extra verifiers-v1`).

    UV_PROJECT_ENVIRONMENT=.venv-v1 uv run --frozen --extra verifiers-v1 python benchmarks/v1_learning.py \\
        [--steps 30] [--model DIR] [--lr 5e-3] [--lora] [--eval-n 32] [--seed 0] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TASKSETS = Path(__file__).resolve().parent / "v1_tasksets"


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="RL steps (default 30)")
    p.add_argument("--model", help="model dir (default: build the offline random-init tiny model)")
    p.add_argument("--lr", type=float, default=5e-3, help="learning rate (default 5e-3, full fine-tune)")
    p.add_argument("--lora", action="store_true", help="LoRA instead of a full fine-tune")
    p.add_argument("--batch-size", type=int, default=16, help="rollouts per step (default 16 = 4 prompts x 4)")
    p.add_argument("--group", type=int, default=4, help="rollouts per prompt")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--eval-n", type=int, default=32, help="held-out tasks (one rollout each)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    return p.parse_args()


def _rewards(states: list[dict]) -> list[float]:
    return [float(s.get("reward") or 0.0) for s in states]


def _report(before: list[float], after: list[float], a: argparse.Namespace, secs: dict[str, float]) -> None:
    diffs = [y - x for x, y in zip(before, after)]
    gain = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / len(diffs) ** 0.5
    mode = "LoRA" if a.lora else "full fine-tune"
    print(f"v1 taskset v1_letters, {mode}, {a.steps} steps x {a.batch_size} rollouts ({a.batch_size // a.group} x "
          f"{a.group}), max_tokens {a.max_tokens}, lr {a.lr}, seed {a.seed}")
    print(f"held-out reward (share of lowercase letters, {len(before)} tasks, temperature 1): "
          f"{statistics.fmean(before):.3f} -> {statistics.fmean(after):.3f}")
    print(f"gain {gain:+.3f} +- {se:.3f} (paired s.e.; {gain / se if se else float('inf'):.1f} s.e.)")
    print(f"seconds: eval before {secs['before']:.1f}, train {secs['train']:.1f} ({secs['train'] / a.steps:.2f} "
          f"s/step), eval after {secs['after']:.1f}, total {secs['total']:.1f}")
    print("command: " + " ".join(["python", *sys.argv]), flush=True)


def main() -> None:
    a = _args()
    from verifiers_rl.v1.loading import INSTALL, v1_available

    if v1_available() is None:
        print(f"benchmarks/v1_learning.py needs verifiers>=0.4,<0.5 (the v1 API): {INSTALL}", file=sys.stderr)
        sys.exit(2)
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    import verifiers_rl as vf
    from verifiers_rl.models.tiny import build_tiny_model
    from verifiers_rl.v1 import load_v1_environment

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model or str(build_tiny_model(f"{tmp}/tiny"))
        train_env = load_v1_environment({"taskset": {"id": "v1_letters", "split": "train"}}, path=TASKSETS)
        eval_env = load_v1_environment({"taskset": {"id": "v1_letters", "split": "eval", "n": a.eval_n}},
                                       path=TASKSETS)
        args = vf.RLConfig(output_dir=f"{tmp}/out", max_steps=a.steps, batch_size=a.batch_size,
                           rollouts_per_example=a.group, micro_batch_size=a.batch_size, max_tokens=a.max_tokens,
                           max_seq_len=256, max_prompt_len=128, learning_rate=a.lr, lr_scheduler_type="constant",
                           use_lora=a.lora, temperature=1.0, save_strategy="no", seed=a.seed,
                           eval_num_examples=0, sample_log_interval=0, logging_steps=1, report_to="none",
                           disable_tqdm=True)
        trainer = vf.RLTrainer(model, train_env, args)
        sampling = {**args.sampling_args(for_eval=True), "extra_body": {"min_tokens": 1}}
        try:
            secs = {}
            t0 = time.perf_counter()
            before = _rewards(trainer.eval_states(eval_env, a.eval_n, 1, sampling))
            secs["before"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            trainer.train()
            secs["train"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            after = _rewards(trainer.eval_states(eval_env, a.eval_n, 1, sampling))
            secs["after"] = time.perf_counter() - t0
        finally:
            trainer.close()
            train_env.close()
            eval_env.close()
        secs["total"] = time.perf_counter() - t_start
        _report(before, after, a, secs)


if __name__ == "__main__":
    main()
