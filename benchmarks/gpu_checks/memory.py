"""(f) memory-4b: peak GPU memory of one training step (forward + backward of the trainer's log-prob path,
`policy_token_logprobs`, under bf16 autocast, then the optimizer step) on a Qwen3-4B-shaped random model built
directly on the GPU in bf16 (nothing written to disk), LoRA-wrapped as configs/vf-rl/alphabet-sort.toml trains it
(`load_policy` with that config's RLConfig), one micro-batch of its micro_batch_size rows of max_seq_len tokens
(padded rows, no shared prompt: the worst case), activation checkpointing as the config says (RLConfig's default,
off, when it says nothing), next to the plan's estimate for the same step (verifiers_rl/plan/memory.py). PASS when the peak fits the trainer's share of an 80 GB GPU: all of it when the config gives the trainer
a GPU of its own (inference.gpus and trainer.gpus both set), else what a colocated vLLM server leaves."""

from __future__ import annotations

import time
import tomllib
from typing import Any

from .common import GiB, REPO, CheckFailed, CheckSkipped, Ctx, Outcome, cuda_reset, describe_shape

CONFIG = REPO / "configs" / "vf-rl" / "alphabet-sort.toml"
GPU_BYTES = 80e9


def _budget(raw: dict) -> tuple[float, str]:
    """(bytes the trainer may use, what was assumed)."""
    from verifiers_rl.plan.gpus import DEFAULT_COLOCATED_GPU_MEMORY

    inf, tr = raw.get("inference", {}), raw.get("trainer", {})
    share = float(inf.get("gpu_memory_utilization") or DEFAULT_COLOCATED_GPU_MEMORY)
    shared = f"{GPU_BYTES * (1 - share) / 1e9:.0f} GB when vLLM shares the GPU and takes {share:g} of it"
    if "gpus" in inf and "gpus" in tr and not inf.get("colocate"):
        return GPU_BYTES, (f"the trainer on a GPU of its own (inference.gpus = {inf['gpus']}, trainer.gpus = "
                           f"{tr['gpus']}); {shared}")
    return GPU_BYTES * (1 - share), shared


def _policy(ctx: Ctx, targs: dict) -> tuple[Any, Any]:
    """The 4B-shaped model on the device in bf16, LoRA-wrapped by the trainer's own loader; (model, RLConfig)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    import verifiers_rl as vf
    from verifiers_rl.models.tiny import build_tokenizer
    from verifiers_rl.trainer.model_loading import load_policy

    kwargs = {k: v for k, v in targs.items() if k not in ("run_name", "gradient_checkpointing")}
    args = vf.RLConfig(output_dir=str(ctx.scratch / "memory-4b"), report_to="none", bf16=ctx.cuda, **kwargs)
    shape = ctx.shape("qwen3-4b")
    config = Qwen3Config(**shape, max_position_embeddings=4096, attn_implementation="sdpa")
    dtype = torch.bfloat16 if ctx.cuda else torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(ctx.device):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model, _ = load_policy(model, args, build_tokenizer())
    return model, args


def _step(model: Any, args: Any, ctx: Ctx, rows: int, seq: int, vocab: int) -> tuple[float, float]:
    """One micro-batch forward + backward + optimizer step; (loss, seconds)."""
    import torch

    from verifiers_rl.trainer.logprobs import policy_token_logprobs

    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, vocab, (rows, seq), generator=g).to(ctx.device)
    attn = torch.ones_like(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, seq // 4:] = True  # the first quarter is the prompt
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    model.train()
    t0 = time.perf_counter()
    with torch.autocast(ctx.device, dtype=torch.bfloat16, enabled=ctx.cuda):
        lp, _ = policy_token_logprobs(model, ids, attn, args.temperature, mask=mask)
        loss = -(lp * mask).sum() / mask.sum()
    loss.backward()
    if not any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params):
        raise CheckFailed("no LoRA parameter got a gradient")
    opt.step()
    opt.zero_grad(set_to_none=True)
    if ctx.cuda:
        torch.cuda.synchronize()
    return float(loss.detach()), time.perf_counter() - t0


def _measure(ctx: Ctx, model: Any, args: Any, checkpointing: bool, rows: int, seq: int, vocab: int) -> str:
    import torch

    if checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    elif getattr(model, "is_gradient_checkpointing", False):
        disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
        disable()
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    loss, secs = _step(model, args, ctx, rows, seq, vocab)
    if loss != loss:
        raise CheckFailed("the loss is NaN")
    peak = torch.cuda.max_memory_allocated() if ctx.cuda else None
    ctx.notes["peak"] = peak
    return (f"checkpointing {'on' if checkpointing else 'off'}: loss {loss:.3f}, {secs:.2f} s, peak "
            + (f"{peak / GiB:.2f} GiB" if peak is not None else "n/a (no CUDA)"))


def check(ctx: Ctx) -> Outcome:
    raw = tomllib.loads(CONFIG.read_text())
    targs = dict(raw.get("trainer", {}).get("args", {}))
    said = targs.get("gradient_checkpointing")
    checkpointing = bool(said)  # RLConfig's default (off) when the config says nothing
    rows, seq = int(targs.get("micro_batch_size", 8)), int(targs.get("max_seq_len", 2048))
    if ctx.smoke:
        seq = min(seq, 64)
    limit, assumed = _budget(raw)
    print(f"  {CONFIG.relative_to(REPO)}: micro_batch_size {rows}, max_seq_len {seq}, use_lora "
          f"{targs.get('use_lora', True)}, gradient_checkpointing "
          f"{'not set: off (the default)' if said is None else said}; budget {limit / 1e9:.0f} GB: {assumed}")
    cuda_reset()
    t0 = time.perf_counter()
    model, args = _policy(ctx, targs)
    weights = torch_allocated()
    shape = ctx.shape("qwen3-4b")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"  model: Qwen3-4B-shaped ({describe_shape(shape)}) on {ctx.device}, built in "
          f"{time.perf_counter() - t0:.1f} s; {trainable:,} trainable (LoRA r={args.lora_rank}); allocated "
          + (f"{weights / GiB:.2f} GiB" if weights is not None else "n/a"))
    vocab = int(shape.get("vocab_size") or model.config.vocab_size)
    line = _measure(ctx, model, args, checkpointing, rows, seq, vocab)
    print("  " + line)
    peak = ctx.notes.pop("peak", None)
    print("  " + _estimate({**shape, "vocab_size": vocab}, rows, seq, checkpointing, args))
    if ctx.check_left() > 30:  # the other setting, for the record
        print("  (for comparison) " + _measure(ctx, model, args, not checkpointing, rows, seq, vocab))
    del model
    cuda_reset()
    summary = f"{rows} x {seq} tokens, {line}; budget {limit / 1e9:.0f} GB ({assumed})"
    if peak is None:
        raise CheckSkipped(f"no CUDA: the step ran on the CPU at toy size ({summary})")
    return Outcome("PASS" if peak <= limit else "FAIL", summary)


def _estimate(shape: dict, rows: int, seq: int, checkpointing: bool, args: Any) -> str:
    """What the plan's memory estimate says for this step (the dry run's figure), to compare with the peak."""
    from verifiers_rl.plan.memory import GIB, shape_from_config, trainer_bytes

    parts = trainer_bytes(shape_from_config({**shape, "max_position_embeddings": 4096}), use_lora=True, half=True,
                          tokens=rows * seq, checkpointing=checkpointing, lora_rank=int(args.lora_rank))
    return (f"the plan's estimate for this step: {sum(parts.values()) / GIB:.2f} GiB ("
            + ", ".join(f"{k} {v / GIB:.2f}" for k, v in parts.items()) + ")")


def torch_allocated() -> float | None:
    import torch

    return torch.cuda.memory_allocated() if torch.cuda.is_available() else None
