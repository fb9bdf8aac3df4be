"""The optimizers `optim = "muon"` and `"sign_sgd"` select (trainer/optim_settings.py), split as prime-rl splits
them: Muon on the hidden layers' weight matrices (torch's `torch.optim.Muon`, its learning rate scaled to AdamW's
update size), AdamW on the embeddings, the output head and every other parameter."""

from __future__ import annotations

from typing import Any

import torch
from torch.optim import AdamW, Optimizer

from verifiers_rl.trainer.optim_settings import extra_optimizer, muon_options


class ExtraOptimizers:
    """A `transformers.Trainer` mixin (listed before Trainer; RLTrainer's and vf-sft's): `args.optim` "muon" or
    "sign_sgd" builds ours, transformers' own names are Trainer's."""

    def create_optimizer(self, model: Any = None) -> Any:
        kind = extra_optimizer(self.args)  # type: ignore[attr-defined]
        if kind is None or self.optimizer is not None:  # type: ignore[attr-defined]
            # transformers 5.0's takes no model (later ones an optional one): pass one only where the Trainer gave one
            return super().create_optimizer(*(() if model is None else (model,)))  # type: ignore[misc]
        model = self.model if model is None else model  # type: ignore[attr-defined]
        decay = self.get_decay_parameter_names(model)  # type: ignore[attr-defined]
        self.optimizer = build_optimizer(kind, model, self.args, decay)  # type: ignore[attr-defined]
        return self.optimizer


class SignSGD(Optimizer):
    """p <- p * (1 - lr * weight_decay) - lr * sign(grad): prime-rl's sign_sgd (AdamW with both betas 0), no state."""

    def __init__(self, params: Any, lr: float = 1e-3, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = _closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(p.grad.sign(), alpha=-group["lr"])
        return loss


class MuonWithAdamW(Optimizer):
    """One optimizer over torch's Muon and AdamW: their param group dicts are this one's (an LR scheduler's change
    reaches both); the state is saved per part."""

    def __init__(self, muon_groups: list[dict], adamw_groups: list[dict], *, lr: float, betas: tuple[float, float],
                 eps: float, **muon: Any):
        try:
            from torch.optim import Muon
        except ImportError:
            raise RuntimeError(f"optim='muon' needs torch.optim.Muon (torch >= 2.9; this is {torch.__version__})"
                               ) from None
        self.parts: dict[str, Optimizer] = {}
        if _nonempty(muon_groups):
            self.parts["muon"] = Muon(_nonempty(muon_groups), lr=lr, adjust_lr_fn="match_rms_adamw", **muon)
        if _nonempty(adamw_groups):
            self.parts["adamw"] = AdamW(_nonempty(adamw_groups), lr=lr, betas=betas, eps=eps)
        super().__init__(self._groups(), {})

    def _groups(self) -> list[dict]:
        return [g for part in self.parts.values() for g in part.param_groups]

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = _closure_loss(closure)
        for part in self.parts.values():
            part.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {name: part.state_dict() for name, part in self.parts.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, part in self.parts.items():
            part.load_state_dict(state_dict[name])
        self.param_groups = self._groups()  # loading gives each part new group dicts


def _closure_loss(closure: Any) -> Any:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _nonempty(groups: list[dict]) -> list[dict]:
    return [g for g in groups if g["params"]]


def _outer_weights(model: Any) -> set[int]:
    """ids of the input embedding's and output head's weights (AdamW's in Muon's split)."""
    found = set()
    for get in ("get_input_embeddings", "get_output_embeddings"):
        module = getattr(model, get, lambda: None)()
        if getattr(module, "weight", None) is not None:
            found.add(id(module.weight))
    return found


def build_optimizer(kind: str, model: Any, args: Any, decay_names: list[str]) -> Optimizer:
    """The `kind` optimizer over `model`'s trainable parameters, weight decay on `decay_names` only (transformers'
    split: not on biases and norms)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def groups(pairs: list[tuple[str, Any]]) -> list[dict]:
        return [{"params": [p for n, p in pairs if n in decay_names], "weight_decay": args.weight_decay},
                {"params": [p for n, p in pairs if n not in decay_names], "weight_decay": 0.0}]

    if kind == "sign_sgd":
        return SignSGD(_nonempty(groups(named)), lr=args.learning_rate)
    outer = _outer_weights(model)
    is_matrix = [p.ndim == 2 and id(p) not in outer and "embed" not in n and "lm_head" not in n for n, p in named]
    return MuonWithAdamW(groups([x for x, m in zip(named, is_matrix) if m]),
                         groups([x for x, m in zip(named, is_matrix) if not m]),
                         lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
                         **muon_options(args.optim_args))
