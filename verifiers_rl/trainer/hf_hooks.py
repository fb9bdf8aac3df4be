"""Every private transformers / accelerate internal RLTrainer relies on, in this one module.

`missing_hooks()` lists what the installed versions no longer have; RLTrainer then refuses to start in one line, and
tests/test_hf_hooks.py catches a release that moves one. Why no public hook does each:
- `Trainer._save_checkpoint` / `_get_output_dir`: checkpoints are staged and renamed into place whole.
- `Trainer._save`, `_save_optimizer_and_scheduler`, `_load_optimizer_and_scheduler`, `_load_from_checkpoint`: FSDP2
  (sharding.py) saves the unsharded model and the optimizer one shard per rank.
- `Trainer._created_lr_scheduler`: set beside our scheduler so the default constant schedule honours warmup_steps.
- `Accelerator.prepare_model` / `_models`: on multi-CPU accelerate wraps every model in DDP; an FSDP2 model is kept.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

# (owner, name) → the parameters our override or call passes (None: an attribute, looked for in the source)
HOOKS: dict[tuple[str, str], tuple[str, ...] | None] = {
    ("transformers.Trainer", "_get_output_dir"): ("self", "trial"),
    ("transformers.Trainer", "_save_checkpoint"): ("self", "model", "trial"),
    ("transformers.Trainer", "_save"): ("self", "output_dir", "state_dict"),
    ("transformers.Trainer", "_save_optimizer_and_scheduler"): ("self", "output_dir"),
    ("transformers.Trainer", "_load_optimizer_and_scheduler"): ("self", "checkpoint"),
    ("transformers.Trainer", "_load_from_checkpoint"): ("self", "resume_from_checkpoint", "model"),
    ("transformers.Trainer", "create_scheduler"): ("self", "num_training_steps", "optimizer"),
    ("transformers.Trainer", "_created_lr_scheduler"): None,  # set in create_scheduler
    ("accelerate.Accelerator", "prepare_model"): ("self", "model", "device_placement", "evaluation_mode"),
    ("accelerate.Accelerator", "_models"): None,  # set in __init__
}
_ATTRIBUTE_SET_IN = {"transformers.Trainer": "create_scheduler", "accelerate.Accelerator": "__init__"}


def missing_hooks() -> list[str]:
    """One entry per hook above that the installed transformers / accelerate lacks or calls differently."""
    missing = []
    for (owner_path, name), params in HOOKS.items():
        module, cls = owner_path.rsplit(".", 1)
        owner = getattr(importlib.import_module(module), cls)
        if params is None:
            try:
                source = inspect.getsource(getattr(owner, _ATTRIBUTE_SET_IN[owner_path]))
            except (OSError, TypeError):  # no source shipped: nothing to check against
                continue
            if f"self.{name}" not in source:
                missing.append(f"{owner_path}.{name} (no longer set by {_ATTRIBUTE_SET_IN[owner_path]})")
        elif not callable(getattr(owner, name, None)):
            missing.append(f"{owner_path}.{name} (gone)")
        elif tuple(inspect.signature(getattr(owner, name)).parameters) != params:
            missing.append(f"{owner_path}.{name} (parameters now {tuple(inspect.signature(getattr(owner, name)).parameters)})")
    return missing


def check_hooks() -> None:
    """Refuse to build an RLTrainer, in one line, on a transformers / accelerate whose internals moved."""
    missing = missing_hooks()
    if missing:
        import accelerate
        import transformers

        raise RuntimeError(f"transformers {transformers.__version__} / accelerate {accelerate.__version__} lack what "
                           f"RLTrainer overrides: {'; '.join(missing)}. Install the versions verifiers-rl pins "
                           "(transformers>=5.0,<6; uv.lock has the tested ones)")


def keep_fsdp_out_of_ddp(accelerator: Any) -> None:
    """Keep a model FSDP2 already shards out of accelerate's DDP wrapping (see the module docstring)."""
    from torch.distributed.fsdp import FSDPModule

    original = accelerator.prepare_model

    def prepare_model(model: Any, device_placement: Any = None, evaluation_mode: bool = False) -> Any:
        if isinstance(model, FSDPModule):
            if model not in accelerator._models:
                accelerator._models.append(model)
            return model
        return original(model, device_placement=device_placement, evaluation_mode=evaluation_mode)

    accelerator.prepare_model = prepare_model


def _sharded_here(trainer: Any) -> bool:
    """FSDP2 applied by sharding.py (not by accelerate): the checkpoint hooks below take over."""
    return trainer.sharded is not None and trainer.sharded.applied


class TrainerHooks:
    """RLTrainer's overrides of transformers.Trainer's private hooks: a mixin before Trainer, handing the work to
    checkpoints.py / sharding.py, or to Trainer's own."""


    sharded: Any = None  # sharding.ShardedPolicy under FSDP2, else None
    checkpoint_root: str | None = None  # while a checkpoint is saved: the staging dir HF writes checkpoint-N into

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        from transformers import SchedulerType, get_scheduler

        # RLConfig documents warmup_steps as a linear warm-up; transformers' "constant" schedule ignores it.
        warmup = self.args.get_warmup_steps(num_training_steps)  # type: ignore[attr-defined]
        if self.lr_scheduler is None and warmup > 0 and SchedulerType(self.args.lr_scheduler_type) == "constant":  # type: ignore[attr-defined]
            self.lr_scheduler = get_scheduler("constant_with_warmup", optimizer or self.optimizer,  # type: ignore[attr-defined]
                                              num_warmup_steps=warmup, num_training_steps=num_training_steps)
            self._created_lr_scheduler = True
        return super().create_scheduler(num_training_steps, optimizer)  # type: ignore[misc]

    def _get_output_dir(self, trial: Any) -> str:
        return self.checkpoint_root or super()._get_output_dir(trial)  # type: ignore[misc]

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        from verifiers_rl.trainer.checkpoints import save_staged

        hf_save = super()._save_checkpoint  # type: ignore[misc]

        def save_into(root: str) -> None:
            self.checkpoint_root = root
            try:
                hf_save(model, trial)
            finally:
                self.checkpoint_root = None

        save_staged(self, save_into)

    def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
        if self.sharded is None:
            return super()._save(output_dir, state_dict)  # type: ignore[misc]
        sharded, self.model = self.model, self.sharded.full  # gathered after every optimizer step
        try:
            super()._save(output_dir, state_dict)  # type: ignore[misc]
        finally:
            self.model = sharded

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        if not _sharded_here(self):
            return super()._save_optimizer_and_scheduler(output_dir)  # type: ignore[misc]
        import torch

        from verifiers_rl.trainer.sharding import save_optimizer_shard

        save_optimizer_shard(self.optimizer, output_dir, self.args.process_index)  # type: ignore[attr-defined]
        if self.args.should_save:  # type: ignore[attr-defined]
            torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))  # type: ignore[attr-defined]

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if not _sharded_here(self) or checkpoint is None:
            return super()._load_optimizer_and_scheduler(checkpoint)  # type: ignore[misc]
        import torch

        from verifiers_rl.trainer.sharding import load_optimizer_shard

        load_optimizer_shard(self.optimizer, checkpoint, self.args.process_index)  # type: ignore[attr-defined]
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(checkpoint, "scheduler.pt")))  # type: ignore[attr-defined]

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        if not _sharded_here(self) or model is not None:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]
        from verifiers_rl.trainer.sharding import load_full_into_shards

        super()._load_from_checkpoint(resume_from_checkpoint, self.sharded.full)  # type: ignore[misc]
        load_full_into_shards(self.sharded.full, self.model)
