"""(c) rl-steps: 2-step `RLTrainer` runs on the Qwen3-0.6B-shaped random model, reverse-text (offline), the local
engine, bf16 set explicitly: LoRA, LoRA + gradient checkpointing, full fine-tuning. For each: the weights moved,
the loss is finite, prompt packing on or off and why, seconds per step, peak CUDA memory.

The random model never writes the task's tags, so reverse-text's own reward is 0 for every rollout (no
advantage, no gradient): the rubric gets one more term, the share of lowercase letters in the reply, which varies
from rollout to rollout."""

from __future__ import annotations

import json
import time
from typing import Any

from .common import CheckFailed, Ctx, Outcome, cuda_peak_gib, cuda_reset, finite, fmt_gib

VARIANTS = {"lora": dict(use_lora=True, gradient_checkpointing=False, learning_rate=1e-4),
            "lora+gc": dict(use_lora=True, gradient_checkpointing=True, learning_rate=1e-4),
            "full": dict(use_lora=False, gradient_checkpointing=False, learning_rate=1e-5)}


def lowercase_share(completion) -> float:
    text = "".join(str(m.get("content") or "") for m in completion) if isinstance(completion, list) else str(completion)
    return sum(ch.islower() for ch in text) / max(len(text), 1)


def make_env(n_eval: int = 16) -> Any:
    import verifiers_rl as vf

    env = vf.load_environment("reverse-text", dataset_source="offline", num_eval_examples=n_eval)
    env.rubric.add_reward_func(lowercase_share, weight=1.0)
    return env


def _watched(model: Any, lora: bool) -> dict[str, Any]:
    """Copies of what must move: every LoRA B (zeros at init), or two full weights."""
    named = dict(model.named_parameters())
    if lora:
        return {k: p.detach().clone() for k, p in named.items() if "lora_B" in k}
    keys = [k for k in named if k.endswith("q_proj.weight")][:1]
    keys += [k for k in named if k.endswith("down_proj.weight")][-1:]
    return {k: named[k].detach().clone() for k in keys}


def _moved(model: Any, before: dict[str, Any]) -> tuple[float, str]:
    named = dict(model.named_parameters())
    diffs = [float((named[k].detach().float() - v.float()).abs().max()) for k, v in before.items() if k in named]
    dtypes = sorted({str(named[k].dtype).replace("torch.", "") for k in before if k in named})
    return (max(diffs) if diffs else 0.0), "/".join(dtypes)


def packing_state(trainer: Any) -> str:
    """Prompt packing on or off for this trainer's model, and why (the trainer prints a line only when off)."""
    from verifiers_rl.trainer.logprobs import _packing_settings, _unwrapped

    settings = _packing_settings(trainer.model)
    _, config, text = _unwrapped(trainer.model)
    impl = getattr(text, "_attn_implementation", None) or getattr(config, "_attn_implementation", None)
    checked = trainer.steps.packing_checked
    if settings is None:
        return f"off (attention '{impl}' or sliding windows: the model cannot take packed rows)"
    how = "dense 4D mask (activation checkpointing or eager)" if settings[2] else "segment attention (sdpa)"
    if checked is None:
        return f"not decided (no micro-batch had a shared prompt to compare); would use {how}"
    if not checked:
        return "off (the first packed micro-batch's log-probs differed from the padded ones)"
    return f"on, {how}, attention '{impl}'"


def _config(ctx: Ctx, name: str, out: str) -> Any:
    import verifiers_rl as vf

    v = VARIANTS[name]
    return vf.RLConfig(output_dir=out, max_steps=2, batch_size=16, rollouts_per_example=8, micro_batch_size=16,
                       max_tokens=8 if ctx.smoke else 32, max_seq_len=256, max_prompt_len=128,
                       learning_rate=v["learning_rate"], use_lora=v["use_lora"],
                       gradient_checkpointing=v["gradient_checkpointing"], bf16=not ctx.smoke,
                       inference_backend="local", save_strategy="no", report_to="none", sample_log_interval=0,
                       logging_steps=1, seed=0, disable_tqdm=True)


def run_variant(ctx: Ctx, name: str) -> tuple[bool, str, str]:
    import verifiers_rl as vf

    out = ctx.scratch / "rl-steps" / name
    args = _config(ctx, name, str(out))
    policy = ctx.policy_dir()  # built before the peak-memory count starts
    cuda_reset()
    trainer = vf.RLTrainer(str(policy), make_env(), args)
    try:
        before = _watched(trainer.model, args.use_lora)
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
        moved, dtype = _moved(trainer.model, before)
        try:
            packing = packing_state(trainer)
        except Exception as e:  # private helpers of the trainer: a rename must not fail the check
            packing = f"unknown ({type(e).__name__}: {e})"
    finally:
        trainer.close()
    peak = cuda_peak_gib()
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    steps = [r for r in rows if "loss/mean" in r]
    losses = [r["loss/mean"] for r in steps]
    secs = [r.get("time/step") for r in steps]
    rewards = [r.get("reward/all/mean") for r in steps]
    ok = len(steps) == 2 and all(finite(x) for x in losses) and moved > 0
    what = "max |LoRA B|" if args.use_lora else "max |dW| (q_proj, down_proj)"
    line = (f"{name}: {'ok' if ok else 'BAD'}; {what} {moved:.3g} ({dtype}); loss "
            f"{', '.join(f'{x:.4g}' for x in losses)}; reward "
            f"{', '.join(f'{x:.3f}' for x in rewards if finite(x))}; s/step "
            f"{', '.join(f'{x:.2f}' for x in secs if finite(x))} (train() {wall / 2:.2f} s/step); peak "
            f"{fmt_gib(peak)}; bf16={args.bf16}; packing {packing}")
    last = secs[-1] if secs and finite(secs[-1]) else wall / 2
    brief = (f"{name} {'ok' if ok else 'BAD'} {last:.2f} s/step, peak {fmt_gib(peak)}, packing "
             f"{packing.split(' ')[0].rstrip(',')}")
    return ok, line, brief


def check(ctx: Ctx) -> Outcome:
    briefs, bad = [], []
    for name in VARIANTS:
        print(f"  --- {name}")
        try:
            ok, line, brief = run_variant(ctx, name)
        except Exception as e:
            import traceback

            print(f"  {name}: FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            ctx.notes.setdefault("tracebacks", []).append(traceback.format_exc())
            bad.append(f"{name}: {type(e).__name__}: {e}"[:200])
            continue
        print("  " + line)
        briefs.append(brief)
        if not ok:
            bad.append(line)
    cuda_reset()
    if bad:
        raise CheckFailed(f"{len(bad)}/{len(VARIANTS)} variants failed: {bad[0][:240]}")
    return Outcome("PASS", "; ".join(briefs))
