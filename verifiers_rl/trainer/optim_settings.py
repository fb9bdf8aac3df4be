"""`optim` values beyond transformers' names, as prime-rl names them: "muon" and "sign_sgd" (built by
trainer/optimizers.py), and their rules, read without torch (vf-rl checks them before it launches)."""

from __future__ import annotations

from typing import Any

EXTRA_OPTIMIZERS = ("muon", "sign_sgd")
OPTIM_HELP = ("The optimizer: one of transformers' `OptimizerNames`, or 'muon' (Muon on the hidden layers' weight "
              "matrices, AdamW with adam_beta1/adam_beta2 on the rest; optim_args 'momentum=0.95,nesterov=true,"
              "ns_steps=5') or 'sign_sgd' (p -= lr * sign(grad)), as prime-rl's trainer.optim.type.")
_MUON_ARGS = {"momentum": float, "nesterov": bool, "ns_steps": int}


def extra_optimizer(args: Any) -> str | None:
    """"muon" or "sign_sgd" when `args.optim` names one of them, else None (transformers builds the optimizer)."""
    optim = getattr(args, "optim", None)
    optim = getattr(optim, "value", optim)
    return optim if optim in EXTRA_OPTIMIZERS else None


def muon_options(optim_args: str | None) -> dict[str, Any]:
    """Muon's keyword arguments from transformers' `optim_args` string ("momentum=0.9,nesterov=false");
    ValueError naming the first it cannot take."""
    options: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in (optim_args or "").split(","))):
        key, _, value = (s.strip() for s in item.partition("="))
        kind = _MUON_ARGS.get(key)
        if kind is None:
            raise ValueError(f"optim_args={optim_args!r}: {key!r} is not an option of optim='muon' "
                             f"({', '.join(_MUON_ARGS)})")
        try:
            if kind is bool:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                options[key] = value.lower() in ("true", "1")
            else:
                options[key] = kind(value)
        except ValueError:
            raise ValueError(f"optim_args={optim_args!r}: {key}={value!r} is not a {kind.__name__}") from None
    return options


def optimizer_problem(args: Any) -> tuple[str, str] | None:
    """(key, one line) when `optim` is ours and its settings cannot train, else None."""
    kind = extra_optimizer(args)
    if kind == "muon" and (getattr(args, "fsdp", None) or getattr(args, "deepspeed", None)):
        return ("optim", "optim='muon' orthogonalizes each whole weight matrix, which fsdp / deepspeed shard across "
                         "processes; train with DDP (no fsdp) or use optim='adamw_torch'")
    if kind == "sign_sgd" and getattr(args, "optim_args", None):
        return ("optim_args", f"optim_args={args.optim_args!r}: optim='sign_sgd' takes none (learning_rate and "
                              "weight_decay are its settings)")
    if kind == "muon":
        try:
            muon_options(getattr(args, "optim_args", None))
        except ValueError as e:
            return ("optim_args", str(e))
    return None
