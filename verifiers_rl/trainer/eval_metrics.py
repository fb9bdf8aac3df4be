"""Training-time eval scores by prime-rl's names: `avg@k` (k = rollouts_per_example) and `pass@1`, `pass@2`, ...
`pass@k` (powers of two; Chen et al. 2021's unbiased estimator). A rollout passes when its reward is >= the env's
`pass_threshold` (verifiers', 0.5 by default, as vf-eval); prime-rl's reward == 1.0 agrees on 0/1 rewards."""


from __future__ import annotations

from typing import Any

from verifiers_rl.rewards import reward_of

DEFAULT_PASS_THRESHOLD = 0.5


def pass_threshold(env: Any) -> float:
    """The environment's pass threshold (verifiers' `Environment(pass_threshold=...)`), 0.5 when it has none."""
    value = getattr(env, "pass_threshold", None)
    return float(value) if isinstance(value, (int, float)) else DEFAULT_PASS_THRESHOLD


def eval_scores(states: list[dict[str, Any]], rollouts_per_example: int,
                threshold: float = DEFAULT_PASS_THRESHOLD) -> dict[str, float]:
    """{"avg@k": ..., "pass@1": ..., ..., "pass@k": ...} for an eval's scored rollouts (grouped by example_id);
    {} for no rollouts."""
    if not states:
        return {}
    k = max(1, int(rollouts_per_example))
    rewards = [reward_of(s) for s in states]
    out = {f"avg@{k}": sum(rewards) / len(rewards)}
    if k == 1:  # one rollout per example: pass@1 is the pass rate itself
        out["pass@1"] = sum(r >= threshold for r in rewards) / len(rewards)
        return out
    from verifiers_rl.utils.save_utils import pass_at_k  # vf-eval's estimator, per example, powers of two

    at, _every = pass_at_k(list(states), k, threshold)
    out.update({f"pass@{n}": v for n, v in at.items()})
    return out
