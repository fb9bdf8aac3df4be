"""(d) engine: the local engine's tokens/s against HF `generate` on the same batch, on the device, the 0.6B-shaped
model in bf16: benchmarks/local_engine_throughput.py's measurement (its prompts; exactly T tokens per row, sampling,
logprobs on for the engine; HF generate in a worker thread like the engine; warm-up, then alternating repeats),
with the model on CUDA (that script loads it on the CPU in fp32)."""

from __future__ import annotations

import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from .common import CheckFailed, Ctx, Outcome, cuda_reset

TARGET = 2.0


def _hf_once(model: Any, tok: Any, batch: dict, n: int, t: int) -> Callable[[], float]:
    import torch

    def generate() -> Any:
        with torch.no_grad():
            return model.generate(**batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=t,
                                  min_new_tokens=t, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)

    def once() -> float:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(1) as pool:
            out = pool.submit(generate).result()
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if tuple(out.shape) != (n, batch["input_ids"].shape[1] + t):
            raise CheckFailed(f"HF generate returned shape {tuple(out.shape)}")
        return n * t / dt

    return once


def _engine_once(engine: Any, prompts: list, t: int) -> Callable[[], float]:
    async def round_() -> tuple[int, float]:
        t0 = time.perf_counter()
        results = await asyncio.gather(*[
            engine.client.chat.completions.create(
                model="local", messages=m, max_tokens=t, temperature=1.0, logprobs=True,
                extra_body={"min_tokens": t, "return_token_ids": True})
            for m in prompts])
        return sum(len(c.token_ids) for r in results for c in r.choices), time.perf_counter() - t0

    def once() -> float:
        calls = engine.generate_calls
        n_tok, dt = asyncio.run(round_())
        if n_tok != len(prompts) * t:
            raise CheckFailed(f"the engine returned {n_tok} tokens, expected {len(prompts) * t}")
        if engine.generate_calls - calls != 1:
            print(f"  note: {engine.generate_calls - calls} batched decode calls for one round (expected 1)")
        return n_tok / dt

    return once


def check(ctx: Ctx) -> Outcome:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from local_engine_throughput import _prompts
    from verifiers_rl.inference.local_engine import LocalEngine

    n, t, repeats = (32, 16, 2) if ctx.smoke else (64, 128, 3)
    path = ctx.policy_dir()
    dtype = torch.float32 if ctx.smoke else torch.bfloat16
    cuda_reset()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(ctx.device).eval()
    prompts = _prompts(n)
    tok.padding_side = "left"
    texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in prompts]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(ctx.device)
    hf, eng = _hf_once(model, tok, batch, n, t), _engine_once(LocalEngine(model, tok, max_batch_size=n), prompts, t)
    t0 = time.perf_counter()
    hf()
    eng()
    print(f"  {n} prompts x {t} new tokens, {dtype} on {ctx.device}; warm-up {time.perf_counter() - t0:.1f} s")
    runs: dict[str, list[float]] = {"hf_generate": [], "local_engine": []}
    for _ in range(repeats):
        runs["hf_generate"].append(hf())
        runs["local_engine"].append(eng())
    for name, xs in runs.items():
        print(f"  {name:13s} tok/s: " + "  ".join(f"{x:8.0f}" for x in xs) + f"   median {statistics.median(xs):8.0f}")
    ratio = statistics.median(runs["local_engine"]) / statistics.median(runs["hf_generate"])
    peak = torch.cuda.max_memory_allocated() / 2**30 if ctx.cuda else None
    del model
    cuda_reset()
    summary = (f"engine {statistics.median(runs['local_engine']):.0f} tok/s vs HF generate "
               f"{statistics.median(runs['hf_generate']):.0f} tok/s: {ratio:.2f}x (target >= {TARGET:g}x; "
               f"{n} x {t}, median of {repeats})" + (f", peak {peak:.2f} GiB" if peak is not None else ""))
    if ctx.smoke:
        return Outcome("PASS", summary + " [--cpu-smoke: target not applied]")
    return Outcome("PASS" if ratio >= TARGET else "FAIL", summary)
