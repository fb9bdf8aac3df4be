"""prime-rl's optimizer and learning-rate schedule tables (an RL config's `[trainer.optim]` / `[trainer.scheduler]`,
an SFT config's `[optim]` / `[scheduler]`) as transformers' settings, and its `[resume]`, for prime train and vf-sft
alike.

Optimizers: adamw (transformers' default), muon and sign_sgd (ours: trainer/optimizers.py), sgd. Schedules: prime-rl's
`linear` is a warm-up, a constant stretch, then a linear decay over the last `decay_steps` to `min_lr` (transformers'
warmup_stable_decay); its `cosine` decays to `min_lr` (cosine_with_min_lr). Both warm up for 10 steps unless told
otherwise (prime-rl-configs 559b447)."""

from __future__ import annotations

from typing import Any

from verifiers_rl.errors import ConfigError
from verifiers_rl.trainer.checkpoints import IF_ANY

OPTIM_NOTE = "adamw (transformers' default), muon, sign_sgd, sgd as is"
OPTIM_ARGS_NOTE = ("muon: momentum=mu (default 0.95), nesterov=false (as prime-rl's Muon, dion's); sgd: momentum "
                   "(0.9), nesterov (true)")
SCHEDULE_NOTE = ("constant; linear (warm-up, constant, a linear decay over the last decay_steps to min_lr): "
                 "warmup_stable_decay, reaching min_lr a step after the last (prime-rl's at the last); cosine (to "
                 "min_lr): cosine or cosine_with_min_lr, its warm-up from 0 rather than min_lr")


def prime_optimizer(optim: dict[str, Any], where: str) -> dict[str, Any]:
    """transformers' optim and optim_args for prime-rl's optimizer table `optim` (`type` and its own keys popped; a
    Muon table's AdamW beta2 defaulted to prime-rl's 0.95); a type prime-rl lacks is a ConfigError naming `where`."""
    kind = optim.pop("type", "adamw")
    if kind not in ("adamw", "muon", "sign_sgd", "sgd"):
        raise ConfigError(f"{where}.type: {kind!r} is not adamw, muon, sign_sgd or sgd")
    if kind == "adamw":
        return {}
    if kind == "muon":
        optim.setdefault("betas2", 0.95)
        return {"optim": kind, "optim_args": f"momentum={optim.pop('mu', 0.95)},nesterov=false"}
    if kind == "sgd":
        return {"optim": kind, "optim_args": f"momentum={optim.pop('momentum', 0.9)},"
                                             f"nesterov={optim.pop('nesterov', True)}"}
    return {"optim": kind}


def prime_schedule(sched: dict[str, Any], where: str, lr: float, max_steps: Any) -> dict[str, Any]:
    """transformers' lr_scheduler_type, warmup_steps and lr_scheduler_kwargs for prime-rl's schedule table `sched`
    (its keys popped: what is left is the caller's to refuse); a schedule prime-rl refuses is a ConfigError naming
    `where` (the table's path)."""
    kind = sched.pop("type", "constant")
    if kind not in ("constant", "linear", "cosine"):
        raise ConfigError(f"{where}.type: {kind!r} is not constant, linear or cosine")
    if kind == "constant":
        return {"lr_scheduler_type": "constant"}
    warmup, min_lr = sched.pop("warmup_steps", 10), sched.pop("min_lr", 0.0)
    decay = sched.pop("decay_steps", 10) if kind == "linear" else 0
    if kind == "cosine":
        out = {"lr_scheduler_type": "cosine_with_min_lr" if min_lr else "cosine", "warmup_steps": warmup}
        return {**out, "lr_scheduler_kwargs": {"min_lr": min_lr}} if min_lr else out
    if warmup == decay == 0:
        raise ConfigError(f"{where}: a linear schedule needs warmup_steps > 0 or decay_steps > 0 (type = 'constant' "
                          "otherwise)")
    if isinstance(max_steps, int) and warmup + decay > max_steps:
        raise ConfigError(f"{where}.decay_steps: warmup_steps ({warmup}) + decay_steps ({decay}) exceed max_steps "
                          f"({max_steps})")
    if decay == 0:  # warm-up, then constant (transformers' "constant" would skip the warm-up)
        return {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": warmup}
    return {"lr_scheduler_type": "warmup_stable_decay", "warmup_steps": warmup,
            "lr_scheduler_kwargs": {"num_decay_steps": decay, "decay_type": "linear", "min_lr_ratio": min_lr / lr}}


RESUME_NOTE = ("an empty [resume]: the newest checkpoint, or a fresh start when there is none ('auto'); step = N: "
               "checkpoint-N; dir: a checkpoint's path")


def prime_resume(resume: Any) -> bool | int | str | None:
    """prime-rl's `[resume]` as a `resume_from_checkpoint` value (vf-rl's and vf-sft's); None when absent."""
    if resume is None or resume is False:
        return None
    resume = dict(resume) if isinstance(resume, dict) else {}  # a bare --resume: as an empty table
    step, path = resume.pop("step", None), resume.pop("dir", None)
    if step is not None and path is not None:
        raise ConfigError("resume.step, resume.dir: give one (the step is taken from the directory's name)")
    if resume:
        raise ConfigError(f"resume.{next(iter(resume))}: not supported yet (resume takes step or dir)")
    return step if step is not None else path or IF_ANY
