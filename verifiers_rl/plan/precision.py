"""The training precision and the vLLM server's dtype, decided once (`plan_precision`).

`bf16` unset: bf16 on a CUDA GPU that has it (as TRL and verifiers), fp32 on the CPU. LoRA trains its adapter in fp32;
full fine-tuning keeps fp32 weights under bf16 autocast so small updates are not rounded away. The server runs in the
training dtype so its logprobs match; vLLM's CUDA LoRA kernels take only fp16/bf16, so fp32 + LoRA on a GPU is refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SERVER_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
LORA_KERNEL_DTYPES = ("bfloat16", "float16", "half")


@dataclass(frozen=True)
class Precision:
    train: str          # 'bf16' | 'fp16' | 'fp32'
    server_dtype: str   # vLLM's --dtype

    @property
    def bf16(self) -> bool:
        return self.train == "bf16"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self, use_lora: bool, cuda: bool) -> str:
        where = "GPU" if cuda else "CPU"
        weights = ("LoRA adapter in fp32 over a frozen base in " + self.train) if use_lora else (
            f"fp32 weights, {self.train} autocast" if self.train in ("bf16", "fp16") else "fp32")
        return f"precision: {self.train} on the {where} ({weights}); a vLLM server runs --dtype {self.server_dtype}"


def _dtype_key(value: Any) -> str:
    return str(value).replace("torch.", "").lower()


def plan_precision(*, bf16: bool | None, fp16: bool = False, use_lora: bool, cuda: bool,
                   bf16_supported: bool = True, server_dtype: Any = None, vllm_server: bool = False,
                   server_cuda: bool | None = None) -> Precision:
    """The run's precision (`server_cuda` None: the trainer's device; `server_dtype`: the user's own vLLM --dtype);
    ValueError (one line naming the setting) for a choice vLLM can't serve."""
    if bf16 and fp16:
        raise ValueError("bf16 and fp16: set one of them")
    if bf16 is None:
        bf16 = cuda and bf16_supported and not fp16
    train = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    dtype = _dtype_key(server_dtype) if server_dtype not in (None, "auto") else SERVER_DTYPES[train]
    if vllm_server and (cuda if server_cuda is None else server_cuda) and use_lora and dtype not in LORA_KERNEL_DTYPES:
        if server_dtype not in (None, "auto"):
            raise ValueError(f"inference.args.dtype = {server_dtype!r} with LoRA on a GPU: vLLM's CUDA LoRA kernels "
                             "take only bfloat16 or float16; remove it (the server follows the trainer's bf16)")
        if not cuda:
            raise ValueError("inference.args.dtype unset with LoRA, the trainer on the CPU and the vLLM server on a "
                             "GPU: the server would run the trainer's fp32, and vLLM's CUDA LoRA kernels take only "
                             "bf16/fp16; set inference.args.dtype = 'bfloat16' (the server samples in bf16, the "
                             "trainer scores in fp32) or train on a GPU")
        raise ValueError("bf16 = false with LoRA on a GPU: vLLM's CUDA LoRA kernels take only bf16/fp16 weights; "
                         "remove trainer.args.bf16 = false (bf16 is the GPU default), set fp16 = true, or use "
                         "inference.backend = 'local'")
    return Precision(train, dtype)


def resolve_bf16(args: Any) -> bool:
    """An RLConfig's `bf16` (None: where it trains decides); ValueError (one line) for what isn't a choice."""
    bf16 = args.bf16
    if bf16 is not None and not isinstance(bf16, bool):
        raise ValueError(f"bf16={bf16!r}: true, false or None (None: bf16 on a CUDA GPU, fp32 on the CPU)")
    if bf16 is not None:
        return bf16
    import torch

    cuda = not args.use_cpu and torch.cuda.is_available()
    return plan_precision(bf16=None, fp16=bool(args.fp16), use_lora=bool(args.use_lora), cuda=cuda,
                          bf16_supported=cuda and torch.cuda.is_bf16_supported()).bf16


def logprob_atol(dtype: Any) -> float:
    """How far two computations of the same log-probs may differ in this dtype (packing check, tests): fp32
    rounding is ~1e-6 relative, bf16's 8-bit mantissa ~4e-3 relative on logits of magnitude ~10-30."""
    key = _dtype_key(dtype)
    if key in ("bfloat16", "bf16"):
        return 0.1
    if key in ("float16", "fp16", "half"):
        return 0.02
    return 1e-3
