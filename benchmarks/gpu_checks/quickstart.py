"""(b) quickstart: the real CLI on the quickstart config, cut short (tiny model, 20 warm-up steps, 16 held-out
examples, 3 RL steps), in its own process: exit 0, every metric finite, and the device it trained on (the plan's
first lines say it)."""

from __future__ import annotations

import json
import sys

from .common import CheckFailed, Ctx, Outcome, finite, run_logged

WORDS = ("GPU", "CPU", "cuda", "precision", "inference:", "trainer on", "warm-up: done", "held-out", "step ", "done in",
         "error", "Error", "Traceback")


def check(ctx: Ctx, timeout: float) -> Outcome:
    s = ctx.scratch / "quickstart"
    warmup, steps, n_eval = ("5", "2", "8") if ctx.smoke else ("20", "3", "16")
    cmd = [sys.executable, "-m", "verifiers_rl.cli.rl", "@", "configs/vf-rl/quickstart.toml",
           "--warmup.max-steps", warmup, "--trainer.args.max-steps", steps, "--eval.num-examples", n_eval,
           "--output-dir", str(s / "rl"), "--tiny-model.path", str(s / "tiny"),
           "--warmup.output-dir", str(s / "warmup")]
    print("  $ python " + " ".join(cmd[1:]))
    rc, lines = run_logged(cmd, timeout=timeout, env=ctx.child_env(), keep=lambda ln: any(w in ln for w in WORDS))
    if rc != 0:
        tail = next((ln for ln in reversed(lines) if ln.strip()), "")
        what = f"timed out after {timeout:.0f} s" if rc == 124 else f"vf-rl exit {rc}"
        raise CheckFailed(f"{what}; last line: {tail[:300]}")
    device = next((ln for ln in lines if "trainer on" in ln or "no GPU found" in ln), "(no device line)")
    metrics = s / "rl" / "metrics.jsonl"
    if not metrics.exists():
        raise CheckFailed(f"no {metrics}")
    rows = [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.strip()]
    steps = [r for r in rows if "loss/mean" in r]
    bad = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not finite(v)})
    if not steps:
        raise CheckFailed(f"metrics.jsonl has no training step ({len(rows)} rows)")
    if bad:
        raise CheckFailed(f"non-finite metrics: {', '.join(bad[:6])}")
    secs = [r.get("time/step") for r in steps if finite(r.get("time/step"))]
    after = "held-out eval after RL"
    gain = next((ln.split(after, 1)[1].strip() for ln in lines if after in ln), "")
    on_gpu = "GPU" in device and "no GPU" not in device
    if ctx.cuda and not on_gpu:
        raise CheckFailed(f"trained on the CPU with CUDA present: {device}")
    return Outcome("PASS", f"exit 0, {len(steps)} steps, metrics finite, s/step "
                           f"{', '.join(f'{x:.2f}' for x in secs)}; device: {device.strip()}; eval {gain[:80]}")
