"""The `Inference` implementation a plan names (runtime.py): the local engine or vLLM servers."""

from __future__ import annotations

from typing import Any

from verifiers_rl.inference.runtime import Inference, LocalInference


def build_inference(plan: Any, *, model: Any, tokenizer: Any, args: Any, server_config: Any = None,
                    is_main: bool = True) -> Inference:
    """`plan`: a `verifiers_rl.plan.InferencePlan`; `server_config`: the VLLMServerConfig (or its fields) of the
    server to start when the plan starts one."""
    if plan.backend == "local":
        # max_tokens=None in RLConfig means "up to max_seq_len minus the prompt": the engine's context is max_seq_len
        return LocalInference(model, tokenizer, plan.weight_sync, max_model_len=args.max_seq_len)
    from verifiers_rl.inference.vllm_backend import VLLMBackend

    return VLLMBackend.start(plan, server_config, model, args, is_main=is_main)
