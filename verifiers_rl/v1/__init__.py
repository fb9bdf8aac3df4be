"""Training on verifiers **v1** environments (verifiers 0.4.x: `import verifiers.v1`; tasksets, harnesses, envs,
episodes) with this package's trainer, through an adapter with the classic environment interface.

- `loading.py`: a v1 env from a taskset id / `[env]` config dict (`vf.resolve_env_config` + `vf.load_environment`),
  every seat on the `subprocess` runtime unless the config names one (verifiers' default is a Prime sandbox).
- `serving.py`: the env's `serving()` held open on a loop thread of its own for the adapter's lifetime; the local
  engine served over HTTP (`/inference/v1/generate`) for the env's `TrainClient`.
- `episodes.py`: one `run_slot` episode → one state of ours (reward, metrics, error, one trajectory step per
  trainable branch with its token ids, sampled mask and logprobs), the run's sampling args → `vf.SamplingConfig`.
- `environment.py`: `V1Environment`, what `RLTrainer(model, env=...)` and `generate_states` call on a classic env
  (`get_dataset`, `get_eval_dataset`, `sampling_args`, `rollout`, `init_state`, `rubric.score_group`).

Nothing here imports `verifiers` at module level: importing this package without verifiers 0.4 loads nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["V1Environment", "load_v1_environment", "v1_available"]


def __getattr__(name: str) -> Any:
    if name == "v1_available":
        from verifiers_rl.v1.loading import v1_available

        return v1_available
    if name in ("V1Environment", "load_v1_environment"):
        from verifiers_rl.v1 import environment

        return getattr(environment, name)
    raise AttributeError(name)
