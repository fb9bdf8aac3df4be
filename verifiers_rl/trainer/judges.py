"""The run's judges, checked once before anything starts (rubrics/judge_endpoint.py): one console line each, and
a judge that OPENAI_BASE_URL would send to the policy's own server refused in one line. The vLLM servers a plan
names are the policy's before they are even started, so the refusal comes before the server's launch."""

from __future__ import annotations

from functools import partial
from typing import Any

from verifiers_rl.rubrics.judge_endpoint import check_judges


def plan_policy(plan: Any) -> list[tuple[str, str | None]]:
    """(url, None) for each server an InferencePlan serves the policy from: the servers given by URL, or the one
    it starts on a known port (a free port is registered by the backend once it is chosen)."""
    if plan is None:
        return []
    urls = list(getattr(plan, "urls", None) or [])
    if getattr(plan, "start_server", False) and getattr(plan, "port", None):
        urls.append(f"http://{plan.host}:{plan.port}/v1")
    return [(url, None) for url in urls]


def check(trainer: Any, plan: Any) -> None:
    """RLTrainer's check: its training and eval environments against `plan`'s servers; rank 0 prints."""
    envs = [trainer.env, *trainer.eval_envs.items()]
    announce = partial(print, flush=True) if trainer.is_world_process_zero() else None
    check_judges(envs, plan_policy(plan), announce=announce)
