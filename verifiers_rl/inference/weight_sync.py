"""Weight sync: after each optimizer step, bring the inference backend up to the new policy.

One interface, several implementations: the local engine shares the policy object (nothing to copy);
server implementations (LoRA hot-swap, full weights) live in `verifiers_rl.inference`.
"""

from __future__ import annotations

from typing import Any


class WeightSync:
    """`sync(model, version)` makes the backend serve `model`'s current weights as policy `version`."""

    def model_name(self) -> str:
        raise NotImplementedError

    def sync(self, model: Any, version: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SharedWeights(WeightSync):
    """The local engine generates with the policy object itself: it is always in sync."""

    def __init__(self, name: str = "local"):
        self._name = name

    def model_name(self) -> str:
        return self._name

    def sync(self, model: Any, version: int) -> None:
        from verifiers_rl.inference.decode_step import weights_changed

        weights_changed()  # the decode step's copies of the weights (an update through `.data` moves no version)


class SnapshotWeights(SharedWeights):
    """The local engine serves a copy of the policy, refreshed after each optimizer step, so the next step's
    rollouts can be generated while this one trains (`local_async`)."""

    def __init__(self, engine: Any, name: str = "policy"):
        super().__init__(name)
        self.engine = engine

    def sync(self, model: Any, version: int) -> None:
        self.engine.load_weights_from(model)


class MergedLoRAWeights(SnapshotWeights):
    """The local engine serves a LoRA policy as a plain copy with the adapters merged in (`lora_merge`), rewritten
    from the policy after each optimizer step."""

    def sync(self, model: Any, version: int) -> None:
        from verifiers_rl.inference.lora_merge import refresh_merged

        with self.engine.weights_lock():
            refresh_merged(self.engine.model, model)
