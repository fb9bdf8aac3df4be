"""Throughput of the local engine against a plain batched HF `model.generate` on the same prompts.

(a) one `model.generate` call on N left-padded chat prompts, sampling, exactly T new tokens each;
(b) the LocalEngine serving N concurrent chat requests (asyncio.gather), exactly T tokens each
    (`min_tokens` = `max_tokens`), with logprobs on, as RL rollouts ask for them.
Each is run once to warm up, then `--repeats` times (alternating); prints tokens/s and the engine/HF ratio.

    python benchmarks/local_engine_throughput.py [--model DIR] [--prompts 64] [--tokens 32] [--repeats 3]
        [--threads N] [--mixed] [--no-system] [--hf-main-thread]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def _prompts(n: int, system: bool = True) -> list[list[dict]]:
    words = ["apple", "river", "mountain", "sky", "keyboard", "elephant", "tea", "orbit"]
    texts = [" ".join(words[(i + j) % len(words)] for j in range(1 + i % 5)) for i in range(n)]
    if not system:  # every prompt differs from its first word on: nothing but the chat header to share
        return [[{"role": "user", "content": f"{t}: reverse it."}] for t in texts]
    return [[{"role": "system", "content": "Reverse the text."}, {"role": "user", "content": t}] for t in texts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="model dir (default: build the tiny model in a temp dir)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    ap.add_argument("--mixed", action="store_true",
                    help="mixed lengths: row i wants 8 + (i * 7) %% (T - 7) tokens (HF generate runs every row to the "
                         "longest; both count only the wanted tokens)")
    ap.add_argument("--no-system", action="store_true",
                    help="no system prompt: the prompts share only the chat header (no common prefix to reuse)")
    ap.add_argument("--hf-main-thread", action="store_true",
                    help="run the plain HF generate in the main thread (default: a worker thread, like the engine)")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verifiers_rl.inference.local_engine import LocalEngine
    from verifiers_rl.models.tiny import build_tiny_model

    tmp = None
    model_dir = args.model
    if model_dir is None:
        tmp = tempfile.TemporaryDirectory()
        model_dir = build_tiny_model(f"{tmp.name}/tiny")
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    N, T = args.prompts, args.tokens
    prompts = _prompts(N, system=not args.no_system)
    wants = [8 + (i * 7) % (T - 7) if args.mixed and T > 8 else T for i in range(N)]
    print(f"model: {model_dir}  ({sum(p.numel() for p in model.parameters()):,} params)  "
          f"torch threads: {torch.get_num_threads()}  prompts: {N}{' (no system prompt)' if args.no_system else ''}  "
          f"new tokens: {T}{' (mixed)' if args.mixed else ''}")

    # (a) plain HF generate: one left-padded batch
    encoded = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in prompts]
    tok.padding_side = "left"
    batch = tok(encoded, return_tensors="pt", padding=True, add_special_tokens=False)

    def hf_generate():
        with torch.no_grad():
            return model.generate(
                **batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=T, min_new_tokens=T,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            )

    def hf_once() -> float:
        t0 = time.perf_counter()
        if args.hf_main_thread:
            out = hf_generate()
        else:
            # The engine generates in a worker thread; do the same here so both run in the same setting
            # (on a loaded machine, torch's OpenMP threads behave very differently in the main thread).
            with ThreadPoolExecutor(1) as pool:
                out = pool.submit(hf_generate).result()
        dt = time.perf_counter() - t0
        assert out.shape == (N, batch["input_ids"].shape[1] + T)
        return sum(wants) / dt

    # (b) the engine, N concurrent chat requests
    engine = LocalEngine(model, tok, max_batch_size=max(N, 1))

    async def engine_round() -> tuple[int, float]:
        t0 = time.perf_counter()
        results = await asyncio.gather(*[
            engine.client.chat.completions.create(
                model="tiny", messages=m, max_tokens=n, temperature=1.0, logprobs=True,
                extra_body={"min_tokens": n, "return_token_ids": True},
            )
            for m, n in zip(prompts, wants)
        ])
        dt = time.perf_counter() - t0
        n_tok = sum(len(c.token_ids) for r in results for c in r.choices)
        return n_tok, dt

    def engine_once() -> float:
        calls = engine.generate_calls
        n_tok, dt = asyncio.run(engine_round())
        assert n_tok == sum(wants), n_tok
        assert engine.generate_calls - calls == 1, "requests were not batched into one generate call"
        return n_tok / dt

    # Warm both up, then alternate them so a change in machine load hits both alike.
    hf_once()
    engine_once()
    results: dict[str, list[float]] = {"hf_generate": [], "local_engine": []}
    for _ in range(args.repeats):
        results["hf_generate"].append(hf_once())
        results["local_engine"].append(engine_once())
    for name, runs in results.items():
        print(f"{name:13s} tok/s: " + "  ".join(f"{r:8.0f}" for r in runs) + f"   median {statistics.median(runs):8.0f}")
    ratio = statistics.median(results["local_engine"]) / statistics.median(results["hf_generate"])
    print(f"ratio local_engine / hf_generate (medians): {ratio:.2f}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
