"""An RLConfig's sampling settings as the arguments of an OpenAI-compatible chat-completions request."""

from __future__ import annotations

from typing import Any

from verifiers_rl.plan.sampling import stated_knobs


def sampling_args(config: Any, *, for_eval: bool = False, prompt_len: int | None = None) -> dict[str, Any]:
    """Sampling parameters for a chat-completions request (see ``RLConfig.sampling_args``); ``max_tokens`` left out
    when unset and no ``prompt_len`` caps it (the server's limit applies), vLLM-only knobs in ``extra_body``."""

    temperature = config.eval_temperature if for_eval and config.eval_temperature is not None else config.temperature
    # every sampling parameter named, off ones at their neutral value: a server must not fill them from the
    # checkpoint's generation config (plan/sampling.py)
    args, extra_body = stated_knobs(temperature, config.top_p, config.top_k, config.min_p,
                                    config.repetition_penalty)

    max_tokens = config.max_tokens
    if prompt_len is not None:
        room = config.max_seq_len - prompt_len
        if room < 1:
            raise ValueError(
                f"prompt of {prompt_len} tokens leaves no room in max_seq_len={config.max_seq_len}; "
                "raise max_seq_len or drop prompts longer than max_prompt_len"
            )
        max_tokens = room if max_tokens is None else min(max_tokens, room)
    if max_tokens is not None:
        args["max_tokens"] = max_tokens
    if config.chat_template_kwargs:  # read by vLLM's and the local engine's chat endpoints
        extra_body["chat_template_kwargs"] = dict(config.chat_template_kwargs)
    args["extra_body"] = extra_body
    return args
