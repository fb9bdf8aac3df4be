"""plan_launch for a RunConfig the test built by hand: the RLConfig it reads is built from the same config, as
`load_run` builds it for vf-rl."""

from __future__ import annotations

from typing import Any

from verifiers_rl.config.resolution import build_rl_config
from verifiers_rl.config.validation import rl_config_kwargs
from verifiers_rl.plan.launch import RunPlan, plan_launch


def plan_for(cfg: Any, gpus_visible: int, has_vllm: Any = None, **options: Any) -> RunPlan:
    out = options.get("output_dir")
    args = build_rl_config(rl_config_kwargs(cfg, str(out) if out is not None else None))
    return plan_launch(cfg, gpus_visible, has_vllm, args=args, **options)
