"""FSDP2 (`fully_shard`) for RLTrainer, selected by `fsdp` / `fsdp_config={"version": 2}` on RLConfig.

Why here: on the CPU transformers accepts those settings and then wraps the model in DDP; when accelerate did not take
FSDP itself, `shard_policy` shards here. Generation and weight sync use `ShardedPolicy.full`, an unsharded copy on every
rank refreshed after each optimizer step (a sharded forward all-gathers every call, and ranks generate different numbers
of tokens).
"""

from __future__ import annotations

import copy
import os
from typing import Any

from verifiers_rl.errors import ConfigError


def fsdp_version(args: Any) -> int | None:
    """The FSDP version the RLConfig asks for (None: no FSDP)."""
    if not getattr(args, "fsdp", None):
        return None
    cfg = getattr(args, "fsdp_config", None) or {}
    return int(cfg.get("version", cfg.get("fsdp_version", 1)))


def _layer_classes(model: Any) -> set[str]:
    """The class names HF marks as units to keep whole (`_no_split_modules`: the decoder layers)."""
    for m in (model, getattr(model, "base_model", None), getattr(model, "get_base_model", lambda: None)()):
        names = getattr(m, "_no_split_modules", None)
        if names:
            return set(names)
    return set()


def apply_fully_shard(model: Any, device_type: str, world: int) -> int:
    """`fully_shard` each decoder layer, then the root; returns the number of layers sharded. The output head stays
    in the root's group: the chunked log-prob head is called outside the forward, a different number of times per
    rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device_type, (world,))
    names = _layer_classes(model)
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ConfigError(f"fsdp: found no decoder layers to shard in {type(model).__name__} (it names no "
                          "_no_split_modules); train it without fsdp")
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    # the log-prob head relies on the root keeping its parameters gathered after the forward (FSDP2's default)
    fully_shard(model, mesh=mesh)
    return len(layers)


class ShardedPolicy:
    """The unsharded copy that generation and the weight sync use, and how to bring it up to date."""

    def __init__(self, model: Any, trainable_only: bool, applied: bool, layers: int, device: Any = None):
        # `model` is already on `device` (shard_policy): the copy is made there, never a CPU copy on a CUDA run
        self.full = copy.deepcopy(model).eval().requires_grad_(False)
        if device is not None:
            self.full.to(device)  # a no-op when the model was there
        self.trainable_only = trainable_only
        self.applied = applied  # fully_shard applied here (not by accelerate)
        self.layers = layers

    def refresh(self, sharded: Any) -> None:
        """Gather `sharded`'s trained parameters into `full` (a collective per parameter, every rank)."""
        import torch
        from torch.distributed.tensor import DTensor

        mine = dict(self.full.named_parameters())
        with torch.no_grad():
            for name, p in sharded.named_parameters():
                if self.trainable_only and not p.requires_grad:
                    continue
                t = p.full_tensor() if isinstance(p, DTensor) else p
                mine[name].copy_(t)


def _on(device: Any, t: Any) -> bool:
    """`t` is on `device` (torchrun's CPU ranks name theirs cpu:0; CPU tensors say cpu)."""
    return t.device.type == device.type and (device.type == "cpu" or device.index is None
                                             or t.device.index == device.index)


def move_to_device(model: Any, device: Any) -> bool:
    """Move `model` to `device` when a parameter or buffer is elsewhere; True when it moved."""
    tensors = [*model.parameters(), *model.buffers()]
    if all(_on(device, t) for t in tensors):
        return False
    model.to(device)
    return True


def shard_policy(trainer: Any) -> ShardedPolicy | None:
    """Apply FSDP2 when the RLConfig asks for it (None without FSDP; one-line ConfigError when unsupported)."""
    import torch
    import torch.distributed as dist

    args = trainer.args
    version = fsdp_version(args)
    if version is None:
        return None
    if version != 2:
        raise ConfigError(f"fsdp_config.version = {version}: only FSDP2 is supported; set fsdp_config = "
                          '{"version": 2}')
    world = args.world_size
    if world < 2 and not (dist.is_available() and dist.is_initialized()):  # torchrun, a mesh of 1 (one GPU) too
        raise ConfigError("fsdp: sharding needs torchrun's process group; start training with torchrun "
                          "--nproc_per_node N (1 included; vf-rl: [trainer] processes = N on the CPU, gpus = N on GPUs) "
                          "or drop fsdp")
    model = trainer.model
    accelerate_shards = bool(getattr(trainer, "is_fsdp_enabled", False))
    device = torch.device(args.device)  # this rank's: cpu, or cuda:LOCAL_RANK under torchrun on GPUs
    move_to_device(model, device)  # before the copy and fully_shard: both on this rank's device
    # The copy is taken before sharding: a plain module whose forward makes no collectives.
    policy = ShardedPolicy(model, trainable_only=bool(args.use_lora), applied=not accelerate_shards, layers=0,
                           device=device)
    if not accelerate_shards:  # the caller keeps accelerate from wrapping it in DDP (hf_hooks.keep_fsdp_out_of_ddp)
        policy.layers = apply_fully_shard(model, device.type, world)
    return policy


def describe(policy: ShardedPolicy | None, world: int) -> str:
    """One line for the console: how many processes and which sharding."""
    if world <= 1:
        return "training: 1 process" + (", FSDP2 (a mesh of 1: the whole model on this rank)" if policy else "")
    if policy is None:
        return f"training: {world} processes, data parallel (DDP: full weights on every rank)"
    return (f"training: {world} processes, FSDP2 (fully_shard on {policy.layers} decoder layers + the root: each "
            f"rank holds 1/{world} of the parameters)")


def shard_fraction(model: Any) -> float:
    """The fraction of the model's parameter elements this rank holds (1.0 unsharded)."""
    from torch.distributed.tensor import DTensor

    total = local = 0
    for p in model.parameters():
        total += p.numel()
        local += p.to_local().numel() if isinstance(p, DTensor) else p.numel()
    return local / max(total, 1)


# --- checkpoints under FSDP2 applied here: each rank its own optimizer shard (called from hf_hooks.py) -------------

OPTIMIZER_SHARD = "optimizer.rank{rank}.pt"


def save_optimizer_shard(optimizer: Any, output_dir: str, rank: int) -> None:
    import torch
    from torch.distributed.tensor import DTensor

    sd = optimizer.state_dict()
    state = {i: {k: (v.to_local() if isinstance(v, DTensor) else v) for k, v in s.items()}
             for i, s in sd["state"].items()}
    os.makedirs(output_dir, exist_ok=True)
    torch.save({"state": state, "param_groups": sd["param_groups"]},
               os.path.join(output_dir, OPTIMIZER_SHARD.format(rank=rank)))


def check_resume_layout(checkpoint: str, sharded_here: bool, world: int) -> None:
    """One-line ConfigError when the checkpoint's optimizer state does not fit this run: FSDP2 shards (one file per
    rank) need FSDP2 on as many processes; one process's optimizer.pt cannot be split into shards here. Otherwise
    transformers resumed with a fresh optimizer in silence, or a rank failed on a missing file."""
    import glob

    shards = len(glob.glob(os.path.join(checkpoint, OPTIMIZER_SHARD.format(rank="*"))))
    here = f"this run: {world} process{'es' if world > 1 else ''}, {'FSDP2' if sharded_here else 'no FSDP2'}"
    if shards and (not sharded_here or shards != world):
        raise ConfigError(
            f"resume_from_checkpoint={checkpoint}: its optimizer state is sharded over {shards} FSDP2 processes "
            f"(optimizer.rank*.pt; {here}); resume it with {shards} training processes and fsdp=True, "
            "fsdp_config={'version': 2}, or start a new run from its weights (model=<that checkpoint>)")
    if not shards and sharded_here and os.path.isfile(os.path.join(checkpoint, "optimizer.pt")):
        raise ConfigError(
            f"resume_from_checkpoint={checkpoint}: its optimizer state is one unsharded optimizer.pt ({here}); "
            "resume it without fsdp, or start a new run from its weights (model=<that checkpoint>)")


def load_optimizer_shard(optimizer: Any, checkpoint: str, rank: int) -> None:
    import torch
    from torch.distributed.tensor import DTensor

    sd = torch.load(os.path.join(checkpoint, OPTIMIZER_SHARD.format(rank=rank)), weights_only=False)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for i, s in sd["state"].items():
        p = params[int(i)]
        if isinstance(p, DTensor):
            s.update({k: DTensor.from_local(v, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                            stride=p.stride())
                      for k, v in s.items() if torch.is_tensor(v) and v.dim() > 0})
    optimizer.load_state_dict(sd)


def load_full_into_shards(full: Any, sharded: Any) -> None:
    """Copy the unsharded copy's weights (just loaded from a checkpoint) into this rank's shards."""
    import torch
    from torch.distributed.tensor import DTensor, distribute_tensor

    src = dict(full.named_parameters())
    with torch.no_grad():
        for name, p in sharded.named_parameters():
            if isinstance(p, DTensor):
                local = distribute_tensor(src[name].detach(), p.device_mesh, p.placements, src_data_rank=None)
                p.to_local().copy_(local.to_local())
            else:
                p.copy_(src[name])
