"""The one object a trainer holds for inference: `Inference` (built by `factory.build_inference`).

Environments call `client`; `inline` means generation shares the policy object (run it between optimizer steps);
`sync(model, v)` serves the weights as policy version v. `LocalInference` and `vllm_backend.VLLMBackend` implement it;
the plan (`verifiers_rl.plan.InferencePlan`) says which and how weights move.
"""

from __future__ import annotations

import copy
from typing import Any

from verifiers_rl.inference.weight_sync import MergedLoRAWeights, SharedWeights, SnapshotWeights, WeightSync


class Inference:
    client: Any
    syncer: WeightSync  # the object that brings the served weights to the policy's (the plan's mode: weight_sync)
    base_url: str | None = None
    inline: bool = False

    def model_name(self) -> str:
        return self.syncer.model_name()

    def sync(self, model: Any, version: int) -> None:
        self.syncer.sync(model, version)

    def metrics(self) -> dict[str, float]:
        return dict(getattr(self.syncer, "metrics", dict)())

    def server_pids(self) -> list[int]:
        """Processes it started (vf-rl stop ends them too)."""
        return []

    def close(self) -> None:
        self.syncer.close()


class LocalInference(Inference):
    """The in-process engine: generating with the policy itself between steps ('shared'), or with a copy
    refreshed after each step so the next step's rollouts come while this one trains ('snapshot'). A LoRA policy
    is served as a copy with its adapters merged (`lora_merge`) in either mode, refreshed at each sync."""

    def __init__(self, model: Any, tokenizer: Any, weight_sync: str, max_model_len: int | None = None):
        from verifiers_rl.inference.lora_merge import merged_copy
        from verifiers_rl.inference.local_engine import LocalEngine

        merged = merged_copy(model)
        if merged is not None:
            served, syncer = merged, MergedLoRAWeights
        elif weight_sync == "snapshot":
            served, syncer = copy.deepcopy(model).eval().requires_grad_(False), SnapshotWeights
        else:
            served, syncer = model, None
        self.engine = LocalEngine(served, tokenizer, model_name="policy", max_model_len=max_model_len)
        self.syncer = syncer(self.engine) if syncer else SharedWeights("policy")
        self.inline = weight_sync != "snapshot"
        self.client = self.engine.client
