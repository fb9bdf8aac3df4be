"""How new weights reach the inference runtime after each optimizer step."""

from __future__ import annotations

from urllib.parse import urlparse

TRANSFERS = ("auto", "nccl", "gloo", "disk")
NATIVE = ("nccl", "gloo")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(url: str) -> bool:
    return (urlparse(url if "://" in url else "http://" + url).hostname or "") in LOOPBACK


def resolve_transfer(choice: str, *, use_lora: bool, cuda: bool, vllm_in_trainer: bool, urls: list[str],
                     transfer_host: str | None, shared_gpu: bool = False) -> str:
    """How full weights reach vLLM servers: 'nccl', 'gloo' or 'disk' ('lora' with use_lora: adapters hot-swap).

    'auto': nccl when the trainer has CUDA and vLLM, a GPU of its own (NCCL can't join two processes on one
    device), and the servers can reach it (launched here, on this machine, or `vllm_weight_transfer_host` set);
    else disk. Raises ValueError (one line) for an explicit choice these servers can't take."""
    if use_lora:
        return "lora"
    if choice == "nccl" and shared_gpu:
        raise ValueError("vllm_weight_transfer='nccl': the server shares the trainer's GPU and NCCL can't connect "
                         "two processes on one device; use 'disk' (or 'auto')")
    remote = [u for u in urls if not is_loopback(u)]
    if choice in NATIVE and remote and not transfer_host:
        raise ValueError(f"vllm_weight_transfer={choice!r} with servers on other machines ({remote[0]}): set "
                         "vllm_weight_transfer_host to this machine's address as they reach it")
    if choice != "auto":
        return choice
    reachable = not remote or bool(transfer_host)
    return "nccl" if cuda and vllm_in_trainer and reachable and not shared_gpu else "disk"


def check_transfer(choice: str, *, use_lora: bool, cuda: bool, vllm_in_trainer: bool) -> str | None:
    """One line saying why an explicit choice can't work here, or None."""
    if choice in ("auto", "disk"):
        return None
    if use_lora:
        return (f"vllm_weight_transfer={choice!r} is for full fine-tuning; with use_lora=True the adapter is "
                "hot-swapped into vLLM: remove vllm_weight_transfer")
    if choice == "nccl" and not cuda:
        return "vllm_weight_transfer='nccl' needs a CUDA GPU in the trainer; use 'gloo' or 'disk' (or 'auto')"
    if choice == "nccl" and not vllm_in_trainer:
        return ("vllm_weight_transfer='nccl' needs vllm importable in the trainer's Python (`pip install vllm`); "
                "or use 'disk' (or 'auto')")
    return None
