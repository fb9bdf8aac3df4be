"""Supervised fine-tuning with TRL's SFTTrainer: full or LoRA, loss on completions / assistant turns only.

The output dir holds `checkpoint-N/` directories like RL runs and, at its top level, the final model (a full
HF model or a PEFT adapter), so it can be the `model` (or starting adapter) of an RL run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SFTSettings(BaseModel):
    """vf-sft's `[trainer]` section."""

    model_config = ConfigDict(extra="forbid")

    output_dir: str = "outputs/sft"
    max_steps: int = 500
    learning_rate: float = 2e-5
    batch_size: int = 8
    lr_scheduler_type: str = "cosine"
    max_length: int = 1024
    use_lora: bool = False
    lora_rank: int = 8
    lora_alpha: int = 32
    lora_target_modules: list[str] | str = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    save_steps: int = 500
    logging_steps: int = 50
    seed: int = 0
    bf16: bool = False
    gradient_checkpointing: bool = False
    report_to: str | list[str] = "none"


def run_sft(model: str, rows: list[dict[str, Any]], settings: SFTSettings, console: Any = None,
            label: str = "SFT", header: bool = True) -> tuple[Path, float]:
    """Train; returns (output dir, final training loss). `label` names its progress bar; `header`: a line with
    the settings first (vf-rl's warm-up writes its own)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from verifiers_rl.sft.data import tokenize_row
    from verifiers_rl.trainer.model_loading import from_pretrained, peft_wrapping_quietly

    out = Path(settings.output_dir)
    tokenizer = from_pretrained(AutoTokenizer, model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if settings.bf16 else torch.float32
    policy = from_pretrained(AutoModelForCausalLM, model, dtype=dtype)
    peft_config = None
    if settings.use_lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=settings.lora_rank, lora_alpha=settings.lora_alpha,
                                 target_modules=settings.lora_target_modules, task_type="CAUSAL_LM")
    data = Dataset.from_list([tokenize_row(r, tokenizer, settings.max_length) for r in rows])
    # transformers 5.18+ names it activation_checkpointing (the old name warns on every construction); older: gradient_
    ckpt = "activation_checkpointing" if "activation_checkpointing" in SFTConfig.__dataclass_fields__ else \
        "gradient_checkpointing"
    config = SFTConfig(
        output_dir=str(out), max_steps=settings.max_steps, learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size, lr_scheduler_type=settings.lr_scheduler_type,
        logging_steps=settings.logging_steps, save_steps=settings.save_steps, report_to=settings.report_to,
        seed=settings.seed, max_length=settings.max_length,
        # TRL defaults to bf16 and gradient checkpointing even on CPU: off unless asked for.
        bf16=settings.bf16, **{ckpt: settings.gradient_checkpointing}, disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0)
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # TRL's dataset passes over pre-tokenized rows are instant: no bars
    try:
        with peft_wrapping_quietly():  # TRL wraps the model with peft here when use_lora
            trainer = SFTTrainer(model=policy, args=config, train_dataset=data, processing_class=tokenizer,
                                 peft_config=peft_config)
    finally:
        if not quiet:
            enable_progress_bars()
    from rich.console import Console
    from transformers.trainer_callback import PrinterCallback

    from verifiers_rl.sft.progress import SFTProgress

    console = console or Console()
    if header:
        kind = "LoRA" if settings.use_lora else "full"
        console.print(f"SFT: {settings.max_steps} steps on {len(rows)} rows ({kind}, batch {settings.batch_size}, "
                      f"lr {settings.learning_rate})")
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; the bar shows the loss instead
    trainer.add_callback(SFTProgress(console, label))
    result = trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    return out, float(result.training_loss)
