"""Train a tiny random model of each architecture below for two RL steps on the local engine and check that step 1's
importance ratios are 1.

At step 1 the sampler's policy is the trainer's, so a ratio off 1 means the trainer's log-probs are not the model's
own: a logit scale or cap after the output head, a dropout left on, a cache the engine sizes wrongly, an attention
the packed forward gets wrong. Each model is built offline from its transformers config with the tiny model's
byte-level tokenizer. Run it after a transformers upgrade, or when adding an architecture users train.

    uv run python scripts/check-architectures.py [NAME ...] [--lora] [--bf16] [--list]

Prints one line per architecture; exits 1 when any fails (an architecture missing from the installed
transformers is skipped, said so).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512)
SLIDING = dict(sliding_window=8, layer_types=["sliding_attention", "full_attention"])
# config class name -> its arguments beyond BASE (a window of 8 tokens so that sliding layers slide)
ARCHS: dict[str, tuple[str, dict]] = {
    "qwen3": ("Qwen3Config", dict(head_dim=16)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    "qwen3_next": ("Qwen3NextConfig", dict(
        head_dim=16, layer_types=["linear_attention", "full_attention"], num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)),
    "qwen2": ("Qwen2Config", {}),
    "llama_tied": ("LlamaConfig", dict(tie_word_embeddings=True)),
    "mistral_sliding": ("MistralConfig", dict(sliding_window=8)),
    "gemma": ("GemmaConfig", dict(head_dim=16)),
    "gemma2": ("Gemma2Config", dict(head_dim=16, sliding_window=8)),
    "gemma3": ("Gemma3TextConfig", dict(head_dim=16, **SLIDING)),
    "gpt_oss": ("GptOssConfig", dict(intermediate_size=64, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                                     **SLIDING)),
    "deepseek_v3": ("DeepseekV3Config", dict(  # MLA: as many kv heads as heads, as its checkpoints have
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, first_k_dense_replace=1,
        kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_group=1,
        topk_group=1)),
    "glm4": ("Glm4Config", dict(head_dim=16)),
    "granite": ("GraniteConfig", dict(embedding_multiplier=2.0, logits_scaling=4.0, residual_multiplier=0.5,
                                      attention_multiplier=0.2)),
    "granitemoehybrid": ("GraniteMoeHybridConfig", dict(
        logits_scaling=4.0, layer_types=["mamba", "attention"], mamba_d_state=16, mamba_n_heads=4, mamba_d_head=32,
        mamba_n_groups=1, mamba_expand=2, num_local_experts=0, shared_intermediate_size=128)),
    "falcon_h1": ("FalconH1Config", dict(lm_head_multiplier=0.5, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16,
                                         mamba_d_state=16, mamba_n_groups=1)),
    "seed_oss": ("SeedOssConfig", dict(head_dim=16)),  # residual and attention dropout 0.1 by default
    "olmo2": ("Olmo2Config", {}),
    "olmo3": ("Olmo3Config", dict(sliding_window=8)),
    "smollm3": ("SmolLM3Config", {}),
    "phi3": ("Phi3Config", {}),
    "cohere": ("CohereConfig", {}),
    "exaone4": ("Exaone4Config", dict(**SLIDING)),
    "ernie4_5": ("Ernie4_5Config", dict(head_dim=16)),
    "apertus": ("ApertusConfig", {}),
    "lfm2": ("Lfm2Config", dict(layer_types=["conv", "full_attention"])),
    "starcoder2": ("Starcoder2Config", dict(sliding_window=8)),
    "stablelm": ("StableLmConfig", {}),
    "hunyuan_dense": ("HunYuanDenseV1Config", dict(head_dim=16)),
    "arcee": ("ArceeConfig", {}),
    "bitnet": ("BitNetConfig", {}),
    "gpt_neox": ("GPTNeoXConfig", {}),
}


def build(name: str, tiny: Path, out: Path) -> Path | None:
    """The architecture's tiny random model with the tiny tokenizer in `out`; None when transformers lacks it."""
    import torch
    import transformers

    cls_name, extra = ARCHS[name]
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        return None
    tok = json.loads((tiny / "config.json").read_text())
    ids = dict(vocab_size=tok["vocab_size"], eos_token_id=tok["eos_token_id"], pad_token_id=tok.get("pad_token_id"))
    config = cls(**{**BASE, **extra, **ids})
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(out)
    for f in tiny.iterdir():
        if f.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy(f, out / f.name)
    return out


def reverse_env():
    from datasets import Dataset

    import verifiers_rl as vf

    words = ["apple", "river", "mountain", "keyboard", "elephant", "orbit", "lantern", "quartz"]

    def letters(completion) -> float:
        text = "".join(str(m.get("content") or "") for m in completion)
        return sum(c.islower() for c in text) / max(len(text), 1)

    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": w, "answer": w[::-1]} for w in words]),
                            system_prompt="Reverse the word.", rubric=vf.Rubric(funcs=[letters]))


def first_step(model_dir: Path, out: Path, lora: bool, bf16: bool) -> dict:
    import verifiers_rl as vf

    args = vf.RLConfig(output_dir=str(out), max_steps=2, batch_size=8, rollouts_per_example=4, micro_batch_size=4,
                       max_tokens=16, max_seq_len=128, max_prompt_len=64, learning_rate=1e-2, seed=0,
                       use_lora=lora, bf16=bf16, logging_steps=1, sample_log_interval=0, save_strategy="no",
                       report_to="none", disable_tqdm=True)
    trainer = vf.RLTrainer(str(model_dir), reverse_env(), args)
    try:
        trainer.train()
    finally:
        trainer.close()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return next(s for s in steps if s.get("step") == 1 and "importance_ratio/min" in s)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="architectures to run (default: all)")
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter instead of the full model")
    p.add_argument("--bf16", action="store_true", help="train under bf16 autocast (tolerance 2e-2 instead of 1e-4)")
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
                s = first_step(model, Path(tmp) / f"run-{name}", a.lora, a.bf16)
                lo, hi = s["importance_ratio/min"], s["importance_ratio/max"]
                ok = 1 - tol < lo <= hi < 1 + tol
            except Exception as e:  # one line per architecture; the traceback for the failing ones
                traceback.print_exc()
                ok, lo, hi = False, None, f"{type(e).__name__}: {str(e)[:300]}"
            failed += not ok
            shown = f"[{lo:.6f}, {hi:.6f}]" if lo is not None else hi
            print(f"{name}: {'ok' if ok else 'FAILED'} step 1 importance ratios {shown}", flush=True)
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
