"""Steps that train nothing (every rollout dropped or errored, or no loss token left): a console warning each,
naming the cause and the setting to change; STALL_STEPS in a row end the run rather than print `loss 0` for
hundreds of steps. A failing reward function is warned of once."""


from __future__ import annotations

from collections import Counter
from typing import Any

from verifiers_rl.errors import TrainingStalledError

STALL_STEPS = 3

# cause → (what happened to those rollouts, what to change)
_CAUSES = {
    "dropped": ("dropped by the environment",
                "the environment dropped every rollout (verifiers' Trace.drop()): check its drop rule"),
    "prompt_too_long": ("dropped", "raise max_prompt_len (unset, it is max_seq_len - max_tokens; with max_tokens "
                                   "None, max_seq_len // 2 up to 512) or shorten the prompts"),
    "errored": ("errored", "fix the environment (the rollouts' `error` is in the eval/trainer logs) or the server"),
    "truncated": ("truncated and masked (mask_truncated_completions)",
                  "raise max_tokens / max_seq_len, or set mask_truncated_completions=false"),
    "empty_completion": ("had no completion tokens",
                         "the model returned no tokens: check max_tokens and the inference server"),
    "context_full": ("had no room for a reply (the prompt fills max_seq_len)",
                     "raise max_seq_len (a tool schema or system prompt counts) or shorten the prompts"),
    "below_min_reward": ("filtered out (training_mode='sft', reward < sft_min_reward)",
                         "the teacher's rollouts scored below sft_min_reward ([teacher] min_reward): lower it, or "
                         "give the teacher easier examples"),
}
# a step whose rollouts were all filtered by sft_min_reward is warned of, not counted towards the stop: a teacher
# that passes rarely leaves such steps in a row by chance
_NOT_A_STALL = {"below_min_reward"}


def _cause(state: dict[str, Any], args: Any) -> str | None:
    """Why this rollout carries no loss token (batching.drop_reason, or no completion tokens at all), or None."""
    from verifiers_rl.evaluation import completion_length
    from verifiers_rl.rewards import reward_of
    from verifiers_rl.trainer.batching import drop_reason

    why = drop_reason(state, args.max_prompt_len, args.mask_truncated_completions)
    if why:
        return why
    floor = getattr(args, "sft_min_reward", None) if getattr(args, "training_mode", "rl") == "sft" else None
    if floor is not None and reward_of(state) < floor:
        return "below_min_reward"
    if completion_length(state):
        return None
    # verifiers' flag: the context was full before the model could reply
    return "context_full" if state.get("prompt_too_long") else "empty_completion"


def step_causes(states: list[dict[str, Any]], args: Any) -> Counter[str] | None:
    """Why each of this step's rollouts carries no loss token, counted by cause; None when at least one does."""
    if not states:
        return None
    causes: Counter[str] = Counter()
    for s in states:
        c = _cause(s, args)
        if c is None:
            return None
        causes[c] += 1
    return causes


def diagnose(states: list[dict[str, Any]], args: Any) -> str | None:
    """One line saying why this step's rollouts carry no loss token, or None when at least one does."""
    causes = step_causes(states, args)
    return None if causes is None else describe(causes, states, args)


def describe(causes: Counter[str], states: list[dict[str, Any]], args: Any) -> str:
    """`step_causes`' count as one line: each cause, how many rollouts, a detail, and what to change."""
    n = len(states)
    parts = []
    for cause, k in causes.most_common():
        detail = ""
        if cause == "prompt_too_long":
            from verifiers_rl.trainer.batching import prompt_length

            longest = max(prompt_length(s) for s in states)
            detail = f" (prompts up to {longest} tokens > max_prompt_len={args.max_prompt_len})"
        elif cause == "errored":
            from verifiers_rl.evaluation import first_error

            first = first_error(states)
            detail = f" (first: {first})" if first else ""
        what, fix = _CAUSES[cause]
        parts.append(f"{cause}: {k} of {n} rollouts {what}{detail}; {fix}")
    return "; ".join(parts)


class EmptyStepWatch:
    """Counts consecutive steps without a loss token; warns on each, raises TrainingStalledError at STALL_STEPS."""

    def __init__(self, limit: int = STALL_STEPS):
        self.limit = limit
        self.in_a_row = 0
        self.steps = 0  # steps checked
        self.trained = 0  # of which carried a loss token
        self.last_why: str | None = None
        self.raised: set[str] = set()  # reward functions already warned of

    def check(self, step: int, states: list[dict[str, Any]] | None, args: Any, warn: Any) -> None:
        self._reward_errors(step, states or [], warn)
        causes = step_causes(states or [], args)
        self.steps += 1
        if causes is None:
            self.in_a_row = 0
            self.trained += 1
            return
        why = self.last_why = describe(causes, states or [], args)
        if not set(causes) <= _NOT_A_STALL:
            self.in_a_row += 1
            if self.in_a_row >= self.limit:
                raise TrainingStalledError(f"stopped at step {step}: {self.limit} steps in a row trained nothing: "
                                           f"{why}")
        warn(f"step {step} trained nothing: {why}")

    def _reward_errors(self, step: int, states: list[dict[str, Any]], warn: Any) -> None:
        """The first step at which a reward function raised (or the reward was NaN / inf): one line."""
        counts: Counter[str] = Counter()
        first: dict[str, str] = {}
        for s in states:
            for name, error in (s.get("reward_errors") or {}).items():
                name = name.split("#")[0]  # verifiers 0.3: a group's errors, numbered, on its first rollout
                counts[name] += 1
                first.setdefault(name, " ".join(str(error).split())[:200])
        for name in counts.keys() - self.raised:
            self.raised.add(name)
            what = "the reward" if name == "reward" else f"reward function {name!r}"  # "reward": a NaN / inf total
            warn(f"step {step}: {what} failed {counts[name]} time(s) in {len(states)} rollouts, scored 0 "
                 f"({first[name]}); errors/reward_funcs counts every failure")

    def finish(self) -> None:
        """At the end of training: a run whose every step trained nothing failed (a 2-step run of errored
        rollouts must not end as a success)."""
        if self.steps and not self.trained:
            raise TrainingStalledError(f"no step of {self.steps} trained anything: {self.last_why}")
