"""A trainer GPU's memory, estimated before launch from the model's shape and the run's settings (the plan prints it;
the shipped GPU configs are sized by it: tests/test_gpu_plan.py).

Worst case per GPU (every sequence at max_seq_len): weights and AdamW state, activations kept for the backward, and a
fixed 2.5 GiB (log-prob head, CUDA context, allocator slack). A rule of thumb, checked by benchmarks/gpu_check.py.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024 ** 3
FIXED_BYTES = 2.5 * GIB

# The shapes of the models the shipped configs name, for a dry run on a machine that has never downloaded them
# (their config.json is read instead whenever it is on disk or in the HF cache).
KNOWN_SHAPES: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-4B-Instruct-2507": dict(num_hidden_layers=36, hidden_size=2560, intermediate_size=9728,
                                        vocab_size=151936, num_attention_heads=32, num_key_value_heads=8,
                                        head_dim=128, tie_word_embeddings=True, max_position_embeddings=262144),
    "Qwen/Qwen2.5-1.5B-Instruct": dict(num_hidden_layers=28, hidden_size=1536, intermediate_size=8960,
                                       vocab_size=151936, num_attention_heads=12, num_key_value_heads=2,
                                       tie_word_embeddings=True, max_position_embeddings=32768),
    "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT": dict(num_hidden_layers=28, hidden_size=1024,
                                                       intermediate_size=3072, vocab_size=151936,
                                                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                                       tie_word_embeddings=True, max_position_embeddings=40960),
}


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    max_positions: int | None

    @property
    def params(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        layer = self.hidden * (2 * q + 2 * kv) + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def lora_params(self, rank: int) -> int:
        """An adapter of `rank` on every attention and MLP projection (the default target modules)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        per = (self.hidden + q) * 2 + (self.hidden + kv) * 2 + (self.hidden + self.intermediate) * 3
        return self.layers * rank * per


def shape_from_config(cfg: dict[str, Any]) -> Shape:
    cfg = cfg.get("text_config", cfg)
    heads = int(cfg["num_attention_heads"])
    return Shape(int(cfg["num_hidden_layers"]), int(cfg["hidden_size"]), int(cfg["intermediate_size"]),
                 int(cfg["vocab_size"]), heads, int(cfg.get("num_key_value_heads") or heads),
                 int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
                 bool(cfg.get("tie_word_embeddings", False)), cfg.get("max_position_embeddings"))


def model_shape(name: str | None) -> Shape | None:
    """The model's shape from its config.json (a local dir, or the HF cache: never a download), else the table
    above, else None."""
    if not name:
        return None
    path = Path(name) / "config.json"
    if not path.exists():
        with contextlib.suppress(Exception):
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json")
            path = Path(cached) if isinstance(cached, str) else path
    with contextlib.suppress(OSError, ValueError, KeyError):
        if path.exists():
            return shape_from_config(json.loads(path.read_text()))
    return shape_from_config(KNOWN_SHAPES[name]) if name in KNOWN_SHAPES else None


def trainer_bytes(shape: Shape, *, use_lora: bool, half: bool, tokens: int, checkpointing: bool,
                  lora_rank: int = 8, reference: bool = False) -> dict[str, float]:
    """Bytes on one training GPU by part (weights, optimizer, activations, fixed) for a micro-batch of
    `tokens` tokens."""
    act = 2 if half else 4
    if use_lora:
        weights = shape.params * act
        optimizer = shape.lora_params(lora_rank) * 16
    else:
        weights = shape.params * (4 + (4 if reference else 0))
        optimizer = shape.params * 12
    per_layer = (12 * shape.hidden + 3 * shape.intermediate) * act * tokens
    acts = shape.layers * shape.hidden * act * tokens + per_layer if checkpointing else shape.layers * per_layer
    return {"weights": weights, "optimizer": optimizer, "activations": acts, "fixed": FIXED_BYTES}


def estimate_line(shape: Shape | None, name: str, *, use_lora: bool, half: bool, micro_batch: int, seq_len: int,
                  checkpointing: bool, lora_rank: int, reference: bool, share: float,
                  gpu_gb: float) -> tuple[str, bool]:
    """(the console line, whether it fits `share` of a `gpu_gb` GB GPU)."""
    if shape is None:
        return f"memory: no estimate ({name}'s config.json is not on this machine)", True
    parts = trainer_bytes(shape, use_lora=use_lora, half=half, tokens=micro_batch * seq_len,
                          checkpointing=checkpointing, lora_rank=lora_rank, reference=reference)
    total = sum(parts.values()) / GIB
    budget = share * gpu_gb * 1e9 / GIB
    fits = total <= budget
    detail = ", ".join(f"{k} {v / GIB:.1f}" for k, v in parts.items())
    gc = "on" if checkpointing else "off"
    whole = f"a whole {gpu_gb:g} GB GPU" if share >= 1 else f"{share:g} of a {gpu_gb:g} GB GPU shared with vLLM"
    verdict = "fits" if fits else ("does NOT fit: turn on trainer.args.gradient_checkpointing, lower "
                                   "micro_batch_size or max_seq_len")
    return (f"memory: trainer ≈ {total:.1f} GiB per GPU ({detail}; {micro_batch} x {seq_len} tokens, "
            f"gradient checkpointing {gc}) of {budget:.1f} GiB ({whole}): {verdict}", fits)
