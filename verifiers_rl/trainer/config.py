"""RLConfig: the trainer's settings, a ``transformers.TrainingArguments`` with RL fields and RL defaults (the RL
fields and their rules: trainer/config_fields.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import TrainingArguments

from verifiers_rl.errors import SettingError
from verifiers_rl.plan.gpus import batch_split_problem
from verifiers_rl.trainer.config_fields import DEFAULT_LORA_TARGET_MODULES, RLFields, field_default
from verifiers_rl.trainer.trl_names import TRL_NAMES
from verifiers_rl.trainer.optim_settings import extra_optimizer

__all__ = ["DEFAULT_LORA_TARGET_MODULES", "RLConfig", "field_default"]


@dataclass
class RLConfig(RLFields, TrainingArguments):
    """Settings of ``RLTrainer``.

    One optimizer step trains on ``batch_size`` rollouts = ``batch_size / rollouts_per_example`` prompts, run as
    micro-batches of ``micro_batch_size`` rollouts per device (the trainer accumulates them itself, so
    ``gradient_accumulation_steps`` stays 1). Invalid combinations raise one ``ValueError`` naming the field.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "RLConfig":
        # before the dataclass __init__'s bare "unexpected keyword argument": TRL's name, and what sets it here
        fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
        for key in kwargs.keys() - fields.keys():
            if key in TRL_NAMES:
                raise TypeError(f"RLConfig has no {key} (TRL's GRPOConfig name): set {TRL_NAMES[key]}")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        self._resolve_rl_fields()
        if self.use_cpu is None:
            import torch

            self.use_cpu = not torch.cuda.is_available()
        from verifiers_rl.plan.precision import resolve_bf16

        try:
            self.bf16 = resolve_bf16(self)  # None → bf16 on a CUDA GPU that has it, fp32 on the CPU
        except ValueError as e:
            raise SettingError("bf16", str(e)) from None
        # transformers 5 renamed gradient_checkpointing to activation_checkpointing and warns on the old name
        if getattr(self, "activation_checkpointing", False) is None:
            self.activation_checkpointing = bool(self.gradient_checkpointing)

        extra = extra_optimizer(self)  # transformers checks optim against its own names: ours it never builds
        if extra:
            self.optim = "adamw_torch"
        super().__post_init__()  # CheckpointSettings' checks, then TrainingArguments'
        if extra:
            self.optim = extra

        # world_size is known only once transformers has set up the distributed state.
        problem = batch_split_problem(self.batch_size, self.micro_batch_size, self.world_size, "world_size")
        if problem:
            raise SettingError("batch_size", problem)
