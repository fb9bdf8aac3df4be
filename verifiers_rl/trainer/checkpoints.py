"""Checkpoints: which one a resume means, which ones rotation keeps, and the trainer side of saving them.

A checkpoint is complete when HF's `trainer_state.json` is in it (ours are staged under `.staging/` and renamed into
place whole; one copied by hand may not be). `resume_from_checkpoint` follows transformers and also takes a step
number (prime-rl's `resume_step`).
"""


from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers_rl.errors import SettingError

STAGING_DIR = ".staging"
MERGED_DIR = "merged"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_LATEST = (True, -1, "latest")
IF_ANY = "auto"  # prime-rl's empty [resume]: the newest checkpoint when there is one, else a fresh start
RESUME_HELP = ("Resume: True (or -1, 'latest') the newest complete checkpoint in output_dir, 'auto' that or a fresh "
               "start when there is none, a step number its checkpoint-N, or a checkpoint path (None: start fresh).")


def used_by(output_dir: str | Path) -> str | None:
    """What in output_dir shows an earlier run, which a second run would mix with its own ('metrics.jsonl', '3
    checkpoints'), or None."""
    found = ["metrics.jsonl"] if (Path(output_dir) / "metrics.jsonl").exists() else []
    n = len(checkpoints(str(output_dir)))
    if n:
        found.append(f"{n} checkpoint{'s' if n > 1 else ''}")
    return " and ".join(found) or None


def checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every `checkpoint-N` directory in output_dir, oldest first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(1)), os.path.join(output_dir, n)) for n in os.listdir(output_dir)
             if (m := _CHECKPOINT.match(n)) and os.path.isdir(os.path.join(output_dir, n))]
    return sorted(found)


def is_complete(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "trainer_state.json"))


def latest_checkpoint(output_dir: str) -> str | None:
    """The newest complete checkpoint (a half-written one is skipped), or None."""
    return next((p for _, p in reversed(checkpoints(output_dir)) if is_complete(p)), None)


def weights_only(path: str) -> bool:
    """Saved with `save_only_model=True`: the model and trainer_state.json, no optimizer, scheduler or RNG state
    (transformers writes scheduler.pt with every other checkpoint)."""
    return is_complete(path) and not os.path.isfile(os.path.join(path, "scheduler.pt"))


def resolve_resume(output_dir: str, value: Any, say: bool = False) -> str | None:
    """`resume_from_checkpoint` → a checkpoint path (None: start fresh); ValueError in one line when there is none,
    or when it holds the weights only (transformers resumed from it with a new optimizer and the schedule's first
    learning rates, in silence). `say`: print when 'auto' finds nothing to resume (the run that starts says it)."""
    path = _resume_path(output_dir, value)
    if say and path is None and value == IF_ANY:
        print(f"resume_from_checkpoint='auto': no complete checkpoint in {output_dir} yet: starting from scratch",
              flush=True)
    if path is not None and weights_only(path):
        raise ValueError(f"resume_from_checkpoint={value!r}: {path} was saved with save_only_model=True (the weights "
                         "only: no optimizer, scheduler or RNG state), which cannot be resumed; resume from a "
                         "checkpoint saved without it, or start a new run from its weights (model=<that path>)")
    return path


def _resume_path(output_dir: str, value: Any) -> str | None:
    if value is None or value is False:
        return None
    if value == IF_ANY:
        return latest_checkpoint(output_dir)
    if any(value is v or (type(value) is type(v) and value == v) for v in _LATEST):
        path = latest_checkpoint(output_dir)
        if path is None:
            raise ValueError(f"resume_from_checkpoint={value!r}: no complete checkpoint in {output_dir}; start "
                             "without it or point output_dir at the run to continue")
        return path
    if isinstance(value, int) and not isinstance(value, bool):
        path = os.path.join(output_dir, f"checkpoint-{value}")
        if value < 0 or not is_complete(path):
            have = ", ".join(str(s) for s, p in checkpoints(output_dir) if is_complete(p)) or "none"
            raise ValueError(f"resume_from_checkpoint={value}: no complete checkpoint-{value} in {output_dir} "
                             f"(complete: {have}); give a saved step, True for the latest, or a path")
        return path
    if isinstance(value, str):
        if not os.path.isdir(value):
            raise ValueError(f"resume_from_checkpoint={value!r}: no such checkpoint directory")
        return value
    raise ValueError(f"resume_from_checkpoint={value!r} must be True (the latest), 'auto', a step number or a path")


def rotate(output_dir: str, keep_last: int | None, keep_interval: int | None) -> list[str]:
    """Delete checkpoints beyond the `keep_last` newest, except steps that are multiples of `keep_interval`
    (kept for good). The newest is always kept. Returns what was deleted."""
    if not keep_last or keep_last <= 0:
        return []
    found = checkpoints(output_dir)
    recent = {p for _, p in found[-keep_last:]}
    doomed = [p for s, p in found if p not in recent and not (keep_interval and s % keep_interval == 0)]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


@dataclass
class CheckpointSettings:
    """RLConfig's checkpoint fields beyond transformers' (save_steps, save_total_limit, resume_from_checkpoint)."""

    save_keep_interval: int | None = field(default=None, metadata={
        "help": "Also keep every checkpoint whose step is a multiple of N for good, whatever save_total_limit "
                "rotates away (None: rotation alone)."})
    save_merged_weights: bool = field(default=False, metadata={
        "help": "LoRA runs: also write the adapters merged into the base weights as checkpoint-N/merged/ (a plain "
                "model dir with the tokenizer: vLLM serves it, from_pretrained loads it); the adapter stays beside."})

    def __post_init__(self) -> None:
        n = self.save_keep_interval
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise SettingError("save_keep_interval",
                               f"save_keep_interval={n!r} must be a positive number of steps or None")
        if self.save_merged_weights and not getattr(self, "use_lora", True):
            raise SettingError("save_merged_weights",
                               "save_merged_weights applies to LoRA runs (without LoRA every checkpoint is a full "
                               "model already); remove it or set use_lora=True")
        r = getattr(self, "resume_from_checkpoint", None)
        if not (r is None or isinstance(r, (bool, str)) or (isinstance(r, int) and r >= -1)):
            raise SettingError("resume_from_checkpoint",
                               f"resume_from_checkpoint={r!r} must be True (the latest), a step number or a path")
        parent = getattr(super(), "__post_init__", None)  # TrainingArguments' (none in vf-rl's pre-launch check)
        if parent is not None:
            parent()


def merged_state_dict(peft_model: Any) -> dict[str, Any]:
    """The base model's state dict (CPU tensors, plain names) with the active LoRA adapters added in and trained
    modules_to_save in place of the originals. The policy itself is not touched (merging in place and back would
    round its weights)."""
    import torch
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    merged: dict[str, Any] = {}
    with torch.no_grad():
        for name, m in base.named_modules():
            if isinstance(m, LoraLayer):
                w = m.get_base_layer().weight
                delta = sum(m.get_delta_weight(a).float() for a in m.active_adapters if a in m.lora_A)
                merged[f"{name}.weight"] = (w.float() + delta).to(w.dtype).cpu()
    adapter = peft_model.active_adapter
    out: dict[str, Any] = {}
    for k, v in base.state_dict().items():
        if "lora_" in k or ".original_module." in k:
            continue
        plain = k.replace(".base_layer.", ".").replace(f".modules_to_save.{adapter}.", ".")
        out[plain] = merged.get(plain, v.detach().cpu())
    return out


def clean_staging(trainer: Any) -> None:
    """Remove what an interrupted save left under `.staging/` (rank 0, before training starts)."""
    staging = os.path.join(trainer.args.output_dir, STAGING_DIR)
    if trainer.is_world_process_zero() and os.path.isdir(staging):
        shutil.rmtree(staging, ignore_errors=True)


def load_rl_state(trainer: Any, checkpoint: Any) -> None:
    """Restore what HF's checkpoint does not cover (the difficulty buffer, rae's moving baselines); the step is
    HF's."""
    path = resolve_resume(trainer.args.output_dir, checkpoint)
    if path and os.path.exists(os.path.join(path, "rl_state.json")):
        with open(os.path.join(path, "rl_state.json")) as f:
            state = json.load(f)
        trainer.orchestrator.load_state_dict(state)
        trainer.steps.baselines.update(state.get("advantage_baselines") or {})


def save_staged(trainer: Any, save_into: Any) -> None:
    """Write the checkpoint under `.staging/` (`save_into(root)`: HF's save of checkpoint-N into `root`, every rank)
    and rename it into place when complete, so a crash mid-save never leaves a `checkpoint-N` that resume would pick.
    Then rl_state.json, merged LoRA weights when asked, and rotation."""
    from verifiers_rl.trainer import distributed

    args, t0 = trainer.args, time.perf_counter()
    name = f"checkpoint-{trainer.state.global_step}"
    staging_root = os.path.join(args.output_dir, STAGING_DIR)
    final = os.path.join(args.output_dir, name)
    save_into(staging_root)
    distributed.barrier(args.world_size)  # every rank's files (RNG states) are in before the rename
    if not args.should_save:
        return
    staged = os.path.join(staging_root, name)
    orch, step = trainer.orchestrator, trainer.state.global_step
    with open(os.path.join(staged, "rl_state.json"), "w") as f:
        json.dump({"step": step, "policy_version": orch.policy_version,
                   "seed": args.data_order_seed(), "data_order": "seeded shuffle per epoch; step k = k-th slice",
                   **orch.state_dict(step),
                   # every rank holds the same: advantages are computed on the whole step's rollouts
                   **({"advantage_baselines": trainer.steps.baselines} if trainer.steps.baselines else {})},
                  f, indent=2)
    if args.save_merged_weights:  # the LoRA policy as a plain HF model dir (config, merged safetensors, tokenizer)
        model, merged = trainer.served_model(), os.path.join(staged, MERGED_DIR)
        model.get_base_model().save_pretrained(merged, state_dict=merged_state_dict(model))
        if trainer.processing_class is not None:
            trainer.processing_class.save_pretrained(merged)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(staged, final)
    shutil.rmtree(staging_root, ignore_errors=True)
    rotate(args.output_dir, args.save_total_limit, args.save_keep_interval)
    # logged with the next step's metrics (HF logs a step before it saves it)
    trainer.pending_metrics.append({"time/save_ckpt": time.perf_counter() - t0})
