"""The gloo weight-transfer wire format, shared by the trainer (`verifiers_rl.inference.weight_transfer`) and the
vLLM worker (`vf_gloo_transfer`). Imports only torch: it also runs inside the vLLM server's venv.

An update names its tensors (`names`, `dtype_names`, `shapes`); they travel as one flat buffer per dtype, dtypes
in order of first appearance, each buffer holding that dtype's tensors concatenated in name order.
"""

from __future__ import annotations

import torch

STORE_PREFIX = "vf-weights"  # the gloo group's keys in the trainer's TCPStore


def update_info(named: list[tuple[str, torch.Tensor]]) -> dict:
    """The JSON body of `/update_weights` for these tensors."""
    return {"names": [n for n, _ in named],
            "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in named],
            "shapes": [list(t.shape) for _, t in named]}


def dtype_groups(dtype_names: list[str]) -> list[tuple[str, list[int]]]:
    """(dtype name, indices of that dtype's tensors) in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(dtype_names):
        groups.setdefault(name, []).append(i)
    return list(groups.items())


def pack(named: list[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
    """The flat CPU buffers to send, one per dtype group."""
    groups = dtype_groups(update_info(named)["dtype_names"])
    return [torch.cat([named[i][1].detach().reshape(-1).cpu() for i in idx]) for _, idx in groups]


def empty_buffers(info: dict) -> list[torch.Tensor]:
    """Receive buffers for an update (same sizes and order as `pack` makes)."""
    sizes = [int(torch.Size(s).numel()) for s in info["shapes"]]
    return [torch.empty(sum(sizes[i] for i in idx), dtype=getattr(torch, name))
            for name, idx in dtype_groups(info["dtype_names"])]


def unpack(info: dict, buffers: list[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) views into the received buffers, in name order."""
    out: dict[int, tuple[str, torch.Tensor]] = {}
    for flat, (_, idx) in zip(buffers, dtype_groups(info["dtype_names"])):
        parts = flat.split([int(torch.Size(info["shapes"][i]).numel()) for i in idx])
        for i, part in zip(idx, parts):
            out[i] = (info["names"][i], part.view(info["shapes"][i]))
    return [out[i] for i in range(len(info["names"]))]
