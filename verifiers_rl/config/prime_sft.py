"""prime-rl's SFT trainer config (its `sft.toml`: `[model] name`, `[data] name / seq_len / batch_size`, `[optim]`,
`[scheduler]`, `[ckpt]`, `[val]`) → a vf-sft config, with prime-rl's defaults where they differ from vf-sft's. What
sizes or places the hosted run (`[deployment]`, `[inference]`, the online `[eval]`, ...) is set aside in one line;
any other key prime-rl has and vf-sft cannot honour is one error naming it."""

from __future__ import annotations

import sys
from typing import Any

from verifiers_rl.config.prime_optim import prime_optimizer, prime_resume, prime_schedule
from verifiers_rl.errors import ConfigError

# prime-rl's defaults (prime-rl-configs 559b447) where vf-sft's differ
PRIME_SFT_DEFAULTS = {"lr": 1e-6, "weight_decay": 0.01, "seq_len": 128, "batch_size": 128, "micro_batch_size": 1,
                      "lora_rank": 16}
SET_ASIDE = ("deployment", "inference", "eval", "log", "output_dir", "clean", "dry_run", "slurm", "env_vars",
             "tokenizer", "renderer", "weight_broadcast", "run", "matmul_precision", "gc", "heartbeat",
             "trace_path", "memory_profiler_path", "dist_timeout_seconds", "monitors")
# keys that only size the hosted run's memory or loader, not what is trained
MODEL_SET_ASIDE = ("seq_len", "impl", "attn", "compile", "ac_offloading", "fsdp_cpu_offload", "optim_cpu_offload",
                   "reshard_after_forward", "dp_replicate", "ep", "cp", "tp", "trust_remote_code", "dtype",
                   "optimization_dtype", "reduce_dtype", "conversion_dir", "moe_use_grouped_mm", "debug")
DATA_SET_ASIDE = ("num_workers", "shuffle", "probabilities", "stopping_strategy")


def _rest(where: str, table: dict[str, Any], set_aside: tuple[str, ...] = ()) -> None:
    """An error naming the first key of `table` not set aside (the keys translated are popped before)."""
    left = [k for k in table if k not in set_aside]
    if left:
        raise ConfigError(f"{where}{left[0]}: not supported yet by vf-sft")


def _dataset(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A prime-rl data table's dataset → vf-sft's `path` and `split`."""
    if data.pop("type", "sft") != "sft":
        raise ConfigError(f"{where}.type: only 'sft' data (a dataset) trains in vf-sft")
    if data.pop("subsets", None):
        raise ConfigError(f"{where}.subsets: not supported yet by vf-sft (one dataset, one split)")
    splits = data.pop("splits", None) or ["train"]
    if len(splits) != 1:
        raise ConfigError(f"{where}.splits: {splits}: vf-sft reads one split")
    return {"path": data.pop("name", "PrimeIntellect/Reverse-Text-SFT"), "split": splits[0]}


def _model(model: dict[str, Any], trainer: dict[str, Any]) -> str:
    name = model.pop("name", None)
    if not isinstance(name, str):
        raise ConfigError('model.name: required key is missing (the model to fine-tune: [model] name = "<hub id>")')
    lora = model.pop("lora", None)
    if lora is not None:
        lora = dict(lora)
        trainer.update(use_lora=True, lora_rank=lora.pop("rank", PRIME_SFT_DEFAULTS["lora_rank"]))
        for key in ("alpha", "target_modules", "dropout"):
            if key in lora:
                trainer[f"lora_{key}"] = lora.pop(key)
        _rest("model.lora.", lora)
    if isinstance(model.pop("ac", {}), dict):  # prime-rl checkpoints activations unless told not to (ac = None)
        trainer["gradient_checkpointing"] = True
    _rest("model.", model, MODEL_SET_ASIDE)
    return name


def _optimizer(raw: dict[str, Any], trainer: dict[str, Any]) -> None:
    optim = dict(raw.pop("optim", {}) or {})
    trainer.update(prime_optimizer(optim, "optim"))
    trainer["learning_rate"] = optim.pop("lr", PRIME_SFT_DEFAULTS["lr"])
    trainer["weight_decay"] = optim.pop("weight_decay", PRIME_SFT_DEFAULTS["weight_decay"])
    trainer["max_grad_norm"] = optim.pop("max_norm", 1.0) or 0.0
    for key, target in (("betas1", "adam_beta1"), ("betas2", "adam_beta2")):
        if key in optim:
            trainer[target] = optim.pop(key)
    _rest("optim.", optim)
    sched = dict(raw.pop("scheduler", {}) or {})
    trainer.update(prime_schedule(sched, "scheduler", trainer["learning_rate"], trainer.get("max_steps")))
    _rest("scheduler.", sched)


def _val(raw: dict[str, Any]) -> dict[str, Any] | None:
    val = raw.pop("val", None)
    if val is None:
        return None
    val = dict(val)
    if val.pop("eval_on_start", False):
        raise ConfigError("val.eval_on_start: not supported yet by vf-sft (its first validation is at `interval`)")
    data = dict(val.pop("data", {}) or {})
    out = {**_dataset(data, "val.data"), "interval": val.pop("interval", 50)}
    _rest("val.data.", data, (*DATA_SET_ASIDE, "batch_size", "seq_len", "seed", "loss_mask"))
    _rest("val.", val)
    return out


def translate(raw: dict[str, Any]) -> dict[str, Any]:
    """A prime-rl SFT raw config → a vf-sft raw config (one line on stderr names what is set aside)."""
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    own = raw.pop("trainer", None) or {}  # vf-sft's own [trainer] keys (the command line's), applied last
    trainer: dict[str, Any] = {"packing": True}  # prime-rl packs samples into seq_len rows
    out: dict[str, Any] = {"model": _model(raw.pop("model"), trainer), "trainer": trainer}
    data = raw.pop("data", {}) or {}
    out["data"] = _dataset(data, "data")
    if "loss_mask" in data:
        out["data"]["loss_mask"] = data.pop("loss_mask")
    trainer["max_length"] = data.pop("seq_len", PRIME_SFT_DEFAULTS["seq_len"])
    trainer["batch_size"] = data.pop("batch_size", PRIME_SFT_DEFAULTS["batch_size"])
    trainer["micro_batch_size"] = data.pop("micro_batch_size", PRIME_SFT_DEFAULTS["micro_batch_size"])
    if "seed" in data:
        trainer["seed"] = data.pop("seed")
    if data.pop("shuffle", True) is False:  # set aside when true: vf-sft shuffles, as TRL's SFTTrainer
        raise ConfigError("data.shuffle: false is not supported yet by vf-sft (it trains the rows shuffled)")
    _rest("data.", data, DATA_SET_ASIDE)
    if (max_steps := raw.pop("max_steps", None)) is not None:
        trainer["max_steps"] = max_steps
    _optimizer(raw, trainer)
    if (val := _val(raw)) is not None:
        out["val"] = val
    if (resume := prime_resume(raw.pop("resume", None))) is not None:
        trainer["resume_from_checkpoint"] = resume
    trainer.update(own)
    ckpt = dict(raw.pop("ckpt", None) or {})
    # no interval: at the end only (of the run as the command line sizes it too; vf-sft's default is 500 steps)
    trainer.setdefault("save_steps", ckpt.pop("interval", None) or trainer.get("max_steps", 500))
    aside = sorted([k for k in raw if k in SET_ASIDE] + [f"ckpt.{k}" for k in ckpt])
    _rest("", raw, SET_ASIDE)
    print("prime-rl SFT config: translated for vf-sft" + (f"; set aside (they size or place the hosted run): "
          f"{', '.join(aside)}" if aside else ""), file=sys.stderr, flush=True)
    return out
