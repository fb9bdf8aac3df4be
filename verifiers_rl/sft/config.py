"""`vf-sft` config: `model`, `[data]` (a file, a hub dataset, or an environment's data), `[trainer]`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from verifiers_rl.sft.trainer import SFTSettings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LossMaskSection(_Section):
    """Which roles' messages carry loss (prime-rl's loss_mask): the assistant's only by default."""

    system: bool = False
    user: bool = False
    assistant: bool = True
    tool: bool = False

    def roles(self) -> tuple[str, ...]:
        return tuple(r for r in ("system", "user", "assistant", "tool") if getattr(self, r))

    @model_validator(mode="after")
    def _some_role(self) -> "LossMaskSection":
        if not self.roles():
            raise ValueError("every role is false, so nothing would be trained; set assistant = true")
        return self


class DataSection(_Section):
    path: str | None = Field(None, description="a .jsonl/.json/.parquet file or a hub dataset id")
    split: str = "train"
    env_id: str | None = Field(None, description="use this environment's training data instead of a file")
    env_args: dict[str, Any] = Field(default_factory=dict)
    completion_format: str = Field("{answer}", description="with env_id: the assistant reply built from the answer")
    num_examples: int = -1
    loss_mask: LossMaskSection = Field(default_factory=LossMaskSection)
    on_template_mismatch: Literal["split", "error"] = Field(
        "split", description="a chat template that renders earlier turns differently once later ones follow "
        "(Qwen3's thinking): train each assistant turn as its own sample, or refuse the row")

    @model_validator(mode="after")
    def _one_source(self) -> "DataSection":
        if (self.path is None) == (self.env_id is None):
            raise ValueError("give exactly one of data.path or data.env_id")
        return self


class ValSection(_Section):
    """Validation: the loss on held-out rows every `interval` steps (TRL's eval_loss)."""

    path: str | None = Field(None, description="a .jsonl/.json/.parquet/.csv file or a hub dataset id")
    split: str = Field("validation", description="with a hub dataset id: its split")
    fraction: float | None = Field(None, gt=0, lt=1, description="instead of path: this share of [data]'s rows, "
                                   "held out (seeded by trainer.seed)")
    num_examples: int = -1
    interval: int = Field(50, gt=0, description="steps between validations")

    @model_validator(mode="after")
    def _one_source(self) -> "ValSection":
        if (self.path is None) == (self.fraction is None):
            raise ValueError("give exactly one of val.path or val.fraction")
        return self


class SFTTrainerSection(SFTSettings):
    """`[trainer]`: the SFT settings plus how many processes train (sft/launch.py), as in vf-rl's `[trainer]`."""

    gpus: int = Field(1, ge=1, description="GPUs for training; > 1 starts one process per GPU with torchrun (DDP)")
    processes: int | None = Field(None, ge=1, description="training processes on a machine without GPUs (torchrun, "
                                  "DDP over gloo); batch_size rows per step are shared among them")

    def settings(self) -> SFTSettings:
        return SFTSettings(**self.model_dump(exclude={"gpus", "processes"}, exclude_unset=True))


# TRL's SFTConfig (and transformers') names vf-sft's [trainer] has no key for → what sets each here
_TRL_SFT = {
    "per_device_train_batch_size": "micro_batch_size: rows per forward on each process; batch_size: rows per step",
    "gradient_accumulation_steps": "batch_size and micro_batch_size: it is batch_size / (micro_batch_size x "
                                   "processes)",
    "max_seq_length": "max_length", "lr": "learning_rate", "r": "lora_rank", "lora_r": "lora_rank",
    "warmup_ratio": "warmup_steps, a share of the run in [0, 1): warmup_steps = 0.1",
    "completion_only_loss": "nothing: a prompt + completion row trains on its completion only",
    "assistant_only_loss": "[data.loss_mask]: assistant = true is the default",
    "dataset_text_field": "nothing: rows have prompt + completion or messages columns",
    "eval_strategy": "[val] interval", "eval_steps": "[val] interval", "torch_dtype": "bf16", "dtype": "bf16",
    **{name: "nothing: upload the output dir yourself (hf upload)" for name in ("push_to_hub", "hub_model_id")},
    **{name: "nothing: not supported by vf-sft" for name in ("padding_free", "use_liger_kernel",
                                                             "neftune_noise_alpha", "gradient_checkpointing_kwargs")},
}
TRL_SFT_NAMES = {f"trainer.{k}": f"TRL's SFTConfig name: set {v}" for k, v in _TRL_SFT.items()}


class SFTRunConfig(_Section):
    model: str
    data: DataSection
    val: ValSection | None = None
    trainer: SFTTrainerSection = Field(default_factory=SFTTrainerSection)


def validate_sft_config(raw: dict[str, Any]) -> SFTRunConfig:
    from verifiers_rl.config.resolution import is_prime_sft
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.config.schema import one_line

    if is_prime_sft(raw):
        from verifiers_rl.config.prime_sft import translate

        raw = translate(raw)
    try:
        cfg = SFTRunConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(one_line(e, SFTRunConfig, foreign=TRL_SFT_NAMES)) from None
    from verifiers_rl.config.hf_fields import report_to_problem

    problem = report_to_problem(cfg.trainer.report_to)
    if problem:
        raise ConfigError(f"trainer.report_to: {problem}")
    from verifiers_rl.config.validation import completion_format_problem

    problem = cfg.data.env_id is not None and completion_format_problem(cfg.data.completion_format)
    if problem:
        raise ConfigError(f"data.completion_format: {problem}")
    from verifiers_rl.trainer.checkpoints import resolve_resume

    try:  # the checkpoint a resume means exists, before anything loads (run_sft resolves it again: the ranks')
        resolve_resume(cfg.trainer.output_dir, cfg.trainer.resume_from_checkpoint)
    except ValueError as e:
        raise ConfigError(f"trainer.{e}") from None
    for key, path in (("data.path", cfg.data.path), ("val.path", cfg.val and cfg.val.path)):
        if _local_file(path) and not Path(path).is_file():
            raise ConfigError(f"{key}: no file {path!r} (relative paths are from the current directory, "
                              f"{os.getcwd()}); give the path of a .jsonl/.json/.parquet/.csv file")
    return cfg


_FILE_KINDS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def _local_file(path: str | None) -> bool:
    """A path `load_rows` reads as one local file (not a hub id, a URL or a glob, which `datasets` resolves)."""
    return bool(path) and path.endswith(tuple(_FILE_KINDS)) and "://" not in path and not any(c in path for c in "*?[")


def load_rows(data: DataSection, key: str = "data.path") -> list[dict[str, Any]]:
    """Rows with `prompt` + `completion` or `messages`; a local file `datasets` cannot parse is a ConfigError (one
    line naming `key`, the file and where it fails)."""
    from verifiers_rl.network import dataset_hub_message, hub_failures_as, hub_state

    if data.env_id is not None:
        from verifiers_rl.envs.loading import load_environment, takes_dataset_source
        from verifiers_rl.sft.warmup import sft_rows

        with hub_failures_as(lambda: dataset_hub_message(data.env_id, takes_dataset_source(data.env_id))):
            env = load_environment(data.env_id, **data.env_args)
        return sft_rows(env, data.completion_format, data.num_examples)
    from datasets import load_dataset

    path = data.path or ""
    kind = next((v for k, v in _FILE_KINDS.items() if path.endswith(k)), None)
    if kind:
        from verifiers_rl.config.loading import ConfigError

        if _local_file(path) and Path(path).stat().st_size == 0:
            raise ConfigError(f"{key}: {path!r} is empty; give it rows with prompt + completion or messages")
        try:
            ds = load_dataset(kind, data_files=path, split="train")
        except Exception as e:  # datasets' DatasetGenerationError says only that one occurred: its cause says where
            while e.__cause__ is not None:
                e = e.__cause__
            raise ConfigError(f"{key}: {path!r} cannot be read as {kind} rows ({type(e).__name__}: "
                              f"{' '.join(str(e).split())})") from None
    else:
        with hub_failures_as(lambda: f"data.path: dataset {path!r} is not in the local cache and {hub_state()}; "
                                     "point data.path at a local .jsonl/.parquet/.csv file"):
            ds = load_dataset(path, split=data.split)
    if data.num_examples > 0:
        ds = ds.select(range(min(data.num_examples, len(ds))))
    return ds.to_list()


def split_rows(cfg: SFTRunConfig, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, validation rows) for `[val]`: its own file or dataset, or a seeded share of `rows`."""
    val = cfg.val
    if val is None:
        return rows, []
    if val.path is not None:
        return rows, load_rows(DataSection(path=val.path, split=val.split, num_examples=val.num_examples), "val.path")
    import random

    order = list(range(len(rows)))
    random.Random(cfg.trainer.seed).shuffle(order)
    n = max(1, round(len(rows) * val.fraction))
    if val.num_examples > 0:
        n = min(n, val.num_examples)
    held = set(order[:n])
    return [r for i, r in enumerate(rows) if i not in held], [rows[i] for i in sorted(held)]
