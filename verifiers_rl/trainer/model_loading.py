"""Loading the policy: a path or hub id, a PEFT adapter dir (its base + that adapter), or a loaded model."""

from __future__ import annotations

import json
import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return Path(path).is_dir() and (Path(path) / "adapter_config.json").exists()


def adapter_base(path: str | os.PathLike) -> str:
    return json.loads((Path(path) / "adapter_config.json").read_text())["base_model_name_or_path"]


@contextmanager
def peft_wrapping_quietly() -> Iterator[None]:
    """peft reads transformers' deprecated `is_gradient_checkpointing` while it wraps a model (a FutureWarning on
    every LoRA run that we cannot fix at its source): ignore that one message from that one module, here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning,
                                module="transformers.modeling_utils")
        yield


def hub_kwargs(name: str) -> dict[str, Any]:
    """from_pretrained kwargs for `name`: a hub id while the hub is unreachable reads the cache only (one probe
    instead of the libraries' retries)."""
    from verifiers_rl.network import hub_unreachable

    return {"local_files_only": True} if not Path(name).exists() and hub_unreachable() else {}


def from_pretrained(cls: Any, name: str, **kwargs: Any) -> Any:
    """`cls.from_pretrained(name)`; a model the hub was needed for and couldn't give is one NetworkError line."""
    from verifiers_rl.network import check_model_path, hub_failures_as, model_hub_message
    from verifiers_rl.verbosity import quiet_bars_begin, quiet_bars_end

    check_model_path(name)
    token = quiet_bars_begin()  # no "Loading weights" bar unless VF_VERBOSE=1
    try:
        with hub_failures_as(lambda: model_hub_message(name)):
            return cls.from_pretrained(name, **hub_kwargs(name), **kwargs)
    finally:
        quiet_bars_end(token)


def _check_peft_config(peft_config: Any, args: Any) -> None:
    """A `peft_config` is the adapter (as TRL's `peft_config`): one line when it would be ignored (use_lora=False),
    is not a peft config, or conflicts with RLConfig's own lora_* settings."""
    if peft_config is None:
        return
    from peft import PeftConfig

    if not isinstance(peft_config, PeftConfig):
        raise TypeError(f"peft_config must be a peft config such as peft.LoraConfig(...), got "
                        f"{type(peft_config).__name__}")
    if not args.use_lora:
        raise ValueError("peft_config is given but use_lora=False: set use_lora=True to train that adapter, or drop "
                         "peft_config for full fine-tuning")
    changed = args.lora_options_set()
    if changed:
        raise ValueError(f"{changed[0]}={getattr(args, changed[0])!r} and peft_config both set the adapter: set it in "
                         "peft_config, or drop peft_config and use RLConfig's lora_* fields")


def disable_dropout(model: Any) -> None:
    """Dropout off in the policy's own layers (TRL's `disable_dropout`): the trainer's log-probs are compared with
    the sampler's, which samples without it. A LoRA adapter's own `lora_dropout` stays."""
    import torch

    adapters = {id(d) for m in model.modules() if isinstance(getattr(m, "lora_dropout", None), torch.nn.ModuleDict)
                for d in m.lora_dropout.values()}
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and id(m) not in adapters:
            m.p = 0.0
        # rates a layer passes to a functional dropout: Llama-style `attention_dropout`, Seed-OSS's
        # `residual_dropout` (0.1 in its config), BLOOM's `hidden_dropout`, `resid_pdrop`, ...
        for name, value in list(vars(m).items()):
            if type(value) is float and value > 0 and ("dropout" in name or "pdrop" in name) \
                    and not name.startswith("lora_"):
                setattr(m, name, 0.0)


def lora_targets(model: Any, asked: Any, default: bool) -> Any:
    """The LoRA target modules: `asked`; the default names (`default`: Llama's projections) on a model that lacks
    some of them (GPT-2, GPT-NeoX, Phi-3's fused projections) become 'all-linear', said in one line. Names the model
    lacks entirely are one line (a ConfigError)."""
    if isinstance(asked, str):
        return asked
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in asked if t not in names]
    if missing and default:
        print(f"LoRA: this model has no {', '.join(missing)} layers: targeting all its linear layers "
              "(lora_target_modules = 'all-linear')", flush=True)
        return "all-linear"
    if len(missing) == len(asked):
        from verifiers_rl.errors import ConfigError

        raise ConfigError(f"lora_target_modules={list(asked)!r}: none is a layer of this model; name its layers or "
                          "use 'all-linear'")
    return asked


def _note_half_weights(model: Any, args: Any) -> None:
    """Full fine-tuning of a model object loaded in half precision updates half-precision weights (from a path,
    the weights load in fp32 and train under autocast): said once, since small updates round away there."""
    import torch

    dtype = next((p.dtype for p in model.parameters()), None) if hasattr(model, "parameters") else None
    if not args.use_lora and dtype in (torch.bfloat16, torch.float16):
        warnings.warn(f"the model's weights are {str(dtype).removeprefix('torch.')}: full fine-tuning updates them "
                      "in that precision, where small updates round away; load it with dtype=torch.float32 (or pass "
                      "its path) to train fp32 weights under autocast", stacklevel=4)


def load_policy(model: Any, args: Any, tokenizer: Any = None, peft_config: Any = None) -> tuple[Any, Any]:
    """Returns (model, tokenizer) ready to train: LoRA-wrapped when `args.use_lora`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # LoRA: the frozen base in the training dtype; full fine-tuning: fp32 weights under autocast (plan/precision.py)
    half = torch.bfloat16 if args.bf16 else torch.float16 if getattr(args, "fp16", False) else None
    dtype = half if half is not None and args.use_lora else torch.float32
    if isinstance(model, (str, os.PathLike)):
        path = str(model)
        if is_adapter_dir(path):
            from peft import PeftModel

            base_id = adapter_base(path)
            base = from_pretrained(AutoModelForCausalLM, base_id, dtype=dtype)
            with peft_wrapping_quietly():
                model = PeftModel.from_pretrained(base, path, is_trainable=True)
            has_tokenizer = any((Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
            tok_source = path if has_tokenizer else base_id
        else:
            model = from_pretrained(AutoModelForCausalLM, path, dtype=dtype)
            tok_source = path
    else:
        tok_source = getattr(getattr(model, "config", None), "_name_or_path", None)
        _note_half_weights(model, args)

    _check_peft_config(peft_config, args)
    is_peft = hasattr(model, "peft_config")
    if is_peft and peft_config is not None:  # as TRL: the model's own adapter would train, peft_config ignored
        raise ValueError("peft_config is given but the model already carries a PEFT adapter, which is the one "
                         "trained: drop peft_config, or pass the base model")
    if is_peft and args.use_lora and not any(p.requires_grad for p in model.parameters()):
        # TRL's GRPOTrainer leaves such an adapter frozen and runs steps that change nothing; here it is one line
        raise ValueError("the model's PEFT adapter is frozen (PeftModel.from_pretrained(..., is_trainable=False), "
                         "its default): nothing would train; load it with is_trainable=True")
    if args.disable_dropout:  # a PeftModel's base too: one passed in, or loaded from an adapter directory
        disable_dropout(model)
    if args.use_lora and not is_peft:
        from peft import LoraConfig, get_peft_model

        cfg = peft_config or LoraConfig(
            r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
            target_modules=lora_targets(model, args.lora_target_modules,
                                        "lora_target_modules" not in args.lora_options_set()),
            modules_to_save=args.lora_modules_to_save,
            task_type="CAUSAL_LM")
        with peft_wrapping_quietly():
            model = get_peft_model(model, cfg)
    elif not args.use_lora and is_peft:
        # full fine-tuning continues from the adapted weights; peft froze the base ones. Said, since the same model
        # trains its adapter alone by default (and under a GRPOConfig, as TRL's)
        print("note: use_lora=False: the model's PEFT adapter is merged into its base and every weight trains "
              "(use_lora=True trains the adapter alone)", flush=True)
        model = model.merge_and_unload().requires_grad_(True)

    if tokenizer is None:
        if tok_source is None:
            raise ValueError("pass processing_class=tokenizer: it can't be inferred from this model object")
        tokenizer = from_pretrained(AutoTokenizer, tok_source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
