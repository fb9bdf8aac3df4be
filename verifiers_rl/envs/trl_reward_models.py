"""TRL's reward models among `reward_funcs`: a model id or dir, loaded as TRL loads one (a sequence classifier with one
label), or a loaded model, with its tokenizer (TRL's `reward_processing_classes`, else the model's own). A model
scores prompt + completion as TRL's GRPOTrainer does: the chat template over the whole conversation (the texts joined
for string prompts), right-padded, `logits[:, 0]`, no gradient, on the trainer's device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RewardModel:
    model: Any
    tokenizer: Any

    @property
    def name(self) -> str:
        return str(getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__).rstrip("/").split(
            "/")[-1]

    def score(self, prompts: list[Any], completions: list[Any], device: Any = None,
              template_kwargs: dict[str, Any] | None = None) -> list[float]:
        import torch

        if prompts and isinstance(prompts[0], list):
            texts = [self.tokenizer.apply_chat_template(list(p) + list(c), tokenize=False, **(template_kwargs or {}))
                     for p, c in zip(prompts, completions)]
        else:
            texts = [p + c for p, c in zip(prompts, completions)]
        if device is not None and next(self.model.parameters()).device != torch.device(device):
            self.model.to(device)
        inputs = self.tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right",
                                add_special_tokens=False).to(next(self.model.parameters()).device)
        with torch.inference_mode():
            return self.model(**inputs).logits[:, 0].float().tolist()


def _load(name: str) -> Any:
    from transformers import AutoModelForSequenceClassification

    from verifiers_rl.errors import NetworkError
    from verifiers_rl.network import check_model_reachable

    try:
        check_model_reachable(name)  # the policy's check: a missing dir, or the hub out of reach, said at once
        return AutoModelForSequenceClassification.from_pretrained(name, num_labels=1)
    except (OSError, ValueError, NetworkError) as e:  # ModelNotFoundError is an OSError
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"reward_funcs: {name!r} could not be loaded as a reward model ({why}); give a model dir, "
                         "a loaded model or a function") from None


def reward_funcs_of(reward_funcs: Any, processing_classes: Any = None) -> list[Any]:
    """TRL's `reward_funcs` (one or a list) as a list of functions and RewardModels; ValueError (one line) for what
    is neither."""
    import torch
    from transformers import AutoTokenizer

    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    procs = (list(processing_classes) if isinstance(processing_classes, (list, tuple))
             else [processing_classes] * (len(funcs) if processing_classes is None else 1))
    if len(procs) != len(funcs):
        raise ValueError(f"reward_processing_classes: {len(procs)} for {len(funcs)} reward functions (TRL: one each, "
                         "None for a function)")
    out: list[Any] = []
    for f, tok in zip(funcs, procs):
        if isinstance(f, RewardModel):  # resolved already (the eval dataset's environment shares the training one's)
            out.append(f)
            continue
        model = _load(f) if isinstance(f, str) else f
        if not isinstance(model, torch.nn.Module):
            if not callable(model):
                raise ValueError(f"reward_funcs: {f!r} is not a function, a reward model or its id")
            out.append(model)
            continue
        tok = tok or AutoTokenizer.from_pretrained(model.config._name_or_path)
        if tok.pad_token_id is None:  # as TRL: the model scores the last token before the padding
            tok.pad_token = tok.eos_token
        model.config.get_text_config().pad_token_id = tok.pad_token_id
        out.append(RewardModel(model.eval().requires_grad_(False), tok))
    return out
