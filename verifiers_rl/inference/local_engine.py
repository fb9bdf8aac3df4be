"""In-process generation with the policy model behind an async OpenAI chat-completions interface.

The environments call `engine.client.chat.completions.create(...)` exactly as they would call a vLLM server;
concurrent requests are collected by a per-event-loop worker and run as shared batched decode calls (a bare
forward loop over the KV cache, `local_decode`). Responses are real `openai.types.chat.ChatCompletion` objects
shaped like vLLM's with `return_token_ids`: top-level `prompt_token_ids`, per-choice `token_ids`, and sampling
logprobs. A LoRA policy is served as a merged copy (`lora_merge`, through `LocalInference`).

Sampling semantics (documented because RL depends on them):
- Tokens are sampled by our own sampler (`local_sampling.Sampler.choose`) on the last position's logits; HF's
  `generate` and its processors are not involved, so the model's `generation_config` defaults never leak in.
- Processing order: repetition penalty → min_tokens EOS mask → temperature → min-p → top-k → top-p (vLLM's order,
  the one the trainer scores with: `inference/truncation.py`).
  The logprob returned is log_softmax of the processed scores, i.e. of the distribution actually sampled from,
  so it matches `log_softmax(logits / temperature)` when no filtering is active. With temperature 0 (greedy) it is
  log_softmax of the raw logits.
- Requests are grouped by their distribution (temperature, top_p, top_k, min_p, repetition_penalty); length and
  stop settings (`max_tokens`, `min_tokens`, `ignore_eos`, `stop`) and `seed` are per row, so they don't split
  batches. A seeded request uses its own `torch.Generator` (the global RNG is not touched); an unseeded batch
  draws its generator seed from torch's global RNG, so `torch.manual_seed` makes runs repeatable for the same
  batching.
- Stop strings (as vLLM does): generation stops at the token that completes a stop string; `content` is cut
  before the stop string, while `token_ids` and logprobs keep every sampled token up to and including the one
  that completed it. EOS tokens are kept in `token_ids` and never appear in `content`.
- `max_tokens` larger than the room left in the context is clamped to it (finish_reason "length"); a prompt
  that fills the context raises `openai.BadRequestError` ("maximum context length ...").
- Unsupported OpenAI arguments (frequency/presence penalties, response_format, ...) are ignored.

The model is switched to eval mode for the duration of each decode call and restored afterwards; don't run a
training step on the same model concurrently with generation.

Layout: this module (the engine and its client), `local_openai` (arguments → request, results → response),
`local_worker` (batching), `local_decode` (the decode loop), `local_sampling` (sampler and stop criteria).
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

    def __init__(
        self,
        model,
        tokenizer,
        *,
        model_name: str = "local",
        max_batch_size: int = 256,
        batch_wait_s: float = 0.005,
        batch_gather_s: float = 0.5,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        max_model_len: int | None = None,
        decode_in_loop_thread: bool = True,
    ):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        import openai.types.chat  # noqa: F401  (the replies' types, ~0.5 s to import: paid here, not by a request)

        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        # how long a batch may wait for the rollouts in flight that have not asked yet (`rollouts_in_flight`, set
        # by the rollout driver): episodes whose requests trickle in (a v1 harness program starting, a tool
        # running) then share one decode instead of paying one each
        self.batch_gather_s = batch_gather_s
        self.rollouts_in_flight = 0
        self.driver_loop: Any = None  # the loop those rollouts run on (set with the count)
        self.default_max_tokens = default_max_tokens
        # like vLLM's --max-model-len: the context a request may fill; without max_tokens, a reply may use the rest
        self.max_model_len = max_model_len
        # Decode batches on the event loop's own thread (blocking it meanwhile) rather than a worker thread: the
        # loop's thread is where the caller trains, so torch keeps one intra-op thread team (faster on CPU).
        self.decode_in_loop_thread = decode_in_loop_thread
        self.client = LocalClient(self)
        self.generate_calls = 0  # how many batched decode calls ran (observability for tests/benchmarks)
        self._worker = BatchWorker(self)
        self._tokens = TokenTexts(tokenizer)

    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | Path,
        *,
        dtype: Any = None,
        device: Any = None,
        model_kwargs: dict | None = None,
        **engine_kwargs,
    ) -> LocalEngine:
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
        """Copy `source`'s weights into the served model, between generate batches (never during one).

        For serving a snapshot of a policy that trains concurrently: `source` must have the same
        architecture (e.g. the served model is a deep copy of it)."""
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
