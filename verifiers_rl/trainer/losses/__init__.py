"""The losses, chosen by name (``loss.type``; prime-rl's ``[loss] type``, TRL's ``loss_type``), each a
:class:`LossSpec` in its own module. The trainer logs whatever metrics a loss returns and names none of them.
Adding a loss: docs/architecture.md, "Adding things".
"""


from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# name -> "module[:attribute]" (attribute LOSS when omitted); imported when the loss is chosen
LOSSES: dict[str, str] = {
    "default": "verifiers_rl.trainer.losses.default",
    # TRL's GRPOConfig.loss_type names, value for value (checked against TRL's own loss code)
    "dapo": "verifiers_rl.trainer.losses.trl_types:DAPO",
    "grpo": "verifiers_rl.trainer.losses.trl_types:GRPO",
    "bnpo": "verifiers_rl.trainer.losses.trl_types:BNPO",
    "dr_grpo": "verifiers_rl.trainer.losses.trl_types:DR_GRPO",
    "cispo": "verifiers_rl.trainer.losses.trl_types:CISPO",
    "sapo": "verifiers_rl.trainer.losses.trl_types:SAPO",
    "luspo": "verifiers_rl.trainer.losses.trl_types:LUSPO",
    "vespo": "verifiers_rl.trainer.losses.trl_types:VESPO",
    "opd": "verifiers_rl.trainer.losses.distill:OPD",
    "sft": "verifiers_rl.trainer.losses.distill:SFT",
}
# the loss a training mode uses when loss.type is not set
MODE_LOSS = {"rl": "default", "opd": "opd", "sft": "sft"}


@dataclass(frozen=True)
class LossSpec:
    """One registered loss. ``mode``: the training mode that builds its inputs (``rl``: ``LossInputs``; ``opd``,
    ``sft``: ``DistillInputs``). ``when_empty``: its ``*/min`` / ``*/max`` values for a step without loss tokens.
    ``console``: ``(metric, label)`` pairs the console's step line shows, after the entropy.
    """


    name: str
    fn: Callable[[Any, Any], Any]
    config: type
    mode: str = "rl"
    when_empty: dict[str, float] = field(default_factory=dict)
    console: tuple[tuple[str, str], ...] = ()
