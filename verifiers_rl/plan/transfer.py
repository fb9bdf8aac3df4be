"""How new weights reach the inference runtime after each optimizer step."""

from __future__ import annotations

from urllib.parse import urlparse

TRANSFERS = ("auto", "nccl", "gloo", "ipc", "disk")
NATIVE = ("nccl", "gloo", "ipc")  # vLLM's native weight transfer backends (weight_transfer.py)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(url: str) -> bool:
    return (urlparse(url if "://" in url else "http://" + url).hostname or "") in LOOPBACK


def resolve_transfer(choice: str, *, use_lora: bool, cuda: bool, vllm_in_trainer: bool, urls: list[str],
                     transfer_host: str | None, shared_gpu: bool = False) -> str:
    """How full weights reach vLLM servers: 'nccl', 'gloo', 'ipc' or 'disk' ('lora' with use_lora: adapters
    hot-swap). 'auto': with CUDA and vLLM in the trainer, nccl when the servers can reach the trainer's own GPU, ipc
    when they share it (NCCL can't join two processes on one device), else disk. ValueError for an impossible choice."""
    if use_lora:
        return "lora"
    if choice == "ipc" and not shared_gpu:
        raise ValueError("vllm_weight_transfer='ipc' maps the trainer's GPU memory into the server: it needs the "
                         "server on the trainer's GPU (one GPU, colocated); use 'nccl' (or 'auto')")
    if choice == "nccl" and shared_gpu:
        raise ValueError("vllm_weight_transfer='nccl': the server shares the trainer's GPU and NCCL can't connect "
                         "two processes on one device; use 'ipc' or 'disk' (or 'auto')")
    problem = check_transfer(choice, use_lora=False, cuda=cuda, vllm_in_trainer=vllm_in_trainer)
    if problem:  # the hardware probed for the plan, not when the RLConfig was built
        raise ValueError(problem)
    remote = [u for u in urls if not is_loopback(u)]
    if choice in NATIVE and remote and not transfer_host:
        raise ValueError(f"vllm_weight_transfer={choice!r} with servers on other machines ({remote[0]}): set "
                         "vllm_weight_transfer_host to this machine's address as they reach it")
    if choice != "auto":
        return choice
    reachable = not remote or bool(transfer_host)
    if not (cuda and vllm_in_trainer):
        return "disk"
    return "ipc" if shared_gpu else "nccl" if reachable else "disk"


def check_transfer(choice: str, *, use_lora: bool, cuda: bool | None = None,
                   vllm_in_trainer: bool | None = None) -> str | None:
    """One line saying why an explicit choice can't work here, or None. `cuda` / `vllm_in_trainer` None: not
    known yet (an RLConfig checks the choice against use_lora; the plan, knowing the hardware, checks the rest)."""
    if choice in ("auto", "disk"):
        return None
    if use_lora:
        return (f"vllm_weight_transfer={choice!r} is for full fine-tuning; with use_lora=True the adapter is "
                "hot-swapped into vLLM: remove vllm_weight_transfer")
    if choice in ("nccl", "ipc") and cuda is False:
        return f"vllm_weight_transfer={choice!r} needs a CUDA GPU in the trainer; use 'gloo' or 'disk' (or 'auto')"
    if choice in ("nccl", "ipc") and vllm_in_trainer is False:
        return (f"vllm_weight_transfer={choice!r} needs vllm importable in the trainer's Python (`uv sync --extra "
                "vllm`, or `pip install vllm`); or use 'disk' (or 'auto')")
    return None
