"""In-process generation with the policy model behind an async OpenAI chat-completions interface.

Concurrent requests are batched per event loop; replies are vLLM-shaped `ChatCompletion`s with `return_token_ids`
(`prompt_token_ids`, per-choice `token_ids`, sampling logprobs). A LoRA policy is served merged (`lora_merge`).

Sampling semantics RL depends on:
- Our own sampler (`local_sampling`), not HF's `generate`, so the checkpoint's `generation_config` never leaks in;
  vLLM's order (as `truncation.py`). The logprob is of the processed distribution sampled from; greedy: raw logits.
- Batches split only by distribution; length, stop and `seed` are per row. Unseeded batches draw from torch's global
  RNG, so `torch.manual_seed` repeats a run for the same batching.
- Stop strings as vLLM: `content` is cut before them, `token_ids`/logprobs keep the completing token; EOS stays in
  `token_ids`, never in `content`. `max_tokens` is clamped to the room left; a full prompt raises `BadRequestError`.

The model is in eval mode during each decode call: don't train it concurrently with generation.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from verifiers_rl.inference.local_openai import LocalEngineError, TokenTexts, build_response, make_request
from verifiers_rl.inference.local_worker import BatchWorker, RowResult

__all__ = ["DEFAULT_MAX_TOKENS", "LocalClient", "LocalEngine", "LocalEngineError"]

DEFAULT_MAX_TOKENS = 512


class LocalClient:
    """The subset of `openai.AsyncOpenAI` the environments use: `client.chat.completions.create(...)`."""

    def __init__(self, engine: LocalEngine):
        self.engine = engine
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=engine.chat_completion))
        self.base_url = "local://engine/v1"
        self.api_key = "local"


class LocalEngine:
    """Serve chat completions from an in-process HF model, batching concurrent requests."""

    def __init__(self, model, tokenizer, *, model_name: str = "local", max_batch_size: int = 256,
                 batch_wait_s: float = 0.005, batch_gather_s: float = 0.5, default_max_tokens: int = DEFAULT_MAX_TOKENS,
                 max_model_len: int | None = None, decode_in_loop_thread: bool = True):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        import openai.types.chat  # noqa: F401  (the replies' types: imported here, not by the first request)

        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        # how long a batch waits for rollouts in flight (`rollouts_in_flight`, set by the driver) that have not
        # asked yet: requests that trickle in then share one decode
        self.batch_gather_s = batch_gather_s
        self.rollouts_in_flight = 0
        self.driver_loop: Any = None  # the loop those rollouts run on (set with the count)
        self.default_max_tokens = default_max_tokens
        # like vLLM's --max-model-len: the context a request may fill; without max_tokens, a reply may use the rest
        self.max_model_len = max_model_len
        # decode on the loop's own thread, where the caller trains: torch keeps one intra-op thread team
        self.decode_in_loop_thread = decode_in_loop_thread
        self.client = LocalClient(self)
        self.generate_calls = 0  # how many batched decode calls ran (observability for tests/benchmarks)
        self._worker = BatchWorker(self)
        self._tokens = TokenTexts(tokenizer)

    @classmethod
    def from_pretrained(cls, path_or_id: str | Path, *, dtype: Any = None, device: Any = None,
                        model_kwargs: dict | None = None, **engine_kwargs) -> LocalEngine:
        """Load a model (or a PEFT adapter directory on top of its base model) and its tokenizer."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from verifiers_rl.network import check_model_path

        check_model_path(str(path_or_id))
        kw = dict(model_kwargs or {})
        if dtype is not None:
            kw["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        path = Path(path_or_id)
        adapter_cfg = path / "adapter_config.json"
        if adapter_cfg.is_file():
            from peft import PeftModel

            base_id = json.loads(adapter_cfg.read_text()).get("base_model_name_or_path")
            if not base_id:
                raise ValueError(f"{adapter_cfg} has no base_model_name_or_path; cannot find the base model")
            base = AutoModelForCausalLM.from_pretrained(base_id, **kw)
            has_tok = any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
            tokenizer = AutoTokenizer.from_pretrained(str(path) if has_tok else base_id)
            model = PeftModel.from_pretrained(base, str(path))
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path_or_id), **kw)
            tokenizer = AutoTokenizer.from_pretrained(str(path_or_id))
        if device is not None:
            model = model.to(device)
        engine_kwargs.setdefault("model_name", str(path_or_id))
        return cls(model, tokenizer, **engine_kwargs)

    def set_model(self, model) -> None:
        """Swap the policy (e.g. for a peft-wrapped one); takes effect from the next batch."""
        self.model = model

    def load_weights_from(self, source) -> None:
        """Copy `source`'s weights (same architecture: a snapshot of a training policy) into the served model,
        between batches."""
        import torch

        with self.weights_lock(), torch.no_grad():
            for dst, src in zip(self.model.state_dict().values(), source.state_dict().values()):
                dst.copy_(src)

    def weights_lock(self):
        """Held while a batch decodes: whoever rewrites the served weights takes it (never mid-batch)."""
        return self._worker.lock

    async def chat_completion(self, **kwargs: Any):
        """`client.chat.completions.create(...)`: OpenAI's chat-completions arguments (`local_openai.make_request`)."""
        from openai.types.chat import ChatCompletion

        req = make_request(self, **kwargs)
        self._worker.submit(req)
        results: list[RowResult] = await req.future
        return ChatCompletion.model_validate(build_response(req, results, self.model_name, self._tokens))
