"""Supervised fine-tuning with TRL's SFTTrainer: full or LoRA, loss on completions / assistant turns only.

The output dir holds `checkpoint-N/` directories like RL runs and, at its top level, the final model (a full
HF model or a PEFT adapter), so it can be the `model` (or starting adapter) of an RL run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from verifiers_rl.config.sections import micro_batch_problem
from verifiers_rl.trainer.config_fields import DEFAULT_LORA_TARGET_MODULES


class SFTSettings(BaseModel):
    """vf-sft's `[trainer]` section (what transformers / TRL / peft would refuse after the model loads: one line)."""

    model_config = ConfigDict(extra="forbid")

    output_dir: str = "outputs/sft"
    max_steps: int = Field(500, ge=1)
    num_train_epochs: float | None = Field(None, gt=0)  # instead of max_steps: passes over the rows (TRL's)
    learning_rate: float = Field(2e-5, ge=0)
    batch_size: int = Field(8, ge=1)
    # rows per forward on each process (gradient accumulation up to batch_size); None: a process's whole share
    micro_batch_size: int | None = Field(None, ge=1)
    # as vf-rl's (trainer/checkpoints.resolve_resume): true (-1, "latest") the newest complete checkpoint-N, "auto"
    # that or a fresh start, N, a path
    resume_from_checkpoint: bool | int | str | None = None
    lr_scheduler_type: str = "cosine"
    lr_scheduler_kwargs: dict[str, Any] = Field(default_factory=dict)  # transformers' (min_lr, num_decay_steps, ...)
    optim: str | None = None  # transformers' names (None: its default), or "muon" / "sign_sgd" (trainer/optimizers.py)
    optim_args: str | None = None
    warmup_steps: int | float = Field(0, ge=0)  # steps, or a share of the run's steps in [0, 1) (transformers')
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, ge=0)
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    max_length: int = Field(1024, ge=1)
    use_lora: bool = False
    lora_rank: int = Field(8, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_target_modules: list[str] | str = Field(default_factory=lambda: list(DEFAULT_LORA_TARGET_MODULES))
    save_steps: int = Field(500, ge=1)
    save_total_limit: int | None = Field(None, ge=1)  # the newest N checkpoint-N dirs kept (transformers')
    logging_steps: int = Field(50, ge=1)
    seed: int = 0
    bf16: bool = False
    gradient_checkpointing: bool = False
    packing: bool = False  # several rows per max_length row (TRL's best-fit packing; attention kept per row)
    report_to: str | list[str] = "none"

    @model_validator(mode="after")
    def _length(self) -> "SFTSettings":
        if self.num_train_epochs is not None and "max_steps" in self.model_fields_set:
            raise ValueError("max_steps and num_train_epochs both size the run; give one")
        if problem := micro_batch_problem(self.batch_size, self.micro_batch_size):
            raise ValueError(problem)
        if isinstance(self.warmup_steps, float) and self.warmup_steps >= 1 and not self.warmup_steps.is_integer():
            raise ValueError(f"warmup_steps = {self.warmup_steps}: give whole steps, or a share of the run in [0, 1)")
        return self

    @model_validator(mode="after")
    def _optimizer(self) -> "SFTSettings":
        from verifiers_rl.trainer.optim_settings import optimizer_problem

        problem = optimizer_problem(self)
        if problem:
            raise ValueError(problem[1])
        return self

    @field_validator("lr_scheduler_type")
    @classmethod
    def _known_scheduler(cls, name: str) -> str:
        from verifiers_rl.config.hf_fields import scheduler_problem

        problem = scheduler_problem(name)
        if problem:
            raise ValueError(problem)
        return name


def run_sft(model: str, rows: list[dict[str, Any]], settings: SFTSettings, console: Any = None,
            label: str = "SFT", header: bool = True, *, loss_roles: tuple[str, ...] | list[str] = ("assistant",),
            on_mismatch: str = "split", val_rows: list[dict[str, Any]] | None = None,
            val_interval: int | None = None) -> tuple[Path, float]:
    """Train; returns (output dir, final training loss). `label` names its progress bar; `header`: a line with
    the settings first (vf-rl's warm-up writes its own). `loss_roles`, `on_mismatch`: sft/data.py; `val_rows`:
    the validation loss every `val_interval` steps (and at the end). Raises SFTDataError (one line)."""
    from verifiers_rl.startup_gc import frozen_heap, paused_gc
    from verifiers_rl.trainer.checkpoints import resolve_resume

    with paused_gc():  # the imports, the data and the model: no collection over them until they are loaded
        trainer, tokenizer, console, this_rank, world = _sft_trainer(
            model, rows, settings, console, label, loss_roles, on_mismatch, val_rows, val_interval)
    out = Path(settings.output_dir)
    from transformers.trainer_callback import PrinterCallback

    from verifiers_rl.sft.progress import SFTProgress

    if header:
        kind = "LoRA" if settings.use_lora else "full"
        length = (f"{settings.num_train_epochs:g} epochs" if settings.num_train_epochs
                  else f"{settings.max_steps} steps")
        console.print(f"SFT: {length} on {len(rows)} rows ({kind}, batch {settings.batch_size}, "
                      f"lr {settings.learning_rate})")
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; the bar shows the loss instead
    trainer.add_callback(SFTProgress(console, label))
    with frozen_heap(trainer.args.device.type == "cpu"):  # out of HF's first full collection, and later ones
        result = trainer.train(resume_from_checkpoint=resolve_resume(
            settings.output_dir, settings.resume_from_checkpoint, say=trainer.is_world_process_zero()))
    if trainer.eval_dataset is not None and trainer.state.global_step % (val_interval or settings.logging_steps):
        trainer.evaluate()  # the final model's validation loss too
    trainer.save_model(str(out))  # rank 0 writes (HF's should_save)
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(out))
    if world > 1:  # one write of one line: the ranks share the console, and print() writes text and newline apart
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), f"{label} rank {this_rank} of {world}: {trainer.state.global_step} steps of "
                                      f"{settings.batch_size // world} rows\n".encode())
    return out, float(result.training_loss)


def _sft_trainer(model: str, rows: list[dict[str, Any]], settings: SFTSettings, console: Any, label: str,
                 loss_roles: Any, on_mismatch: str, val_rows: Any, val_interval: int | None) -> tuple:
    """TRL's SFTTrainer on the tokenized rows, and (its tokenizer, the console, this rank, the world size)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from rich.console import Console
    from trl import SFTConfig, SFTTrainer

    from verifiers_rl.sft.launch import rank
    from verifiers_rl.trainer.distributed import release_process_group_at_exit
    from verifiers_rl.trainer.model_loading import from_pretrained, lora_targets, peft_wrapping_quietly
    from verifiers_rl.trainer.optim_settings import extra_optimizer
    from verifiers_rl.trainer.optimizers import ExtraOptimizers
    from verifiers_rl.verbosity import no_progress_bars

    tokenizer = from_pretrained(AutoTokenizer, model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    this_rank, world = rank()  # under torchrun (sft/launch.py): rank 0 speaks for the run, each rank trains a share
    if world > 1:
        release_process_group_at_exit()
    # the data first: a row it cannot train on is one line before the model loads
    console = Console(quiet=True) if this_rank else (console or Console())
    data, val = _datasets(rows, val_rows, tokenizer, settings.max_length, loss_roles, on_mismatch, console, label)
    dtype = torch.bfloat16 if settings.bf16 else torch.float32
    policy = from_pretrained(AutoModelForCausalLM, model, dtype=dtype)
    peft_config = None
    if settings.use_lora:
        from peft import LoraConfig

        targets = lora_targets(policy, settings.lora_target_modules,
                               settings.lora_target_modules == DEFAULT_LORA_TARGET_MODULES)
        peft_config = LoraConfig(r=settings.lora_rank, lora_alpha=settings.lora_alpha,
                                 lora_dropout=settings.lora_dropout, target_modules=targets,
                                 task_type="CAUSAL_LM")
    micro = settings.micro_batch_size or settings.batch_size // world  # sft/launch.world_size checked the split
    # transformers 5.18+ names it activation_checkpointing (the old name warns on every construction); older: gradient_
    ckpt = "activation_checkpointing" if "activation_checkpointing" in SFTConfig.__dataclass_fields__ else \
        "gradient_checkpointing"
    config = SFTConfig(
        output_dir=str(Path(settings.output_dir)), learning_rate=settings.learning_rate,
        max_steps=-1 if settings.num_train_epochs else settings.max_steps,
        num_train_epochs=settings.num_train_epochs or 1.0,
        per_device_train_batch_size=micro, gradient_accumulation_steps=settings.batch_size // (micro * world),
        lr_scheduler_type=settings.lr_scheduler_type,
        lr_scheduler_kwargs=settings.lr_scheduler_kwargs,
        logging_steps=settings.logging_steps, save_steps=settings.save_steps, report_to=settings.report_to,
        save_total_limit=settings.save_total_limit,
        seed=settings.seed, max_length=settings.max_length, warmup_steps=settings.warmup_steps,
        weight_decay=settings.weight_decay, max_grad_norm=settings.max_grad_norm, adam_beta1=settings.adam_beta1,
        adam_beta2=settings.adam_beta2, optim_args=settings.optim_args,
        **({"optim": "adamw_torch" if extra_optimizer(settings) else settings.optim} if settings.optim else {}),
        # TRL defaults to bf16 and gradient checkpointing even on CPU: off unless asked for.
        bf16=settings.bf16, **{ckpt: settings.gradient_checkpointing}, disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0, packing=settings.packing,
        **({"eval_strategy": "steps", "eval_steps": val_interval or settings.logging_steps,
            "per_device_eval_batch_size": settings.batch_size} if val is not None else {}))
    # TRL's dataset passes over pre-tokenized rows are instant: no bars; TRL wraps the model with peft here (use_lora)
    if extra_optimizer(settings):  # after transformers' check of its own names: ours, ExtraOptimizers builds
        config.optim = settings.optim

    class Trainer(ExtraOptimizers, SFTTrainer):
        pass

    with no_progress_bars(), peft_wrapping_quietly():
        trainer = Trainer(model=policy, args=config, train_dataset=data, eval_dataset=val, processing_class=tokenizer,
                          peft_config=peft_config)
    return trainer, tokenizer, console, this_rank, world


def _datasets(rows: list[dict[str, Any]], val_rows: list[dict[str, Any]] | None, tokenizer: Any, max_length: int,
              loss_roles: Any, on_mismatch: str, console: Any, label: str) -> tuple[Any, Any]:
    """(train, validation or None) as tokenized datasets; a line when rows were split (sft/data.py)."""
    from datasets import Dataset

    from verifiers_rl.sft.data import tokenize_dataset, trained_samples

    samples, n_split = tokenize_dataset(rows, tokenizer, max_length, loss_roles, on_mismatch)
    if n_split:
        console.print(f"{label}: {n_split} of {len(rows)} rows render earlier turns differently once later ones "
                      "follow (a position-dependent chat template): each of their assistant turns trains as its own "
                      "sample", highlight=False)
    kept = trained_samples(samples)
    if len(kept) < len(samples):  # as TRL drops them, packed or not, and said
        console.print(f"{label}: {len(samples) - len(kept)} of {len(samples)} samples keep no loss token within "
                      f"max_length = {max_length} (what comes before the trained messages fills it): left out",
                      highlight=False)
    val = None
    if val_rows:
        val = Dataset.from_list(trained_samples(tokenize_dataset(val_rows, tokenizer, max_length, loss_roles,
                                                                 on_mismatch, label="val")[0]))
    return Dataset.from_list(kept), val
