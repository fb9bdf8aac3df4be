"""(e) trl: seconds per step (`train()` wall / steps) of RLTrainer against TRL's GRPOTrainer on the device: same
model (the 0.6B-shaped one), task (benchmarks/speed_vs_trl.py's `letters_env`: reward = share of lowercase
letters), batch, group, max_tokens, learning rate and steps, full fine-tuning, bf16 on both sides (fp32 weights
under autocast), both generating in-process (RLTrainer's local engine, TRL's `generate`), no checkpoints, logging
every step; median of alternating pairs (the order flips every pair). The runs are speed_vs_trl.py's own, with
this check's workload and bf16."""

from __future__ import annotations

import statistics
from typing import Any

from .common import CheckFailed, Ctx, Outcome, cuda_reset, finite

TARGET = 0.5
GPU_WORKLOAD = dict(batch_size=64, group=8, max_tokens=64, lr=1e-5, steps=4, pairs=3)
SMOKE_WORKLOAD = dict(batch_size=8, group=4, max_tokens=8, lr=1e-5, steps=2, pairs=1)


def run_ours(model_dir: str, env: Any, w: dict, out: str, seed: int, bf16: bool) -> tuple[float, list[float]]:
    from speed_vs_trl import run_ours as ours

    return ours(model_dir, env, {**w, "full": True}, w["steps"], out, seed, bf16=bf16)


def run_trl(model_dir: str, env: Any, w: dict, out: str, seed: int, bf16: bool) -> tuple[float, list[float]]:
    from speed_vs_trl import run_trl as trl

    return trl(model_dir, env, {**w, "full": True}, w["steps"], out, seed, bf16=bf16)


def _pair(ctx: Ctx, env: Any, w: dict, pair: int) -> dict[str, tuple[float, list[float]]]:
    order = [("ours", run_ours), ("trl", run_trl)]
    if pair % 2:
        order.reverse()
    got = {}
    for side, fn in order:
        cuda_reset()
        got[side] = fn(str(ctx.policy_dir()), env, w, str(ctx.scratch / "trl" / f"{side}-{pair}"), pair,
                       not ctx.smoke)
    return got


def check(ctx: Ctx) -> Outcome:
    try:
        import trl
    except ImportError as e:
        raise CheckFailed(f"trl is not importable: {e}") from None
    from speed_vs_trl import letters_env

    w = SMOKE_WORKLOAD if ctx.smoke else GPU_WORKLOAD
    print(f"  trl {trl.__version__}; full fine-tuning, {w['steps']} steps, batch {w['batch_size']} = "
          f"{w['batch_size'] // w['group']} x {w['group']}, max_tokens {w['max_tokens']}, lr {w['lr']}, "
          f"bf16={not ctx.smoke}, {w['pairs']} alternating pair(s)")
    env = letters_env()
    ratios, ours_s, trl_s, tails = [], [], [], []
    for pair in range(w["pairs"]):
        if pair and ctx.check_left() < 1.5 * (sum(ours_s) + sum(trl_s)) / pair * w["steps"] + 30:
            print(f"  stopping after {pair} pair(s): the time budget is short")
            break
        got = _pair(ctx, env, w, pair)
        (so, ro), (st, rt) = got["ours"], got["trl"]
        ours_s.append(so)
        trl_s.append(st)
        ratios.append(so / st)
        tails.append((ro[-1] if ro else float("nan"), rt[-1] if rt else float("nan")))
        print(f"  pair {pair}: RLTrainer {so:.3f} s/step, TRL {st:.3f} s/step, ratio {so / st:.2f}; last-step "
              f"reward {tails[-1][0]:.3f} vs {tails[-1][1]:.3f}", flush=True)
    if not ratios or not all(finite(r) for r in ratios):
        raise CheckFailed("no pair finished")
    ratio = statistics.median(ratios)
    summary = (f"RLTrainer {statistics.median(ours_s):.3f} s/step vs TRL GRPOTrainer {statistics.median(trl_s):.3f} "
               f"s/step: {ratio:.2f}x (target <= {TARGET:g}x; median of {len(ratios)} pair(s))")
    cuda_reset()
    if ctx.smoke:
        return Outcome("PASS", summary + " [--cpu-smoke: target not applied]")
    return Outcome("PASS" if ratio <= TARGET else "FAIL", summary)
